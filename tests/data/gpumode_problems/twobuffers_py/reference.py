import torch
from task import input_t, output_t


def generate_input(size: int, block: int, seed: int, device: str = "cuda") -> input_t:
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    x = torch.randn(size, device=device, dtype=torch.float32, generator=gen)
    q_out = torch.empty(size, device=device, dtype=torch.int8)
    s_out = torch.empty(size // block, device=device, dtype=torch.float32)
    return x, q_out, s_out


def ref_kernel(data: input_t) -> output_t:
    x, q_out, s_out = data
    blocks = x.view(s_out.numel(), -1)
    torch.div(blocks.abs().amax(dim=1).clamp(min=1e-12), 127.0, out=s_out)
    q_out.copy_(torch.round(blocks / s_out[:, None]).clamp(-127, 127).view(-1))
    return q_out, s_out


def check_implementation(data: input_t, output: output_t) -> tuple[bool, str]:
    expected_q, expected_s = ref_kernel(data)
    if not isinstance(output, tuple | list) or len(output) != 2:
        return False, f"expected (q, scales), got {type(output).__name__}"
    q, scales = output
    if q.dtype != torch.int8 or q.shape != expected_q.shape:
        return False, f"q: {q.dtype} {tuple(q.shape)}, expected int8 {tuple(expected_q.shape)}"
    if scales.shape != expected_s.shape or not torch.allclose(scales, expected_s, rtol=1e-6, atol=0):
        return False, "scales differ"
    off = int(((q.int() - expected_q.int()).abs() > 1).sum())
    return (False, f"q: {off} values off by more than 1") if off else (True, "")
