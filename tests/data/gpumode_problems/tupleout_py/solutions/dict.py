import torch
from task import input_t


def custom_kernel(data: input_t) -> dict:
    # a dict where a tuple is expected: the problem's check says what is wrong, nothing crashes
    x, block = data
    return {"q": torch.zeros(x.numel(), dtype=torch.int8), "scales": torch.ones(x.numel() // block)}
