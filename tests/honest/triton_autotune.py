"""Honest: a direct convolution in Triton, one program per block of output elements, with two
autotune configs (the Triton interpreter runs it on the CPU)."""

import triton
import triton.language as tl
from task import input_t, output_t


@triton.autotune(
    configs=[triton.Config({"BLOCK": 64}, num_warps=2), triton.Config({"BLOCK": 128}, num_warps=4)],
    key=["total"],
)
@triton.jit
def conv_kernel(x, w, out, total, C: tl.constexpr, H, W, OH, OW, K: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < total
    ow = offsets % OW
    oh = (offsets // OW) % OH
    oc = (offsets // (OW * OH)) % C
    b = offsets // (OW * OH * C)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for ic in range(C):
        for kh in range(K):
            for kw in range(K):
                xv = tl.load(x + ((b * C + ic) * H + oh + kh) * W + ow + kw, mask=mask, other=0.0)
                wv = tl.load(w + ((oc * C + ic) * K + kh) * K + kw, mask=mask, other=0.0)
                acc += xv * wv
    tl.store(out + offsets, acc, mask=mask)


def custom_kernel(data: input_t) -> output_t:
    input_tensor, kernel, output = data
    batch, channels, height, width = input_tensor.shape
    size = kernel.shape[-1]
    out_h, out_w = height - size + 1, width - size + 1
    total = batch * channels * out_h * out_w
    conv_kernel[lambda meta: (triton.cdiv(total, meta["BLOCK"]),)](
        input_tensor, kernel, output, total, channels, height, width, out_h, out_w, size
    )
    return output
