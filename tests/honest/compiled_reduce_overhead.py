"""Honest: the convolution through torch.compile with mode="reduce-overhead" (CUDA graphs on a
GPU; on the CPU it compiles as the default mode does)."""

import torch
import torch.nn.functional as F
from task import input_t, output_t

torch.backends.cudnn.allow_tf32 = False


@torch.compile(mode="reduce-overhead")
def _conv(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.conv2d(x, w)


def custom_kernel(data: input_t) -> output_t:
    input_tensor, kernel, output = data
    output.copy_(_conv(input_tensor, kernel))
    return output
