"""A Triton kernel whose second autotune config computes the wrong answer (its block is too
narrow for the loop it assumes), while the first is right."""
import torch
import triton
import triton.language as tl
from task import input_t, output_t


@triton.autotune(
    configs=[
        triton.Config({"BLOCK": 1024, "SKIP_TAIL": 0}, num_warps=4),
        triton.Config({"BLOCK": 16, "SKIP_TAIL": 1}, num_warps=4),
    ],
    key=["n"],
)
@triton.jit
def copy_kernel(src, dst, n, BLOCK: tl.constexpr, SKIP_TAIL: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    if SKIP_TAIL:
        mask = mask & (offsets < n - 1)
    tl.store(dst + offsets, tl.load(src + offsets, mask=mask), mask=mask)


def custom_kernel(data: input_t) -> output_t:
    input_tensor, kernel, output = data
    result = torch.nn.functional.conv2d(input_tensor, kernel).contiguous()
    n = result.numel()
    copy_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](result, output, n)
    return output
