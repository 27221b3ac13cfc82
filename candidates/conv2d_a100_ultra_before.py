import torch
import triton
import triton.language as tl
 
@triton.autotune(
    configs=[
        # === H100/B200 Hopper Architecture ===
        # Максимальный prefetch (num_stages=7) для HBM3
        triton.Config({'BLOCK_H': 8, 'BLOCK_W': 256}, num_warps=8, num_stages=7),
        triton.Config({'BLOCK_H': 16, 'BLOCK_W': 128}, num_warps=8, num_stages=6),
        triton.Config({'BLOCK_H': 8, 'BLOCK_W': 128}, num_warps=8, num_stages=6),
        
        # === A100 Ampere ===
        triton.Config({'BLOCK_H': 16, 'BLOCK_W': 64}, num_warps=8, num_stages=5),
        triton.Config({'BLOCK_H': 4, 'BLOCK_W': 256}, num_warps=8, num_stages=5),
        
        # === L4 / Balanced ===
        triton.Config({'BLOCK_H': 4, 'BLOCK_W': 128}, num_warps=4, num_stages=4),
        triton.Config({'BLOCK_H': 8, 'BLOCK_W': 64}, num_warps=4, num_stages=4),
        
        # === Fallback для малых размеров ===
        triton.Config({'BLOCK_H': 2, 'BLOCK_W': 64}, num_warps=4, num_stages=3),
    ],
    key=['W_OUT', 'H_OUT', 'C_IN', 'K'],
)
@triton.jit
def conv2d_kernel_ultimate(
    input_ptr, weight_ptr, output_ptr,
    stride_in_n, stride_in_c, stride_in_h, stride_in_w,
    stride_w_out, stride_w_in, stride_w_h, stride_w_w,
    stride_out_n, stride_out_c, stride_out_h, stride_out_w,
    H_IN, W_IN, H_OUT, W_OUT, C_IN, C_OUT, K,
    BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr
):
    """
    Ultimate Conv2D Kernel для A100/H100/B200/L4.
    
    Ключевые оптимизации:
    1. Incremental pointer updates (избегаем умножений в цикле)
    2. Aggressive prefetch через num_stages=6-7
    3. 2D tiling с adaptive block sizes
    4. Mask hoisting (маски вычисляются один раз)
    5. Coalesced memory access через broadcasting
    """
    
    # === 1. Grid Decoding ===
    pid_w = tl.program_id(0)
    pid_h = tl.program_id(1)
    pid_z = tl.program_id(2)
 
    batch_idx = pid_z // C_OUT
    out_ch = pid_z % C_OUT
 
    # === 2. Coordinate Generation ===
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_w = pid_w * BLOCK_W + tl.arange(0, BLOCK_W)
 
    # === 3. Mask Hoisting (вычисляем один раз) ===
    mask_h = offs_h < H_OUT
    mask_w = offs_w < W_OUT
    mask_2d = mask_h[:, None] & mask_w[None, :]
 
    # === 4. Base Pointers (2D Broadcasting) ===
    # Output [batch, out_ch, h, w]
    ptr_out = (output_ptr + batch_idx * stride_out_n + out_ch * stride_out_c +
               offs_h[:, None] * stride_out_h + offs_w[None, :] * stride_out_w)
 
    # Input base [batch, ?, h, w]
    ptr_in_base = (input_ptr + batch_idx * stride_in_n +
                   offs_h[:, None] * stride_in_h + offs_w[None, :] * stride_in_w)
 
    # Weight base [out_ch, ?, ?, ?]
    ptr_wei_base = weight_ptr + out_ch * stride_w_out
 
    # === 5. Accumulator ===
    acc = tl.zeros([BLOCK_H, BLOCK_W], dtype=tl.float32)
 
    # === 6. Main Loop (Pointer Chasing Optimization) ===
    # Текущие указатели для каналов
    ptr_in_ch = ptr_in_base
    ptr_wei_ch = ptr_wei_base
 
    for cin in range(C_IN):
        # Локальные указатели для spatial loops
        ptr_in_kh = ptr_in_ch
        ptr_wei_kh = ptr_wei_ch
        
        for kh in range(K):
            # Еще более локальные указатели для kw loop
            ptr_in_kw = ptr_in_kh
            ptr_wei_kw = ptr_wei_kh
            
            for kw in range(K):
                # === A. Load Weight (scalar broadcast) ===
                w_val = tl.load(ptr_wei_kw)
                
                # === B. Load Input (vectorized 2D block) ===
                in_val = tl.load(ptr_in_kw, mask=mask_2d, other=0.0)
                
                # === C. FMA ===
                acc += in_val * w_val
                
                # Increment по ширине (kw)
                ptr_in_kw += stride_in_w
                ptr_wei_kw += stride_w_w
            
            # Increment по высоте (kh)
            ptr_in_kh += stride_in_h
            ptr_wei_kh += stride_w_h
        
        # Increment по каналам (cin)
        ptr_in_ch += stride_in_c
        ptr_wei_ch += stride_w_in
 
    # === 7. Store Result ===
    tl.store(ptr_out, acc, mask=mask_2d)
 
 
def custom_kernel(data):
    """
    Production-ready wrapper для Conv2D kernel.
    """
    input_tensor, kernel, output_tensor = data
    
    # Гарантируем contiguous layout для coalesced access
    input_tensor = input_tensor.contiguous()
    kernel = kernel.contiguous()
    
    # Размеры
    batch, c_in, h_in, w_in = input_tensor.shape
    c_out, _, k_h, k_w = kernel.shape
    
    h_out = h_in - k_h + 1
    w_out = w_in - k_w + 1
    
    # Grid configuration
    grid = lambda META: (
        triton.cdiv(w_out, META['BLOCK_W']),
        triton.cdiv(h_out, META['BLOCK_H']),
        batch * c_out
    )
    
    # Launch kernel
    conv2d_kernel_ultimate[grid](
        input_tensor, kernel, output_tensor,
        *input_tensor.stride(),
        *kernel.stride(),
        *output_tensor.stride(),
        h_in, w_in, h_out, w_out,
        c_in, c_out, k_h,
    )
    
    return output_tensor
