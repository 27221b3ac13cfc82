import torch
from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    """An exclusive scan: every element one step behind."""
    x, out = data
    out[0] = 0
    out[1:] = torch.cumsum(x, dim=0)[:-1]
    return out
