"""Untimed checks side by side (issue 17): the test phase runs several revisions at once, each in
its own child, while a timing anywhere in the process still runs alone; Ctrl-C and a crashing
candidate in the middle of such a phase lose nothing that ended and leave no process behind.
Real children, the real CLI in a subprocess, a SQLite store in a tmp dir."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import HARNESS_SCRIPT, local_ray_cluster, rows

from harness import checking
from harness.config import CANDIDATES_DIR
from harness.sandbox.devices import INTERLEAVE_GROUP, check_parallelism
from harness.sandbox.evaluation import Evaluator, evaluate_interleaved
from harness.sandbox.limits import SandboxLimits
from harness.sandbox.pool import CHILD_POOL
from harness.tasks import load_task
from harness.timing import StoppingRule

TASK = load_task("conv2d_v2")
REFERENCE = CANDIDATES_DIR / "conv2d_v2_reference.py"
HONEST_SLOW = Path(__file__).parent / "adversarial" / "slow_honest.py"
QUICK = {"call_timeout_s": 60.0, "import_timeout_s": 120.0}

# A correct candidate whose every call takes `%(call_s)s` s, with a thread that beats every 5 ms
# and prints each pause it did not choose (a gap over 30 ms on the monotonic clock, which the
# parent shares) as `busy gap FROM TO`: while it is stopped, it cannot beat. Each call prints its
# span as `busy call FROM TO`.
BUSY = b'''"""Correct, slow (%(call_s)s s a call), and always busy on a thread of its own (copy %(copy)d)."""
import threading
import time

import torch.nn.functional as F


def _beat():
    last = time.monotonic()
    while True:
        time.sleep(0.005)
        now = time.monotonic()
        if now - last > 0.03:
            print(f"busy gap {last:.4f} {now:.4f}", flush=True)
        last = now


threading.Thread(target=_beat, daemon=True).start()


def custom_kernel(data):
    started = time.monotonic()
    input_tensor, kernel, output = data
    output.copy_(F.conv2d(input_tensor, kernel))
    time.sleep(%(call_s)s)
    print(f"busy call {started:.4f} {time.monotonic():.4f}", flush=True)
    return output
'''


def busy_code(copy: int, call_s: float) -> bytes:
    return BUSY % {b"call_s": str(call_s).encode(), b"copy": copy}


def test_the_automatic_count_stays_within_the_cores_and_the_group():
    automatic = check_parallelism(0)
    assert 1 <= automatic <= min(len(os.sched_getaffinity(0)), INTERLEAVE_GROUP)
    assert check_parallelism(3) == 3 and check_parallelism(1) == 1
    assert check_parallelism(1000) == INTERLEAVE_GROUP


def test_untimed_evaluations_overlap_and_reference_cases_are_made_once_per_shape(monkeypatch):
    """Three slow revisions (0.4 s a call) with three at once: their recorded spans overlap, and
    so do their calls (interleaved, one call runs at a time), each passes, and every shape's
    reference case was made once for all three (not once per revision, as with two cases kept
    while the threads are at different shapes)."""
    made: list[tuple] = []
    real_make = checking.make_reference_case

    def counted(reference, shape, seed, device, **options):
        made.append((tuple(sorted(shape.parameters.items())), seed))
        return real_make(reference, shape, seed, device, **options)

    monkeypatch.setattr(checking, "make_reference_case", counted)
    monkeypatch.setattr(checking, "_recent_cases", OrderedDict())  # no case left by an earlier test
    limits = SandboxLimits.from_settings(**QUICK)
    evaluators = [
        Evaluator(busy_code(copy, 0.4), f"busy_{copy}.py", TASK, device="cpu", limits=limits)
        for copy in range(3)
    ]
    heard: list[str] = []
    evaluations = evaluate_interleaved(
        evaluators, parallel=3, on_evaluation=lambda evaluator, evaluation: heard.append(evaluation.filename)
    )
    assert [evaluation.status for evaluation in evaluations] == ["pass"] * 3, [e.reason for e in evaluations]
    assert sorted(heard) == ["busy_0.py", "busy_1.py", "busy_2.py"]
    latest_start = max(evaluation.started_at for evaluation in evaluations)
    earliest_end = min(evaluation.ended_at for evaluation in evaluations)
    assert latest_start < earliest_end, [(e.started_at, e.ended_at) for e in evaluations]
    calls = [
        [(float(a), float(b)) for a, b in re.findall(r"busy call ([\d.]+) ([\d.]+)", evaluation.log_tail)]
        for evaluation in evaluations
    ]
    assert all(len(spans) == len(TASK.smoke) for spans in calls), calls
    overlapping = [
        (i, j)
        for i in range(3)
        for j in range(i + 1, 3)
        if any(a0 < b1 and b0 < a1 for a0, a1 in calls[i] for b0, b1 in calls[j])
    ]
    assert len(overlapping) == 3, calls
    assert sorted(made) == sorted(set(made)) and len(made) == len(TASK.smoke)
    assert not any(evaluator.child in CHILD_POOL.live for evaluator in evaluators)


def test_a_timing_never_shares_the_machine_with_checks_running_side_by_side():
    """Two busy revisions are checked side by side (3 s a call) on one thread while another
    thread times an honest revision: every checking child that was alive over a timing phase
    shows a pause in its beats over the whole phase (it was stopped), and at least one was."""
    limits = SandboxLimits.from_settings(**QUICK)
    checkers = [
        Evaluator(busy_code(copy, 3.0), f"busy_{copy}.py", TASK, device="cpu", limits=limits)
        for copy in range(2)
    ]
    first_shape = threading.Event()
    checked: list = []
    thread = threading.Thread(
        target=lambda: checked.extend(
            evaluate_interleaved(checkers, lambda evaluator, outcome: first_shape.set(), parallel=2)
        )
    )
    timed = Evaluator(
        HONEST_SLOW.read_bytes(),
        "slow_honest.py",
        TASK,
        device="cpu",
        timed=True,
        limits=limits,
        rule=StoppingRule(min_runs=3, max_runs=5, budget_s=0.3),
    )
    phases: list[tuple[float, float]] = []
    real_time = timed.child.time

    def recorded_time(*args, **kwargs):
        started = time.monotonic()
        try:
            return real_time(*args, **kwargs)
        finally:
            phases.append((started, time.monotonic()))

    timed.child.time = recorded_time
    thread.start()
    try:
        assert first_shape.wait(timeout=180), "the checks never ran a shape"
        [timed_result] = evaluate_interleaved([timed])
    finally:
        thread.join(timeout=300)
    assert timed_result.status == "pass", timed_result.reason
    assert [evaluation.status for evaluation in checked] == ["pass"] * 2, [e.reason for e in checked]
    assert len(phases) == 2 * len(TASK.smoke)  # two blocks of calls per shape
    covered = 0
    for evaluation in checked:
        gaps = [
            (float(a), float(b)) for a, b in re.findall(r"busy gap ([\d.]+) ([\d.]+)", evaluation.log_tail)
        ]
        calls = [
            (float(a), float(b)) for a, b in re.findall(r"busy call ([\d.]+) ([\d.]+)", evaluation.log_tail)
        ]
        assert len(calls) == len(TASK.smoke), evaluation.log_tail
        for start, end in phases:
            if not (calls[0][0] <= start and end <= calls[-1][1]):  # not within its calls: nothing to see
                continue
            covered += 1
            assert any(g0 <= start + 0.1 and g1 >= end - 0.05 for g0, g1 in gaps), ((start, end), gaps)
    assert covered, ("no timing phase fell within a checking child's calls", phases)


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _register(tmp_path: Path, store_url: str, name: str, code: bytes) -> int:
    path = tmp_path / name
    path.write_bytes(code)
    done = subprocess.run(
        [str(HARNESS_SCRIPT), "register", str(path), "--lineage", path.stem],
        check=False,
        capture_output=True,
        text=True,
        env={**os.environ, "HARNESS_DB": store_url},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return int(re.search(r"submission (\d+)", done.stdout).group(1))


def _alive(pids: set[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, IndexError):
            continue
        if state != "Z":
            alive.append(pid)
    return alive


@pytest.mark.parametrize("crash", [False, True], ids=["ctrl_c", "crash_then_ctrl_c"])
def test_ctrl_c_in_a_parallel_test_phase_keeps_what_ended_and_leaves_no_process(tmp_path, store_url, crash):
    """`harness test` on three revisions, three at once: the reference (quick) and two slow ones
    (20 s a call), or with `crash` one slow one and one that exits in the middle of a call. Once
    the quick ones are stored, Ctrl-C: the command exits 130, the ended runs stay (the crash a
    `crashed` run), the slow one's claim is released, and no process it started is left."""
    quick = _register(tmp_path, store_url, "reference.py", REFERENCE.read_bytes())
    slow = _register(tmp_path, store_url, "slow.py", busy_code(0, 20.0))
    if crash:
        other = _register(
            tmp_path,
            store_url,
            "exits.py",
            (Path(__file__).parent / "bad_candidates" / "exits_midway.py").read_bytes(),
        )
    else:
        other = _register(tmp_path, store_url, "slow_too.py", busy_code(1, 20.0))
    process = subprocess.Popen(
        [str(HARNESS_SCRIPT), "test", "--device", "cpu", str(quick), str(slow), str(other)],
        env={**os.environ, "HARNESS_DB": store_url, "HARNESS_CHECK_PARALLELISM": "3"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    ended = [quick, other] if crash else [quick]
    seen: set[int] = set()
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and process.poll() is None:
            seen |= _descendants(process.pid)
            done = (
                {
                    revision
                    for (revision,) in rows(store_url, "select revision_id from runs where state = 'done'")
                }
                if Path(store_url.removeprefix("sqlite:///")).exists()
                else set()
            )
            if set(ended) <= done:
                break
            time.sleep(0.3)
        assert process.poll() is None, process.communicate()
        assert set(ended) <= done, "the quick revisions were never stored"
        seen |= _descendants(process.pid)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr
    stored = dict(rows(store_url, "select revision_id, status from runs where state = 'done'"))
    assert stored == ({quick: "pass", other: "crashed"} if crash else {quick: "pass"}), stored
    assert rows(store_url, "select count(*) from runs where state = 'claimed'") == [(0,)]
    details = json.loads(rows(store_url, "select details from runs where revision_id = ?", quick)[0][0])
    assert details["started_at"] < details["ended_at"]
    assert len(seen) >= 2, "the children were never seen"
    deadline = time.monotonic() + 10
    while _alive(seen) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _alive(seen) == [], "processes outlived the interrupted command"


def test_each_evaluation_tells_what_it_does_in_order():
    """Side by side: building, checking, done; timed (interleaved): building, then per shape
    checking, timing and waiting for the next turn, timing its second block and waiting, done; every change heard on the caller's
    thread."""
    limits = SandboxLimits.from_settings(**QUICK)
    heard: list[tuple[str, str, str]] = []

    def told(evaluator, activity):
        heard.append((evaluator.evaluation.filename, activity, threading.current_thread().name))

    checked = [
        Evaluator(
            REFERENCE.read_bytes() + b"\n# %d\n" % copy, f"copy_{copy}.py", TASK, device="cpu", limits=limits
        )
        for copy in range(2)
    ]
    timed = Evaluator(
        REFERENCE.read_bytes(),
        "timed.py",
        TASK,
        device="cpu",
        timed=True,
        limits=limits,
        rule=StoppingRule(min_runs=2, max_runs=3, budget_s=0.1),
    )
    evaluations = evaluate_interleaved([*checked, timed], parallel=2, on_activity=told)
    assert [evaluation.status for evaluation in evaluations] == ["pass"] * 3
    assert {thread for _, _, thread in heard} == {threading.main_thread().name}
    for name in ("copy_0.py", "copy_1.py"):
        assert [activity for file, activity, _ in heard if file == name] == ["building", "checking", "done"]
    assert [activity for file, activity, _ in heard if file == "timed.py"] == [
        "building",
        *["checking", "timing", "waiting", "timing", "waiting"] * len(TASK.smoke),  # two blocks a shape
        "done",
    ]


def test_the_progress_bar_counts_what_builds_and_checks_and_names_what_is_timed():
    import io

    from rich.console import Console

    from harness.report.progress import RichTournamentProgress

    with RichTournamentProgress(Console(file=io.StringIO(), force_terminal=False)) as progress:
        progress.start_phase("test", 8)
        for label, activity in [
            ("a r1", "building"),
            ("b r1", "building"),
            ("c r1", "building"),
            ("a r1", "checking"),
            ("b r1", "checking"),
        ]:
            progress.activity(label, activity)
        assert progress.now_text() == "building 1 · checking 2"
        progress.activity("a r1", "done")
        progress.activity("c r1", "timing")
        assert progress.now_text() == "checking 1 · timing c r1"
        assert progress.progress.tasks[0].fields["now"] == "checking 1 · timing c r1"
        progress.activity("c r1", "waiting")
        assert progress.now_text() == "checking 1"
        progress.end_phase()
        progress.start_phase("benchmark", 4)
        assert progress.now_text() == ""


def test_gpu_workers_tell_activities_and_store_each_evaluation_as_it_ends(tmp_path, store_url, monkeypatch):
    """Through two CPU workers (`--gpus 2` on the CPU), two checks at once in each: the parent
    hears each revision build, check and end, and every run is stored with its span."""
    monkeypatch.setenv("HARNESS_CHECK_PARALLELISM", "2")
    from harness.executors.local import GpuWorkers
    from harness.plan.tournament import TournamentProgress, run_tournament
    from harness.store.session import open_store

    ids = [
        _register(tmp_path, store_url, f"copy_{copy}.py", REFERENCE.read_bytes() + b"\n# %d\n" % copy)
        for copy in range(3)
    ]

    class Recorded(TournamentProgress):
        def __init__(self):
            self.heard: list[tuple[str, str]] = []

        def activity(self, label, activity):
            self.heard.append((label, activity))

    progress = Recorded()
    executor = GpuWorkers(["0", "1"])
    try:
        with open_store(store_url) as store:
            result = run_tournament(store, device="cpu", mode="test", progress=progress, executor=executor)
    finally:
        executor.close()
    assert sorted(result.phases[0].passed) == sorted(ids)
    labels = {label for label, _ in progress.heard}
    assert len(labels) == 3
    for label in labels:
        assert [activity for heard, activity in progress.heard if heard == label] == [
            "building",
            "checking",
            "done",
        ]
    spans = rows(store_url, "select details from runs where state = 'done'")
    assert len(spans) == 3
    for (details,) in spans:
        details = json.loads(details)
        assert details["started_at"] < details["ended_at"]


@pytest.fixture(scope="module")
def cpu_ray_cluster(tmp_path_factory) -> Iterator[str]:
    """A local Ray cluster on this CPU with no GPU resource; its address."""
    with local_ray_cluster(tmp_path_factory.mktemp("ray"), gpus=0) as address:
        yield address


def test_ray_checks_on_the_cpus_of_a_cluster_without_gpus(tmp_path, store_url, cpu_ray_cluster):
    """`--executor ray --device cpu` on a cluster with CPUs only: its tasks ask for a CPU each and
    the revisions are checked and stored; without `--device cpu` it refuses in one line."""
    ids = [
        _register(tmp_path, store_url, f"copy_{copy}.py", REFERENCE.read_bytes() + b"\n# %d\n" % copy)
        for copy in range(2)
    ]
    env = {**os.environ, "HARNESS_DB": store_url}
    done = subprocess.run(
        [
            str(HARNESS_SCRIPT),
            "tournament",
            "--device",
            "cpu",
            "--mode",
            "test",
            "--executor",
            "ray",
            "--ray-address",
            cpu_ray_cluster,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "test: 2 revisions, 2 evaluated now" in done.stdout, done.stdout
    assert sorted(rows(store_url, "select revision_id, status from runs")) == [
        (i, "pass") for i in sorted(ids)
    ]
    refused = subprocess.run(
        [
            str(HARNESS_SCRIPT),
            "tournament",
            "--mode",
            "test",
            "--executor",
            "ray",
            "--ray-address",
            cpu_ray_cluster,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and "the Ray cluster has no GPU resource" in refused.stderr, (
        refused.stderr
    )


def test_the_benchmark_bar_advances_once_per_shape_not_per_pass(tmp_path, store_url):
    """Every timed shape is reported after each of its passes (two blocks at least): the
    tournament hears each report, but its bar advances once per shape, so that it never passes
    its steps while the phase runs (a board cut mid-phase read 137/70, 2026-12-06)."""
    from harness.plan.tournament import TournamentProgress, run_tournament
    from harness.store.session import open_store
    from harness.timing import StoppingRule

    _register(tmp_path, store_url, "reference.py", REFERENCE.read_bytes())

    class Recorded(TournamentProgress):
        def __init__(self):
            self.phase, self.steps, self.advanced, self.reports = "", 0, 0, 0

        def start_phase(self, phase, steps):
            self.phase, self.steps, self.advanced, self.reports = phase, steps, 0, 0

        def set_steps(self, steps):
            self.steps = steps

        def step(self, description, advance=1):
            self.reports += 1
            self.advanced += advance
            assert self.advanced <= self.steps, (self.phase, description, self.advanced, self.steps)

    progress = Recorded()
    with open_store(store_url) as store:
        run_tournament(
            store, device="cpu", mode="benchmark", progress=progress, rule=StoppingRule(budget_s=0.05)
        )
    assert progress.phase == "benchmark"
    # this file and the task's reference candidate (registered by the tournament), four smoke shapes each
    assert progress.advanced == progress.steps == 8
    assert progress.reports >= 2 * progress.steps  # a report per pass
