import torch
from task import input_t, output_t


def ref_kernel(data: input_t) -> output_t:
    xs, w, scales = data
    return [(x @ w) * scale + shift for x, (scale, shift) in zip(xs, scales, strict=True)]


def generate_input(
    m: list[int], k: int, scales: list[list[float]], seed: int, device: str = "cuda"
) -> input_t:
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    xs = [torch.randn(rows, k, device=device, dtype=torch.float32, generator=gen) for rows in m]
    w = torch.randn(k, device=device, dtype=torch.float32, generator=gen)
    return xs, w, scales


def check_implementation(data: input_t, output: output_t) -> tuple[bool, str]:
    expected = ref_kernel(data)
    if not isinstance(output, list) or len(output) != len(expected):
        return False, f"expected a list of {len(expected)} tensors, got {type(output).__name__}"
    for group, (got, want) in enumerate(zip(output, expected, strict=True)):
        if got.shape != want.shape or not torch.allclose(got, want, rtol=1e-5, atol=1e-5):
            return False, f"group {group} differs"
    return True, ""
