from dataclasses import dataclass

import torch
from task import input_t, output_t
from utils import make_match_reference


@dataclass
class Config:
    scale: float
    size: int


def ref_kernel(data: input_t) -> output_t:
    config, x = data
    return x * config.scale


def generate_input(size: int, seed: int, device: str = "cuda") -> input_t:
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return Config(scale=2.0, size=size), torch.randn(size, device=device, generator=gen)


check_implementation = make_match_reference(ref_kernel)
