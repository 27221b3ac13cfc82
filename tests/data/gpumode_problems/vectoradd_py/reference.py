import torch
from task import input_t, output_t
from utils import make_match_reference


def ref_kernel(data: input_t) -> output_t:
    a, b, out = data
    out[...] = a + b
    return out


def generate_input(size: int, seed: int, device: str = "cuda") -> input_t:
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    a = torch.randn(size, size, device=device, dtype=torch.float32, generator=gen)
    b = torch.randn(size, size, device=device, dtype=torch.float32, generator=gen)
    out = torch.empty(size, size, device=device, dtype=torch.float32)
    return a, b, out


check_implementation = make_match_reference(ref_kernel)
