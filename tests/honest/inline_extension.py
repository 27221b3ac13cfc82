"""Honest (CPU and CUDA): the convolution in a C++ extension built at import with
torch.utils.cpp_extension.load_inline, the way users ship a custom operator (here ATen's own
conv2d, TF32 off through torch's flags; the build lands in the harness's per-code extensions
cache and takes about a minute on a 2-core machine)."""

import torch
from task import input_t, output_t
from torch.utils.cpp_extension import load_inline

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

_SOURCE = r"""
at::Tensor conv_into(const at::Tensor& input, const at::Tensor& kernel, at::Tensor output) {
  return output.copy_(at::conv2d(input, kernel));
}
"""
_extension = load_inline(name="honest_inline_conv", cpp_sources=[_SOURCE], functions=["conv_into"])


def custom_kernel(data: input_t) -> output_t:
    input_tensor, kernel, output = data
    return _extension.conv_into(input_tensor, kernel, output)
