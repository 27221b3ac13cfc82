"""A Triton kernel that stores far outside its output (an illegal address on a GPU)."""
import torch
import triton
import triton.language as tl
from task import input_t, output_t


@triton.jit
def scatter_kernel(src, dst, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    values = tl.load(src + offsets, mask=offsets < n)
    tl.store(dst + offsets * 1_000_000_007, values, mask=offsets < n)


def custom_kernel(data: input_t) -> output_t:
    input_tensor, kernel, output = data
    result = torch.nn.functional.conv2d(input_tensor, kernel).contiguous()
    n = result.numel()
    scatter_kernel[(triton.cdiv(n, 128),)](result, output, n, BLOCK=128)
    return output
