"""The timed calls' inputs and references, made once for the children timed together.

Every timed call gets inputs from a fresh secret seed and its output is checked against the
reference of that seed (issue 28): the parent makes the inputs and runs the task's reference
before each call (and, where GPU MODE's rule fails somewhere, the exact answer in float64). On
conv2d that work costs about what the timed call itself costs, once per timed call of every
revision: the largest part of the harness's overhead in a benchmark phase.

A `TimedCases` belongs to one group of evaluators timed together (`evaluate_in_groups`) and
shares that work among them. The seed of a timed call is a function of the group's own secret,
the shape, the block of calls (the evaluator's how-many-th timing of that shape: a later pass, a
confirmation) and the call's index in the block, so that:
- no child is ever timed twice on one seed: within a block the index grows, and each block of one
  evaluator has a number of its own (a kept child timed again, a pass after the first, sees new
  seeds);
- the children of the group's other revisions get the same inputs for the same call, so their
  references (and exact answers) are made once and kept until the group moves on to the next
  shape (`forget`), up to `budget_bytes`; past that, a case is made for its caller alone.

What a revision could gain from another's inputs needs a channel between two sandboxed children
(their own namespaces, cgroups and files; docs/threat-model.md): the same inputs for the same
call are what GPU MODE gives every submission of a leaderboard too, and the secret is new for
every group, so a seed is never seen in two runs.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable

from harness import checking

# the cases kept at once on a GPU (inputs and references; their exact answers come on top): a
# quarter of the GPU's memory, up to this. At 4 GiB on the H200 a group's revisions shared only
# the first few dozen calls of conv2d's benchmark shapes (a case is up to 190 MB there; a fast
# revision makes 100 calls per shape), and the slower calls' references and exact answers were
# made again for each revision that reached them. `_room_on_device` still keeps none where the
# GPU's memory is short (a child that holds it beside the parent).
CUDA_BUDGET_BYTES = 32 * 1024**3
CPU_BUDGET_BYTES = 512 * 1024**2


def _cuda_budget() -> int:
    return min(CUDA_BUDGET_BYTES, checking.memory_bytes("cuda") // 4)


def case_bytes(case: checking.ReferenceCase) -> int:
    """The bytes of a case's inputs and reference (its exact answer, when made later, adds its own)."""
    return checking.output_nbytes(case.data) + checking.output_nbytes(case.expected)


def _room_on_device(case: checking.ReferenceCase, size: int) -> bool:
    """Whether the GPU a case lives on has room to spare for keeping it: four times its bytes
    free, and a quarter of the GPU left free after it (a task whose parent work fills the GPU
    keeps none, as before this module; on an H100 the kept cases of pmpp's grayscale, 4 GiB each
    on its largest shape, left the parent's own check of a timed output no room)."""
    import torch

    tensors = [t for t in checking.output_parts(case.expected) if isinstance(t, torch.Tensor)]
    if not tensors or tensors[0].device.type != "cuda":
        return True
    free, total = torch.cuda.mem_get_info(tensors[0].device)
    return free >= max(4 * size, size + total // 4)


class TimedCases:
    """The seeds and cases of one group's timed calls (module docstring)."""

    def __init__(self, device: str, budget_bytes: int | None = None) -> None:
        self.secret = secrets.randbits(128)
        self.budget_bytes = (
            budget_bytes
            if budget_bytes is not None
            else (_cuda_budget() if device == "cuda" else CPU_BUDGET_BYTES)
        )
        self.cases: dict[tuple[str, int], checking.ReferenceCase] = {}
        self.kept_bytes = 0
        self.made = 0  # cases made (each a reference run)
        self.shared = 0  # cases handed out again, made by another caller before

    def seed(self, shape_key: str, block: int, index: int) -> int:
        """The seed of timed call `index` of block `block` of shape `shape_key` (63 bits)."""
        digest = hashlib.blake2b(
            f"{shape_key}\0{block}\0{index}".encode(), key=self.secret.to_bytes(16, "big"), digest_size=8
        ).digest()
        return int.from_bytes(digest, "big") >> 1

    def case(
        self, shape_key: str, seed: int, make: Callable[[], checking.ReferenceCase]
    ) -> tuple[checking.ReferenceCase, bool]:
        """The case of `seed`: the kept one, or `make()` kept while the budget allows. Returns
        (case, kept): a case not kept is its caller's alone."""
        key = (shape_key, seed)
        if key in self.cases:
            self.shared += 1
            return self.cases[key], True
        case = make()
        self.made += 1
        size = case_bytes(case)
        if self.kept_bytes + size > self.budget_bytes or not _room_on_device(case, size):
            return case, False
        self.cases[key] = case
        self.kept_bytes += size
        return case, True

    def forget(self) -> None:
        """Drop every kept case (the group goes on to its next shape)."""
        self.cases.clear()
        self.kept_bytes = 0
