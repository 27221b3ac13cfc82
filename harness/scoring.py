"""Scores from per-shape timings, the significance of a difference between two revisions, ranks.

Score, by the task's `ranking_by` (GPU MODE's choices):
- `geom`: the geometric mean over the benchmark shapes of the per-shape mean times;
- `mean`: the arithmetic mean of the per-shape mean times;
- `last`: the mean time of the last benchmark shape (GPU MODE uses it for tasks with a single
  benchmark, where it is `benchmark.0.mean`).
Speedup against the reference = reference score / score.

Comparison (`compare`), the test stated: each shape's mean time m has the variance of a sample
mean, v = s^2 / n from its per-call times. By the delta method the log of the score has variance
- geom: log S = (1/k) sum log m_i, var = (1/k^2) sum v_i / m_i^2,
- mean: S = (1/k) sum m_i, var = (1/k^2) sum v_i / S^2,
- last: S = m_k, var = v_k / m_k^2.
The two revisions' scores are independent, so z = (log S_a - log S_b) / sqrt(var_a + var_b). A
difference is significant when |z| exceeds the 99 % two-sided normal threshold (2.576) AND the
scores differ by at least 1 %; then A is `faster` or `slower` than B, otherwise `same within
noise`. The normal threshold is a large-sample approximation; the 1 % floor keeps tiny but
well-measured differences (clock drift, a kernel moved by 0.5 %) from counting as real.

Drift within a run (`timing_variance`): per-call variance misses what changes between the
blocks of calls of one run (a loaded machine, clocks). When B was timed twice in A's run, first
and last (harness.evolve.judging: B's calls joined), its two per-shape means m_i and m'_i give
that block-to-block variance: d_i = log(m_i / m'_i) has variance 2 s^2, so s^2 = mean(d_i^2) / 2
per shape's block; A's score (one block per shape) and B's joined score (two) add s^2 / k and
s^2 / (2k) to the variance of their difference (geom; `last`: k = 1 on the last shape; `mean`
like geom), passed to `compare` as `extra_variance`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from harness.errors import HarnessError

RANKING_CHOICES = ("geom", "mean", "last")
FASTER = "faster"
SLOWER = "slower"
SAME = "same within noise"
Z_THRESHOLD = statistics.NormalDist().inv_cdf(1 - 0.01 / 2)
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


def compare(
    times_a: Sequence[Sequence[float]],
    times_b: Sequence[Sequence[float]],
    ranking_by: str = "geom",
    *,
    extra_variance: float = 0.0,
) -> Comparison:
    """Compare two revisions from their per-call times per benchmark shape (same shapes, same
    order); the test is stated in the module docstring (`extra_variance`: of the log-score
    difference, beyond the per-call variance: `timing_variance`)."""
    if len(times_a) != len(times_b):
        raise ValueError(f"different numbers of shapes: {len(times_a)} and {len(times_b)}")
    log_a, var_a = _log_score_and_variance(times_a, ranking_by)
    log_b, var_b = _log_score_and_variance(times_b, ranking_by)
    difference = log_a - log_b
    spread = math.sqrt(var_a + var_b + extra_variance)
    if spread > 0:
        z = difference / spread
    else:
        z = 0.0 if difference == 0 else math.copysign(math.inf, difference)
    ratio = math.exp(difference)
    significant = abs(z) > Z_THRESHOLD and abs(ratio - 1) >= MIN_RELATIVE_DIFFERENCE
    verdict = SAME if not significant else FASTER if ratio < 1 else SLOWER
    return Comparison(verdict=verdict, ratio=ratio, z=z)


def timing_variance(
    first_means: Sequence[float], last_means: Sequence[float], ranking_by: str = "geom"
) -> float:
    """The variance that drift between blocks of calls adds to the log-score difference of a
    revision timed once against one timed twice (first and last) in the same run, from the
    latter's two per-shape means (module docstring)."""
    _check_ranking_by(ranking_by)
    pairs = [(a, b) for a, b in zip(first_means, last_means) if a > 0 and b > 0]
    if ranking_by == "last":
        pairs = pairs[-1:]
    if not pairs:
        return 0.0
    block = statistics.fmean(math.log(a / b) ** 2 for a, b in pairs) / 2
    return 1.5 * block / len(pairs)


def _log_score_and_variance(
    times_per_shape: Sequence[Sequence[float]], ranking_by: str
) -> tuple[float, float]:
    _check_ranking_by(ranking_by)
    if not times_per_shape or any(len(times) == 0 for times in times_per_shape):
        raise ValueError("every shape needs at least one timed call")
    means = [statistics.fmean(times) for times in times_per_shape]
    variances = [statistics.variance(t) / len(t) if len(t) > 1 else 0.0 for t in times_per_shape]
    shapes = len(means)
    log_score = math.log(score(means, ranking_by))
    if ranking_by == "last":
        return log_score, variances[-1] / means[-1] ** 2
    if ranking_by == "mean":
        return log_score, sum(variances) / shapes**2 / math.exp(log_score) ** 2
    return log_score, sum(v / m**2 for v, m in zip(variances, means)) / shapes**2


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
