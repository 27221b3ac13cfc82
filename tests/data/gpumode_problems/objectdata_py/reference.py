from dataclasses import dataclass
from typing import NamedTuple

import torch
from task import input_t, output_t
from torch import nn
from utils import make_match_reference


class Shift(NamedTuple):
    weight: float
    values: torch.Tensor


@dataclass
class Config:
    scale: float
    size: int
    bias: torch.Tensor
    shift: Shift
    dtype: torch.dtype


class Cache(nn.Module):
    """As amd's mla-decode's KVCache: a registered buffer, a plain attribute, a submodule."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.register_buffer("data", torch.zeros(size))
        self.filled = 0
        self._step = 1  # an attribute of its own with an underscore travels too
        self.project = nn.Linear(size, size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.filled += self._step  # as mla-decode's KVCache, it changes as it is used
        self.data[0] = x[0]
        return self.project(x) + self.data * self.filled


def ref_kernel(data: input_t) -> output_t:
    config, x, cache = data
    with torch.no_grad():
        shifted = x * config.scale + config.bias + config.shift.weight * config.shift.values
        return cache(shifted.to(config.dtype))


def generate_input(size: int, seed: int, device: str = "cuda") -> input_t:
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    bias = torch.randn(size, device=device, generator=gen)
    x = torch.randn(size, device=device, generator=gen)
    shift = Shift(0.5, torch.randn(size, device=device, generator=gen))
    cache = Cache(size).to(device)
    with torch.no_grad():
        cache.data.copy_(torch.randn(size, device=device, generator=gen))
        cache.project.weight.copy_(torch.randn(size, size, device=device, generator=gen) / size**0.5)
    cache.filled, cache._step = 3, 2
    return Config(scale=2.0, size=size, bias=bias, shift=shift, dtype=torch.float32), x, cache


check_implementation = make_match_reference(ref_kernel)
