"""Allocates 3 GiB in its call and keeps it (issue 15: 3 GiB held)."""
import torch
import torch.nn.functional as F
from task import input_t, output_t

held = []


def custom_kernel(data: input_t) -> output_t:
    held.append(torch.ones(3 * 1024**3 // 4))
    input_tensor, kernel, output = data
    output.copy_(F.conv2d(input_tensor, kernel))
    return output
