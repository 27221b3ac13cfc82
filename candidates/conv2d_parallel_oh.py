import torch
import triton
import triton.language as tl
 
 
# Triton kernel: 2D cross-correlation (PyTorch conv2d semantics) with:
# - no padding
# - stride = 1
# - out_channels == in_channels == channels
# Accumulation is in fp32 for both fp32 and bf16 inputs.
#
# Performance fix:
# - Parallelize the output height (OH) across the launch grid instead of looping over OH inside
#   a single program. The previous version looped over OH in-kernel and timed out on large cases.
# - Keep a deterministic sequential accumulation across (ic, kh, kw) to improve numerical
#   agreement with PyTorch's conv2d under strict tolerances, while avoiding excessive overhead.
 
 
@triton.autotune(
    configs=[
        triton.Config({'BLOCK_OC': 32, 'BLOCK_OW': 64}, num_stages=3, num_warps=4),
        triton.Config({'BLOCK_OC': 64, 'BLOCK_OW': 32}, num_stages=3, num_warps=8),
        triton.Config({'BLOCK_OC': 64, 'BLOCK_OW': 64}, num_stages=4, num_warps=8),
        triton.Config({'BLOCK_OC': 32, 'BLOCK_OW': 128}, num_stages=3, num_warps=4),
        triton.Config({'BLOCK_OC': 64, 'BLOCK_OW': 128}, num_stages=4, num_warps=8),
    ],
    key=['B', 'C', 'H', 'W', 'KH', 'KW'],
)
@triton.jit
def _conv2d_nopad_stride1_parallel_oh(
    x_ptr, w_ptr, y_ptr,
    B, C, H, W, KH, KW, OH, OW,
    stride_x_b, stride_x_c, stride_x_h, stride_x_w,
    stride_w_oc, stride_w_ic, stride_w_kh, stride_w_kw,
    stride_y_b, stride_y_c, stride_y_h, stride_y_w,
    BLOCK_OC: tl.constexpr,
    BLOCK_OW: tl.constexpr,
):
    # Grid mapping:
    # axis 0: combined (batch, oh) tiles
    # axis 1: tiles over output channels
    # axis 2: tiles over output width
    pid_boh = tl.program_id(axis=0)
    pid_oc = tl.program_id(axis=1)
    pid_ow = tl.program_id(axis=2)
 
    # Recover (b, oh) from packed pid_boh
    # We launch axis0 = B * OH, so:
    b = pid_boh // OH
    oh = pid_boh % OH
 
    # Compute offsets for oc and ow tiles
    oc_offsets = pid_oc * BLOCK_OC + tl.arange(0, BLOCK_OC)  # [BLOCK_OC]
    ow_offsets = pid_ow * BLOCK_OW + tl.arange(0, BLOCK_OW)  # [BLOCK_OW]
 
    # Masks for bounds
    oc_mask = oc_offsets < C
    ow_mask = ow_offsets < OW
 
    # FP32 accumulator
    acc = tl.zeros((BLOCK_OC, BLOCK_OW), dtype=tl.float32)
 
    # Reduction across input channels, KH, KW in deterministic order
    for ic in tl.range(0, C):
        for kh in tl.range(0, KH):
            in_h = oh + kh  # valid: no padding, stride=1
            for kw in tl.range(0, KW):
                in_w = ow_offsets + kw  # [BLOCK_OW]
                in_w_mask = (ow_mask & (in_w < W))
 
                # Load weights for this (ic, kh, kw) across BLOCK_OC output channels
                w_ptrs = (
                    w_ptr
                    + oc_offsets * stride_w_oc
                    + ic * stride_w_ic
                    + kh * stride_w_kh
                    + kw * stride_w_kw
                )
                w_vals = tl.load(w_ptrs, mask=oc_mask, other=0.0).to(tl.float32)  # [BLOCK_OC]
 
                # Load input row for this (ic, in_h) across BLOCK_OW positions
                x_ptrs = (
                    x_ptr
                    + b * stride_x_b
                    + ic * stride_x_c
                    + in_h * stride_x_h
                    + in_w * stride_x_w
                )
                x_vals = tl.load(x_ptrs, mask=in_w_mask, other=0.0).to(tl.float32)  # [BLOCK_OW]
 
                # Outer product accumulate
                acc += w_vals[:, None] * x_vals[None, :]
 
    # Store results to output
    y_ptrs = (
        y_ptr
        + b * stride_y_b
        + oc_offsets[:, None] * stride_y_c
        + oh * stride_y_h
        + ow_offsets[None, :] * stride_y_w
    )
    y_mask = oc_mask[:, None] & ow_mask[None, :]
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=y_mask)
 
 
def kernel_function(input_tensor: torch.Tensor, weight: torch.Tensor, output_tensor: torch.Tensor = None):
    """
    Triton-backed 2D convolution (no padding, stride=1), matching PyTorch's F.conv2d semantics
    for the test settings:
      - input:  [B, C, H, W]
      - weight: [C, C, KH, KW] (out_channels == in_channels == C)
      - output: [B, C, H-KH+1, W-KW+1]
 
    All math runs inside the Triton kernel; the wrapper only validates/allocates/launches.
    Accumulation is done in fp32 for both fp32 and bf16 inputs.
 
    Args:
        input_tensor: CUDA tensor [B, C, H, W], dtype float32 or bfloat16, contiguous.
        weight:       CUDA tensor [C, C, KH, KW], same dtype as input, contiguous.
        output_tensor (optional): Pre-allocated output [B, C, OH, OW], same dtype/device.
 
    Returns:
        Output tensor [B, C, OH, OW], CUDA, same dtype as input.
    """
    # Validate inputs
    assert input_tensor.is_cuda and weight.is_cuda, "Tensors must be CUDA"
    assert input_tensor.dtype in (torch.float32, torch.bfloat16), "Supported dtypes: float32, bfloat16"
    assert input_tensor.dtype == weight.dtype, "Input/weight dtypes must match"
    assert input_tensor.dim() == 4 and weight.dim() == 4, "Expected 4D tensors"
    assert input_tensor.is_contiguous() and weight.is_contiguous(), "Inputs must be contiguous"
 
    B, C_in, H, W = input_tensor.shape
    OC, IC, KH, KW = weight.shape
    assert C_in == IC == OC, "Expect out_channels == in_channels == channels"
    assert KH >= 1 and KW >= 1, "Kernel dims must be positive"
 
    OH = H - KH + 1
    OW = W - KW + 1
    assert OH > 0 and OW > 0, "Invalid kernel size: no padding, stride=1"
 
    if output_tensor is None:
        output_tensor = torch.empty((B, OC, OH, OW), device=input_tensor.device, dtype=input_tensor.dtype)
    else:
        assert output_tensor.is_cuda, "Output tensor must be CUDA"
        assert output_tensor.dtype == input_tensor.dtype, "Output dtype mismatch"
        assert output_tensor.is_contiguous(), "Output must be contiguous"
        assert tuple(output_tensor.shape) == (B, OC, OH, OW), "Output shape mismatch"
 
    # Strides
    stride_x_b, stride_x_c, stride_x_h, stride_x_w = input_tensor.stride()
    stride_w_oc, stride_w_ic, stride_w_kh, stride_w_kw = weight.stride()
    stride_y_b, stride_y_c, stride_y_h, stride_y_w = output_tensor.stride()
 
    # 3D grid over (batch*OH, channel tiles, output-width tiles)
    def grid(META):
        return (
            B * OH,
            triton.cdiv(C_in, META['BLOCK_OC']),
            triton.cdiv(OW, META['BLOCK_OW']),
        )
 
    # Launch Triton kernel
    _conv2d_nopad_stride1_parallel_oh[grid](
        input_tensor, weight, output_tensor,
        B, C_in, H, W, KH, KW, OH, OW,
        stride_x_b, stride_x_c, stride_x_h, stride_x_w,
        stride_w_oc, stride_w_ic, stride_w_kh, stride_w_kw,
        stride_y_b, stride_y_c, stride_y_h, stride_y_w,
    )
 
    return output_tensor
 
import inspect
