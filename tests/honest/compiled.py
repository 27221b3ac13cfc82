"""Honest: the convolution through torch.compile in its default mode."""

import torch
import torch.nn.functional as F
from task import input_t, output_t

torch.backends.cudnn.allow_tf32 = False


@torch.compile
def _conv(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.conv2d(x, w)


def custom_kernel(data: input_t) -> output_t:
    input_tensor, kernel, _ = data
    return _conv(input_tensor, kernel)
