"""Tensors as bit patterns: each element read as an integer of its own size. The child counts the
input elements a call changed with them (harness.sandbox.transfer.changed_elements).
"""

from __future__ import annotations

import torch

_SAME_SIZE_INTEGER = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bit_patterns(value: torch.Tensor) -> torch.Tensor:
    """The tensor's elements as integers of the same size (their bit patterns), without a copy."""
    return value.detach().view(_SAME_SIZE_INTEGER[value.element_size()])
