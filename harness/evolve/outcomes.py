"""How a step of an experiment can end without a child to evaluate.

A step that fails is not an error of the harness: the experiment records the status and the
one-line reason, and goes on with the next generation. These exceptions carry that status from
the place that knows what went wrong (the proposer, the edit application, the mutator) to the
loop that records it. They are deliberately not `HarnessError`s: the CLI never sees them.
"""

from __future__ import annotations

# Step statuses besides the runner's own (pass, wrong_answer, compile_error, ...), which a step
# takes over from its child's evaluation.
PROPOSER_FAILED = "proposer_failed"
PROPOSER_TIMEOUT = "proposer_timeout"
EDIT_FAILED = "edit_failed"
UNCHANGED = "unchanged"  # the reply gives back the parent's exact bytes: nothing registered
DUPLICATE = "duplicate"  # the child's bytes are already a revision of the lineage
REJECTED = "rejected"  # the child's bytes cannot be registered (empty, too large, not UTF-8)
PROPOSING = "proposing"  # parent chosen and prompt rendered, the proposer asked (resumable)
EVALUATING = "evaluating"  # child registered, evaluation not recorded yet (resumable)
# Ends of a step that leave nothing to evaluate: an experiment in which every step ended so
# failed (`failed`, not `finished`).
NO_CHILD = (PROPOSER_FAILED, PROPOSER_TIMEOUT, EDIT_FAILED, UNCHANGED, DUPLICATE, REJECTED)


class StepFailed(Exception):
    """A step ends without a new revision; `str(exc)` is the reason stored with the step, and
    `reply` whatever the proposer said before it failed (kept for review)."""

    status = PROPOSER_FAILED

    def __init__(self, reason: str, *, reply: str = "", stderr: str = "") -> None:
        super().__init__(reason)
        self.reply = reply
        self.stderr = stderr


class ProposerFailed(StepFailed):
    """The proposer ran but gave no usable reply (exit status, empty output, bad metadata,
    nothing to mutate)."""

    status = PROPOSER_FAILED


class ProposerTimeout(StepFailed):
    status = PROPOSER_TIMEOUT


class EditFailed(StepFailed):
    """The reply cannot be applied to the parent (a SEARCH block matching 0 or several times, a
    malformed block, no code at all). Never silently dropped."""

    status = EDIT_FAILED
