"""Tensors as bit patterns: each element read as an integer of its own size. Both sides of the
sandbox use them: the child counts the input elements a call changed (harness.sandbox.transfer)
and fingerprints its inputs (`bit_sum`), which the parent compares with its own (harness.checking).
"""

from __future__ import annotations

import torch

_SAME_SIZE_INTEGER = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bit_patterns(value: torch.Tensor) -> torch.Tensor:
    """The tensor's elements as integers of the same size (their bit patterns), without a copy."""
    return value.detach().view(_SAME_SIZE_INTEGER[value.element_size()])


def bit_sum(value: torch.Tensor) -> int:
    """The sum of the elements' bit patterns as integers (int64, wrapping): a cheap fingerprint,
    on the tensor's own device, that the parent compares with its own inputs' to see that both
    sides generated the same inputs."""
    return int(bit_patterns(value).sum(dtype=torch.int64))
