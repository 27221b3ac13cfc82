"""Computes the right answer, then scribbles on its kernel input."""
from task import input_t, output_t
import torch.nn.functional as F


def custom_kernel(data: input_t) -> output_t:
    input_tensor, kernel, output = data
    output.copy_(F.conv2d(input_tensor, kernel))
    kernel.mul_(2.0)
    return output
