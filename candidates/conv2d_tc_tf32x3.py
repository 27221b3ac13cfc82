#!POPCORN leaderboard conv2d_v2
#!POPCORN gpu H100

# Strict-fp32 conv2d (no padding, stride 1) as an implicit GEMM on Hopper tensor cores with
# error-compensated split operands. The lineage began as 3xTF32 (v1); this final version is v3
# with H4S at PK = 64 as the default path (the fastest accurate variant measured on the H200:
# geomean 3.32 ms over the five benchmark shapes, rel. L2 error <= 5.1e-7 against float64).
#
# GEMM view: M = output pixels, N = C_out, reduction = KH*KW*C_in.
# - The input is repacked once per call to NHWC rows: output pixel m of image b reads row
#   b*H*W + m + kh*W + kw, so each A tile is a plain [BM, BK] block for TMA. M runs over a
#   "virtual" width W; the K-1 columns past OW in each row are computed and discarded.
# - The weight is repacked once per call to [C_out, KH*KW*C_in] (K-major).
# - Repacking splits each value v into hi + lo, both exact in the dot's input type, laid out
#   per chunk of PK channels as NSLOT slots, so that one dot of K = NSLOT*PK forms the sum of
#   the cross products that the slots pair up.
#   - T3F: TF32 hi/lo, three chained TF32 dots (lo*hi + hi*lo + hi*hi), as v1's CHAIN3.
#   - H4: fp16 hi/lo of v scaled by a power of two (max |v| -> [2^14, 2^15)), slots
#     x = (hi, lo, hi, lo), w = (hi, hi, lo, lo): ONE fp16 dot per step gives all four
#     products (exact to ~2^-22 relative per value); fp16 runs at twice the TF32 rate.
#   - H3: fp16 as H4 but three products: x = (lo, hi), w = (hi, lo) dot, plus hi*hi.
#   - H4S: fp16, x and w stored as (hi_c, lo_c) pairs per channel c: x@w gives hi*hi + lo*lo,
#     and x with each pair swapped in registers gives lo*hi + hi*lo. Two dots per step, four
#     products, but each tile is loaded once: half of H4's bytes from L2 per product (v2's
#     H4 and T3F moved about 6.8 TB/s from L2 and ran no faster in fp16 than in TF32).
# - Accuracy of the sum (v1's finding): the tensor cores truncate when they accumulate
#   (an exact 1 + 0.75 ulp came back as 1), so a long accumulation in one wgmma
#   accumulator drifts (v1: rel. error 9e-4 over K = 131072). With FLUSH each step's dot
#   starts from zero and is added in fp32 (round to nearest) to a group sum, and every
#   GROUP_K reduction elements the group sum is added to the output accumulator.
import os

import torch
import triton
import triton.language as tl

from task import input_t, output_t

T3F = 0
H3 = 3
H4 = 4
H4S = 6

# (NSLOT, x slots, w slots, fp16, interleaved); slot 0 = hi, 1 = lo
_LAYOUT = {
    T3F: (2, (0, 1), (0, 1), False, False),
    H3: (2, (1, 0), (0, 1), True, False),
    H4: (4, (0, 1, 0, 1), (0, 0, 1, 1), True, False),
    H4S: (2, (0, 1), (0, 1), True, True),
}

DEFAULT_MODE = H4S
DEFAULT_FLUSH = 1
DEFAULT_GROUP_K = 1024
DEFAULT_PK = 64

_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


def _scratch(size, alignment, stream):
    """Global scratch for descriptors made on the device (tl.make_tensor_descriptor)."""
    return torch.empty(size, device="cuda", dtype=torch.int8)


triton.set_allocator(_scratch)


@triton.jit
def _round_tf32(x):
    """Round fp32 to the nearest TF32 value (ties away from zero), like cvt.rna.tf32.f32."""
    bits = x.to(tl.int32, bitcast=True)
    bits = (bits + 0x1000) & -8192
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _pow2_scale(amax_bits, INVERSE: tl.constexpr):
    """2^p (or 2^-p) as fp32, p = 14 - floor(log2(amax)): scales max |v| into [2^14, 2^15),
    inside fp16's range (amax given by its bits; a zero or subnormal amax gives p = 14)."""
    e = ((amax_bits >> 23) & 0xFF) - 127
    p = tl.where(e == -127, 14, 14 - e)
    if INVERSE:
        p = -p
    return ((127 + p) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _amax_kernel(src, n, out_bits, BLOCK: tl.constexpr):
    """out_bits = max(out_bits, bits of max |src|) (non-negative floats order as ints)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(src + offs, mask=offs < n, other=0.0)
    m = tl.max(tl.abs(x), axis=0)
    tl.atomic_max(out_bits, m.to(tl.int32, bitcast=True))


@triton.jit
def _pack_kernel(src, dst, amax_bits, R, S, C, s_b, s_r, s_s, d_b, d_r, d_s,
                 CH_AXIS: tl.constexpr, PK: tl.constexpr, NSLOT: tl.constexpr, FP16: tl.constexpr,
                 LO_SLOTS: tl.constexpr, INTERLEAVE: tl.constexpr, BR: tl.constexpr, BS: tl.constexpr):
    """Copy src[bt, r, s] to dst, placing channel c (axis CH_AXIS: 0 = bt, 1 = r) of each slot
    at (c // PK) * NSLOT * PK + slot * PK + c % PK (INTERLEAVE: + (c % PK) * NSLOT + slot);
    channels >= C read as zero. Slot i holds
    lo if bit i of LO_SLOTS is set, else hi."""
    pid_s = tl.program_id(0)
    pid_r = tl.program_id(1)
    bt = tl.program_id(2)
    r = pid_r * BR + tl.arange(0, BR)
    s = pid_s * BS + tl.arange(0, BS)
    if CH_AXIS == 0:
        in_r = (r < R) & ((r * 0 + bt) < C)
    else:
        in_r = (r < R) & (r < C)
    mask = in_r[:, None] & (s < S)[None, :]
    x = tl.load(src + bt * s_b + r[:, None] * s_r + s[None, :] * s_s, mask=mask, other=0.0)
    if FP16:
        x = x * _pow2_scale(tl.load(amax_bits), False)
        hi = x.to(tl.float16)
        lo = (x - hi.to(tl.float32)).to(tl.float16)
    else:
        hi = _round_tf32(x)
        lo = _round_tf32(x - hi)
    store_mask = (r < R)[:, None] & (s < S)[None, :]
    s_off = s[None, :] * d_s
    for slot in tl.static_range(NSLOT):
        if CH_AXIS == 0:
            c_in = bt
        else:
            c_in = r
        if INTERLEAVE:
            ch = (c_in // PK) * (NSLOT * PK) + (c_in % PK) * NSLOT + slot
        else:
            ch = (c_in // PK) * (NSLOT * PK) + slot * PK + c_in % PK
        if CH_AXIS == 0:
            off = ch * d_b + r[:, None] * d_r + s_off
        else:
            off = bt * d_b + ch[:, None] * d_r + s_off
        if (LO_SLOTS >> slot) & 1:
            tl.store(dst + off, lo, mask=store_mask)
        else:
            tl.store(dst + off, hi, mask=store_mask)


GPU_CONFIGS = [
    triton.Config({"BM": 128, "BN": 128}, num_warps=8, num_stages=3),
    triton.Config({"BM": 128, "BN": 128}, num_warps=8, num_stages=4),
    triton.Config({"BM": 128, "BN": 128}, num_warps=8, num_stages=2),
    triton.Config({"BM": 128, "BN": 64}, num_warps=8, num_stages=3),
    triton.Config({"BM": 64, "BN": 128}, num_warps=4, num_stages=3),
    triton.Config({"BM": 64, "BN": 64}, num_warps=4, num_stages=3),
]
INTERPRETER_CONFIGS = [triton.Config({"BM": 32, "BN": 16}, num_warps=4, num_stages=1)]


def _configs():
    return INTERPRETER_CONFIGS if _INTERPRET else GPU_CONFIGS


_SMEM_BYTES = 225 * 1024


def _fits(cfg, mode, pk, flush):
    """Register tiles (fp32 BM x BN) and shared memory per stage that the config needs."""
    bm, bn = cfg.kwargs["BM"], cfg.kwargs["BN"]
    tiles = 3 if flush else 2
    regs = tiles * bm * bn // (32 * cfg.num_warps)
    nslot, _, _, fp16, _ = _LAYOUT[mode]
    k_elems = nslot * pk + (pk if mode == H3 else 0)  # H3 also loads the hi slot on its own
    smem = (bm + bn) * k_elems * (2 if fp16 else 4) * cfg.num_stages
    return regs <= 192 and smem <= _SMEM_BYTES


def _prune(configs, named_args, **kwargs):
    """Keep configs that fit, with tiles no wider than C_out; a small problem takes the first."""
    a = {**named_args, **kwargs}
    c = a["C"]
    fit = [cfg for cfg in configs if _INTERPRET or _fits(cfg, a["MODE"], a["PK"], a["FLUSH"])]
    kept = [cfg for cfg in fit if cfg.kwargs["BN"] <= max(c, 16)] or fit[-1:] or configs[-1:]
    flops = 2 * a["B"] * c * c * a["KH"] * a["KW"] * a["OH"] * a["OW"]
    return kept if flops > 1e10 else kept[:1]


def _bench(kernel_call, quantiles):
    return triton.testing.do_bench(kernel_call, warmup=5, rep=25, quantiles=quantiles)


@triton.autotune(configs=_configs(), key=["B", "C", "H", "W", "KH", "KW", "MODE", "FLUSH", "GROUP_K", "PK"],
                 prune_configs_by={"early_config_prune": _prune}, do_bench=_bench)
@triton.heuristics({"EVEN_N": lambda a: a["C"] % a["BN"] == 0})
@triton.jit(do_not_specialize=["B", "H", "W", "KH", "KW", "OH", "OW", "GROUP_K", "zero"])
def _conv_kernel(xp, wp, out, amax_bits,
                 B, C, CP, H, W, KH, KW, OH, OW, GROUP_K, zero,
                 MODE: tl.constexpr, FLUSH: tl.constexpr, PK: tl.constexpr, NSLOT: tl.constexpr,
                 FP16: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, EVEN_N: tl.constexpr):
    """xp: [B*H*W, NSLOT*CP] packed input rows; wp: [C, KH*KW*NSLOT*CP] packed weight rows."""
    pid = tl.program_id(0)
    n_tiles = tl.cdiv(C, BN)
    MV = OH * W
    m_tiles = tl.cdiv(MV, BM)
    pid_n = pid % n_tiles
    rest = pid // n_tiles
    pid_m = rest % m_tiles
    b = rest // m_tiles

    row_len = NSLOT * CP
    k_tot = KH * KW * row_len
    row0 = b * H * W + pid_m * BM
    n0 = pid_n * BN
    KA: tl.constexpr = NSLOT * PK if MODE != 0 else PK
    # Rows past the end of xp read as zeros; they only feed discarded outputs.
    a_desc = tl.make_tensor_descriptor(xp, shape=[B * H * W, row_len], strides=[row_len, 1],
                                       block_shape=[BM, KA])
    b_desc = tl.make_tensor_descriptor(wp, shape=[C, k_tot], strides=[k_tot, 1], block_shape=[BN, KA])
    if MODE == 0 or MODE == 3:
        a1_desc = tl.make_tensor_descriptor(xp, shape=[B * H * W, row_len], strides=[row_len, 1],
                                            block_shape=[BM, PK])
        b1_desc = tl.make_tensor_descriptor(wp, shape=[C, k_tot], strides=[k_tot, 1], block_shape=[BN, PK])

    cb = CP // PK
    n_iter = KH * KW * cb
    group_iters = tl.cdiv(GROUP_K, PK)
    z = tl.full((BM, BN), zero, tl.float32)  # an accumulator start the compiler cannot fold away
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for g in range(0, n_iter, group_iters):
        part = tl.zeros((BM, BN), dtype=tl.float32)
        for t in range(g, tl.minimum(g + group_iters, n_iter)):
            kk = t // cb
            j = t - kk * cb
            kh = kk // KW
            kw = kk - kh * KW
            a_row = row0 + kh * W + kw
            a_col = j * (NSLOT * PK)
            b_col = kk * row_len + j * (NSLOT * PK)
            if FLUSH:
                d = z
            else:
                d = part
            x0 = a_desc.load([a_row, a_col])
            w0 = b_desc.load([n0, b_col])
            if MODE == 4:
                d = tl.dot(x0, tl.trans(w0), d)
            elif MODE == 6:
                # x, w interleaved (hi_c, lo_c) per channel c: x0 @ w0 = hi*hi + lo*lo; the
                # pairwise swap of x0 gives lo*hi + hi*lo
                hi_a, lo_a = tl.split(tl.reshape(x0, (BM, PK, 2)))
                x_sw = tl.reshape(tl.join(lo_a, hi_a), (BM, 2 * PK))
                d = tl.dot(x0, tl.trans(w0), d)
                d = tl.dot(x_sw, tl.trans(w0), d)
            elif MODE == 3:
                # x slots (lo, hi), w slots (hi, lo): [lo|hi] @ [hi;lo] + hi @ hi
                x1 = a1_desc.load([a_row, a_col + PK])
                w1 = b1_desc.load([n0, b_col])
                d = tl.dot(x0, tl.trans(w0), d)
                d = tl.dot(x1, tl.trans(w1), d)
            else:
                # x and w slots (hi, lo), TF32
                x1 = a1_desc.load([a_row, a_col + PK])
                w1 = b1_desc.load([n0, b_col + PK])
                d = tl.dot(x1, tl.trans(w0), d, input_precision="tf32")
                d = tl.dot(x0, tl.trans(w1), d, input_precision="tf32")
                d = tl.dot(x0, tl.trans(w0), d, input_precision="tf32")
            if FLUSH:
                part += d
            else:
                part = d
        acc += part

    if FP16:
        # undo the power-of-two scales of x and w
        acc = acc * (_pow2_scale(tl.load(amax_bits), True) * _pow2_scale(tl.load(amax_bits + 1), True))

    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = n0 + tl.arange(0, BN)
    oh = offs_m // W
    ow = offs_m - oh * W
    m_ok = (offs_m < MV) & (ow < OW)
    o_off = b * C * OH * OW + offs_n[None, :] * (OH * OW) + (oh * OW + ow)[:, None]
    if EVEN_N:
        mask = m_ok[:, None]
    else:
        mask = m_ok[:, None] & (offs_n < C)[None, :]
    tl.store(out + o_off, acc, mask=mask)


def _pack(src, amax_bits, nb, r, s, s_strides, d_strides, ch_axis, cp, mode, pk, weight):
    nslot, x_slots, w_slots, fp16, interleave = _LAYOUT[mode]
    lo_slots = sum(v << i for i, v in enumerate(w_slots if weight else x_slots))
    size = nslot * cp * (r if ch_axis == 0 else nb) * s
    dst = torch.empty(size, device=src.device, dtype=torch.float16 if fp16 else torch.float32)
    c = nb if ch_axis == 0 else r
    nb_p, r_p = (cp, r) if ch_axis == 0 else (nb, cp)
    br, bs = 32, 64
    grid = (triton.cdiv(s, bs), triton.cdiv(r_p, br), nb_p)
    _pack_kernel[grid](src, dst, amax_bits, r_p, s, c, *s_strides, *d_strides,
                       CH_AXIS=ch_axis, PK=pk, NSLOT=nslot, FP16=fp16,
                       LO_SLOTS=lo_slots, INTERLEAVE=interleave, BR=br, BS=bs)
    return dst


def conv2d(x, w, out, mode=DEFAULT_MODE, flush=DEFAULT_FLUSH, group_k=DEFAULT_GROUP_K, pk=DEFAULT_PK):
    x = x.contiguous()
    w = w.contiguous()
    B, C, H, W = x.shape
    KH, KW = w.shape[2], w.shape[3]
    OH, OW = H - KH + 1, W - KW + 1
    pk = min(pk, max(16, triton.next_power_of_2(C)))
    cp = triton.cdiv(C, pk) * pk
    nslot, _, _, fp16, _ = _LAYOUT[mode]
    amax_bits = torch.zeros(2, device=x.device, dtype=torch.int32)
    if fp16:
        block = 4096
        _amax_kernel[(triton.cdiv(x.numel(), block),)](x, x.numel(), amax_bits, BLOCK=block)
        _amax_kernel[(triton.cdiv(w.numel(), block),)](w, w.numel(), amax_bits[1:], BLOCK=block)
    kk = KH * KW
    # x [B][C][H*W] -> [B][H*W][slots of C]: channel axis r, rows of nslot*cp
    xp = _pack(x, amax_bits, B, C, H * W, (C * H * W, H * W, 1), (H * W * nslot * cp, 1, nslot * cp),
               1, cp, mode, pk, weight=False)
    # w [C_out][C_in][KK] seen as (bt=C_in, r=C_out, s=KK) -> [C_out][KK][slots of C_in]
    wp = _pack(w, amax_bits[1:], C, C, kk, (kk, C * kk, 1), (1, kk * nslot * cp, nslot * cp),
               0, cp, mode, pk, weight=True)
    grid = lambda meta: (B * triton.cdiv(OH * W, meta["BM"]) * triton.cdiv(C, meta["BN"]),)
    _conv_kernel[grid](xp, wp, out, amax_bits, B, C, cp, H, W, KH, KW, OH, OW, group_k, 0.0,
                       MODE=mode, FLUSH=flush, PK=pk, NSLOT=nslot, FP16=fp16)
    return out


def custom_kernel(data: input_t) -> output_t:
    x, w, out = data
    return conv2d(x, w, out)
