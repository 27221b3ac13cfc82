import torch
from task import input_t, output_t


def generate_input(size: int, block: int, seed: int, device: str = "cuda") -> input_t:
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    x = torch.randn(size, device=device, dtype=torch.float32, generator=gen)
    return x, block


def ref_kernel(data: input_t) -> output_t:
    x, block = data
    blocks = x.view(-1, block)
    scales = blocks.abs().amax(dim=1).clamp(min=1e-12) / 127.0
    q = torch.round(blocks / scales[:, None]).clamp(-127, 127).to(torch.int8).view(-1)
    return q, scales


def check_implementation(data: input_t, output: output_t) -> tuple[bool, str]:
    expected_q, expected_scales = ref_kernel(data)
    if not isinstance(output, tuple | list) or len(output) != 2:
        return False, f"expected (q, scales), got {type(output).__name__}"
    q, scales = output
    if q.dtype != torch.int8 or q.shape != expected_q.shape:
        return False, f"q: {q.dtype} {tuple(q.shape)}, expected int8 {tuple(expected_q.shape)}"
    if not torch.allclose(scales, expected_scales, rtol=1e-6, atol=0):
        return False, "scales differ"
    off = int(((q.int() - expected_q.int()).abs() > 1).sum())
    return (False, f"q: {off} values off by more than 1") if off else (True, "")
