"""The harness's own overhead: a group's children start together (each with its own deadlines)
and stop together, the kernel caches are kept per code hash, and a GPU's name can be read back
without initializing CUDA. Real children on the CPU; no part of the harness is replaced."""

from __future__ import annotations

import hashlib
import json
import signal
import threading
import time
from pathlib import Path

import pytest

from harness import environment
from harness.sandbox.evaluation import Evaluator, evaluate_interleaved
from harness.sandbox.limits import SandboxLimits
from harness.sandbox.supervisor import ChildProcess
from harness.tasks import load_task

TASK = load_task("conv2d_v2")
ROOT = Path(__file__).resolve().parent.parent
BAD = ROOT / "tests" / "bad_candidates"
REFERENCE = ROOT / "candidates" / "conv2d_v2_reference.py"


def _evaluator(path: Path, **limits: float) -> Evaluator:
    settings = SandboxLimits.from_settings(**{"call_timeout_s": 60.0, "import_timeout_s": 60.0, **limits})
    return Evaluator(path.read_bytes(), path.name, TASK, device="cpu", limits=settings)


@pytest.mark.parametrize("parallel", [1, 3], ids=["interleaved", "side_by_side"])
def test_a_group_starts_together_and_each_child_keeps_its_status_deadlines_and_place(parallel):
    """Interleaved (`parallel=1`) in groups of four, or three at a time side by side: each child
    keeps its status, its own deadlines and its place in the answer."""
    files = [
        (REFERENCE, {}),
        (BAD / "syntax_error.py", {}),
        (BAD / "import_loop.py", {"import_timeout_s": 3.0}),
        (BAD / "segfaults.py", {}),
        (BAD / "no_entry_point.py", {}),
        (BAD / "wrong_answer.py", {}),
    ]
    evaluators = [_evaluator(path, **limits) for path, limits in files]
    evaluations = evaluate_interleaved(evaluators, group_size=4, parallel=parallel)

    assert [e.filename for e in evaluations] == [path.name for path, _ in files]
    statuses = {e.filename: (e.status, e.reason) for e in evaluations}
    assert statuses["conv2d_v2_reference.py"] == ("pass", "")
    assert (
        statuses["syntax_error.py"][0] == "compile_error" and "SyntaxError" in statuses["syntax_error.py"][1]
    )
    # the import deadline runs from this child's own `Started`, not from the group's
    assert statuses["import_loop.py"] == ("timeout", "import/compile exceeded 3 s")
    assert statuses["segfaults.py"][0] == "crashed" and "SIGSEGV" in statuses["segfaults.py"][1]
    assert statuses["no_entry_point.py"][0] == "compile_error"
    assert statuses["wrong_answer.py"][0] == "wrong_answer"
    passed = evaluations[0]
    assert passed.startup_s is not None and passed.startup_s > 0 and passed.compile_s is not None
    assert all(s.status == "pass" for s in passed.shapes)

    for evaluator in evaluators:
        assert evaluator.child.proc is not None and evaluator.child.proc.poll() is not None
        assert not evaluator.child.workdir.exists() and not evaluator.child.io_dir.exists()
    if parallel > 1:
        return
    # groups of four: every child of a group was spawned before any of them had imported torch
    for group in (evaluators[:4], evaluators[4:]):
        spawned = [e.child.started for e in group]
        torch_imported = [e.child.started + e.child.startup_s for e in group if e.child.startup_s is not None]
        assert max(spawned) < min(torch_imported)
    # the second group started only after the first had stopped
    assert min(e.child.started for e in evaluators[4:]) > max(e.child.started for e in evaluators[:4])
    for evaluator in evaluators:
        assert evaluator.child.proc is not None and evaluator.child.proc.poll() is not None
        assert not evaluator.child.workdir.exists() and not evaluator.child.io_dir.exists()


@pytest.mark.parametrize("parallel", [1, 2], ids=["interleaved", "side_by_side"])
def test_a_start_interrupted_by_ctrl_c_ends_every_child_and_raises(parallel):
    evaluators = [_evaluator(REFERENCE), _evaluator(BAD / "import_loop.py")]
    main = threading.main_thread().ident
    timer = threading.Timer(1.5, lambda: signal.pthread_kill(main, signal.SIGINT))
    timer.start()
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            evaluate_interleaved(evaluators, parallel=parallel)
    finally:
        timer.cancel()
    assert time.monotonic() - started < 30, "the import_loop child's 60 s deadline was not waited out"
    for evaluator in evaluators:
        assert evaluator.child.proc is None or evaluator.child.proc.poll() is not None
    left = [thread for thread in threading.enumerate() if thread.name.startswith(("start-", "check-"))]
    for thread in left:  # one may be past its last line, not yet gone from the list
        thread.join(timeout=5)
    assert not [thread for thread in left if thread.is_alive()]


def test_kernel_caches_are_kept_per_code_hash(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    code = b"def custom_kernel(data):\n    return data[2]\n"
    digest = hashlib.sha256(code).hexdigest()
    limits = SandboxLimits.from_settings()
    with ChildProcess(code, TASK, device="cpu", limits=limits, code_sha256=digest) as child:
        env = child.environment()
    for variable, kind in (
        ("TRITON_CACHE_DIR", "triton"),
        ("TORCH_EXTENSIONS_DIR", "torch_extensions"),
        ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
    ):
        assert env[variable] == str(tmp_path / "cache" / kind / digest)
        assert Path(env[variable]).is_dir(), "kept after the child's own directory is gone"
    assert "TRITON_CACHE_AUTOTUNING" not in env, "each evaluation tunes afresh unless asked"


def test_autotuning_results_are_kept_only_when_asked(tmp_path, monkeypatch):
    from harness.errors import HarnessError

    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HARNESS_CACHE_AUTOTUNING", "1")
    limits = SandboxLimits.from_settings()
    assert limits.cache_autotuning
    code = b"def custom_kernel(data):\n    return data[2]\n"
    digest = hashlib.sha256(code).hexdigest()
    with ChildProcess(code, TASK, device="cpu", limits=limits, code_sha256=digest) as child:
        assert child.environment()["TRITON_CACHE_AUTOTUNING"] == "1"
    monkeypatch.setenv("HARNESS_CACHE_AUTOTUNING", "yes")
    with pytest.raises(HarnessError, match="HARNESS_CACHE_AUTOTUNING"):
        SandboxLimits.from_settings()


@pytest.fixture
def fake_driver(tmp_path, monkeypatch):
    """A driver's /proc files as the NVIDIA kernel module writes them, and a fresh cache dir."""
    proc = tmp_path / "proc"
    gpu = proc / "gpus" / "0000:18:00.0"
    gpu.mkdir(parents=True)
    (gpu / "information").write_text(
        "Model: \t\t NVIDIA H200\nGPU UUID: \t GPU-0b1c\nBus Location: \t 0000:18:00.0\nDevice Minor: \t 0\n"
    )
    (proc / "version").write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.124.06\n")
    (proc / "boot_id").write_text("5f1e\n")
    monkeypatch.setattr(environment, "NVIDIA_GPUS_DIR", proc / "gpus")
    monkeypatch.setattr(environment, "NVIDIA_DRIVER_VERSION_FILE", proc / "version")
    monkeypatch.setattr(environment, "NVIDIA_CAPABILITIES_DIR", proc / "capabilities")
    monkeypatch.setattr(environment, "BOOT_ID_FILE", proc / "boot_id")
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(environment, "_names_from_cache", {})
    return gpu / "information"


def test_the_gpu_fingerprint_changes_with_whatever_decides_device_0(fake_driver, monkeypatch):
    first = environment.gpu_fingerprint("2.11.0")
    assert first is not None and first == environment.gpu_fingerprint("2.11.0")
    assert environment.gpu_fingerprint("2.12.0") != first
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert environment.gpu_fingerprint("2.11.0") != first
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    fake_driver.write_text(fake_driver.read_text().replace("H200", "H100 80GB HBM3"))
    assert environment.gpu_fingerprint("2.11.0") not in (None, first)
    fake_driver.unlink()
    assert environment.gpu_fingerprint("2.11.0") is None, "unreadable: ask torch every time"


def test_a_kept_gpu_name_is_served_without_cuda_only_for_its_fingerprint(fake_driver, tmp_path):
    fingerprint = environment.gpu_fingerprint("2.11.0")
    cache = tmp_path / "cache" / environment.DEVICE_NAME_CACHE
    cache.parent.mkdir(parents=True)
    cache.write_text(json.dumps({fingerprint: "NVIDIA H200"}))
    # no GPU here: torch.cuda.get_device_name() would raise, so this name came from the kept copy
    assert environment.cuda_device_name("2.11.0") == "NVIDIA H200"
    assert environment._names_from_cache == {fingerprint: "NVIDIA H200"}
    import torch

    if not torch.cuda.is_available():
        with pytest.raises((RuntimeError, AssertionError)):
            environment.cuda_device_name("2.12.0")  # another fingerprint: torch is asked


def test_on_a_gpu_a_kept_name_that_is_not_torchs_is_refused_and_dropped(tmp_path, monkeypatch):
    import torch

    from harness.errors import HarnessError

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    fingerprint = environment.gpu_fingerprint(torch.__version__)
    if fingerprint is None:
        pytest.skip("the driver's /proc files are not readable here")
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(environment, "_names_from_cache", {})
    real = environment.probe_environment("cuda")  # asks torch, keeps the name
    assert real.device_name == torch.cuda.get_device_name()
    cache = tmp_path / "cache" / environment.DEVICE_NAME_CACHE
    assert json.loads(cache.read_text()) == {fingerprint: real.device_name}
    again = environment.probe_environment("cuda")  # served from the kept copy
    assert again.env_key == real.env_key
    environment.confirm_device_name()  # agrees with torch
    cache.write_text(json.dumps({fingerprint: "NVIDIA Imaginary"}))
    monkeypatch.setattr(environment, "_names_from_cache", {})
    assert environment.probe_environment("cuda").device_name == "NVIDIA Imaginary"
    with pytest.raises(HarnessError, match="NVIDIA Imaginary"):
        environment.confirm_device_name()
    assert fingerprint not in json.loads(cache.read_text())


def test_the_environment_key_needs_no_triton_import_and_is_unchanged():
    import subprocess
    import sys

    import triton

    code = (
        "import sys; from harness.environment import probe_environment; e = probe_environment('cpu'); "
        "print(e.triton, e.env_key, 'triton' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    version, key, imported = done.stdout.split()
    assert version == triton.__version__ and imported == "False"
    assert key == environment.probe_environment("cpu").env_key  # here triton is imported


def test_a_passing_child_is_kept_for_the_next_phase_adopted_once_and_then_stopped():
    from harness.sandbox.pool import CHILD_POOL
    from harness.timing import StoppingRule

    settings = SandboxLimits.from_settings(call_timeout_s=60.0, import_timeout_s=60.0)
    files = (REFERENCE, BAD / "wrong_answer.py")

    def make(path: Path, **options) -> Evaluator:
        return Evaluator(path.read_bytes(), path.name, TASK, device="cpu", limits=settings, **options)

    checked = [make(path, keep_child=True) for path in files]
    first = evaluate_interleaved(checked)
    assert [e.status for e in first] == ["pass", "wrong_answer"]
    kept = checked[0].child
    assert kept.serving and list(CHILD_POOL.kept.values()) == [kept]
    assert checked[1].child.proc.poll() is not None, "a failing candidate's child is not kept"

    rule = StoppingRule(min_runs=2, max_runs=3, budget_s=0.2)
    timed = [make(path, timed=True, rule=rule) for path in files]
    assert timed[0].adopted and timed[0].child is kept and not timed[1].adopted
    assert not CHILD_POOL.kept
    second = evaluate_interleaved(timed)
    reused = second[0]
    assert (
        reused.status == "pass"
        and reused.child_reused
        and reused.startup_s == 0.0
        and reused.compile_s == 0.0
    )
    assert all(s.runs and s.mean_ms > 0 for s in reused.shapes)
    assert second[1].status == "wrong_answer" and not second[1].child_reused and second[1].startup_s > 0
    assert kept.proc.poll() is not None, "not asked to keep it again: stopped at the end"
    assert not kept.workdir.exists() and not CHILD_POOL.kept


def test_kept_children_that_no_job_adopts_are_stopped_when_the_next_job_starts():
    from harness.executors import EvaluationRequest, Job, run_job
    from harness.sandbox.pool import CHILD_POOL

    settings = SandboxLimits.from_settings(call_timeout_s=60.0, import_timeout_s=60.0)
    request = EvaluationRequest.make(
        1, REFERENCE.read_bytes(), REFERENCE.name, "conv2d_v2", device="cpu", limits=settings, keep_child=True
    )
    [checked] = run_job(Job(device="cpu", env_key="k", requests=[request]))
    assert checked.status == "pass"
    [kept] = CHILD_POOL.kept.values()
    other = EvaluationRequest.make(
        2,
        (BAD / "wrong_answer.py").read_bytes(),
        "wrong_answer.py",
        "conv2d_v2",
        device="cpu",
        limits=settings,
    )
    [result] = run_job(Job(device="cpu", env_key="k", requests=[other]))
    assert result.status == "wrong_answer" and not result.child_reused
    assert kept.proc.poll() is not None and not CHILD_POOL.kept


def test_an_isolation_probe_started_early_gives_the_same_level_and_leaves_nothing_at_exit(tmp_path):
    import subprocess
    import sys

    from harness.sandbox.isolation import detect_isolation

    env = {**__import__("os").environ, "TMPDIR": str(tmp_path)}
    script = "from harness.sandbox import isolation as s\ns.start_isolation_probe('cpu')\n"
    waited = subprocess.run(
        [sys.executable, "-c", script + "print(s.detect_isolation('cpu').name)"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    assert waited.stdout.strip() == detect_isolation("cpu").name
    # a command that exits while its probe still runs (nothing to evaluate, an error)
    subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        timeout=120,
        check=True,
    )
    assert not list(tmp_path.glob("harness-probe-*")), "the probe's scratch directory is removed"


KEPT_ISOLATION = """
import json, sys
from harness.errors import HarnessError
from harness.sandbox import supervisor as s
from harness.sandbox.isolation import detect_isolation, level_was_kept
from harness.sandbox.limits import SandboxLimits
from harness.tasks import load_task
level = detect_isolation("cpu")
print(level.name, "kept" if level_was_kept("cpu") else "probed")
if sys.argv[1:] in (["fail"], ["slow"]):
    limits = SandboxLimits.from_settings(startup_timeout_s=0.001 if sys.argv[1] == "slow" else 120.0)
    child = s.ChildProcess(b"def custom_kernel(d):\\n    return d[2]\\n", load_task("conv2d_v2"), device="cpu",
                           limits=limits, code_sha256="0" * 64)
    try:
        child.spawn()
        if sys.argv[1] == "fail":
            child.kill_group()  # it dies before its first message
        child.wait_ready()
    except HarnessError as exc:
        print("error:", exc)
    except s.ChildFailure as failure:
        print("slow:", failure.reason)
    finally:
        child.close()
"""


def test_the_isolation_level_is_kept_on_disk_and_dropped_when_a_child_then_dies_at_start(tmp_path):
    import subprocess
    import sys

    from harness.sandbox.isolation import ISOLATION_CACHE, detect_isolation

    env = {**__import__("os").environ, "HARNESS_CACHE_DIR": str(tmp_path / "cache")}

    def run(*args: str) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-c", KEPT_ISOLATION, *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=True,
        )
        return done.stdout.strip().splitlines()

    name = detect_isolation("cpu").name
    assert run() == [f"{name} probed"]
    kept = json.loads((tmp_path / "cache" / ISOLATION_CACHE).read_text())
    assert list(kept.values()) == [name]
    assert run() == [f"{name} kept"], "the next command reads the level instead of probing"
    # a child slow to start (held back by the load beside it) is its own failure: the level stays
    slow = run("slow")
    assert slow[0] == f"{name} kept" and slow[1].startswith("slow: "), slow
    assert list(json.loads((tmp_path / "cache" / ISOLATION_CACHE).read_text()).values()) == [name]
    lines = run("fail")
    assert lines[0] == f"{name} kept"
    assert lines[1].startswith(
        f"error: a sandboxed child did not start under the kept isolation level {name}"
    )
    assert lines[1].endswith("the kept level is dropped: run the command again")
    assert json.loads((tmp_path / "cache" / ISOLATION_CACHE).read_text()) == {}
    assert run() == [f"{name} probed"]


EARLY_CHILD = """
import sys
from pathlib import Path
from harness.sandbox.limits import SandboxLimits
from harness.sandbox.pool import CHILD_POOL
from harness.tasks import load_task

code = Path(sys.argv[1]).read_bytes()
task = load_task("conv2d_v2")
limits = SandboxLimits.from_settings(call_timeout_s=60.0, import_timeout_s=60.0)
CHILD_POOL.start_early([(code, task, "cpu", limits)])
print("torch imported before the spawn:", "torch" in sys.modules)
[early] = CHILD_POOL.early.values()
from harness.sandbox.evaluation import Evaluator, evaluate_interleaved
evaluator = Evaluator(code, "reference.py", task, device="cpu", limits=limits)
print("taken:", evaluator.spawned_early and evaluator.child is early and not CHILD_POOL.early)
[evaluation] = evaluate_interleaved([evaluator])
print("status:", evaluation.status, "startup_s > 0:", evaluation.startup_s > 0)
CHILD_POOL.start_early([(code, task, "cpu", limits)])
CHILD_POOL.close_waiting()
print("left:", len(CHILD_POOL.early))
"""


def test_children_spawned_before_torch_is_imported_are_taken_by_their_evaluations():
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", EARLY_CHILD, str(REFERENCE)],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    assert done.stdout.splitlines() == [
        "torch imported before the spawn: False",
        "taken: True",
        "status: pass startup_s > 0: True",
        "left: 0",
    ], done.stderr[-2000:]


def test_torch_versions_are_read_without_importing_torch_and_are_torchs():
    import subprocess
    import sys

    script = (
        "import sys\nfrom harness.environment import torch_versions\nread = torch_versions()\n"
        "print('torch' in sys.modules)\nimport torch\nprint(read == (str(torch.__version__), torch.version.cuda or ''))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split() == ["False", "True"]


MARKS_ITS_TUNER = b'''"""A torch conv2d that marks its (never launched) Triton autotuner's choices and prints how many
it remembers at each call."""
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"B": 16}), triton.Config({"B": 32})], key=["n"])
@triton.jit
def tuned(x, n, B: tl.constexpr):
    pass


def custom_kernel(data):
    input_tensor, kernel, output = data
    print("remembered", len(tuned.cache), flush=True)
    tuned.cache[("marked",)] = tuned.configs[0]
    output.copy_(F.conv2d(input_tensor, kernel))
    return output
'''


def test_a_kept_childs_autotuners_forget_their_choices_before_the_next_phase():
    from harness.sandbox.pool import CHILD_POOL
    from harness.timing import StoppingRule

    settings = SandboxLimits.from_settings(call_timeout_s=60.0, import_timeout_s=60.0)
    checked = Evaluator(MARKS_ITS_TUNER, "marks.py", TASK, device="cpu", limits=settings, keep_child=True)
    [first] = evaluate_interleaved([checked])
    assert first.status == "pass", first.reason
    remembered = [line for line in first.log_tail.splitlines() if line.startswith("remembered")]
    assert remembered[0] == "remembered 0" and remembered[-1] == "remembered 1", (
        "the mark stays within a phase"
    )
    kept = checked.child
    timed = Evaluator(
        MARKS_ITS_TUNER,
        "marks.py",
        TASK,
        device="cpu",
        limits=settings,
        timed=True,
        rule=StoppingRule(min_runs=2, max_runs=2, budget_s=0.1),
    )
    assert timed.adopted and timed.child is kept
    [second] = evaluate_interleaved([timed])
    assert second.status == "pass" and second.child_reused
    remembered = [line for line in second.log_tail.splitlines() if line.startswith("remembered")]
    assert remembered[0] == "remembered 0", "forgotten before the kept child's first call of this phase"
    assert remembered[1:] and set(remembered[1:]) == {"remembered 1"}
    assert not CHILD_POOL.kept


def test_a_cpu_only_torch_decides_the_device_without_being_imported():
    import subprocess
    import sys

    import torch

    if torch.version.cuda is not None or torch.version.hip is not None:
        pytest.skip("this torch is built for a GPU")
    script = (
        "import sys\nfrom harness.errors import HarnessError\nfrom harness.devices import resolve_device\n"
        "print(resolve_device(None))\ntry:\n    resolve_device('cuda')\nexcept HarnessError as exc:\n    print(exc)\n"
        "print('torch' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.splitlines() == [
        "cpu",
        "--device cuda, but torch sees no CUDA GPU here (a CPU-only build of torch)",
        "False",
    ]


def test_timed_calls_seeds_are_new_to_each_block_and_secret_per_group():
    from harness.sandbox.timed_cases import TimedCases

    source, other = TimedCases("cpu"), TimedCases("cpu")
    seeds = {
        source.seed(shape, block, index) for shape in ("a", "b") for block in range(3) for index in range(50)
    }
    assert len(seeds) == 2 * 3 * 50, "every (shape, block, call) has a seed of its own"
    assert all(0 <= seed < 2**63 for seed in seeds)
    assert source.seed("a", 0, 0) == source.seed("a", 0, 0)
    assert not seeds & {other.seed("a", block, index) for block in range(3) for index in range(50)}


def test_the_timed_calls_of_a_group_share_their_inputs_and_references(monkeypatch):
    """Two revisions timed together, each shape in two blocks: each timed call's inputs and
    reference are made once for both (the second revision's calls of a block reuse the first's),
    also when their warm-ups take different numbers of calls (a warm-up of 20 ms: many of the
    reference's sub-millisecond calls, a few of a copy that sleeps 5 ms a call), every output is
    still checked, and a case past the budget is made for its caller alone."""
    from harness import checking
    from harness.sandbox import evaluation
    from harness.sandbox.timed_cases import TimedCases
    from harness.timing import StoppingRule

    monkeypatch.setitem(evaluation.WARMUP, "cpu", (1, 0.02))
    settings = SandboxLimits.from_settings(call_timeout_s=60.0, import_timeout_s=60.0)
    rule = StoppingRule(min_runs=4, max_runs=4, budget_s=5.0)
    reference = REFERENCE.read_bytes()
    slow = reference.replace(
        b"    input_tensor, kernel, output = data\n",
        b"    __import__('time').sleep(0.005)\n    input_tensor, kernel, output = data\n",
    )
    assert slow != reference, "the copy sleeps in every call"
    timed = [
        Evaluator(code, f"copy{i}.py", TASK, device="cpu", limits=settings, timed=True, rule=rule)
        for i, code in enumerate((reference, slow))
    ]
    evaluations = evaluate_interleaved(timed)
    assert [e.status for e in evaluations] == ["pass", "pass"]
    source = timed[0].timed_cases
    assert source is not None and timed[1].timed_cases is source
    # two blocks of two calls per shape each (more where the parent's clock asked for a
    # confirmation, a loaded host): the second revision's calls of the first two blocks reuse
    # the first's cases, and nothing else does
    shapes = len(evaluations[0].shapes)
    assert all(blocks >= 2 for blocks in timed[0]._timed_blocks.values())
    assert source.shared >= 2 * 2 * shapes
    assert source.made >= 2 * 2 * shapes and source.made + source.shared >= 2 * 4 * shapes
    assert not source.cases, "forgotten once the group is past the shape"

    shape = TASK.shapes("smoke")[0]

    def make():
        return checking.make_reference_case(timed[0].reference, shape, 7, "cpu", exact_now=False)

    tight = TimedCases("cpu", budget_bytes=0)
    first, kept = tight.case(shape.key(), 7, make)
    second, kept_again = tight.case(shape.key(), 7, make)
    assert not kept and not kept_again and first is not second and tight.made == 2
