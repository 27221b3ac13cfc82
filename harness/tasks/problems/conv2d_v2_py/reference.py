"""conv2d_v2's reference and input generator, as GPU MODE's reference.py has them.

`generate_input` is the one place inputs come from: the parent (to compute the reference) and the
sandboxed child (to feed the candidate) both call it with the same seed on the same device, and
a seeded `torch.Generator` on that device makes the two identical.
"""

from __future__ import annotations

import threading

import torch
import torch.nn.functional as F
from utils import make_match_reference

# The flags are process-wide: a lock keeps two threads' save/restore from interleaving.
_FLAGS_LOCK = threading.RLock()


class ExactFp32:
    """cuDNN and cuBLAS in full fp32 (TF32 off) with deterministic algorithms, restored on exit."""

    def __enter__(self) -> None:
        _FLAGS_LOCK.acquire()
        self.saved = (
            torch.backends.cudnn.allow_tf32,
            torch.backends.cuda.matmul.allow_tf32,
            torch.backends.cudnn.deterministic,
        )
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.deterministic = True

    def __exit__(self, *exc: object) -> None:
        (
            torch.backends.cudnn.allow_tf32,
            torch.backends.cuda.matmul.allow_tf32,
            torch.backends.cudnn.deterministic,
        ) = self.saved
        _FLAGS_LOCK.release()


def ref_kernel(data: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """No padding, stride 1; computes in the inputs' dtype (float64 inputs give a float64 result)."""
    input_tensor, kernel, _output = data
    with ExactFp32():
        return F.conv2d(input_tensor, kernel, stride=1, padding=0)


def ref_kernel_at(
    data: tuple[torch.Tensor, torch.Tensor, torch.Tensor], positions: torch.Tensor
) -> torch.Tensor:
    """The exact answer at the output elements `positions` (an [n, 4] index tensor: batch, output
    channel, row, column) as n float64 values: each element's products x * w summed in float64,
    as ref_kernel on the inputs cast to float64 sums them everywhere (task.yml's
    `exact_answer_at`). A few elements at a time, so that memory stays small."""
    input_tensor, kernel, _output = data
    channels, size = input_tensor.shape[1], kernel.shape[-1]
    device = input_tensor.device
    positions = positions.to(device)
    offsets = torch.arange(size, device=device)
    channel = torch.arange(channels, device=device)[None, :, None, None]
    values = []
    for part in positions.split(16):
        b, out_channel, row, column = part.unbind(1)
        patches = input_tensor[
            b[:, None, None, None],
            channel,
            (row[:, None] + offsets)[:, None, :, None],
            (column[:, None] + offsets)[:, None, None, :],
        ]
        values.append((patches.double() * kernel[out_channel].double()).sum(dim=(1, 2, 3)))
    return torch.cat(values) if values else torch.zeros(0, dtype=torch.float64, device=device)


def output_scale(data: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """The natural scale of each output element, s = sqrt(sum (x*w)^2) over its terms: the size of
    the rounding errors an fp32 sum of those terms makes. In the inputs' dtype (a scale needs no
    more), so that it costs one more convolution at the reference's speed."""
    input_tensor, kernel, _output = data
    with ExactFp32():
        return F.conv2d(input_tensor * input_tensor, kernel * kernel, stride=1, padding=0).sqrt_()


def flops(size: int, kernelsize: int, channels: int, batch: int) -> int:
    """Multiply-adds of the convolution, two FLOPs each: 2 * B * C_out * C_in * K * K * OH * OW."""
    out = size - kernelsize + 1
    return 2 * batch * channels * channels * kernelsize * kernelsize * out * out


def generate_input(
    size: int, kernelsize: int, channels: int, batch: int, seed: int, device: str = "cuda"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input [batch, channels, size, size], kernel [channels, channels, k, k], output buffer)."""
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    input_tensor = torch.randn(
        batch, channels, size, size, device=device, dtype=torch.float32, generator=gen
    ).contiguous()
    kernel = torch.randn(
        channels, channels, kernelsize, kernelsize, device=device, dtype=torch.float32, generator=gen
    ).contiguous()
    output = torch.empty(
        batch, channels, size - kernelsize + 1, size - kernelsize + 1, device=device, dtype=torch.float32
    )
    return input_tensor, kernel, output


# GPU MODE's check (the harness computes the same rule itself: task.yml's `harness: tolerance`)
check_implementation = make_match_reference(ref_kernel, rtol=1e-3, atol=1e-3)
