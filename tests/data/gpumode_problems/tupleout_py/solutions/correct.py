import torch
from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    x, block = data
    blocks = x.view(-1, block)
    scales = blocks.abs().amax(dim=1).clamp(min=1e-12) / 127.0
    q = torch.round(blocks * (1.0 / scales)[:, None]).clamp(-127, 127).to(torch.int8)
    return q.view(-1), scales
