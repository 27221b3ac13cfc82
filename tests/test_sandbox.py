"""The sandboxed runner on the CPU, end to end: real children, the Triton interpreter, SQLite.

Each evaluation starts a child that imports torch (seconds), so the candidates are evaluated two
at a time, once per module, and the tests read the results.
"""

from __future__ import annotations

import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from harness.config import sqlite_directory
from harness.environment import Environment, probe_environment
from harness.errors import HarnessError
from harness.sandbox.evaluation import Evaluation, ShapeOutcome, evaluate
from harness.sandbox.isolation import detect_isolation
from harness.sandbox.limits import SandboxLimits
from harness.store.revisions import register_revision
from harness.store.runs import claim_run, find_run, record_run, release_claim
from harness.store.session import open_store
from harness.tasks import load_task
from harness.tasks.spec import load_task_file
from harness.wire import ShapeCheck

TASK = load_task("conv2d_v2")
BAD = Path(__file__).parent / "bad_candidates"
CANDIDATES = Path(__file__).resolve().parent.parent / "candidates"
FULL_ISOLATION = detect_isolation().full

# file -> (status, text the reason must contain, limits)
QUICK = {"call_timeout_s": 60.0, "import_timeout_s": 60.0}
EXPECTED = {
    "wrong_answer.py": ("wrong_answer", "GPU MODE check: fails", QUICK),
    "nan_output.py": ("wrong_answer", "NaN/Inf", QUICK),
    "partial_write.py": ("wrong_answer", "NaN/Inf (unwritten elements stay NaN)", QUICK),
    "modifies_inputs.py": ("wrong_answer", "input 'kernel' was modified", QUICK),
    "raises.py": ("runtime_error", "ValueError: tile size does not divide the output", QUICK),
    "infinite_loop.py": ("timeout", "call on smoke[0] exceeded 2 s", {**QUICK, "call_timeout_s": 2.0}),
    "import_loop.py": ("timeout", "import/compile exceeded 3 s", {**QUICK, "import_timeout_s": 3.0}),
    "aborts.py": ("crashed", "killed by SIGABRT during call on smoke[0]", QUICK),
    "segfaults.py": ("crashed", "killed by SIGSEGV during call on smoke[0]", QUICK),
    "exits_midway.py": ("crashed", "exited with code 0 during call on smoke[0]", QUICK),
    "os_exit.py": ("crashed", "exited with code 3 during call on smoke[0]", QUICK),
    "prints_protocol.py": ("wrong_answer", "GPU MODE check: fails", QUICK),
    "forges_on_pipe.py": ("crashed", "protocol violation during call on smoke[0]", QUICK),
    "syntax_error.py": ("compile_error", "SyntaxError", QUICK),
    "no_entry_point.py": ("compile_error", "defines no function custom_kernel or kernel_function", QUICK),
    "cuda_only.py": ("unsupported", "needs CUDA: this torch was built without it", QUICK),
    "returns_subclass.py": ("wrong_answer", "returned a submission.LazyTensor, not a torch.Tensor", QUICK),
    "returns_input_view.py": ("wrong_answer", "returned tensor shares memory with an input", QUICK),
    "caches_output.py": ("wrong_answer", "smoke[3]", QUICK),
    "autotune_bad_config.py": (
        "wrong_answer",
        "autotune config 1 (copy_kernel: BLOCK=16, SKIP_TAIL=1",
        QUICK,
    ),
    "oob_write.py": ("crashed", "killed by SIGSEGV", QUICK),  # on a GPU: runtime_error (illegal address)
}
if FULL_ISOLATION:
    EXPECTED["probes_sandbox.py"] = ("pass", "", QUICK)


def _evaluate_files(paths: list[Path], limits: dict[str, dict], task=TASK) -> dict[str, Evaluation]:
    def one(path: Path) -> tuple[str, Evaluation]:
        settings = SandboxLimits.from_settings(**limits.get(path.name, {}))
        return path.name, evaluate(path.read_bytes(), path.name, task, device="cpu", limits=settings)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, paths))


@pytest.fixture(scope="module")
def bad_results() -> dict[str, Evaluation]:
    """All the purpose-written bad candidates, evaluated in one go: none stops the others."""
    return _evaluate_files([BAD / name for name in EXPECTED], {name: e[2] for name, e in EXPECTED.items()})


@pytest.mark.parametrize("name", list(EXPECTED))
def test_a_bad_candidate_gets_its_status_and_a_reason_that_says_why(bad_results, name):
    status, reason, _ = EXPECTED[name]
    evaluation = bad_results[name]
    assert (evaluation.status, name) == (status, name), evaluation.reason
    assert reason in evaluation.reason
    if status not in ("pass", "wrong_answer"):
        later = [shape.status for shape in evaluation.shapes[1:]]
        assert set(later) <= {"not_run"}, "the evaluation stops at the first crash, timeout or error"


def test_every_bad_candidate_was_evaluated_to_the_end(bad_results):
    assert set(bad_results) == set(EXPECTED)
    for evaluation in bad_results.values():
        assert evaluation.wall_s > 0 and evaluation.status


def test_a_wrong_answer_is_checked_on_every_shape_with_details(bad_results):
    evaluation = bad_results["wrong_answer.py"]
    assert [shape.status for shape in evaluation.shapes] == ["wrong_answer"] * len(TASK.smoke)
    check = evaluation.shapes[0].check
    assert check.mismatches > 0 and len(check.first_mismatches) == 5
    assert check.rel_l2 > 0.1 and check.max_abs_err > 0.1


def test_an_output_written_in_part_fails_by_exactly_its_unwritten_elements(bad_results):
    p = TASK.smoke[0].parameters
    out_size = p["size"] - p["kernelsize"] + 1
    unwritten = p["batch"] * p["channels"] * (out_size - out_size // 2) * out_size
    check = bad_results["partial_write.py"].shapes[0].check
    assert check.not_finite == check.mismatches == unwritten
    assert check.max_abs_err == 0.0, "the half it wrote is exact"


def test_printed_imitations_of_the_protocol_only_reach_the_log(bad_results):
    evaluation = bad_results["prints_protocol.py"]
    assert '"type": "check_reply"' in evaluation.log_tail and "check: pass" in evaluation.log_tail


def test_the_log_tail_keeps_the_candidates_traceback(bad_results):
    assert "ValueError: tile size does not divide the output" in bad_results["raises.py"].log_tail


def test_a_caching_candidate_passes_until_the_same_shape_comes_back_with_new_values(bad_results):
    statuses = [shape.status for shape in bad_results["caches_output.py"].shapes]
    assert statuses == ["pass", "pass", "pass", "wrong_answer"]


def test_a_wrong_autotune_config_is_named_while_the_right_one_passes(bad_results):
    evaluation = bad_results["autotune_bad_config.py"]
    assert [tuner.name for tuner in evaluation.autotuners] == ["copy_kernel"]
    configs = evaluation.shapes[0].check.configs
    assert [(c.index, c.status) for c in configs] == [(0, "pass"), (1, "wrong_answer")]


@pytest.mark.skipif(not FULL_ISOLATION, reason="needs user, pid and mount namespaces")
def test_the_sandbox_hides_the_store_blocks_writes_network_and_the_parent(bad_results):
    evaluation = bad_results["probes_sandbox.py"]
    assert evaluation.status == "pass", evaluation.reason
    assert "read-only" in evaluation.isolation and "locked" in evaluation.isolation


# --- the seed candidates -------------------------------------------------------------------


def _expected_seed_status(path: Path) -> str:
    """A candidate that builds a CUDA extension cannot run here; every other one must pass."""
    return "unsupported" if "load_inline" in path.read_text() else "pass"


SEED_FILES = sorted(CANDIDATES.glob("*.py"))


@pytest.fixture(scope="module")
def seed_results() -> dict[str, Evaluation]:
    return _evaluate_files(SEED_FILES, {})


@pytest.mark.skipif(not SEED_FILES, reason="no candidates/ yet")
@pytest.mark.parametrize("path", SEED_FILES, ids=lambda path: path.name)
def test_seed_candidates_pass_the_smoke_shapes_under_the_interpreter(seed_results, path: Path):
    evaluation = seed_results[path.name]
    assert evaluation.status == _expected_seed_status(path), evaluation.reason
    if evaluation.status == "pass":
        assert all(shape.passed for shape in evaluation.shapes)
        assert all(shape.check.rel_l2 < 1e-5 for shape in evaluation.shapes)
        for tuner in evaluation.autotuners:  # every config of every autotuner was checked
            assert len(evaluation.shapes[0].check.configs) >= len(tuner.configs)


# --- modes, tasks, arguments ---------------------------------------------------------------


def test_leaderboard_mode_uses_secret_seeds_and_stores_only_the_public_ones():
    reference = (CANDIDATES / "conv2d_v2_reference.py").read_bytes()
    evaluation = evaluate(reference, "ref.py", TASK, device="cpu", mode="leaderboard", secret_seed=2**31 + 7)
    assert evaluation.status == "pass", evaluation.reason
    assert [shape.shape["seed"] for shape in evaluation.shapes] == [shape.seed for shape in TASK.smoke]
    public = evaluate(reference, "ref.py", TASK, device="cpu")
    assert public.shapes[0].check.max_abs_err == 0.0
    # a checked output that fits comes back in the shared output buffer (the memfd), not a file
    assert all(shape.check.output.shared for shape in (*public.shapes, *evaluation.shapes))
    assert evaluation.shapes[0].check.rel_l2 != public.shapes[0].check.rel_l2, "other inputs"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"device": "tpu"}, "unknown device"),
        ({"device": "cpu", "mode": "ranked"}, "unknown mode"),
        ({"device": "cpu", "mode": "leaderboard"}, "needs the secret seed"),
        ({"device": "cpu", "shape_set": "huge"}, "unknown shape set"),
    ],
)
def test_bad_arguments_are_harness_errors_before_any_child_starts(arguments, message):
    with pytest.raises(HarnessError, match=message):
        evaluate(b"", "x.py", TASK, **arguments)


VECADD_YML = """
name: vecadd
description: out = a + b
reference: vecadd_reference
task_shim: vecadd_task.py
data: [a, b, out]
output_buffer: out
rtol: 1.0e-5
atol: 1.0e-5
tests: [{"size": 1024, "seed": 1}]
benchmarks: [{"size": 1048576, "seed": 2}]
smoke: [{"size": 100, "seed": 3}, {"size": 77, "seed": 4}]
"""
VECADD_REFERENCE = """
import torch

def generate_input(size, seed, device="cuda"):
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    a = torch.randn(size, device=device, generator=gen)
    b = torch.randn(size, device=device, generator=gen)
    return a, b, torch.empty(size, device=device)

def ref_kernel(data):
    a, b, _ = data
    return a + b
"""
VECADD_SHIM = "input_t = output_t = object\n"


def test_a_second_task_is_a_yaml_file_and_a_reference_module(tmp_path: Path):
    (tmp_path / "vecadd.yml").write_text(VECADD_YML)
    (tmp_path / "vecadd_reference.py").write_text(VECADD_REFERENCE)
    (tmp_path / "vecadd_task.py").write_text(VECADD_SHIM)
    task = load_task_file(tmp_path / "vecadd.yml")
    right = tmp_path / "right.py"
    right.write_text(
        "from task import input_t\ndef custom_kernel(data):\n    a, b, out = data\n    return out.copy_(a + b)\n"
    )
    wrong = tmp_path / "wrong.py"
    wrong.write_text("def custom_kernel(data):\n    a, b, out = data\n    return out.copy_(a - b)\n")
    results = _evaluate_files([right, wrong], {}, task=task)
    assert results["right.py"].status == "pass", results["right.py"].reason
    assert [shape.shape for shape in results["right.py"].shapes] == [
        {"size": 100, "seed": 3},
        {"size": 77, "seed": 4},
    ]
    assert results["wrong.py"].status == "wrong_answer"


# --- environment and the store's runs ------------------------------------------------------


def test_probe_environment_keys_the_facts_of_this_machine():
    environment = probe_environment("cpu")
    assert environment.device == "cpu" and environment.device_name and environment.torch
    assert len(environment.env_key) == 64
    assert probe_environment("cpu").env_key == environment.env_key
    assert Environment(**environment.model_dump()).env_key == environment.env_key
    newer = Environment(**{**environment.model_dump(), "triton": "99.0"})
    assert newer.env_key != environment.env_key, "a new library version is a new environment"


def _evaluation(status: str = "pass") -> Evaluation:
    shapes = [
        ShapeOutcome(
            set_name="smoke",
            index=i,
            shape={**s.parameters, "seed": s.seed},
            status=status,
            passed=status == "pass",
            check=ShapeCheck(max_abs_err=0.0),
        )
        for i, s in enumerate(TASK.smoke)
    ]
    return Evaluation(
        status=status,
        task="conv2d_v2",
        filename="x.py",
        code_sha256="0" * 64,
        device="cpu",
        mode="test",
        shape_set="smoke",
        wall_s=1.0,
        shapes=shapes,
        log_tail="tail",
    )


@pytest.fixture
def store_with_revision(store_url: str):
    store = open_store(store_url)
    with store.session() as session:
        revision_id = register_revision(
            session, b"def custom_kernel(data):\n    return data[2]\n", "k.py"
        ).revision.id
    yield store, revision_id
    store.close()


def test_a_run_is_claimed_then_written_whole(store_with_revision):
    store, revision_id = store_with_revision
    environment = probe_environment("cpu")
    with store.session() as session:
        run = claim_run(session, revision_id, "conv2d_v2", "test", environment, worker="w1", ttl_s=60)
        run_id = run.id
    with store.session() as session:
        assert find_run(session, revision_id, "conv2d_v2", "test", environment.env_key) is None, (
            "claimed is no result"
        )
        assert (
            claim_run(session, revision_id, "conv2d_v2", "test", environment, worker="w2", ttl_s=60) is None
        )
    with store.session() as session:
        assert record_run(session, run_id, "w2", _evaluation()) is None, "not w2's claim"
        record_run(session, run_id, "w1", _evaluation("wrong_answer"))
    with store.session() as session:
        found = find_run(session, revision_id, "conv2d_v2", "test", environment.env_key)
        assert found.state == "done" and found.status == "wrong_answer" and found.claim_expires_at is None
        assert [shape.index for shape in found.shapes] == list(range(len(TASK.smoke)))
        assert found.shapes[0].status == "wrong_answer" and found.details["log_tail"] == "tail"
        assert (
            claim_run(session, revision_id, "conv2d_v2", "test", environment, worker="w3", ttl_s=60) is None
        )


def test_a_stale_claim_is_replaced_and_a_done_run_only_when_asked(store_with_revision):
    store, revision_id = store_with_revision
    environment = probe_environment("cpu")
    with store.session() as session:
        stale = claim_run(session, revision_id, "conv2d_v2", "test", environment, worker="dead", ttl_s=-1)
        stale_id = stale.id
    with store.session() as session:
        taken = claim_run(session, revision_id, "conv2d_v2", "test", environment, worker="alive", ttl_s=60)
        assert taken is not None and taken.id == stale_id and taken.claimed_by == "alive"
    with store.session() as session:
        assert record_run(session, stale_id, "dead", _evaluation()) is None, (
            "the dead worker's result is dropped"
        )
        record_run(session, stale_id, "alive", _evaluation())
    with store.session() as session:
        shapes = len(find_run(session, revision_id, "conv2d_v2", "test", environment.env_key).shapes)
        again = claim_run(
            session, revision_id, "conv2d_v2", "test", environment, worker="x", ttl_s=60, replace_done=True
        )
        assert again.state == "done" and len(again.shapes) == shapes > 0, "the result stays until replaced"
        release_claim(session, again.id, "x")
    with store.session() as session:
        kept = find_run(session, revision_id, "conv2d_v2", "test", environment.env_key)
        assert kept.claimed_by == "x" and kept.claim_expires_at is None and len(kept.shapes) == shapes
        assert record_run(session, kept.id, "x", _evaluation()) is None, "a released claim records nothing"


def test_sqlite_directory_finds_the_store_to_hide():
    assert sqlite_directory("sqlite:////srv/db/store.sqlite") == "/srv/db"
    assert sqlite_directory("postgresql://host/db") is None
    assert sqlite_directory("sqlite://") is None


# --- the command ---------------------------------------------------------------------------


def _register(run_cli, path: Path, lineage: str) -> int:
    done = run_cli("register", path, "--lineage", lineage)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split("submission ", 1)[1].split(":", 1)[0])


def test_harness_test_checks_several_revisions_and_stores_one_run_each(run_cli, store_url, tmp_path):
    ids = [
        _register(run_cli, CANDIDATES / "conv2d_v2_reference.py", "reference"),
        _register(run_cli, BAD / "raises.py", "raises"),
        _register(run_cli, BAD / "segfaults.py", "segfaults"),
        _register(run_cli, BAD / "infinite_loop.py", "loops"),
    ]
    done = run_cli("test", *ids, "--device", "cpu", "--call-timeout", "2", timeout=600)
    assert done.returncode == 1, done.stderr  # some revisions failed
    assert "device: cpu" in done.stdout
    for status in ("pass", "runtime_error", "crashed", "timeout"):
        assert status in done.stdout
    path = store_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as connection:
        rows = connection.execute(
            "SELECT revision_id, mode, state, status FROM runs ORDER BY revision_id"
        ).fetchall()
    assert rows == [
        (ids[0], "test", "done", "pass"),
        (ids[1], "test", "done", "runtime_error"),
        (ids[2], "test", "done", "crashed"),
        (ids[3], "test", "done", "timeout"),
    ]
    again = run_cli("test", ids[0], ids[1], "--device", "cpu")
    assert again.returncode == 1 and "2 of 2 stored from an earlier check" in again.stdout


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["99999"], "error: there is no submission 99999"),
        (["{id}", "--device", "tpu"], "error: unknown device 'tpu'"),
        (["{id}", "--mode", "ranked", "--device", "cpu"], "error: unknown mode 'ranked'"),
    ],
)
def test_harness_test_rejects_bad_input_with_one_line_and_writes_nothing(
    run_cli, store_url, dump_store, arguments, message
):
    revision_id = _register(run_cli, BAD / "raises.py", "raises")
    before = dump_store(store_url)
    done = run_cli("test", *[argument.format(id=revision_id) for argument in arguments])
    assert done.returncode == 2
    assert done.stderr.strip() == message or done.stderr.strip().startswith(message)
    assert len(done.stderr.strip().splitlines()) == 1
    assert dump_store(store_url) == before
