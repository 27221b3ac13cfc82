"""Needs a GPU: synchronizes CUDA in the call."""
import torch
import torch.nn.functional as F
from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    input_tensor, kernel, output = data
    torch.cuda.synchronize()
    output.copy_(F.conv2d(input_tensor, kernel))
    return output
