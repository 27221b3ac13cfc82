import torch
from task import input_t, output_t


def generate_input(batch: int, n: int, seed: int) -> input_t:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    a = torch.randn((batch, n, n), device=device, dtype=torch.float32, generator=gen)
    spd = a @ a.transpose(-1, -2) / n
    spd.diagonal(dim1=-2, dim2=-1).add_(1.0)
    return (0.5 * (spd + spd.transpose(-1, -2))).contiguous()


def ref_kernel(data: input_t) -> output_t:
    return torch.linalg.cholesky(data)


def check_implementation(data: input_t, output: output_t) -> tuple[bool, str]:
    if not isinstance(output, torch.Tensor) or output.shape != data.shape:
        return False, f"expected a tensor of shape {tuple(data.shape)}"
    factor, matrix = output.double(), data.double()
    if not torch.isfinite(factor).all():
        return False, "the factor has NaN or Inf"
    upper = torch.triu(factor, diagonal=1).abs().max()
    if upper > 0:
        return False, f"not lower triangular: {float(upper):.3g} above the diagonal"
    error = (factor @ factor.transpose(-1, -2) - matrix).norm() / matrix.norm()
    if error > 1e-4:
        return False, f"L @ L^T differs from A: relative error {float(error):.3g}"
    return True, ""
