"""A Triton kernel with 400 autotune configs that differ only in a parameter the kernel ignores,
and a call that takes 0.1 s: checking every config of every smoke shape on the CPU would take
minutes (issue 15: 170 s), near the call limit days."""
import time

import torch
import triton
import triton.language as tl
from task import input_t, output_t


@triton.autotune(
    configs=[triton.Config({"BLOCK": 1024, "UNUSED": i}, num_warps=4) for i in range(400)],
    key=["n"],
)
@triton.jit
def copy_kernel(src, dst, n, BLOCK: tl.constexpr, UNUSED: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(dst + offsets, tl.load(src + offsets, mask=mask), mask=mask)


def custom_kernel(data: input_t) -> output_t:
    input_tensor, kernel, output = data
    result = torch.nn.functional.conv2d(input_tensor, kernel).contiguous()
    n = result.numel()
    copy_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](result, output, n)
    time.sleep(0.1)
    return output
