"""The checks the built-in problems' references import (`from utils import ...`), in the roles
GPU MODE's problem utilities have; written for the harness."""

from __future__ import annotations

import torch


@torch.no_grad()
def mismatch_report(
    received: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float, shown: int = 5
) -> list[str]:
    """Where `received` is not within `atol + rtol * |expected|` of `expected` (NaN and infinities
    must match), in words; [] when it is everywhere."""
    if received.shape != expected.shape:
        return [f"shape {tuple(received.shape)} is not {tuple(expected.shape)}"]
    close = torch.isclose(received, expected.to(received.dtype), rtol=rtol, atol=atol, equal_nan=True)
    count = int((~close).sum())
    if count == 0:
        return []
    first = [
        f"at {tuple(position.tolist())}: {received[tuple(position)]} vs {expected[tuple(position)]}"
        for position in torch.nonzero(~close)[:shown]
    ]
    return [f"{count} mismatched elements", *first]


def make_match_reference(reference, rtol: float = 1e-5, atol: float = 1e-8):
    """check_implementation(data, output) -> (ok, message) against `reference(data)`."""

    def check_implementation(data, output) -> tuple[bool, str]:
        found = mismatch_report(output, reference(data), rtol, atol)
        return (False, "mismatch found! " + "; ".join(found)) if found else (True, "")

    return check_implementation
