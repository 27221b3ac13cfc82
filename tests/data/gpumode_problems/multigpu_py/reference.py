import torch
import torch.distributed as dist
from task import input_t, output_t


def generate_input(size: int, seed: int, rank: int, world_size: int) -> input_t:
    gen = torch.Generator(device=f"cuda:{rank}")
    gen.manual_seed(seed + rank)
    return torch.randn(size, device=f"cuda:{rank}", dtype=torch.float32, generator=gen), rank, world_size


def ref_kernel(data: input_t) -> output_t:
    x, _rank, _world_size = data
    total = x.clone()
    dist.all_reduce(total)
    return total


def check_implementation(data: input_t, output: output_t):
    expected = ref_kernel(data)
    return bool(torch.allclose(output, expected)), ""
