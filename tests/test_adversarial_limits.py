"""Issue 15, items 6 and 7, on the CPU: candidates in tests/adversarial/ that run long or take
resources (autotune configs without end, memory, processes, disk, the per-code cache), each
evaluated in the real sandbox under small limits, each ending with the status and reason the
limit promises (docs/threat-model.md), with no process or file of theirs left behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from conftest import HARNESS_SCRIPT, none_left_named

from harness.sandbox.evaluation import Evaluation, Evaluator, checked_configs, evaluate_interleaved
from harness.sandbox.isolation import detect_isolation
from harness.sandbox.limits import SandboxLimits
from harness.sandbox.supervisor import ChildProcess
from harness.store.revisions import register_revision
from harness.store.session import open_store
from harness.tasks import load_task

TASK = load_task("conv2d_v2")
ADVERSARIAL = Path(__file__).parent / "adversarial"
REFERENCE = Path(__file__).resolve().parent.parent / "candidates" / "conv2d_v2_reference.py"
FULL_ISOLATION = detect_isolation().full
MIB = 1024**2
SMALL = {
    "call_timeout_s": 60.0,
    "import_timeout_s": 60.0,
    "memory_bytes": 1536 * MIB,
    "max_processes": 16,
    "disk_bytes": 64 * MIB,
    "code_cache_bytes": 16 * MIB,
    "max_checked_autotune_configs": 4,
}
DEADLINE_S = 15.0

# case -> (candidate file, limits over SMALL)
CASES = {
    "sampled configs": ("many_autotune_configs.py", {}),
    "deadline": (
        "many_autotune_configs.py",
        {"evaluation_timeout_s": DEADLINE_S, "max_checked_autotune_configs": 1000},
    ),
    "memory": ("holds_memory.py", {}),
    "memory in children": ("holds_memory_in_children.py", {}),
    "memory in helpers": ("holds_memory_in_helpers.py", {}),
    "processes": ("forks_processes.py", {}),
    "cache": ("fills_cache.py", {}),
    "exchange directory": ("fills_exchange_dir.py", {}),
}
if FULL_ISOLATION:  # without a mount namespace /dev/shm is the host's: the test would fill it
    CASES["disk"] = ("fills_disk.py", {})


@pytest.fixture(scope="module")
def results() -> dict[str, tuple[Evaluation, Evaluator]]:
    def one(case: str) -> tuple[str, tuple[Evaluation, Evaluator]]:
        name, limits = CASES[case]
        evaluator = Evaluator(
            (ADVERSARIAL / name).read_bytes(),
            name,
            TASK,
            device="cpu",
            limits=SandboxLimits.from_settings(**{**SMALL, **limits}),
        )
        return case, (evaluate_interleaved([evaluator])[0], evaluator)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, list(CASES)))


@pytest.mark.parametrize("case", list(CASES))
def test_nothing_of_a_candidate_is_left_behind(results, case):
    _evaluation, evaluator = results[case]
    child = evaluator.child
    assert child.proc is not None and child.proc.poll() is not None
    assert not child.workdir.exists() and not child.io_dir.exists()
    assert child.watch is not None and not child.watch.running


def test_autotune_configs_above_the_cap_are_sampled_with_config_0(results):
    evaluation, _ = results["sampled configs"]
    assert evaluation.status == "pass", evaluation.reason
    samples = []
    for shape, public in zip(evaluation.shapes, TASK.smoke):
        indices = [config.index for config in shape.check.configs]
        assert indices == checked_configs(400, 4, public.seed) and indices[0] == 0
        assert all(config.status == "pass" for config in shape.check.configs)
        sampled = shape.check.configs_sampled
        assert f"checked autotune configs {', '.join(map(str, indices))} of 400" in sampled
        assert "max_checked_autotune_configs=4" in sampled and "the rest were not run" in sampled
        samples.append(tuple(indices))
    assert len(set(samples)) > 1  # each shape's seed draws its own sample
    assert evaluation.wall_s < 60


def test_the_evaluation_deadline_ends_a_long_run_of_calls(results):
    evaluation, _ = results["deadline"]
    assert evaluation.status == "timeout", evaluation.reason
    assert f"ran past the evaluation's deadline: {DEADLINE_S:g} s" in evaluation.reason
    assert "(evaluation_timeout_s)" in evaluation.reason
    assert DEADLINE_S <= evaluation.wall_s < DEADLINE_S + 15
    assert [shape.status for shape in evaluation.shapes[1:]] == ["not_run"] * (len(TASK.smoke) - 1)


def test_memory_above_the_limit_fails_the_allocation_on_the_cpu(results):
    evaluation, _ = results["memory"]
    assert evaluation.status == "runtime_error", evaluation.reason
    assert "can't allocate memory" in evaluation.reason


def test_memory_held_by_several_processes_is_killed_by_the_parent(results):
    evaluation, _ = results["memory in children"]
    assert evaluation.status == "crashed", evaluation.reason
    # the memory cgroup's OOM kill where one is made (harness.sandbox.cgroups), else the watch
    assert re.search(
        r"killed by the parent during call on smoke\[0\]: \d+ MiB of memory held, over the limit of 1536 MiB"
        r"|killed by the kernel during call on smoke\[0\]: memory .* over the limit of 1536 MiB",
        evaluation.reason,
    )
    assert "(memory_bytes)" in evaluation.reason


def test_an_oom_kill_of_one_helper_ends_the_whole_child(results):
    """The kernel's OOM kill in the child's memory cgroup took one helper; the candidate, waiting
    on it, would sit to the call's timeout (it did under load, 2026-12-05) had the parent's watch
    not ended the child for that kill. Without a memory cgroup the parent's watch kills it."""
    evaluation, evaluator = results["memory in helpers"]
    assert evaluation.status == "crashed", evaluation.reason
    if "memory" in evaluator.child.cgroups.mechanisms:
        assert re.search(
            r"killed by the kernel during call on smoke\[0\]: memory .* over the limit of 1536 MiB",
            evaluation.reason,
        )
    else:
        assert "killed by the parent during call on smoke[0]" in evaluation.reason
    assert "(memory_bytes)" in evaluation.reason
    assert evaluation.wall_s < 50  # not the call's timeout (60 s)
    assert none_left_named("limits-helper", wait_s=10, zombies=True)
    assert none_left_named("limits-memory", wait_s=10, zombies=True)


def test_a_fork_bomb_as_root_is_killed_by_the_parent(results):
    evaluation, _ = results["processes"]
    assert evaluation.status == "crashed", evaluation.reason
    assert re.search(
        r"killed by the parent during call on smoke\[0\]: \d+ processes, over the limit of 16",
        evaluation.reason,
    )
    assert "(max_processes)" in evaluation.reason
    assert none_left_named("limits-forker", wait_s=10, zombies=True)


def test_the_per_code_cache_is_capped_and_removed(results):
    evaluation, evaluator = results["cache"]
    assert evaluation.status == "crashed", evaluation.reason
    assert "killed by the parent during call on smoke[0]" in evaluation.reason
    assert "the per-code caches, over the limit of 16 MiB (code_cache_bytes)" in evaluation.reason
    assert not any(cache.exists() for cache in evaluator.child.caches)


@pytest.mark.skipif(not FULL_ISOLATION, reason="needs a mount namespace")
def test_dev_shm_and_the_working_directory_are_sized(results):
    evaluation, _ = results["disk"]
    assert evaluation.status == "runtime_error", evaluation.reason
    found = re.search(
        r"filled /dev/shm: (\d+) MiB then ENOSPC; working directory: (\d+) MiB then ENOSPC", evaluation.reason
    )
    assert found, evaluation.reason
    assert all(int(written) <= 64 for written in found.groups())


def test_the_directories_shared_with_the_parent_are_watched(results):
    evaluation, _ = results["exchange directory"]
    assert evaluation.status == "crashed", evaluation.reason
    assert "killed by the parent during call on smoke[0]" in evaluation.reason
    assert "in the working directories, over the limit of 64 MiB (disk_bytes)" in evaluation.reason


FORKS_AFTER_LOADING = """
import os
import time

import torch.nn.functional as F
from task import input_t, output_t


def custom_kernel(data: input_t) -> output_t:
    input_tensor, kernel, output = data
    workers = []
    for _ in range(12):  # each holds, copy-on-write, the ~150 MiB its parent had made
        pid = os.fork()
        if pid == 0:
            time.sleep(1.5)
            os._exit(0)
        workers.append(pid)
    for pid in workers:
        os.waitpid(pid, 0)
    output.copy_(F.conv2d(input_tensor, kernel))
    return output
"""


def test_workers_forked_after_loading_torch_are_not_charged_for_pages_they_share():
    """Thirteen processes (the candidate and twelve sleeping forks) each show the candidate's
    ~150 MiB of RssAnon: 1.9 GiB summed, over a 1536 MiB limit, though they hold one copy. The
    watch counts a sum over the limit again by proportional shares (Pss, each shared page once),
    so the candidate passes; twelve forks that each write their own memory do not
    (`test_memory_held_by_several_processes_is_killed_by_the_parent`)."""
    evaluator = Evaluator(
        FORKS_AFTER_LOADING.encode(),
        "forks_after_loading.py",
        TASK,
        device="cpu",
        limits=SandboxLimits.from_settings(**SMALL),
    )
    evaluation = evaluate_interleaved([evaluator])[0]
    assert evaluation.status == "pass", evaluation.reason


def test_per_code_caches_over_the_limit_when_a_child_is_closed_are_removed(tmp_path, monkeypatch):
    """What a run left between the watch's last look and its end (here written before a child
    that never started) is measured when the child is closed, and removed."""
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path))
    code = b"# caches left over the limit\n"
    limits = SandboxLimits.from_settings(**SMALL)
    sha256 = hashlib.sha256(code).hexdigest()
    child = ChildProcess(code, TASK, device="cpu", limits=limits, code_sha256=sha256)
    (child.triton_cache / "left.bin").write_bytes(b"\x01" * 17 * MIB)
    child.close()
    assert not any(cache.exists() for cache in child.caches)
    assert child.caches_trimmed == (
        "left more than 16 MiB in its per-code caches, over the limit (code_cache_bytes): the caches were removed"
    )
    within = ChildProcess(code, TASK, device="cpu", limits=limits, code_sha256=sha256)
    (within.triton_cache / "kept.bin").write_bytes(b"\x01" * MIB)
    within.close()
    assert within.caches_trimmed is None and (within.triton_cache / "kept.bin").exists()


@pytest.mark.parametrize("allowed", [True, False])
def test_the_harness_exports_get_room_beyond_the_disk_limit(allowed):
    """`disk_bytes` is the candidate's own room: the exchange directory holds the harness's export
    of a checked output on top of it (`ChildProcess.allow_output`; GPU MODE's prefixsum has 1 GiB
    outputs, and on the H200 its honest reference was killed under the default 1 GiB)."""
    code = b"def custom_kernel(data):\n    return data[2]\n"
    limits = SandboxLimits.from_settings(**{**SMALL, "disk_bytes": 1 * MIB})
    child = ChildProcess(
        code, TASK, device="cpu", limits=limits, code_sha256=hashlib.sha256(code).hexdigest()
    )
    try:
        child.spawn()
        child.wait_ready()
        if allowed:
            child.allow_output(2 * MIB)
        (child.io_dir / "output-1.bin").write_bytes(bytes(2 * MIB))  # as the child's export would
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and child.watch.problem is None:
            time.sleep(0.05)
        if allowed:
            assert child.watch.problem is None and child.proc.poll() is None
        else:
            assert "over the limit of 1 MiB (disk_bytes)" in (child.watch.problem or ""), child.watch.problem
    finally:
        child.close()


def test_the_watch_leaves_a_stopped_childs_files_alone_until_it_resumes():
    """While a child is stopped (another one is timed: ChildPool.others_stopped), the watch does not
    walk its directories (nothing there can change, and the walk would take the timed child's
    CPU); once it runs again, what it holds counts as before, folders nested past PATH_MAX
    included."""
    code = b"def custom_kernel(data):\n    return data[2]\n"
    limits = SandboxLimits.from_settings(**{**SMALL, "disk_bytes": 1 * MIB})
    child = ChildProcess(
        code, TASK, device="cpu", limits=limits, code_sha256=hashlib.sha256(code).hexdigest()
    )
    try:
        child.spawn()
        child.wait_ready()
        child.stop()
        current = os.open(child.io_dir, os.O_RDONLY | os.O_DIRECTORY)
        for level in range(30):  # 6,000 characters of path
            name = f"{level:03d}" + "x" * 197
            os.mkdir(name, dir_fd=current)
            below = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=current)
            os.close(current)
            current = below
        hidden = os.open("bytes.bin", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=current)
        os.write(hidden, bytes(2 * MIB))
        os.close(hidden)
        os.close(current)
        time.sleep(1.0)  # five looks of the watch
        assert child.watch.problem is None and child.proc.poll() is None
        child.resume()
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline and child.watch.problem is None:
            time.sleep(0.05)
        assert "over the limit of 1 MiB (disk_bytes)" in (child.watch.problem or ""), child.watch.problem
    finally:
        child.close()
    assert not child.io_dir.exists()


SLOW_IMPORT_S = 40  # beyond the start-up deadline below, within the import deadline
SLOW_STARTUP_TIMEOUT_S = 30


def test_a_slow_import_beside_the_calibration_child_ends_no_timed_run(tmp_path):
    """Issue 33, item 2: a correct candidate that imports for longer than a child's start-up
    deadline, timed beside the harness's calibration child (spawned with it, first waited on at
    the first timing). The calibration child's start-up counts its own time, not the parent's
    wait on the slow import: `bench` and the tournament's benchmark phase end with exit 0, and the
    kept isolation level stays kept."""
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    slow = (ADVERSARIAL / "slow_import.py").read_bytes()
    assert b"IMPORT_S = 150" in slow
    contents = {
        "reference": REFERENCE.read_bytes(),
        "slow": slow.replace(b"IMPORT_S = 150", f"IMPORT_S = {SLOW_IMPORT_S}".encode()),
    }
    store = open_store(url)
    try:
        with store.session() as session:
            ids = {
                name: register_revision(session, content, f"{name}.py", lineage=name).revision.id
                for name, content in contents.items()
            }
    finally:
        store.close()
    cache = tmp_path / "cache"
    environment = {
        **os.environ,
        "HARNESS_DB": url,
        "HARNESS_CACHE_DIR": str(cache),
        "HARNESS_STARTUP_TIMEOUT_S": str(SLOW_STARTUP_TIMEOUT_S),
        "COLUMNS": "300",
    }

    def harness(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(HARNESS_SCRIPT), *args, "--device", "cpu"],
            capture_output=True,
            text=True,
            env=environment,
            timeout=600,
            check=False,
        )

    checked = harness("test", str(ids["reference"]), str(ids["slow"]))  # keeps the isolation level
    assert checked.returncode == 0, checked.stderr
    kept = json.loads((cache / "isolation-levels.json").read_text())
    assert kept, "the first command keeps its isolation level"
    # the test phase is reused: the benchmark phase starts the slow import beside the calibration child
    tournament = harness("tournament", "--mode", "benchmark", "--budget", "0.2")
    assert tournament.returncode == 0, tournament.stderr
    assert "calibration" not in tournament.stderr and "leaderboard on cpu" in tournament.stdout
    bench = harness("bench", str(ids["slow"]), str(ids["reference"]), "--budget", "0.2")
    assert bench.returncode == 0, bench.stderr
    assert "slow r1: pass" in bench.stdout, bench.stdout
    assert json.loads((cache / "isolation-levels.json").read_text()) == kept


def test_the_parents_own_work_out_of_memory_is_the_shapes_result(tmp_path):
    """Issue 33, item 4 (the parent's side), on the CPU: a task whose second shape the parent cannot
    even make (2 TiB of input: torch's CPU allocator gives up at once, as CUDA does when a child
    beside it holds the GPU's memory), checked beside a candidate that holds memory. More than the
    machine has in all (issue 34): the shape is `unsupported` here, "too large to run here", for
    every revision, the first shape's results stand, the run ends with exit 0 (unsupported is no
    failure) and results, and runs again on the same store."""
    problems = tmp_path / "problems"
    shutil.copytree(TASK.directory, problems / "hugeconv_py")
    shutil.copy(TASK.directory.parent / "utils.py", problems / "utils.py")
    spec = problems / "hugeconv_py" / "task.yml"
    text = spec.read_text()
    smoke = text.index("  smoke:\n")
    end = text.index("\n", text.index('"seed": 404}', smoke))
    huge = '{"size": 524288, "kernelsize": 2, "channels": 2, "batch": 1, "seed": 202}'
    spec.write_text(
        text[:smoke]
        + '  smoke:\n    - {"size": 8, "kernelsize": 2, "channels": 2, "batch": 1, "seed": 101}\n'
        + f"    - {huge}"
        + text[end:]
    )
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    environment = {**os.environ, "HARNESS_DB": url, "HARNESS_CACHE_DIR": str(tmp_path / "cache")}

    def harness(*args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [str(HARNESS_SCRIPT), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**environment, "COLUMNS": "300"},
        )

    added = harness("task", "add", str(problems / "hugeconv_py"))
    assert added.wait(timeout=120) == 0, added.communicate()
    ids = []
    for source in (REFERENCE, ADVERSARIAL / "holds_device_memory.py"):
        # without conv2d_v2's `#!POPCORN leaderboard` line, which --task may not contradict
        path = tmp_path / source.name
        lines = source.read_text().splitlines(keepends=True)
        path.write_text("".join(line for line in lines if not line.startswith("#!POPCORN")))
        registered = harness("register", str(path), "--task", "hugeconv")
        stdout, stderr = registered.communicate(timeout=120)
        assert registered.returncode == 0, stderr
        ids.append(re.search(r"registered submission (\d+)", stdout).group(1))
    connection = None
    for attempt in range(2):  # the second on the same store
        process = harness("test", *ids, "--device", "cpu")
        stdout, stderr = process.communicate(timeout=600)
        assert process.returncode == 0, stderr  # unsupported here, no failure; the run ended
        assert "Traceback" not in stderr, stderr
        assert not list(Path("/dev/shm").glob(f"harness-io-{process.pid}-*"))
        if attempt == 0:
            assert "too large to run here" in stdout, stdout
    connection = sqlite3.connect(tmp_path / "store.sqlite")
    try:
        for revision_id in ids:
            run = connection.execute(
                "SELECT id, status, reason FROM runs WHERE revision_id = ? AND mode = 'test'", (revision_id,)
            ).fetchone()
            assert run[1] == "unsupported", run
            assert "smoke[1]" in run[2] and "too large to run here" in run[2], run
            shapes = connection.execute(
                'SELECT set_name, "index", passed FROM shape_results WHERE run_id = ? ORDER BY "index"',
                (run[0],),
            ).fetchall()
            assert shapes[0] == ("smoke", 0, 1), shapes  # the first shape's result stands
            assert shapes[1:] in ([], [("smoke", 1, 0)]), shapes
    finally:
        connection.close()


@pytest.mark.parametrize("figures", [True, False])
def test_the_parents_comparison_in_chunks_gives_the_same_verdicts(monkeypatch, figures):
    """The parent compares an output COMPARE_CHUNK elements at a time (bounded memory beside the
    children): with chunks of 97 elements the verdicts, counts and first mismatches are those of
    one chunk, and the figures agree to rounding."""
    import math

    import torch

    from harness import checking
    from harness.tasks import load_reference

    reference = load_reference(TASK)
    shape = TASK.smoke[1]
    case = checking.make_reference_case(reference, shape, shape.seed, "cpu", exact_answer=TASK.exact_answer)
    outputs = [case.expected.clone(), case.expected + 1e-6]
    off = case.expected.clone()
    off.view(-1)[::7] += 1e-2
    off.view(-1)[3] = float("nan")
    outputs.append(off)

    def close(one: object, other: object) -> bool:
        if isinstance(one, dict):
            return one.keys() == other.keys() and all(close(one[key], other[key]) for key in one)
        if isinstance(one, list):
            return len(one) == len(other) and all(map(close, one, other))
        if isinstance(one, float) and isinstance(other, float):
            return math.isclose(one, other, rel_tol=1e-9)
        return one == other

    for output in outputs:
        whole = checking.compare_output(output, case, rtol=TASK.rtol, atol=TASK.atol, figures=figures)
        with monkeypatch.context() as patch:
            patch.setattr(checking, "COMPARE_CHUNK", 97)
            assert output.numel() > 3 * 97
            chunked = checking.compare_output(output, case, rtol=TASK.rtol, atol=TASK.atol, figures=figures)
        assert close(whole.model_dump(), chunked.model_dump()), (whole, chunked)
        assert torch.isfinite(output).all() == (whole.not_finite == 0)


def test_a_revision_out_of_memory_beside_others_is_retried_alone(tmp_path, run_cli):
    """Issue 33, item 4: a revision that runs out of memory while others are checked beside it
    (on a GPU their memory is one) is evaluated again alone, after the rest, before its failure
    counts. `starved_once.py` fails its first evaluation with CUDA's out-of-memory words and
    passes every later one: `harness test` of it beside the reference ends with both passing."""
    for name in ("reference", "starved"):
        path = REFERENCE if name == "reference" else ADVERSARIAL / "starved_once.py"
        registered = run_cli("register", path, "--lineage", name)
        assert registered.returncode == 0, registered.stderr
    environment = {"HARNESS_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "250"}
    checked = run_cli("test", "1", "2", "--device", "cpu", env=environment, timeout=600)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert re.search(r"starved r1\s+pass", checked.stdout), checked.stdout
    assert list((tmp_path / "cache").rglob("starved-once")), "its first evaluation ran out of memory"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_gpu_memory_hog_started_first_ends_no_tournament(tmp_path, run_cli):
    """A candidate that takes the GPU's memory at its import, registered first so that its child
    starts before the parent's first CUDA call: the parent makes its CUDA context before any
    child of a CUDA job starts (harness.sandbox.devices.hold_cuda_context), so the tournament
    ends with results, the hog's a failure, never a traceback (on an H100, 2026-12-06, a
    board's second tournament ended in cudaMemGetInfo with "CUDA error: out of memory")."""
    for name, path in (("hog", ADVERSARIAL / "holds_device_memory.py"), ("reference", REFERENCE)):
        registered = run_cli("register", path, "--lineage", name)
        assert registered.returncode == 0, registered.stderr
    environment = {"HARNESS_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "250"}
    result = run_cli("tournament", "--device", "cuda", "--mode", "test", env=environment, timeout=600)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode in (0, 1), result.stderr
    assert "reference r1" in result.stdout, result.stdout


def test_revisions_starved_beside_one_that_was_not_are_retried_together_without_it(tmp_path, monkeypatch):
    """Issue 33, item 4: on the H200 sixteen revisions ran out of memory beside a hog's kept child
    and were retried one after another (the run did not end). Two revisions starved once, timed
    beside the reference that passed (and keeps its child): the two are evaluated again together
    in one round, with the reference's kept child stopped, not alone one after the other."""
    from harness.sandbox.pool import CHILD_POOL
    from harness.timing import StoppingRule

    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    settings = SandboxLimits.from_settings(call_timeout_s=120.0, import_timeout_s=120.0)
    starved = (ADVERSARIAL / "starved_once.py").read_bytes()
    codes = [(REFERENCE.read_bytes(), "reference.py")]
    codes += [(starved + f"\n# copy {copy}\n".encode(), f"starved_{copy}.py") for copy in range(2)]
    rule = StoppingRule(min_runs=2, max_runs=2, budget_s=1.0)
    evaluators = [
        Evaluator(code, name, TASK, device="cpu", limits=settings, keep_child=True, timed=True, rule=rule)
        for code, name in codes
    ]
    alive: dict[str, list[int]] = {}
    beside_the_reference: dict[str, list[bool]] = {}

    def heard(evaluator: Evaluator, outcome) -> None:
        children = CHILD_POOL.live | set(CHILD_POOL.kept.values()) | set(CHILD_POOL.early.values())
        alive.setdefault(evaluator.arguments["filename"], []).append(len(children))
        reference_child = evaluators[0].child
        beside = reference_child in children and reference_child.proc.poll() is None
        beside_the_reference.setdefault(evaluator.arguments["filename"], []).append(beside)

    try:
        evaluations = evaluate_interleaved(evaluators, heard)
        assert [e.status for e in evaluations] == ["pass"] * 3, [e.reason for e in evaluations]
        assert "evaluated again" not in evaluations[0].log_tail
        for evaluation in evaluations[1:]:
            assert (
                "evaluated again beside only revisions that had run out of memory too" in evaluation.log_tail
            )
            assert "evaluated again alone" not in evaluation.log_tail
            assert all(s.runs and s.mean_ms > 0 for s in evaluation.shapes)
        # the retried round's shapes come last: the two retried children and the harness's
        # calibration child, one fewer than in the first round, and the reference's not alive
        shapes = len(evaluations[1].shapes)
        first_round = alive["reference.py"][0]
        for name in ("starved_0.py", "starved_1.py"):
            assert alive[name][-shapes:] == [first_round - 1] * shapes, alive
            assert beside_the_reference[name][0] and not any(beside_the_reference[name][-shapes:])
    finally:
        CHILD_POOL.close_waiting()


def test_a_flagged_timing_beside_a_revision_that_ran_out_of_memory_is_evaluated_again(tmp_path, monkeypatch):
    """Issue 33, item 4, as seen on the H200: the reference, retried with a hog that had run out of
    memory too, was timed beside the hog's child that held the GPU's memory and came out flagged
    by the parent's clock, so an honest revision went unranked. A flagged timing in a group where
    another revision ran out of memory is a neighbour's doing until shown otherwise: it is
    evaluated again with the starved ones. Here the flagged one is a cheat (its own timing loop
    reports 0.0005 ms per call): flagged again, as before. The reference that passed unflagged is
    not evaluated again."""
    from harness.sandbox.pool import CHILD_POOL
    from harness.timing import HOST_CLOCK_MISMATCH, StoppingRule

    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    settings = SandboxLimits.from_settings(call_timeout_s=120.0, import_timeout_s=120.0)
    codes = [
        (REFERENCE.read_bytes(), "reference.py"),
        ((ADVERSARIAL / "starved_once.py").read_bytes(), "starved.py"),
        ((ADVERSARIAL / "replaces_timing_loop_with_calls.py").read_bytes(), "cheat.py"),
    ]
    rule = StoppingRule(min_runs=3, max_runs=3, budget_s=1.0)
    evaluators = [
        Evaluator(code, name, TASK, device="cpu", limits=settings, timed=True, rule=rule)
        for code, name in codes
    ]
    try:
        reference, starved, cheat = evaluate_interleaved(evaluators)
    finally:
        CHILD_POOL.close_waiting()
    assert reference.status == starved.status == cheat.status == "pass", (starved.reason, cheat.reason)
    assert "evaluated again" not in reference.log_tail
    assert "evaluated again" in starved.log_tail and "evaluated again" in cheat.log_tail
    assert any(HOST_CLOCK_MISMATCH in shape.timing_flags for shape in cheat.shapes), [
        shape.check.timing for shape in cheat.shapes
    ]


def test_a_revision_retried_alone_has_no_kept_child_beside_it(tmp_path, monkeypatch):
    """Issue 33, item 4, as seen on the H200: the hog, retried alone first, passed and kept its
    child for the next phase, and two honest revisions retried after it ran out of memory again
    beside that kept child. Two revisions starved once, checked together with `keep_child`:
    each is evaluated again alone, and while the second one runs no other child of the harness
    is alive (kept, early or live), the first one's kept child included."""
    from harness.sandbox.pool import CHILD_POOL

    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    settings = SandboxLimits.from_settings(call_timeout_s=120.0, import_timeout_s=120.0)
    starved = (ADVERSARIAL / "starved_once.py").read_bytes()
    evaluators = [
        Evaluator(
            starved + f"\n# copy {copy}\n".encode(),
            f"starved_{copy}.py",
            TASK,
            device="cpu",
            limits=settings,
            keep_child=True,
        )
        for copy in range(2)
    ]
    alive: dict[str, list[int]] = {}

    def heard(evaluator: Evaluator, outcome) -> None:
        # the child that ran the shape is live; any other (kept, early, live) shares the machine
        count = len(CHILD_POOL.live | set(CHILD_POOL.kept.values()) | set(CHILD_POOL.early.values()))
        alive.setdefault(evaluator.arguments["filename"], []).append(count)

    try:
        evaluations = evaluate_interleaved(evaluators, heard, parallel=2)
        assert [e.status for e in evaluations] == ["pass", "pass"], [e.reason for e in evaluations]
        assert all("evaluated again alone" in e.log_tail for e in evaluations)
        assert len(list((tmp_path / "cache").rglob("starved-once"))) == 2, "both starved first"
        # the shapes heard of the retried evaluations come last: none shared the machine
        shapes = len(evaluations[1].shapes)
        assert alive["starved_1.py"][-shapes:] == [1] * shapes, alive
    finally:
        CHILD_POOL.close_waiting()


def test_a_group_that_all_ran_out_of_memory_is_retried_in_halves(tmp_path, monkeypatch):
    """Issue 33, item 4, as seen on the H200 (2026-12-03): a hog that starves itself too runs out
    of memory with all of its group, and so again when they are retried together. Every one of
    three revisions starved once: the first half (one) is evaluated again alone, the second half
    (two) together, and all pass."""
    from harness.sandbox.pool import CHILD_POOL

    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    settings = SandboxLimits.from_settings(call_timeout_s=120.0, import_timeout_s=120.0)
    starved = (ADVERSARIAL / "starved_once.py").read_bytes()
    evaluators = [
        Evaluator(
            starved + f"\n# copy {copy}\n".encode(), f"starved_{copy}.py", TASK, device="cpu", limits=settings
        )
        for copy in range(3)
    ]
    try:
        evaluations = evaluate_interleaved(evaluators, parallel=1)
        assert [e.status for e in evaluations] == ["pass"] * 3, [e.reason for e in evaluations]
        assert "evaluated again alone" in evaluations[0].log_tail
        for evaluation in evaluations[1:]:
            assert (
                "evaluated again beside only revisions that had run out of memory too" in evaluation.log_tail
            )
            assert "evaluated again alone" not in evaluation.log_tail
    finally:
        CHILD_POOL.close_waiting()


def test_a_calibration_child_out_of_memory_is_a_shape_result_and_a_fresh_child_follows():
    """Issue 33, item 4, on the H200 (ff0bf71): beside a candidate that held the GPU's memory,
    the harness's calibration child ran out of memory and `harness tournament` ended with exit 2
    ("the harness's calibration child failed"). Such a failure is `CalibrationOutOfMemory` (the
    evaluator makes it the timed revision's shape result, which the retry without its neighbours
    takes up), the starved child is closed, and the next calibration starts a fresh one. Here the
    calibration no-op returns a tensor too large for any host (4 TiB): the CPU's allocator says
    "can't allocate memory", as CUDA's does beside a hog."""
    from harness.sandbox.calibration import CalibrationOutOfMemory, Calibrator

    task = load_task("conv2d_v2")
    shape = task.smoke[0]
    huge = ("torch.float32", (1 << 40,))
    with Calibrator(task, device="cpu", limits=SandboxLimits.from_settings()) as calibrator:
        for _ in range(2):  # the second in a fresh child: the first was closed
            with pytest.raises(CalibrationOutOfMemory, match="can't allocate memory"):
                calibrator.harness_ms(shape, 0, huge)
            assert huge not in calibrator.children
        harness_ms = calibrator.harness_ms(shape, 0)  # the task's own calibration is untouched
        assert 0 < harness_ms < 1000
        assert calibrator.prelude_ms(shape, 0) == 0.0, "no go, so no prelude, on the CPU"


def test_the_oom_killer_takes_a_child_before_the_harness():
    """Every process of a sandboxed child, its forks too, is the kernel OOM killer's first choice
    (oom_score_adj 1000): a machine overfilled by a shape ends a child, recorded as its result,
    never the harness. The candidate answers only where its own score says so."""
    source = b"""
import os
import torch.nn.functional as F

def custom_kernel(data):
    x, w, out = data
    with open("/proc/self/oom_score_adj") as mine:
        adj = mine.read().strip()
    pid = os.fork()  # a helper of its own inherits it
    if pid == 0:
        with open("/proc/self/oom_score_adj") as helper:
            os._exit(0 if helper.read().strip() == "1000" else 1)
    _, status = os.waitpid(pid, 0)
    if adj == "1000" and os.waitstatus_to_exitcode(status) == 0:
        out.copy_(F.conv2d(x, w))
    return out
"""
    evaluator = Evaluator(
        source, "oom_score.py", TASK, device="cpu", limits=SandboxLimits.from_settings(**SMALL)
    )
    evaluation = evaluate_interleaved([evaluator])[0]
    assert evaluation.status == "pass", evaluation.reason
    with open("/proc/self/oom_score_adj") as ours:  # the harness's own stays as it was
        assert ours.read().strip() != "1000"
