"""Scores from per-shape timings, the significance of a difference between two revisions, ranks.

Score, by the task's `ranking_by` (GPU MODE's choices):
- `geom`: the geometric mean over the benchmark shapes of the per-shape mean times;
- `mean`: the arithmetic mean of the per-shape mean times;
- `last`: the mean time of the last benchmark shape (GPU MODE uses it for tasks with a single
  benchmark, where it is `benchmark.0.mean`).
Speedup against the reference = reference score / score.

Comparison (`compare`), the test stated: the difference of the two log scores, against its
standard error from two estimates, the larger one counting:
- per call: each shape's mean time m has the variance of a sample mean, v = s^2 / n, from its
  per-call times; by the delta method log S has variance sum_i w_i^2 v_i / m_i^2 with w_i =
  d log S / d log m_i (geom: 1/k; mean: m_i / sum m; last: 1 on the last shape, 0 elsewhere);
- per block: each shape is timed in P blocks of calls (harness.timing, method 5.); the spread of
  a revision's block means on one shape, pooled over every revision and shape of the run
  (`block_spread`: sigma^2 of the log of a block's mean, with its degrees of freedom), gives
  log S the variance sigma^2 / P * sum_i w_i^2. This is what per-call variance misses: calls are not independent
  (a loaded host, clocks and bursts move whole runs of calls), and on a 2-core CPU runner an
  identical revision's blocks differ by 10 % where its per-call error says 1 %.
The two scores are independent, so z = (log S_a - log S_b) / sqrt(max(per-call variances summed,
per-block variances summed)). A difference is significant when |z| exceeds the 99.9 % two-sided
threshold (an experiment makes a comparison per child, and a false `faster` picks the next
parent): the normal one (3.29) for the per-call estimate, Student's t at the pooled degrees of
freedom for the per-block one (3.85 at 20: the estimate itself is noisy, and what moves one
process's calls and not another's, as where the scheduler put it, is in neither estimate),
AND the scores differ by at least 1 %; then A is `faster` or `slower` than B,
otherwise `same within noise`. The 1 % floor keeps tiny but well-measured differences (clock
drift, a kernel moved by 0.5 %) from counting as real.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from harness.errors import HarnessError

if TYPE_CHECKING:
    from harness.wire import ShapeCheck

RANKING_CHOICES = ("geom", "mean", "last")
FASTER = "faster"
SLOWER = "slower"
SAME = "same within noise"
Z_THRESHOLD = statistics.NormalDist().inv_cdf(1 - 0.001 / 2)
MIN_RELATIVE_DIFFERENCE = 0.01


def score(means_ms: Sequence[float], ranking_by: str = "geom") -> float:
    """The score in ms of per-shape mean times (in benchmark order) under `ranking_by`."""
    _check_ranking_by(ranking_by)
    if not means_ms:
        raise ValueError("no benchmark shapes to score")
    if ranking_by == "last":
        return float(means_ms[-1])
    if ranking_by == "mean":
        return statistics.fmean(means_ms)
    if any(m <= 0 for m in means_ms):
        raise ValueError(f"a geometric mean needs positive times, got {list(means_ms)}")
    return math.exp(statistics.fmean(math.log(m) for m in means_ms))


def speedup(reference_score_ms: float, score_ms: float) -> float:
    return reference_score_ms / score_ms


@dataclass(frozen=True)
class Comparison:
    """A against B: `verdict` is `faster`, `slower` or `same within noise`; `ratio` = S_a / S_b."""

    verdict: str
    ratio: float
    z: float


@dataclass(frozen=True)
class BlockSpread:
    """A run's pooled variance of the log of a block's mean time, and its degrees of freedom
    (`block_spread`)."""

    variance: float = 0.0
    freedom: int = 0


def compare(
    times_a: Sequence[Sequence[float]],
    times_b: Sequence[Sequence[float]],
    ranking_by: str = "geom",
    *,
    spread: BlockSpread | None = None,
    blocks: tuple[int, int] = (1, 1),
) -> Comparison:
    """Compare two revisions from their per-call times per benchmark shape (same shapes, same
    order), timed in one run; the test is stated in the module docstring (`spread`: the run's
    `block_spread`; `blocks`: how many blocks of calls each revision's times of a shape joined)."""
    if len(times_a) != len(times_b):
        raise ValueError(f"different numbers of shapes: {len(times_a)} and {len(times_b)}")
    log_a, calls_a, weights_a = _log_score_and_variance(times_a, ranking_by)
    log_b, calls_b, weights_b = _log_score_and_variance(times_b, ranking_by)
    spread = spread or BlockSpread()
    per_block = spread.variance * (weights_a / max(blocks[0], 1) + weights_b / max(blocks[1], 1))
    difference = log_a - log_b
    variance = max(calls_a + calls_b, per_block)
    if variance > 0:
        z = difference / math.sqrt(variance)
    else:
        z = 0.0 if difference == 0 else math.copysign(math.inf, difference)
    threshold = t_threshold(spread.freedom) if per_block > calls_a + calls_b else Z_THRESHOLD
    ratio = math.exp(difference)
    significant = abs(z) > threshold and abs(ratio - 1) >= MIN_RELATIVE_DIFFERENCE
    verdict = SAME if not significant else FASTER if ratio < 1 else SLOWER
    return Comparison(verdict=verdict, ratio=ratio, z=z)


def t_threshold(freedom: int) -> float:
    """Student's t quantile for the test's level (99.9 % two-sided) at `freedom` degrees of
    freedom, by the Cornish-Fisher expansion around the normal quantile (Abramowitz and Stegun
    26.7.5): within 0.5 % of the exact quantile from 5 degrees of freedom on, 1-4 % under it at
    3 and 4, further under below (a run pools at least one degree per shape and revision); the
    normal threshold for none (an unknown number: infinitely many)."""
    if freedom <= 0:
        return Z_THRESHOLD
    z, n = Z_THRESHOLD, float(freedom)
    return (
        z
        + (z**3 + z) / (4 * n)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * n**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * n**3)
        + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * n**4)
    )


def block_spread(groups: Iterable[Sequence[float]]) -> BlockSpread:
    """The pooled variance of the log of a block's mean time, from groups of block means (a
    group per revision and shape of one run: that shape's blocks of calls, harness.timing,
    method 5.), with its degrees of freedom; groups of fewer than two blocks add nothing."""
    total, freedom = 0.0, 0
    for means in groups:
        logs = [math.log(mean) for mean in means if mean > 0]
        if len(logs) < 2:
            continue
        centre = statistics.fmean(logs)
        total += sum((value - centre) ** 2 for value in logs)
        freedom += len(logs) - 1
    return BlockSpread(total / freedom if freedom else 0.0, freedom)


def block_means(check: ShapeCheck) -> list[float]:
    """The means of a shape's blocks of calls (its check's `passes`), in timing order; empty for a
    shape timed in one block."""
    return [item.mean_ms for item in check.passes if item.mean_ms]


def run_blocks(run: Any) -> list[list[float]]:
    """A stored run's block means, a group per timed shape (`block_spread`'s groups)."""
    return [block_means(shape.check) for shape in run.shapes if shape.mean_ms is not None]


def blocks_joined(groups: Sequence[Sequence[float]]) -> int:
    """How many blocks of calls a revision's shapes joined, from their block means (the fewest
    of any shape; at least 1: a shape timed in one block keeps no block means)."""
    return max(1, min((len(group) for group in groups), default=1))


def _log_score_and_variance(
    times_per_shape: Sequence[Sequence[float]], ranking_by: str
) -> tuple[float, float, float]:
    """log S, its variance from the per-call times (delta method), and sum_i w_i^2 (module
    docstring)."""
    _check_ranking_by(ranking_by)
    if not times_per_shape or any(len(times) == 0 for times in times_per_shape):
        raise ValueError("every shape needs at least one timed call")
    means = [statistics.fmean(times) for times in times_per_shape]
    relative = [
        statistics.variance(t) / len(t) / m**2 if len(t) > 1 else 0.0 for t, m in zip(times_per_shape, means)
    ]
    shapes = len(means)
    if ranking_by == "last":
        weights = [0.0] * (shapes - 1) + [1.0]
    elif ranking_by == "mean":
        weights = [m / sum(means) for m in means]
    else:
        weights = [1 / shapes] * shapes
    log_score = math.log(score(means, ranking_by))
    calls = sum(w**2 * v for w, v in zip(weights, relative))
    return log_score, calls, sum(w**2 for w in weights)


def _check_ranking_by(ranking_by: str) -> None:
    if ranking_by not in RANKING_CHOICES:
        raise HarnessError(f"unknown ranking_by {ranking_by!r} (choose from {', '.join(RANKING_CHOICES)})")


class Scored(Protocol):
    """Anything with a score and the environment it was measured in (a store `Run` is one)."""

    score_ms: float | None
    env_key: str


ScoredT = TypeVar("ScoredT", bound=Scored)


def rank_by_score(entries: Sequence[ScoredT]) -> list[tuple[int, ScoredT]]:
    """Rank passing results, lowest score first, with competition ranks (1, 2, 2, 4).

    Only results from one environment can be ranked together: times from different devices
    (CPU and GPU, or two GPU models) measure different things.
    """
    environments = sorted({entry.env_key for entry in entries})
    if len(environments) > 1:
        raise HarnessError(f"cannot rank results from different environments together: {environments}")
    if any(entry.score_ms is None for entry in entries):
        raise ValueError("only results with a score can be ranked")
    ordered = sorted(entries, key=lambda entry: entry.score_ms)
    ranked: list[tuple[int, ScoredT]] = []
    for position, entry in enumerate(ordered, start=1):
        tied = ranked and ranked[-1][1].score_ms == entry.score_ms
        ranked.append((ranked[-1][0] if tied else position, entry))
    return ranked
