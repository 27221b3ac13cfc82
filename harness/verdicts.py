"""The two verdicts on a checked output, in one typed form for checking (which makes them), the
store (which keeps them as columns), the reports and the prompts; torch-free.

- `gpumode`: GPU MODE's rule: every element finite and within `atol + rtol * |reference|` of the
  task's fp32 reference (its `verbose_allclose`).
- `accurate`: every element finite and within `atol + rtol * |exact|` of the exact answer (the
  reference computed in float64 from the same fp32 inputs) or within GPU MODE's tolerance of the
  reference, element by element; so nothing GPU MODE accepts is refused, and an output that is
  more accurate than the reference but rounds differently is accepted. Without an exact answer
  (a task without one, a shape too costly for the CPU) it is GPU MODE's rule, and its reason
  says so.

A task names the verdict that ranks (`verdict` in its file; `--verdict` overrides it). An output
is timed when it passes either.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

VerdictName = Literal["gpumode", "accurate"]
VERDICTS: tuple[VerdictName, ...] = ("gpumode", "accurate")
VERDICT_WORDS: dict[VerdictName, str] = {
    "gpumode": "GPU MODE",
    "accurate": "accurate",
}  # as reports name them


class Verdict(BaseModel):
    """One verdict on one output: `pass` or `fail`, the count of elements that fail it, and why in
    words (empty when it passes)."""

    model_config = ConfigDict(extra="forbid")

    status: Literal["pass", "fail"]
    failures: int = 0
    reason: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "pass"


class Verdicts(BaseModel):
    """Both verdicts on one output (module docstring)."""

    model_config = ConfigDict(extra="forbid")

    gpumode: Verdict
    accurate: Verdict

    def get(self, name: VerdictName) -> Verdict:
        return getattr(self, name)

    def failing(self) -> list[VerdictName]:
        return [name for name in VERDICTS if not self.get(name).passed]

    @property
    def either_passed(self) -> bool:
        """The output is worth timing: it passes at least one verdict."""
        return len(self.failing()) < len(VERDICTS)

    def reasons(self) -> str:
        """Why the failing verdicts fail, in words ("" when both pass)."""
        return "; ".join(self.get(name).reason for name in self.failing() if self.get(name).reason)

    def both(self, other: Verdicts) -> Verdicts:
        """Each verdict passes only where it passes in both (a shape's checked call and its timed
        calls, or every shape of a run)."""
        return Verdicts(**{name: _worse(self.get(name), other.get(name)) for name in VERDICTS})


def _worse(first: Verdict, second: Verdict) -> Verdict:
    return second if first.passed and not second.passed else first


class Accuracy(BaseModel):
    """How far an output is from the exact answer: the relative L2 error and the largest absolute
    error over the output's natural scale (the task's `output_scale`); None when not computed."""

    model_config = ConfigDict(extra="forbid")

    rel_l2: float | None = None
    max_err_over_scale: float | None = None

    def worst(self, other: Accuracy) -> Accuracy:
        return Accuracy(
            **{
                name: max(
                    (v for v in (getattr(self, name), getattr(other, name)) if v is not None), default=None
                )
                for name in ("rel_l2", "max_err_over_scale")
            }
        )
