"""A weighted column sum, scaled and shifted, whose generate_input and check_implementation may run
only in the harness's parent: they refuse to run in a process without PARENT_ONLY_REFERENCE=parent
in its environment. The tests set it for the harness command; the sandboxed child never has it
(its environment is scrubbed), so a child whose harness code made inputs or judged would fail.
(ref_kernel is left unguarded: the task's reference candidate, a submission like any other,
imports this module and calls it in its child.) Its data tuple holds what GPU MODE's tasks hand a
submission besides tensors: a transposed (non-contiguous) tensor, an int, a float, a string and a
nested tuple."""

import os

import torch
from task import input_t, output_t
from utils import match_reference


def _only_in_the_parent(what: str) -> None:
    if os.environ.get("PARENT_ONLY_REFERENCE") != "parent":
        raise RuntimeError(f"reference.py {what} outside the harness's parent")


def ref_kernel(data: input_t) -> output_t:
    x, weights, (shift, (scale, how)), offset, out = data
    assert how == "sum"
    out[...] = (weights[:, None] * x).sum(0) * scale + shift + offset
    return out


def generate_input(size: int, offset: int, seed: int, device: str = "cuda") -> input_t:
    _only_in_the_parent("generate_input called")
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    x = torch.randn(size, 3, device=device, dtype=torch.float32, generator=gen).t()
    weights = torch.randn(3, device=device, dtype=torch.float32, generator=gen)
    scale = 0.5 + float(torch.rand(1, device=device, generator=gen))
    config = (seed % 7, (scale, "sum"))
    out = torch.empty(size, device=device, dtype=torch.float32)
    return x, weights, config, offset, out


def check_implementation(data: input_t, output: output_t):
    _only_in_the_parent("check_implementation called")
    return match_reference(data, output, ref_kernel, rtol=1e-5, atol=1e-5)
