"""Statistics, the stopping rule and host-clock timing of real calls (no speed assertions)."""

from __future__ import annotations

import math
import random
import statistics
import time

import pytest
import torch

from harness.timing import BenchmarkStats, StoppingRule, time_calls


def test_statistics_of_a_known_sample():
    stats = BenchmarkStats.from_times([4.0, 1.0, 3.0, 2.0], device="cpu", compile_s=0.5)
    assert (stats.runs, stats.mean_ms, stats.median_ms, stats.min_ms, stats.max_ms) == (4, 2.5, 2.5, 1.0, 4.0)
    assert stats.std_ms == pytest.approx(math.sqrt(5 / 3))  # squared deviations 5, over n - 1 = 3
    assert stats.err_ms == pytest.approx(math.sqrt(5 / 3) / 2)
    assert stats.times_ms == [4.0, 1.0, 3.0, 2.0]
    assert (stats.device, stats.compile_s, stats.flags) == ("cpu", 0.5, [])


def test_statistics_of_one_call_and_of_none():
    stats = BenchmarkStats.from_times([2.0], device="cuda")
    assert (stats.runs, stats.std_ms, stats.err_ms) == (1, 0.0, 0.0)
    with pytest.raises(ValueError):
        BenchmarkStats.from_times([], device="cpu")


def test_stopping_rule_stops_at_three_for_stable_data():
    rule = StoppingRule()
    stable = [1.0, 1.0002, 0.9999]
    assert not rule.done(stable[:2], elapsed_s=0.0)
    assert rule.done(stable, elapsed_s=0.0)


def test_stopping_rule_goes_on_for_noisy_data_until_the_budget_or_the_cap():
    rule = StoppingRule(budget_s=10.0)
    noisy = [1.0, 1.3, 0.8, 1.1]
    assert not rule.done(noisy, elapsed_s=9.9)
    assert rule.done(noisy, elapsed_s=10.0)
    assert rule.done([1.0, 2.0] * 50, elapsed_s=0.0)
    assert not rule.done([1.0, 2.0] * 49 + [1.0], elapsed_s=0.0)


def test_stopping_rule_never_stops_before_three_calls_even_past_the_budget():
    assert not StoppingRule(budget_s=0.0).done([1.0, 5.0], elapsed_s=100.0)


def noisy_sleep(seed: int):
    rng = random.Random(seed)

    def call(inputs):
        time.sleep(rng.uniform(0.001, 0.004))
        return inputs

    return call


def test_noisy_calls_go_on_to_the_cap():
    stats = time_calls(noisy_sleep(0), lambda index: index, device="cpu", rule=StoppingRule(max_runs=12))
    assert stats.runs == 12


def test_noisy_calls_stop_at_the_budget():
    """100 sleeps of at least 1 ms cannot fit in 30 ms, and their error never reaches 0.1 %."""
    stats = time_calls(noisy_sleep(1), lambda index: index, device="cpu", rule=StoppingRule(budget_s=0.03))
    assert 3 <= stats.runs < 100


def test_cpu_timing_of_a_real_call_records_every_call():
    made: list[int] = []
    handed: list[tuple[int, bool]] = []

    def make_inputs(index):
        made.append(index)
        return torch.full((64, 64), float(index))

    def after_call(index, inputs, output):
        handed.append((index, bool(torch.equal(output, inputs @ inputs))))

    stats = time_calls(
        lambda x: x @ x, make_inputs, device="cpu", warmup_calls=2, rule=StoppingRule(max_runs=5), after_call=after_call
    )
    assert stats.device == "cpu" and 3 <= stats.runs <= 5
    assert made == list(range(2 + stats.runs))
    assert handed == [(index, True) for index in range(2, 2 + stats.runs)]
    assert len(stats.times_ms) == stats.runs and all(t > 0 for t in stats.times_ms)
    assert stats.mean_ms == pytest.approx(statistics.fmean(stats.times_ms))
    assert stats.min_ms <= stats.median_ms <= stats.max_ms
    assert stats.compile_s > 0
    assert stats.flags == []


def test_unknown_device_is_refused():
    with pytest.raises(ValueError, match="device"):
        time_calls(lambda x: x, lambda index: index, device="tpu")
