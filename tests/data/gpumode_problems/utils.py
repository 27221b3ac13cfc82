"""Checks shared by the test problems, in the shape of GPU MODE's problem utilities (written for
these tests): an elementwise comparison that lists the first mismatches, and a
check_implementation built from a reference."""

import torch


@torch.no_grad()
def mismatches(received: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float) -> list[str]:
    if received.shape != expected.shape:
        return [f"shape {tuple(received.shape)} is not {tuple(expected.shape)}"]
    received, expected = received.double(), expected.double()
    bad = ~((received - expected).abs() <= atol + rtol * expected.abs())
    count = int(bad.sum())
    if not count:
        return []
    first = [
        f"at {tuple(i.tolist())}: {float(received[tuple(i)])} vs {float(expected[tuple(i)])}"
        for i in bad.nonzero()[:3]
    ]
    return [f"{count} elements differ", *first]


def match_reference(data, output, reference, rtol=1e-5, atol=1e-8):
    found = mismatches(output, reference(data), rtol, atol)
    return (False, "output differs from the reference: " + "; ".join(found)) if found else (True, "")


def make_match_reference(reference, **tolerances):
    def check(data, output):
        return match_reference(data, output, reference, **tolerances)

    return check
