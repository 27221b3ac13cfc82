"""The adversarial suite (issue 8) on the CPU: purpose-written cheating candidates in
tests/adversarial/, each evaluated in the real sandbox, each ending failed or flagged with a reason
that names the cheat. Cheats that tests/bad_candidates/ already covers are tested in
test_sandbox.py; docs/threat-model.md lists both.

Four groups, each evaluated in one go: untimed checks, timed evaluations (with a tiny CPU peak
rate, so that every honest time is below the physical floor), the timing cheats of issue 15
(interleaved, in benchmark and leaderboard mode) and the secret hunt against a real store.
"""

from __future__ import annotations

import math
import os
import re
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from conftest import none_left_named, processes_named

from harness.plan.phases import store_limits
from harness.sandbox.evaluation import Evaluation, Evaluator, evaluate, evaluate_interleaved
from harness.sandbox.isolation import detect_isolation
from harness.sandbox.limits import SandboxLimits
from harness.sandbox.pool import CHILD_POOL
from harness.store.models import Run
from harness.store.revisions import get_or_create_secret, register_revision
from harness.store.session import open_store
from harness.tasks import load_task
from harness.timing import (
    BELOW_PHYSICAL_FLOOR,
    HOST_CLOCK_MISMATCH,
    HOST_CONFIRM_PASSES,
    TIMING_MISMATCH,
    TIMING_PASSES,
    StoppingRule,
)

TASK = load_task("conv2d_v2")
ADVERSARIAL = Path(__file__).parent / "adversarial"
REFERENCE = Path(__file__).resolve().parent.parent / "candidates" / "conv2d_v2_reference.py"
FULL_ISOLATION = detect_isolation().full
QUICK = {"call_timeout_s": 60.0, "import_timeout_s": 60.0}
RULE = StoppingRule(min_runs=3, max_runs=5, budget_s=0.5)
TINY_PEAK = '{"cpu": 1e-9}'  # GB/s: one byte a second, which any real call beats

# file -> (status, text the reason must contain)
UNTIMED = {
    "patches_comparison.py": ("wrong_answer", "GPU MODE check: fails 98 of 98 elements"),
    "searches_memory.py": ("runtime_error", "memory search: no expected output found"),
    "reused_allocation.py": ("wrong_answer", "GPU MODE check: fails"),
    "thread_writes_later.py": ("wrong_answer", "NaN/Inf (unwritten elements stay NaN)"),
    "writes_to_fds.py": (
        "crashed",
        "protocol violation during call on smoke[0]: a message with a wrong token",
    ),
    "exits_at_import.py": ("crashed", "exited with code 0 during import/compile"),
    "wrong_dtype.py": ("wrong_answer", "returned dtype torch.float64, expected torch.float32"),
    "wrong_device.py": ("wrong_answer", "returned a tensor on meta, expected cpu"),
}
if FULL_ISOLATION:  # without a pid namespace the candidate would kill the test run itself
    UNTIMED["kills_parent.py"] = ("pass", "")


def _evaluate(
    names: list[str], *, timed: bool = False, limits: SandboxLimits | None = None
) -> dict[str, Evaluation]:
    limits = limits or SandboxLimits.from_settings(**QUICK)

    def one(name: str) -> tuple[str, Evaluation]:
        path = REFERENCE if name == REFERENCE.name else ADVERSARIAL / name
        return name, evaluate(
            path.read_bytes(), name, TASK, device="cpu", timed=timed, limits=limits, rule=RULE
        )

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, names))


@pytest.fixture(scope="module")
def untimed() -> dict[str, Evaluation]:
    return _evaluate(list(UNTIMED))


@pytest.fixture(scope="module")
def timed() -> dict[str, Evaluation]:
    """The timer cheat, an exit in the timing phase and the honest reference, timed with a CPU peak
    rate that every real call violates."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HARNESS_PEAK_BANDWIDTH_GBS", TINY_PEAK)
        return _evaluate(["patches_timers.py", "exits_during_timing.py", REFERENCE.name], timed=True)


@pytest.mark.parametrize("name", list(UNTIMED))
def test_a_cheat_ends_with_its_status_and_a_reason_that_names_it(untimed, name):
    status, reason = UNTIMED[name]
    evaluation = untimed[name]
    assert (evaluation.status, name) == (status, name), evaluation.reason
    assert reason in evaluation.reason


def test_no_shape_of_a_cheat_passes(untimed):
    for name, evaluation in untimed.items():
        if UNTIMED[name][0] != "pass":
            assert not any(shape.status == "pass" for shape in evaluation.shapes), name


def test_patched_comparisons_in_the_child_do_not_reach_the_parents_check(untimed):
    check = untimed["patches_comparison.py"].shapes[0].check
    assert check.mismatches == 98 and check.rel_l2 > 0.1
    assert check.max_abs_err > 0.1


def test_a_background_thread_writes_too_late_on_every_shape(untimed):
    shapes = untimed["thread_writes_later.py"].shapes
    assert [shape.status for shape in shapes] == ["wrong_answer"] * len(TASK.smoke)
    assert all(shape.check.not_finite == shape.check.mismatches > 0 for shape in shapes)


def _reused_allocation_lines(evaluation: Evaluation) -> list[str]:
    return [line for line in evaluation.log_tail.splitlines() if "reused allocation: call" in line]


def _assert_judged_on_stale_memory(evaluation: Evaluation, calls: int) -> None:
    """Every call ran (one log line each: where its answer came from) and every shape failed on
    its values: at least half of the elements off, whatever the memory held."""
    assert len(_reused_allocation_lines(evaluation)) == calls, evaluation.log_tail
    assert evaluation.status == "wrong_answer", evaluation.reason
    for shape in evaluation.shapes:
        numel = math.prod(shape.check.output.shape)
        assert shape.status == "wrong_answer" and "GPU MODE check: fails" in shape.reason, (
            shape.index,
            shape.reason,
        )
        assert shape.check.mismatches > numel // 2, (shape.index, shape.reason)


def test_reused_allocations_hold_no_expected_output(untimed):
    """The candidate never computes: it returns the most output-like window of memory it did not
    write (the heap and anonymous mappings through /proc/self/mem, sixteen torch.empty tensors,
    its earlier output buffers). The child never holds a reference output and NaN-fills earlier
    outputs, so whatever it finds is judged on its values and fails."""
    _assert_judged_on_stale_memory(untimed["reused_allocation.py"], len(TASK.smoke))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the caching-allocator cheat needs a CUDA GPU")
def test_reused_allocations_hold_no_expected_output_on_cuda():
    """On the GPU the candidate reads every block of torch's caching allocator (freed or not) and
    a fresh 256 MiB from the driver. The honest reference runs the same shapes and seeds first, in
    a child that then exits, and this process empties its own cache: a stale right answer could
    only come from device memory handed on without being cleared."""
    honest = evaluate(REFERENCE.read_bytes(), REFERENCE.name, TASK, device="cuda", shape_set="tests")
    assert honest.status == "pass", honest.reason
    torch.cuda.empty_cache()
    limits = SandboxLimits.from_settings(call_timeout_s=60.0, import_timeout_s=120.0)
    code = (ADVERSARIAL / "reused_allocation.py").read_bytes()
    evaluation = evaluate(code, "reused_allocation.py", TASK, device="cuda", shape_set="tests", limits=limits)
    print(
        "reused allocations on cuda:",
        evaluation.status,
        evaluation.reason,
        *_reused_allocation_lines(evaluation),
        sep="\n",
    )
    _assert_judged_on_stale_memory(evaluation, len(TASK.tests))


@pytest.mark.skipif(not FULL_ISOLATION, reason="needs a pid namespace")
def test_killing_the_parent_reaches_nothing_and_the_harness_reports(untimed):
    evaluation = untimed["kills_parent.py"]
    assert all(shape.status == "pass" for shape in evaluation.shapes)
    assert "visible pids [1, 2]" in evaluation.log_tail, "only the init and the worker are visible"
    assert os.getppid() > 0  # this process is alive to read the result


def test_replaced_timers_are_flagged_by_the_parents_clock(timed):
    evaluation = timed["patches_timers.py"]
    assert evaluation.status == "pass", "every output is right; only the times lie"
    for shape in evaluation.shapes:
        assert max(shape.check.timing.reported_ms) < 0.01, "the child reports the fake clock's time"
        assert BELOW_PHYSICAL_FLOOR in shape.timing_flags
        # flagged, or (the brackets too widely spread by load for the flag) scored by them: 20 ms
        assert HOST_CLOCK_MISMATCH in shape.timing_flags or shape.min_ms > 20.0, shape.check.timing


def test_a_shape_flagged_for_load_on_its_blocks_is_timed_again_and_judged_over_all_calls(tmp_path):
    """Issue 28: a host loaded through every call of a shape's blocks looks like work hidden from
    the child's timer. A flagged shape is timed again (harness.timing, step 6): here the first 16
    calls' NaN fill sleeps 20 ms (every call of the regular passes), the later calls are honest,
    and a later block clears the flag; with the sleep in every call the flag stands after
    HOST_CONFIRM_PASSES more blocks, each scored with the 20 ms."""
    code = (ADVERSARIAL / "hides_work_for_a_while.py").read_bytes()
    always = code.replace(b"HIDDEN_FILLS = 16", b"HIDDEN_FILLS = 10**9")
    task = TASK.model_copy(update={"smoke": TASK.smoke[:1]})
    rule = StoppingRule(min_runs=10, max_runs=10, budget_s=5.0)
    evaluators = [
        Evaluator(
            source,
            name,
            task,
            device="cpu",
            timed=True,
            rule=rule,
            limits=SandboxLimits.from_settings(**QUICK),
        )
        for source, name in ((code, "for_a_while.py"), (always, "always.py"))
    ]
    for_a_while, hiding = (evaluation.shapes[0] for evaluation in evaluate_interleaved(evaluators))
    assert for_a_while.status == hiding.status == "pass", (for_a_while.reason, hiding.reason)
    assert HOST_CLOCK_MISMATCH in hiding.timing_flags, hiding.check.timing
    assert len(hiding.check.passes) == TIMING_PASSES + HOST_CONFIRM_PASSES
    assert hiding.min_ms > 20.0, "scored by its brackets"
    assert for_a_while.timing_flags == [], for_a_while.check.timing
    assert TIMING_PASSES < len(for_a_while.check.passes) <= TIMING_PASSES + HOST_CONFIRM_PASSES
    # its first block: flagged, or (the brackets too widely spread by load for the flag: 21-32 ms
    # beside a second test suite) scored by them, 20 ms and more a call
    first = for_a_while.check.passes[0]
    assert HOST_CLOCK_MISMATCH in first.flags or min(first.times_ms) > 20.0, first


def test_an_honest_candidate_is_not_flagged_by_the_parents_clock(timed):
    evaluation = timed["conv2d_v2_reference.py"]
    assert evaluation.status == "pass", evaluation.reason
    assert [shape.timing_flags for shape in evaluation.shapes] == [[BELOW_PHYSICAL_FLOOR]] * len(TASK.smoke)


def test_a_time_below_the_physical_floor_is_flagged_and_kept_for_reports(timed):
    shape = timed["conv2d_v2_reference.py"].shapes[0]
    assert shape.check.timing.flags == [BELOW_PHYSICAL_FLOOR]
    assert 0 < shape.min_ms < 576_000, "smoke[0] reads 576 bytes of inputs: 576 s at the tiny peak"


def test_an_exit_in_the_timing_phase_is_a_crash_named_by_its_phase(timed):
    evaluation = timed["exits_during_timing.py"]
    assert evaluation.status == "crashed"
    assert "exited with code 0 during timing on smoke[0]" in evaluation.reason
    assert evaluation.shapes[0].mean_ms is None and evaluation.score_ms is None


def test_the_secret_hunt_finds_neither_the_store_nor_harness_settings(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    store = open_store(url)
    try:
        with store.session() as session:
            register_revision(session, (ADVERSARIAL / "reads_secrets.py").read_bytes(), "reads_secrets.py")
            secret = get_or_create_secret(session, "leaderboard")
        limits = store_limits(store, SandboxLimits.from_settings(**QUICK))
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("HARNESS_DB", url)
            patch.setenv("HARNESS_SECRET_PROBE", "visible-only-to-the-parent")
            evaluation = _evaluate(["reads_secrets.py"], limits=limits)["reads_secrets.py"]
    finally:
        store.close()
    assert evaluation.status == "runtime_error" and "secrets found:" in evaluation.reason
    for text in (evaluation.reason, evaluation.log_tail):
        assert str(tmp_path) not in text and "HARNESS" not in text and str(secret) not in text
    if FULL_ISOLATION:
        assert "/proc/" not in evaluation.reason, "no other process's environment is readable"


def test_the_parent_side_timing_checks_on_numbers():
    from harness.tasks import load_reference
    from harness.timing import host_clock_disagrees, physical_floor_ms

    assert load_reference(TASK).flops(size=8, kernelsize=2, channels=2, batch=1) == 2 * 2 * 2 * 4 * 7 * 7
    assert physical_floor_ms(4_800_000_000_000, 4800.0) == pytest.approx(1e3), "a second of reading at peak"
    assert not host_clock_disagrees([0.05, 0.06], [0.4, 9.0]), "one slow interval is load, not a lie"
    assert host_clock_disagrees([0.001, 0.001], [20.3, 20.5])
    assert not host_clock_disagrees([], [20.0])
    assert not host_clock_disagrees([0.1, 0.1], [20.3, 20.5], harness_ms=20.0), "the harness's own cost"
    assert host_clock_disagrees([0.1, 0.1], [27.3, 27.5], harness_ms=20.0), "7.2 ms of work left unreported"
    assert host_clock_disagrees([5.0, 1.0], [4.0, 20.0]), "a call reported longer than its whole bracket"
    assert not host_clock_disagrees([0.1] * 4, [0.5, 30.0, 12.0, 0.45], harness_ms=0.3), "load on most calls"


def test_a_timer_cheat_benched_into_the_store_shows_its_flag_on_the_leaderboard(tmp_path):
    from harness.plan.bench import bench_revisions
    from harness.standing.board import build_leaderboard

    store = open_store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    try:
        with store.session() as session:
            code = (ADVERSARIAL / "patches_timers.py").read_bytes()
            revision_id = register_revision(session, code, "patches_timers.py").revision.id
        benched = bench_revisions(
            store, [revision_id], device="cpu", limits=SandboxLimits.from_settings(**QUICK), rule=RULE
        )
        assert HOST_CLOCK_MISMATCH in benched[0].flags
        with store.session() as session:
            board = build_leaderboard(session, "conv2d_v2", "cpu")
            entry = next(e for e in board.entries if e.submission_id == revision_id)
            assert HOST_CLOCK_MISMATCH in entry.flags
            assert entry.rank is None and entry.status == "flagged", "a flagged timing is never ranked"
            assert "a flagged timing is never ranked" in entry.reason and entry.score_ms is not None
    finally:
        store.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the stream cheat needs a CUDA GPU")
def test_work_left_on_a_side_stream_is_flagged_or_fails_on_cuda():
    """The timed region ends with a device-wide synchronize and each call's host wall time is
    checked against its event time: the side stream's work is either counted (flag
    `timing_mismatch`, wall time used) or its output is not there (wrong_answer)."""
    code = (ADVERSARIAL / "side_stream.py").read_bytes()
    rule = StoppingRule(min_runs=3, max_runs=10, budget_s=1.0)
    evaluation = evaluate(
        code, "side_stream.py", TASK, device="cuda", timed=True, rule=rule, shape_set="tests"
    )
    flagged = any(TIMING_MISMATCH in shape.timing_flags for shape in evaluation.shapes)
    assert evaluation.status != "pass" or flagged, evaluation.model_dump_json(include={"status", "reason"})
    honest = evaluate(
        REFERENCE.read_bytes(), REFERENCE.name, TASK, device="cuda", timed=True, rule=rule, shape_set="tests"
    )
    assert honest.status == "pass" and not any(TIMING_MISMATCH in s.timing_flags for s in honest.shapes)
    by_shape = [(s.mean_ms, h.mean_ms) for s, h in zip(evaluation.shapes, honest.shapes) if s.mean_ms]
    print("side stream vs reference per shape (ms):", by_shape, "status:", evaluation.status)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the CUDA timer cheat needs a CUDA GPU")
def test_replaced_cuda_timers_are_flagged_on_cuda():
    """On the GPU the timer cheat also replaces torch.cuda.Event and torch.cuda.synchronize; the
    parent's own clock (and the physical floor) still see through it."""
    code = (ADVERSARIAL / "patches_timers.py").read_bytes()
    rule = StoppingRule(min_runs=3, max_runs=5, budget_s=0.5)
    limits = SandboxLimits.from_settings(call_timeout_s=10.0, import_timeout_s=60.0)
    evaluation = evaluate(
        code,
        "patches_timers.py",
        TASK,
        device="cuda",
        timed=True,
        rule=rule,
        shape_set="tests",
        limits=limits,
    )
    print(
        "timer cheat on cuda:",
        evaluation.status,
        evaluation.reason,
        [(s.mean_ms, s.timing_flags) for s in evaluation.shapes],
    )
    # Its fake clock never lets the warm-up end (0.1 s of warm-up on a clock that barely moves):
    # the parent's deadline for the timing phase ends it; or, where it gets through, it is flagged.
    if evaluation.status == "timeout":
        assert "on the parent's clock" in evaluation.reason
        return
    assert evaluation.status == "pass", evaluation.reason
    for shape in evaluation.shapes:
        assert HOST_CLOCK_MISMATCH in shape.timing_flags or BELOW_PHYSICAL_FLOOR in shape.timing_flags, (
            shape.index,
            shape.mean_ms,
            shape.timing_flags,
        )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the L2 flush exists on a CUDA GPU only")
def test_a_candidate_that_skips_the_childs_flush_still_calls_on_a_cold_cache_on_cuda(monkeypatch):
    """Issue 28: the child's L2 flush before a timed call is code in the candidate's process, which
    `adversarial/skips_the_flush.py` replaces with nothing, so that its calls would find their
    inputs (just copied onto the device) in the L2 cache. The parent flushes the L2 from its own
    process between the child's inputs and its call (`harness.timing.parent_l2_flush`): on the
    first two benchmark shapes, whose inputs fit the H200's 50 MB L2, it is timed no faster than
    the honest reference (5 % for noise). The same pair without the parent's flush is printed, to
    show what the flush is worth (not asserted: it depends on the GPU)."""
    from harness.sandbox import evaluation as evaluation_module

    task = TASK.model_copy(update={"smoke": TASK.benchmarks[:2], "benchmarks": TASK.benchmarks[:2]})
    rule = StoppingRule(min_runs=10, max_runs=30, budget_s=1.0)
    code = (ADVERSARIAL / "skips_the_flush.py").read_bytes()

    def pair() -> tuple[Evaluation, Evaluation]:
        return tuple(
            evaluate_interleaved(
                [
                    Evaluator(code, "skips_the_flush.py", task, device="cuda", timed=True, rule=rule),
                    Evaluator(
                        REFERENCE.read_bytes(), REFERENCE.name, task, device="cuda", timed=True, rule=rule
                    ),
                ]
            )
        )

    skipper, honest = pair()
    assert skipper.status == honest.status == "pass", (skipper.reason, honest.reason)
    means = [(s.mean_ms, h.mean_ms) for s, h in zip(skipper.shapes, honest.shapes)]
    print("skips the flush vs reference, with the parent's flush (ms):", means)
    monkeypatch.setattr(evaluation_module, "parent_l2_flush", lambda device: None)
    skipper, honest = pair()
    unguarded = [(s.mean_ms, h.mean_ms) for s, h in zip(skipper.shapes, honest.shapes)]
    print("skips the flush vs reference, without the parent's flush (ms):", unguarded)
    for skipped, reference in means:
        assert skipped >= 0.95 * reference, means


def test_a_fake_clock_cannot_stretch_the_warm_up_past_the_parents_deadline(monkeypatch):
    """The child ends warm-up by its own clock; the timer cheat's clock barely moves, so a warm-up
    measured in seconds would never end. The parent's deadline for the warm-up ends it: its calls
    send no message, so the first message of the timing is due within call_timeout_s per warm-up
    call plus the warm-up's seconds, 3.1 s here, well inside the phase's limit of 8.4 s (on the
    CPU the harness warms up by calls only, so the test asks for 0.1 s of warm-up)."""
    from harness.sandbox import evaluation as evaluation_module

    monkeypatch.setitem(evaluation_module.WARMUP, "cpu", (1, 0.1))
    limits = SandboxLimits.from_settings(call_timeout_s=3.0, import_timeout_s=60.0)
    code = (ADVERSARIAL / "patches_timers.py").read_bytes()
    result = evaluate(code, "patches_timers.py", TASK, device="cpu", timed=True, limits=limits, rule=RULE)
    assert result.status == "timeout", result.reason
    assert (
        "the warm-up of timing on smoke[0] ran past its limit of 3.1 s on the parent's clock" in result.reason
    )


def test_a_fake_clock_ends_the_warm_up_soon_after_its_first_call(monkeypatch):
    """With the default call_timeout_s (120 s) the first message of the timing would be due after
    six minutes (call_timeout_s per warm-up call), and the phase's limit four minutes: on the H100
    the timer cheat held each group 240 s that way. Once the child says its first warm-up call
    is over (`FirstCallDone`), the parent bounds the rest of the warm-up by that call's length:
    four times the warm-up's seconds and its calls at the first's length, plus 10 s."""
    from harness.sandbox import evaluation as evaluation_module

    monkeypatch.setitem(evaluation_module.WARMUP, "cpu", (3, 0.1))
    code = (ADVERSARIAL / "patches_timers.py").read_bytes()
    started = time.monotonic()
    result = evaluate(code, "patches_timers.py", TASK, device="cpu", timed=True, rule=RULE)
    assert result.status == "timeout", result.reason
    assert re.search(
        r"the warm-up of timing on smoke\[0\] ran past its limit of [\d.]+ s on the parent's "
        r"clock \(after its first call of [\d.e-]+ s",
        result.reason,
    ), result.reason
    assert time.monotonic() - started < 90, "the warm-up's limit is 10 s and a fraction of one"
    # the honest reference warms up the same way and is timed
    honest = evaluate(REFERENCE.read_bytes(), REFERENCE.name, TASK, device="cpu", timed=True, rule=RULE)
    assert honest.status == "pass", honest.reason


def test_a_stalled_clock_cannot_keep_the_timed_calls_going():
    """The child ends its timed calls by its own clock; a candidate that makes that clock crawl and
    jitter (tests/adversarial/stalls_the_clock.py) would never meet the budget nor the error target
    and run to the rule's largest count, here 100,000 calls of 5 ms. The parent ends it by its own
    clock: twice the budget and two of the longest calls, plus 5 s, less the parent's own work. The
    honest reference under the same rule stops at its budget and passes."""
    rule = StoppingRule(min_runs=3, max_runs=100_000, budget_s=0.2)
    code = (ADVERSARIAL / "stalls_the_clock.py").read_bytes()
    started = time.monotonic()
    result = evaluate(code, "stalls_the_clock.py", TASK, device="cpu", timed=True, rule=rule)
    assert result.status == "timeout", result.reason
    assert "the timed calls went on past their limit of" in result.reason, result.reason
    assert time.monotonic() - started < 120
    honest = evaluate(REFERENCE.read_bytes(), REFERENCE.name, TASK, device="cpu", timed=True, rule=rule)
    assert honest.status == "pass", honest.reason


# --- issue 15: timing cheats -----------------------------------------------------------------

SECRET = 987654321
# (file, mode) -> what becomes of it: a status and a text its reason contains, or "flagged"
# (host_clock_mismatch, or scored by the parent's brackets: `_assert_timing_cheat_outcome`)
TIMING_CHEATS = {
    ("computes_when_checked.py", "test"): ("wrong_answer", "timed output check: call "),
    ("replaces_timing_loop.py", "test"): (
        "wrong_answer",
        "2 timed calls, but 0 outputs handed over for checking",  # the first block: 2 of the 3 to 5
    ),
    ("replaces_timing_loop_with_calls.py", "test"): "flagged",
    ("asks_for_extra_calls.py", "test"): ("crashed", "timed calls its rule allows"),
    ("replaces_timing_loop_with_calls.py", "leaderboard"): "flagged",
    ("fills_with_the_answer.py", "test"): "flagged",
    ("fills_with_the_answer.py", "leaderboard"): "flagged",
    # issue 28: answers kept from earlier calls, in benchmark mode (every timed call has a fresh seed)
    ("memoizes_by_shape.py", "test"): ("wrong_answer", "timed output check: call "),
}


def _timing_cheat_evaluators(device: str, cheats, task=TASK, **options) -> list[Evaluator]:
    evaluators = []
    for name, mode in cheats:
        path = REFERENCE if name == REFERENCE.name else ADVERSARIAL / name
        secret = SECRET if mode == "leaderboard" else None
        evaluators.append(
            Evaluator(
                path.read_bytes(),
                name,
                task,
                device=device,
                mode=mode,
                timed=True,
                secret_seed=secret,
                **options,
            )
        )
    return evaluators


def _assert_nothing_left(evaluators: list[Evaluator]) -> None:
    """Every child (the calibration child too) is gone, with its working and exchange directories."""
    children = [evaluator.child for evaluator in evaluators]
    children += {
        id(e.calibrator): e.calibrator.child for e in evaluators if e.calibrator is not None
    }.values()
    for child in children:
        assert child.proc is None or child.proc.poll() is not None
        assert not child.workdir.exists() and not child.io_dir.exists()
        assert child not in CHILD_POOL.live


@pytest.fixture(scope="module")
def timing_cheats() -> dict[tuple[str, str], Evaluation]:
    """The timing cheats, the honest reference in both modes and the precomputer, interleaved
    in groups of four (one calibration child for all)."""
    cheats = [
        *TIMING_CHEATS,
        (REFERENCE.name, "test"),
        (REFERENCE.name, "leaderboard"),
        ("precomputes_public_seeds.py", "test"),
        ("memoizes_by_fingerprint.py", "test"),
        ("memoizes_by_pointer.py", "test"),
    ]
    evaluators = _timing_cheat_evaluators(
        "cpu", cheats, limits=SandboxLimits.from_settings(**QUICK), rule=RULE
    )
    evaluations = evaluate_interleaved(evaluators, group_size=4)
    _assert_nothing_left(evaluators)
    return dict(zip(cheats, evaluations))


def _assert_timing_cheat_outcome(expected, evaluation: Evaluation, where) -> None:
    if expected == "flagged":
        # flagged (never ranked), or, where a loaded host spread its calls' brackets too widely
        # for the flag, scored by the brackets: every call holds its 10 ms of hidden work
        assert evaluation.status == "pass", (where, evaluation.reason)
        for shape in evaluation.shapes:
            assert HOST_CLOCK_MISMATCH in shape.timing_flags or shape.min_ms > 10.0, (
                where,
                shape.index,
                shape.times_ms,
                shape.check,
            )
    else:
        status, reason = expected
        assert (evaluation.status, where) == (status, where), evaluation.reason
        assert reason in evaluation.reason, (where, evaluation.reason)
        assert evaluation.score_ms is None and all(shape.mean_ms is None for shape in evaluation.shapes)


@pytest.mark.parametrize(("name", "mode"), list(TIMING_CHEATS))
def test_a_timing_cheat_fails_or_is_flagged(timing_cheats, name, mode):
    _assert_timing_cheat_outcome(TIMING_CHEATS[name, mode], timing_cheats[name, mode], (name, mode))


def test_a_candidate_that_computes_only_for_the_check_fails_on_its_first_timed_output(timing_cheats):
    """It finds the child's checking call on its call stack and computes only there: its check
    passes, and the NaN of its first timed call's buffer is checked like any output."""
    evaluation = timing_cheats["computes_when_checked.py", "test"]
    first = evaluation.shapes[0]
    assert first.check.passed is True
    assert "NaN/Inf (unwritten elements stay NaN)" in first.reason


def test_a_replaced_timing_loop_is_caught_by_the_parents_clock(timing_cheats):
    """The loop that plays the protocol reports 0.0005 ms a call; the parent's brackets, less the
    harness's own cost, hold its 10 ms kernel."""
    for mode in ("test", "leaderboard"):
        for shape in timing_cheats["replaces_timing_loop_with_calls.py", mode].shapes:
            timing = shape.check.timing
            assert timing.reported_ms == [0.0005] * 2  # the first of two blocks of 2 calls
            assert min(timing.parent_ms) - timing.harness_ms > 10.0, (mode, timing)
            assert min(shape.times_ms) > 10.0, "scored with the work every bracket held"


def test_work_in_the_nan_fill_counts_against_the_candidate(timing_cheats):
    """The fill runs before the timer in the child, but inside the parent's bracket."""
    for mode in ("test", "leaderboard"):
        for shape in timing_cheats["fills_with_the_answer.py", mode].shapes:
            timing = shape.check.timing
            assert max(timing.reported_ms) < 1.0 and min(timing.parent_ms) > 10.0, (mode, timing)
            assert shape.min_ms > 10.0, "scored with the work every bracket held"


def test_precomputed_public_outputs_gain_nothing(timing_cheats):
    """Its checks (public seeds) get the kept outputs, but benchmark mode times a seed drawn for
    the timing: every timed call takes its slow path, and nothing is flagged."""
    evaluation = timing_cheats["precomputes_public_seeds.py", "test"]
    assert evaluation.status == "pass", evaluation.reason
    for shape in evaluation.shapes:
        assert shape.check.passed is True and shape.min_ms > 10.0, (shape.index, shape.times_ms)
        assert shape.timing_flags == []


def test_a_memoizer_keyed_on_sampled_values_never_answers_a_timed_call_from_memory(timing_cheats):
    """Its check's inputs come back in the warm-up (a hit there), but every timed call has inputs
    of a fresh seed: each misses and takes the slow path, so no timed call is under 10 ms."""
    evaluation = timing_cheats["memoizes_by_fingerprint.py", "test"]
    assert evaluation.status == "pass", evaluation.reason
    for shape in evaluation.shapes:
        assert shape.min_ms > 10.0, (shape.index, shape.times_ms)
    assert "fingerprint memo: miss" in evaluation.log_tail


def test_a_memoizer_keyed_on_the_inputs_address_gains_nothing(timing_cheats):
    """Where a timed call's inputs land at an address it has seen (the allocator decides: some
    runs, some shapes), its kept answer is checked against the fresh seed's reference and fails;
    every timed call that passed took the slow path (no answer came from memory)."""
    evaluation = timing_cheats["memoizes_by_pointer.py", "test"]
    if evaluation.status != "pass":
        assert evaluation.status == "wrong_answer", evaluation.reason
        assert evaluation.score_ms is None
    for shape in evaluation.shapes:
        if shape.status == "pass" and shape.min_ms is not None:  # timed: every shape before passed
            assert shape.min_ms > 10.0, (shape.index, shape.times_ms)


# GPU MODE's third test shape as the smoke set: 61 million multiply-adds a call, milliseconds on
# the CPU, well above the method's resolution there (the score's floor allows for honest children's
# harness costs differing by a tenth of a millisecond or more: on GPU MODE's first two test
# shapes, 0.3-0.5 ms of work, the convolution hidden in the fill fell under it on one in CI).
FILL_TASK = TASK.model_copy(update={"smoke": TASK.tests[2:3]})
FILL_CASES = [
    ("computes_in_the_fill.py", "test"),
    ("computes_in_the_fill.py", "leaderboard"),
    (REFERENCE.name, "test"),
    (REFERENCE.name, "leaderboard"),
    ("computes_in_some_fills.py", "test"),
    ("computes_in_most_fills.py", "test"),
]


@pytest.fixture(scope="module")
def fill_cheat() -> dict[tuple[str, str], Evaluation]:
    """The computation hidden in the NaN fill beside the honest reference, interleaved, with 10
    calls a pass (sub-millisecond calls: the quietest of them shows what every bracket holds)."""
    evaluators = _timing_cheat_evaluators(
        "cpu",
        FILL_CASES,
        task=FILL_TASK,
        limits=SandboxLimits.from_settings(**QUICK),
        rule=StoppingRule(min_runs=20, max_runs=20, budget_s=5.0),
    )
    return dict(zip(FILL_CASES, evaluate_interleaved(evaluators)))


@pytest.mark.parametrize("mode", ["test", "leaderboard"])
def test_a_computation_in_the_nan_fill_is_scored_by_the_parents_brackets(fill_cheat, mode):
    """Issue 28: the convolution inside the child's NaN fill (before the child's timer, no sleep)
    reported ~0.001 ms a call, 75x the reference on the CPU. The work is in every bracket: the
    least excess of the shape's brackets over the reported calls and the calibrated harness cost
    is added to every call, so the shape is scored about as its honest compute. Judged on a shape
    of milliseconds (FILL_TASK: below a few tenths of a millisecond the work is within the
    method's resolution on the CPU): the cheat's mean against the reference's reported compute.
    Before the change it was under 1/50 of it; a third leaves room for a loaded host, whose
    calibration a burst can inflate."""
    evaluation = fill_cheat["computes_in_the_fill.py", mode]
    reference = fill_cheat[REFERENCE.name, mode]
    assert evaluation.status == reference.status == "pass", (evaluation.reason, reference.reason)
    cheat_ms, honest_ms, hidden = [], [], []
    for shape, honest in zip(evaluation.shapes, reference.shapes):
        timing = shape.check.timing
        assert statistics.median(timing.reported_ms) < 0.01, (
            shape.index,
            timing,
        )  # a loaded host delays some
        honest_reported = statistics.median(honest.check.timing.reported_ms)
        if honest_reported >= 0.1:  # the reference's own clock: its compute, without harness cost
            cheat_ms.append(shape.mean_ms)
            honest_ms.append(honest_reported)
            hidden.append(timing.joined.hidden_ms)
    assert len(cheat_ms) == len(FILL_TASK.smoke), [s.check.timing for s in reference.shapes]
    assert any(hidden), hidden
    assert statistics.geometric_mean(cheat_ms) > statistics.geometric_mean(honest_ms) / 3, (
        cheat_ms,
        honest_ms,
    )


def test_a_computation_in_the_nan_fill_gains_nothing_on_the_smallest_smoke_shape(harness, store_url):
    """Issue 28, as a new user meets it: a default CPU tournament (conv2d_v2's smoke shapes) of the
    reference, an honest revision that does the same work (a fresh tensor), the convolution
    hidden in the NaN fill and the same hidden in the output's export, after the call. On smoke[0]
    the hidden work (0.03-0.05 ms of bracket) lay under the CPU's score floor, went unscored, and
    the cheat ranked first at 3.6x the reference: 0.0005 ms on smoke[0] against the honest 0.03
    (2026-12-06); later, with the calibration and a cheat's blocks timed with the parent and child
    on one core and on two, it read as none again in one run of four beside a second suite
    (harness.sandbox.placement, 2026-12-07). Every shape of each cheat scores at least half the
    honest revisions' quietest reported call of that shape (the convolution's own time, which it
    does too, hidden): a cheat read as none scores its microsecond. Not against the honest
    revisions' scores: beside a second test suite those carry the load of their own moment (the
    reference 0.24 ms on smoke[0], the export cheat 0.034, 2026-12-07)."""
    hiders = ("computes_in_the_fill", "computes_in_the_export")
    honest = (REFERENCE, Path(__file__).parent / "honest" / "fresh_tensor.py")
    for path in (*honest, *(ADVERSARIAL / f"{name}.py" for name in hiders)):
        registered = harness("register", path, "--lineage", path.stem)
        assert registered.returncode == 0, registered.stderr
    ran = harness("tournament", "--device", "cpu", "--mode", "benchmark", "--budget", "0.5", timeout=600)
    assert ran.returncode == 0, ran.stderr[-2000:]
    with open_store(store_url, read_only=True) as store, store.session() as session:
        shapes = {
            run.revision.lineage.name: {shape.index: shape for shape in run.shapes}
            for run in session.query(Run).filter(Run.mode == "benchmark")
        }
        means = {
            name: {i: shape.mean_ms for i, shape in by_index.items()} for name, by_index in shapes.items()
        }
        quietest = {
            i: min(reported for path in honest for reported in _reported_ms(shapes[path.stem][i]))
            for i in range(len(TASK.smoke))
        }
    for name in hiders:
        assert set(means[name]) == set(range(len(TASK.smoke))), means
        assert all(means[name][i] >= quietest[i] / 2 for i in quietest), (name, means, quietest)


def _reported_ms(shape) -> list[float]:
    """Every timed call of a stored shape as its child reported it, every pass."""
    passes = shape.check.passes
    if passes:
        return [ms for item in passes for ms in item.reported_ms]
    return list(shape.check.timing.reported_ms)


def test_a_computation_in_some_fills_only_is_scored_by_those_calls_brackets(fill_cheat):
    """Issue 28: the convolution in the NaN fill on 2 calls of 5, honest in the others. The least
    excess is an honest call's, so only the calls reported far below the others show the work:
    each is scored by its bracket (harness.timing.host_clock_verdict). Before, those calls were
    scored at a microsecond plus the least excess (0.06 ms against honest calls of 0.17 ms); now
    at about an honest call's time (at least half of it, for the brackets' noise)."""
    evaluation = fill_cheat["computes_in_some_fills.py", "test"]
    assert evaluation.status == "pass", evaluation.reason
    for shape in evaluation.shapes:
        calls = [pair for block in shape.check.passes for pair in zip(block.reported_ms, block.times_ms)]
        honest = [reported for reported, _ in calls if reported >= 0.01]
        answered = [scored for reported, scored in calls if reported < 0.01]  # in the fill
        assert honest and answered, calls
        assert shape.check.timing.joined.rescored_calls > 0, shape.check.timing
        assert statistics.mean(answered) >= 0.5 * statistics.median(honest), calls


def test_a_computation_in_most_fills_is_scored_by_the_quietest_bracket(fill_cheat):
    """Issue 28: the convolution in the NaN fill on 4 calls of 5, honest in the fifth. The least
    excess is the honest call's, and the median reported call is a hiding one, so no call is
    reported far below it: scored by its reports it was a fifth of the honest time (1.6x the
    reference, first, in a default CPU tournament, 2026-12-06). The quietest bracket less the
    fastest report holds the work, added to every call: at least half the reference's own
    reported compute on every shape (a loaded host's calibration can make a burst of slack)."""
    evaluation = fill_cheat["computes_in_most_fills.py", "test"]
    reference = fill_cheat[REFERENCE.name, "test"]
    assert evaluation.status == reference.status == "pass", (evaluation.reason, reference.reason)
    for shape, honest in zip(evaluation.shapes, reference.shapes, strict=True):
        honest_ms = statistics.median(honest.check.timing.reported_ms)
        assert shape.mean_ms > honest_ms / 2, (shape.index, shape.mean_ms, honest_ms, shape.check.timing)


@pytest.mark.parametrize("mode", ["test", "leaderboard"])
def test_the_honest_reference_is_not_flagged_beside_the_cheats(timing_cheats, mode):
    evaluation = timing_cheats[REFERENCE.name, mode]
    assert evaluation.status == "pass", evaluation.reason
    assert [shape.timing_flags for shape in evaluation.shapes] == [[]] * len(TASK.smoke), [
        shape.check.timing for shape in evaluation.shapes
    ]


def test_the_honest_reference_is_not_flagged_while_both_cores_are_busy():
    """Issue 28: on a busy 2-core machine the honest reference was flagged `host_clock_mismatch`
    (one shortest bracket against a calibration made moments earlier). Two busy loops run beside
    it here, one per core of the CI machine, while it is timed in both modes."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        evaluators = _timing_cheat_evaluators(
            "cpu",
            [(REFERENCE.name, "test"), (REFERENCE.name, "leaderboard")],
            limits=SandboxLimits.from_settings(**QUICK),
            rule=RULE,
        )
        evaluations = evaluate_interleaved(evaluators)
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    for evaluation in evaluations:
        assert evaluation.status == "pass", evaluation.reason
        assert [shape.timing_flags for shape in evaluation.shapes] == [[]] * len(TASK.smoke), [
            shape.check.timing for shape in evaluation.shapes
        ]


def _spinner_gaps(log: str) -> list[tuple[str, float, float]]:
    return [
        (kind, float(start), float(end))
        for kind, start, end in re.findall(r"spinner (\w+) gap ([\d.]+) ([\d.]+)", log)
    ]


def _assert_spinners_stopped_while_others_are_timed(device: str, **options) -> None:
    """A correct candidate leaves a spinner thread and a spinner process (in a new session)
    running, and on a GPU a thread that launches matrix products, quiet during its own calls.
    While the other revision (an honest 20 ms kernel) is timed, every spinner is stopped: each
    shows a gap in its beats over every timing phase of the other revision (the last shape's gap
    may not be printed before the shutdown)."""
    spinners_before = set(
        processes_named("hx-spinner", zombies=True)
    )  # a suite beside this one may have its own
    evaluators = _timing_cheat_evaluators(
        device, [("spins_while_others_run.py", "test"), ("slow_honest.py", "test")], **options
    )
    honest = evaluators[1]
    phases: list[tuple[float, float]] = []
    real_time = honest.child.time

    def recorded_time(*args, **kwargs):
        started = time.monotonic()
        try:
            return real_time(*args, **kwargs)
        finally:
            phases.append((started, time.monotonic()))

    honest.child.time = recorded_time
    spinning, honest_result = evaluate_interleaved(evaluators)
    _assert_nothing_left(evaluators)
    assert spinning.status == "pass" and honest_result.status == "pass", (
        spinning.reason,
        honest_result.reason,
    )
    assert honest_result.shapes[0].timing_flags == [], honest_result.shapes[0].check.timing
    gaps = _spinner_gaps(spinning.log_tail)
    # two blocks of calls per shape, and a third where the parent's clock asked to confirm one
    assert len(phases) >= 2 * len(honest.shapes)
    for start, end in phases[:-1]:
        for kind in ("thread", "process", *(["gpu"] if device == "cuda" else [])):
            assert any(k == kind and g0 <= start + 0.1 and g1 >= end - 0.05 for k, g0, g1 in gaps), (
                kind,
                (start, end),
                gaps,
            )
    assert none_left_named("hx-spinner", spinners_before, wait_s=5, zombies=True), (
        "the spinner outlived its sandbox"
    )


@pytest.mark.skipif(not FULL_ISOLATION, reason="without a pid namespace a process in a new session escapes")
def test_spinners_left_running_are_stopped_while_another_revision_is_timed():
    _assert_spinners_stopped_while_others_are_timed(
        "cpu", limits=SandboxLimits.from_settings(**QUICK), rule=RULE
    )


CUDA_RULE = StoppingRule(min_runs=3, max_runs=10, budget_s=1.0)
# The GPU cases on the two largest test shapes: on all five benchmark shapes nine revisions took
# longer than a device call may (each cheat's own "real work" is a 10 ms sleep, not the shape's).
CUDA_TASK = TASK.model_copy(update={"benchmarks": TASK.tests[3:]})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the CUDA timing cheats need a CUDA GPU")
def test_timing_cheats_fail_or_are_flagged_on_cuda():
    """The same cheats on the GPU's benchmark shapes, beside the honest reference (which must not
    be flagged host_clock_mismatch) and the precomputer (which gains nothing)."""
    cheats = [
        *TIMING_CHEATS,
        (REFERENCE.name, "test"),
        (REFERENCE.name, "leaderboard"),
        ("precomputes_public_seeds.py", "test"),
        ("memoizes_by_fingerprint.py", "test"),
        ("memoizes_by_pointer.py", "test"),
    ]
    limits = SandboxLimits.from_settings(call_timeout_s=60.0, import_timeout_s=120.0)
    evaluators = _timing_cheat_evaluators("cuda", cheats, task=CUDA_TASK, limits=limits, rule=CUDA_RULE)
    evaluations = dict(zip(cheats, evaluate_interleaved(evaluators)))
    _assert_nothing_left(evaluators)
    for key, evaluation in evaluations.items():
        print(
            "timing cheat on cuda:",
            key,
            evaluation.status,
            evaluation.reason,
            [
                (
                    s.mean_ms,
                    s.timing_flags,
                    s.check.timing and s.check.timing.harness_ms,
                    min(s.check.timing.parent_ms or [0]) if s.check.timing else 0,
                    s.check.timing and s.check.timing.joined,
                )
                for s in evaluation.shapes
            ],
        )
    for key, expected in TIMING_CHEATS.items():
        _assert_timing_cheat_outcome(expected, evaluations[key], key)
    for mode in ("test", "leaderboard"):
        honest = evaluations[REFERENCE.name, mode]
        assert honest.status == "pass", honest.reason
        assert not any(HOST_CLOCK_MISMATCH in shape.timing_flags for shape in honest.shapes), mode
    precomputed = evaluations["precomputes_public_seeds.py", "test"]
    assert precomputed.status == "pass" and all(shape.min_ms > 10.0 for shape in precomputed.shapes)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="kernels queued by a stopped child need a CUDA GPU")
def test_kernels_a_stopped_child_left_queued_do_not_slow_the_next_revisions_calls_on_cuda():
    """queues_work_for_the_next.py leaves a third of a second of matrix products queued after
    every call; the reference is timed next. The parent's flush before each of the reference's
    calls waits until the GPU serves it as fast as ever (harness.timing.wait_for_quiet_gpu), so
    none of the reference's calls shares the GPU with that work: its slowest call stays near its
    quickest (one call sharing the GPU with it took tens of milliseconds more)."""
    limits = SandboxLimits.from_settings(call_timeout_s=60.0, import_timeout_s=120.0)
    cheats = [("queues_work_for_the_next.py", "test"), (REFERENCE.name, "test")]
    evaluators = _timing_cheat_evaluators("cuda", cheats, task=CUDA_TASK, limits=limits, rule=CUDA_RULE)
    queuer, reference = evaluate_interleaved(evaluators)
    _assert_nothing_left(evaluators)
    assert reference.status == "pass", reference.reason
    for shape in reference.shapes:
        times = shape.times_ms  # every pass's calls
        print("reference after the queuer on cuda:", shape.index, min(times), max(times), queuer.status)
        assert max(times) <= 1.5 * min(times) + 0.5, times


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the CUDA spinner case needs a CUDA GPU")
def test_spinners_left_running_are_stopped_while_another_revision_is_timed_on_cuda():
    limits = SandboxLimits.from_settings(call_timeout_s=60.0, import_timeout_s=120.0)
    _assert_spinners_stopped_while_others_are_timed("cuda", task=CUDA_TASK, limits=limits, rule=CUDA_RULE)
