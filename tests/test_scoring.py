"""Scores, the significance test between two revisions, and ranks."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import pytest

from harness.errors import HarnessError
from harness.scoring import (
    FASTER,
    SAME,
    SLOWER,
    Z_THRESHOLD,
    BlockSpread,
    block_spread,
    compare,
    rank_by_score,
    score,
    speedup,
    t_threshold,
)


def samples(means: list[float], rel_sd: float, runs: int, seed: int) -> list[list[float]]:
    """Per-call times for each shape: normal noise of `rel_sd` around each shape's mean."""
    rng = random.Random(seed)
    return [[rng.gauss(mean, rel_sd * mean) for _ in range(runs)] for mean in means]


SHAPE_MEANS = [0.8, 1.5, 6.0, 6.1, 14.0]


def test_geom_mean_last_on_known_values():
    assert score([4.0, 9.0], "geom") == pytest.approx(6.0)
    assert score([1.0, 3.0], "mean") == pytest.approx(2.0)
    assert score([1.0, 3.0, 7.0], "last") == 7.0
    assert score([2.0, 8.0, 4.0], "geom") == pytest.approx(4.0)


def test_speedup_is_reference_over_score():
    assert speedup(10.0, 4.0) == pytest.approx(2.5)


def test_unknown_ranking_or_no_shapes_is_refused():
    with pytest.raises(HarnessError, match="ranking_by"):
        score([1.0], "median")
    with pytest.raises(ValueError):
        score([], "geom")


@pytest.mark.parametrize("ranking_by", ["geom", "mean", "last"])
def test_clearly_different_samples_are_faster_and_slower(ranking_by):
    fast = samples(SHAPE_MEANS, 0.02, 20, seed=1)
    slow = samples([1.2 * m for m in SHAPE_MEANS], 0.02, 20, seed=2)
    a_vs_b = compare(fast, slow, ranking_by)
    assert a_vs_b.verdict == FASTER
    assert a_vs_b.ratio == pytest.approx(1 / 1.2, rel=0.02)
    assert compare(slow, fast, ranking_by).verdict == SLOWER


@pytest.mark.parametrize("seed", range(5))
def test_same_distribution_is_same_within_noise(seed):
    a = samples(SHAPE_MEANS, 0.05, 10, seed=seed)
    b = samples(SHAPE_MEANS, 0.05, 10, seed=seed + 100)
    assert compare(a, b).verdict == SAME


def test_a_real_half_percent_difference_is_below_the_one_percent_floor():
    a = samples(SHAPE_MEANS, 0.0005, 100, seed=3)
    b = samples([1.005 * m for m in SHAPE_MEANS], 0.0005, 100, seed=4)
    result = compare(a, b)
    assert abs(result.z) > Z_THRESHOLD  # the test alone would call it real
    assert result.verdict == SAME


def test_a_large_difference_drowned_in_noise_is_same_within_noise():
    a = samples(SHAPE_MEANS, 0.3, 4, seed=5)
    b = samples([1.03 * m for m in SHAPE_MEANS], 0.3, 4, seed=6)
    result = compare(a, b)
    assert abs(result.ratio - 1) >= 0.01  # the floor alone would call it real
    assert result.verdict == SAME


def test_identical_noiseless_times_are_same_and_different_ones_are_not():
    assert compare([[1.0, 1.0, 1.0]], [[1.0, 1.0, 1.0]]).verdict == SAME
    result = compare([[1.0, 1.0, 1.0]], [[2.0, 2.0, 2.0]])
    assert result.verdict == FASTER and math.isinf(result.z)


def test_last_only_looks_at_the_last_shape():
    a = [[5.0, 5.1, 4.9], [1.0, 1.01, 0.99]]
    b = [[1.0, 1.01, 0.99], [1.0, 1.01, 0.99]]
    assert compare(a, b, "last").verdict == SAME
    assert compare(a, b, "geom").verdict == SLOWER


def blocked_samples(means: list[float], rel_sd: float, block_sd: float, blocks: int, seed: int):
    """Per-call times of `blocks` blocks per shape, each block's level moved by `block_sd` (a
    loaded host): the per-call times, and each shape's block means."""
    rng = random.Random(seed)
    times, block_means = [], []
    for mean in means:
        levels = [mean * math.exp(rng.gauss(0, block_sd)) for _ in range(blocks)]
        calls = [[rng.gauss(level, rel_sd * level) for _ in range(50)] for level in levels]
        times.append([t for block in calls for t in block])
        block_means.append([sum(block) / len(block) for block in calls])
    return times, block_means


def test_block_spread_pools_the_spread_of_block_means():
    assert block_spread([]) == BlockSpread(0.0, 0) == block_spread([[1.0], [2.0]])  # one block each
    # log(1.1) apart in one group, none in the other: (log 1.1)^2 / 2 over 2 degrees of freedom
    assert block_spread([[1.0, 1.1], [3.0, 3.0]]).variance == pytest.approx(math.log(1.1) ** 2 / 4)
    assert block_spread([[1.0, 1.1], [3.0, 3.0, 3.1]]).freedom == 3
    rng = random.Random(7)
    groups = [[math.exp(rng.gauss(0, 0.1)) for _ in range(2)] for _ in range(2000)]
    assert block_spread(groups).variance == pytest.approx(0.01, rel=0.1)


def test_t_threshold_is_students_quantile():
    # 99.9 % two-sided: t(0.9995) at 5, 20 and 120 degrees of freedom (tables: 6.869, 3.850, 3.373)
    assert t_threshold(20) == pytest.approx(3.850, rel=0.002)
    assert t_threshold(120) == pytest.approx(3.373, rel=0.001)
    assert t_threshold(5) == pytest.approx(6.869, rel=0.05)
    assert t_threshold(0) == Z_THRESHOLD < t_threshold(1000) < t_threshold(20)


def test_identical_revisions_on_a_loaded_host_are_same_within_noise_only_with_the_block_term():
    """Whole blocks of calls move together (10 % from block to block, 1 % from call to call):
    per-call variance calls most identical pairs different; the run's pooled block spread
    does not, and a real 30 % difference stays `faster`."""
    pairs = []
    for seed in range(40):
        a, a_blocks = blocked_samples(SHAPE_MEANS, 0.01, 0.1, 2, seed)
        b, b_blocks = blocked_samples(SHAPE_MEANS, 0.01, 0.1, 2, seed + 1000)
        pairs.append((a, b, block_spread(a_blocks + b_blocks)))
    calls_only = [compare(a, b).verdict for a, b, _ in pairs]
    with_blocks = [compare(a, b, spread=spread, blocks=(2, 2)).verdict for a, b, spread in pairs]
    assert calls_only.count(SAME) < 20
    assert with_blocks.count(SAME) == 40
    fast, fast_blocks = blocked_samples([0.7 * m for m in SHAPE_MEANS], 0.01, 0.1, 2, 99)
    slow, slow_blocks = blocked_samples(SHAPE_MEANS, 0.01, 0.1, 2, 98)
    spread = block_spread(fast_blocks + slow_blocks)
    assert compare(fast, slow, spread=spread, blocks=(2, 2)).verdict == FASTER
    # the larger estimate counts: a block term smaller than the per-call one changes nothing
    a, b = samples(SHAPE_MEANS, 0.05, 10, seed=1), samples(SHAPE_MEANS, 0.05, 10, seed=2)
    assert compare(a, b, spread=BlockSpread(1e-12, 10), blocks=(2, 2)) == compare(a, b)


def test_shapes_must_match():
    with pytest.raises(ValueError, match="shapes"):
        compare([[1.0]], [[1.0], [2.0]])


@dataclass
class Result:
    name: str
    score_ms: float | None
    env_key: str


def test_rank_by_score_lowest_first_with_ties():
    entries = [Result("c", 3.0, "e"), Result("a", 1.0, "e"), Result("b2", 2.0, "e"), Result("b1", 2.0, "e")]
    ranked = rank_by_score(entries)
    assert [(rank, entry.score_ms) for rank, entry in ranked] == [(1, 1.0), (2, 2.0), (2, 2.0), (4, 3.0)]
    assert rank_by_score([]) == []


def test_cpu_and_gpu_results_are_never_ranked_together():
    with pytest.raises(HarnessError, match="different environments"):
        rank_by_score([Result("a", 1.0, "cpu-env"), Result("b", 0.1, "h200-env")])


def test_unscored_results_are_not_ranked():
    with pytest.raises(ValueError):
        rank_by_score([Result("a", None, "e")])
