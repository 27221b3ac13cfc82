import torch
from task import input_t, output_t
from utils import make_match_reference


def ref_kernel(data: input_t) -> output_t:
    torch.mul(data["x"], data["scale"], out=data["out"])
    return data["out"]


def generate_input(size: int, seed: int, device: str = "cuda") -> input_t:
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return {
        "x": torch.randn(size, size, device=device, dtype=torch.float32, generator=gen),
        "scale": 0.5 + seed % 3,
        "out": torch.empty(size, size, device=device, dtype=torch.float32),
    }


check_implementation = make_match_reference(ref_kernel)
