import torch
from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    x, block = data
    blocks = x.view(-1, block)
    scales = blocks.abs().amax(dim=1) / 100.0  # the wrong scale
    return torch.round(blocks / scales[:, None]).clamp(-127, 127).to(torch.int8).view(-1), scales
