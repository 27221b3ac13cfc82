"""Honest: returns a tensor of its own instead of writing into the output buffer."""

import torch
import torch.nn.functional as F
from task import input_t, output_t

torch.backends.cudnn.allow_tf32 = False


def custom_kernel(data: input_t) -> output_t:
    input_tensor, kernel, _ = data
    return F.conv2d(input_tensor, kernel)
