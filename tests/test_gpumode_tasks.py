"""GPU MODE problem directories as tasks (issue 18), through the `harness` command line: add,
list, show, re-add, a changed file, every kind of bad directory, a tournament and a leaderboard
per task on the CPU, a task whose inputs are made on CUDA only.

The problems in tests/data/gpumode_problems/ were written for these tests in GPU MODE's format
(task.yml, reference.py with generate_input/ref_kernel/check_implementation, task.py, a shared
../utils.py), each with a correct and a wrong submission in solutions/."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from conftest import rows

PROBLEMS = Path(__file__).parent / "data" / "gpumode_problems"
CUDA_ONLY = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def ok(result) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def some_failed(result) -> str:
    """A tournament with a failing revision: exit code 1 (README, "Exit codes")."""
    assert result.returncode == 1, result.stderr
    return result.stdout


def copy_problem(tmp_path: Path, name: str) -> Path:
    """A copy of a test problem with the set's utils.py one folder up, as GPU MODE keeps it."""
    problems = tmp_path / "problems"
    problems.mkdir(exist_ok=True)
    shutil.copy(PROBLEMS / "utils.py", problems / "utils.py")
    return Path(shutil.copytree(PROBLEMS / name, problems / name))


def test_add_list_show_and_the_same_files_again(harness, store_url, dump_store):
    out = ok(harness("task", "add", PROBLEMS / "vectoradd_py"))
    assert out.startswith("added task vectoradd version 1 (reference.py, task.py, task.yml, utils.py; files ")
    assert "registered submission 1: vectoradd_reference r1" in out
    before = dump_store(store_url)
    again = ok(harness("task", "add", PROBLEMS / "vectoradd_py"))
    assert again.strip() == "unchanged: these files are already task vectoradd version 1"
    assert dump_store(store_url) == before

    listed = ok(harness("task", "list")).splitlines()
    assert listed[0].startswith("conv2d_v2  built in  verdicts: gpumode, accurate  CPU and CUDA")
    assert listed[1].startswith("vectoradd  version 1 of ")
    assert listed[1].endswith("verdicts: gpumode  CPU and CUDA")

    shown = ok(harness("task", "show", "vectoradd"))
    assert "shapes: 2 tests, 2 benchmarks, 2 smoke (CPU)" in shown
    assert "data: as generate_input returns it; output buffer data[2] (found by running" in shown
    assert "no exact answer, so no accurate verdict" in shown
    assert "v1  files " in shown and "runs: 0" in shown
    builtin = ok(harness("task", "show", "conv2d_v2"))
    assert builtin.startswith("task conv2d_v2: built in")
    assert "accurate (exact answer: ref_kernel in float64); ranked by accurate" in builtin

    # the files are blobs, content-addressed like candidate code
    stored = rows(store_url, "SELECT f.name, b.content FROM task_files f JOIN blobs b ON b.sha256 = f.sha256")
    assert dict(stored)["reference.py"] == (PROBLEMS / "vectoradd_py" / "reference.py").read_bytes()
    assert dict(stored)["utils.py"] == (PROBLEMS / "utils.py").read_bytes()


def test_a_changed_file_is_a_new_version_and_old_results_stay_with_the_old_one(harness, store_url, tmp_path):
    problem = copy_problem(tmp_path, "prefixsum_py")
    ok(harness("task", "add", problem, "--name", "scan"))
    out = ok(harness("register", problem / "solutions" / "correct.py", "--task", "scan"))
    submission = out.split()[2].rstrip(":")
    ok(harness("test", submission, "--device", "cpu"))
    assert rows(store_url, "SELECT task, task_version, status FROM runs") == [("scan", 1, "pass")]

    (problem / "reference.py").write_text((problem / "reference.py").read_text() + "\n# a second version\n")
    out = ok(harness("task", "add", problem, "--name", "scan"))
    assert out.startswith("added task scan version 2 ")
    assert "registered submission" not in out  # the reference candidate is the same file
    shown = ok(harness("task", "show", "scan"))
    assert "task scan: version 2" in shown
    assert [line.split("runs: ")[1] for line in shown.splitlines() if "runs: " in line] == ["1", "0"]

    ok(harness("test", submission, "--device", "cpu"))  # judged again under version 2
    assert rows(store_url, "SELECT task_version, status FROM runs ORDER BY task_version") == [
        (1, "pass"),
        (2, "pass"),
    ]
    # the utils.py one folder up is part of the task: changing it is a new version too
    (tmp_path / "problems" / "utils.py").write_text((PROBLEMS / "utils.py").read_text() + "\n")
    assert ok(harness("task", "add", problem, "--name", "scan")).startswith("added task scan version 3 ")


def _break(problem: Path, case: str) -> Path:
    reference = problem / "reference.py"
    if case == "not a directory":
        return problem / "task.yml"
    if case == "no task.yml":
        (problem / "task.yml").unlink()
    elif case == "task.yml not a mapping":
        (problem / "task.yml").write_text("- just\n- a list\n")
    elif case == "no tests":
        text = (problem / "task.yml").read_text()
        (problem / "task.yml").write_text(text.replace("tests:", "old_tests:"))
    elif case == "no benchmarks":
        text = (problem / "task.yml").read_text()
        (problem / "task.yml").write_text(text.replace("benchmarks:", "old_benchmarks:"))
    elif case == "a shape without a seed":
        text = (problem / "task.yml").read_text()
        (problem / "task.yml").write_text(text.replace('"seed": 11', '"seeds": 11'))
    elif case == "a shape key generate_input does not take":
        text = (problem / "task.yml").read_text()
        (problem / "task.yml").write_text(text.replace('{"size": 8,', '{"size": 8, "width": 3,'))
    elif case == "no check_implementation":
        reference.write_text(reference.read_text().replace("check_implementation =", "check ="))
    elif case == "no ref_kernel":
        reference.write_text(reference.read_text().replace("def ref_kernel", "def reference_kernel"))
    elif case == "no generate_input":
        reference.write_text(reference.read_text().replace("def generate_input", "def make_input"))
    elif case == "a syntax error":
        reference.write_text(reference.read_text() + "\ndef broken(:\n")
    elif case == "no task.py":
        (problem / "task.py").unlink()
    elif case == "no utils.py":
        (problem.parent / "utils.py").unlink()
    elif case == "not a Python problem":
        text = (problem / "task.yml").read_text()
        (problem / "task.yml").write_text(text.replace('lang: "py"', 'lang: "cu"'))
    elif case == "an unknown harness key":
        (problem / "task.yml").write_text((problem / "task.yml").read_text() + "harness:\n  smoky: []\n")
    return problem


BAD = {
    "not a directory": "not a directory",
    "no task.yml": "no task.yml: not a GPU MODE problem directory",
    "task.yml not a mapping": "task.yml: not a mapping",
    "no tests": "task.yml: no tests shapes",
    "no benchmarks": "task.yml: no benchmarks shapes",
    "a shape without a seed": "tests[0] is not a mapping with an integer seed",
    "a shape key generate_input does not take": "tests[0] has width, which generate_input does not take",
    "no check_implementation": "reference.py: defines no check_implementation",
    "no ref_kernel": "reference.py: defines no ref_kernel",
    "no generate_input": "reference.py: defines no generate_input",
    "a syntax error": "reference.py: syntax error on line",
    "no task.py": "no task.py",
    "no utils.py": "imports utils, but there is no utils.py beside it or above it",
    "not a Python problem": "only Python problems (lang: py) are tasks",
    "an unknown harness key": "harness: smoky: Extra inputs are not permitted",
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_directory_that_is_not_a_problem_is_one_line_and_exit_2_and_nothing_written(
    harness, store_url, dump_store, tmp_path, case
):
    ok(harness("init"))
    before = dump_store(store_url)
    problem = _break(copy_problem(tmp_path, "vectoradd_py"), case)
    result = harness("task", "add", problem)
    assert result.returncode == 2, result.stdout
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ")
    assert BAD[case] in result.stderr
    assert dump_store(store_url) == before


def test_a_bad_directory_creates_no_store(harness, store_url, tmp_path):
    result = harness("task", "add", tmp_path)
    assert result.returncode == 2 and "no task.yml" in result.stderr
    assert not Path(store_url.removeprefix("sqlite:///")).exists()


def test_a_built_in_name_is_refused(harness, store_url, dump_store):
    ok(harness("init"))
    before = dump_store(store_url)
    result = harness("task", "add", PROBLEMS / "matmul_py", "--name", "conv2d_v2")
    assert result.returncode == 2 and "task 'conv2d_v2' is built in" in result.stderr
    assert dump_store(store_url) == before


@pytest.mark.parametrize(
    ("task", "mode", "reason"),
    [
        (
            "vectoradd",
            "leaderboard",
            "GPU MODE check: output differs from the reference: 64 elements differ; at (0, 0):",
        ),
        (
            "prefixsum",
            "benchmark",
            "GPU MODE check: output differs from the reference: 100 elements differ; at (0,): 0.0 vs",
        ),
        ("matmul", "benchmark", "GPU MODE check: output differs from the reference:"),
    ],
)
def test_a_tournament_and_a_leaderboard_per_task_on_the_cpu(harness, task, mode, reason):
    ok(harness("task", "add", PROBLEMS / f"{task}_py"))
    for kind in ("correct", "wrong"):
        ok(
            harness(
                "register",
                PROBLEMS / f"{task}_py" / "solutions" / f"{kind}.py",
                "--task",
                task,
                "--lineage",
                f"{task}_{kind}",
            )
        )
    some_failed(harness("tournament", "--task", task, "--device", "cpu", "--mode", mode, timeout=600))
    board = json.loads(ok(harness("leaderboard", "--task", task, "--format", "json")))
    entries = {entry["lineage"]: entry for entry in board["entries"]}
    assert board["verdict"] == "gpumode" and board["exact_answer"] is False and board["mode"] == mode
    assert {name for name, entry in entries.items() if entry["rank"] is not None} == {
        f"{task}_reference",
        f"{task}_correct",
    }
    assert entries[f"{task}_reference"]["speedup_vs_reference"] == 1.0
    # the harness ranks by task.yml's ranking_by (prefixsum_py's `last`), else the geometric mean;
    # GPU MODE's score beside it where that differs: without ranking_by, KernelBot's `last`
    assert board["ranking_by"] == ("last" if task == "prefixsum" else "geom")
    assert board["gpumode_ranking_by"] == (None if task == "prefixsum" else "last")
    for entry in entries.values():
        if entry["rank"] is not None and task != "prefixsum":
            assert entry["gpumode_score_ms"] == pytest.approx(entry["benchmarks"][-1]["mean_ms"])
    wrong = entries[f"{task}_wrong"]
    assert wrong["rank"] is None and wrong["status"] == "wrong_answer"
    assert reason in wrong["reason"]
    table = ok(harness("leaderboard", "--task", task))
    assert "[no exact answer: only GPU MODE's verdict]" in table
    # the stored task's runs are its version 1's; a second tournament reuses all of them
    again = some_failed(harness("tournament", "--task", task, "--device", "cpu", "--mode", mode, timeout=600))
    assert "3 reused" in again
    refused = harness("leaderboard", "--task", task, "--verdict", "accurate")
    assert refused.returncode == 2
    assert (
        refused.stderr.strip() == f"error: task {task} has no exact answer: it has only the gpumode verdict"
    )


def test_a_task_whose_inputs_are_made_on_cuda_only_is_unsupported_on_the_cpu(harness):
    ok(harness("task", "add", PROBLEMS / "cudaonly_py"))
    assert "CUDA only" in ok(harness("task", "list"))
    out = ok(harness("register", PROBLEMS / "cudaonly_py" / "negate.py", "--task", "cudaonly"))
    submission = out.split()[2].rstrip(":")
    result = harness("test", submission, "--device", "cpu")
    assert result.returncode == 0 and "unsupported" in result.stdout
    line = "task cudaonly makes its inputs on CUDA only (its generate_input takes no `device`): unsupported on cpu"
    board = json.loads(ok(harness("leaderboard", "--task", "cudaonly", "--format", "json")))
    entry = next(entry for entry in board["entries"] if entry["lineage"] == "negate")
    assert (entry["status"], entry["reason"]) == ("unsupported", line)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without CUDA")
@pytest.mark.parametrize("part", ["check", "reference"])
def test_a_task_whose_code_asks_for_cuda_is_unsupported_on_a_machine_without_it(harness, tmp_path, part):
    """needscuda_py makes its inputs on the device it is given, and its check (or, in a copy, its
    reference) calls `.cuda()`: on a machine without CUDA the task cannot run, said in one line,
    and neither the task's error (exit 2) nor a wrong answer of the revision."""
    problem = tmp_path / "needscuda_py"
    shutil.copytree(PROBLEMS / "needscuda_py", problem)
    if part == "reference":
        reference = problem / "reference.py"
        reference.write_text(
            reference.read_text()
            .replace("    out[...] = -x\n    return out", "    return (-x).cuda()")
            .replace("expected = ref_kernel(data).cuda()", "expected = ref_kernel(data)")
        )
    ok(harness("task", "add", problem))
    out = ok(harness("register", problem / "negate.py", "--task", "needscuda"))
    submission = out.split()[2].rstrip(":")
    result = harness("test", submission, "--device", "cpu")
    assert result.returncode == 0 and "unsupported" in result.stdout, result.stdout + result.stderr
    board = json.loads(ok(harness("leaderboard", "--task", "needscuda", "--format", "json")))
    entry = next(entry for entry in board["entries"] if entry["lineage"] == "negate")
    assert entry["status"] == "unsupported"
    assert f"the task's {part} needs CUDA, which this machine lacks (" in entry["reason"]
    assert entry["reason"].endswith("unsupported on cpu")


def test_a_stored_task_whose_files_were_altered_is_refused_and_the_rest_works(harness, store_url):
    import sqlite3

    ok(harness("task", "add", PROBLEMS / "vectoradd_py"))
    ok(harness("task", "add", PROBLEMS / "matmul_py"))
    connection = sqlite3.connect(store_url.removeprefix("sqlite:///"))
    with connection:
        connection.execute(
            "UPDATE blobs SET content = CAST('def ref_kernel(data): pass' AS BLOB) WHERE sha256 = "
            "(SELECT f.sha256 FROM task_files f JOIN task_versions v ON v.id = f.task_version_id "
            "WHERE v.name = 'vectoradd' AND f.name = 'reference.py')"
        )
    connection.close()
    listed = ok(harness("task", "list"))
    assert (
        "task vectoradd version 1 cannot be used: task vectoradd version 1: its stored files do not match"
        in listed
    )
    assert "matmul  version 1 of " in listed
    refused = harness("leaderboard", "--task", "vectoradd")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "cannot be used" in refused.stderr
    assert "matmul_reference" in ok(harness("list", "--task", "matmul"))


def test_an_added_task_reaches_the_tournaments_gpu_workers(harness, store_url):
    """`--gpus 2` evaluates in worker processes (harness.executors.worker): they know the added
    task from the tournament's process, not from the store."""
    ok(harness("task", "add", PROBLEMS / "vectoradd_py"))
    for kind in ("correct", "wrong"):
        ok(harness("register", PROBLEMS / "vectoradd_py" / "solutions" / f"{kind}.py", "--task", "vectoradd"))
    some_failed(
        harness(
            "tournament",
            "--task",
            "vectoradd",
            "--device",
            "cpu",
            "--gpus",
            "2",
            "--mode",
            "test",
            timeout=600,
        )
    )
    statuses = rows(
        store_url, "SELECT r.filename, u.status FROM runs u JOIN revisions r ON r.id = u.revision_id"
    )
    assert sorted(statuses) == [
        ("correct.py", "pass"),
        ("vectoradd_reference.py", "pass"),
        ("wrong.py", "wrong_answer"),
    ]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA_ONLY)])
def test_the_child_limits_cublas_workspace_only_where_this_torch_refuses_products_without(
    harness, store_url, tmp_path, device
):
    """GPU MODE's references run under torch.use_deterministic_algorithms(True), which torch before
    pytorch/pytorch#161749 refused for cuBLAS products without CUBLAS_WORKSPACE_CONFIG: the
    reference candidate's child gets the variable on CUDA where this torch refuses, and otherwise
    runs as GPU MODE's runner runs a submission, without it (it limits cuBLAS's workspace, and a
    candidate's products may take slower kernels under it)."""
    from harness.sandbox.devices import cublas_needs_workspace_config

    expected = ":4096:8" if device == "cuda" and cublas_needs_workspace_config() else None
    ok(harness("task", "add", PROBLEMS / "vectoradd_py"))
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import os\n\n\ndef custom_kernel(data):\n"
        f"    assert os.environ.get('CUBLAS_WORKSPACE_CONFIG') == {expected!r}\n    return data[0] + data[1]\n"
    )
    submission = ok(harness("register", probe, "--task", "vectoradd")).split()[2].rstrip(":")
    ok(harness("test", submission, "--device", device))
    assert rows(store_url, "SELECT status, reason FROM runs") == [("pass", "")]


def test_a_reference_that_fails_is_the_tasks_error_in_one_line_not_a_candidates_result(
    harness, store_url, tmp_path
):
    problem = copy_problem(tmp_path, "vectoradd_py")
    reference = problem / "reference.py"
    reference.write_text(
        reference.read_text().replace("    out[...] = a + b\n", "    raise RuntimeError('no answer')\n")
    )
    ok(harness("task", "add", problem))
    ok(harness("register", problem / "solutions" / "correct.py", "--task", "vectoradd"))
    result = harness("tournament", "--task", "vectoradd", "--device", "cpu")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "error: the task's reference failed on size=8 (seed 11): RuntimeError: no answer"
    )
    assert rows(store_url, "SELECT count(*) FROM runs WHERE state = 'done'") == [(0,)]


def test_outputs_of_another_kind_than_the_buffer_are_calibrated_with_their_own_kind(harness, store_url):
    """The parent's clock bound (harness.timing, step 5) takes off the harness's own cost of a
    call, measured by a no-op that returns the output buffer. The prefix sum's reference answers
    in float64 where the buffer is float32, twice the bytes to export: it is calibrated with a
    no-op returning float64 of its shape (on the H200 the other flagged GPU MODE's own reference
    `host_clock_mismatch`), the submission that fills the buffer with the buffer itself."""
    ok(harness("task", "add", PROBLEMS / "prefixsum_py"))
    correct = PROBLEMS / "prefixsum_py" / "solutions" / "correct.py"
    ok(harness("register", correct, "--task", "prefixsum", "--lineage", "prefixsum_correct"))
    ok(harness("tournament", "--task", "prefixsum", "--device", "cpu", "--mode", "benchmark", timeout=600))
    calibrated = {
        lineage: (json.loads(shape)["size"], json.loads(check)["timing"]["calibrated_output"])
        for lineage, shape, check in rows(
            store_url,
            'SELECT l.name, s.shape, s."check" FROM shape_results s JOIN runs r ON r.id = s.run_id '
            "JOIN revisions v ON v.id = r.revision_id JOIN lineages l ON l.id = v.lineage_id "
            "WHERE r.mode = 'benchmark'",
        )
    }
    size = calibrated["prefixsum_reference"][0]
    assert calibrated == {
        "prefixsum_reference": (size, ["torch.float64", [size]]),
        "prefixsum_correct": (size, None),
    }


def test_the_calibration_no_op_takes_only_a_known_dtype_and_whole_sizes():
    """The kind of output comes from the candidate's reply: nothing of it but a known dtype and
    integers goes into the no-op's code."""
    from harness.errors import HarnessError
    from harness.sandbox.calibration import returning_candidate
    from harness.tasks import load_task

    task = load_task("conv2d_v2")
    code = returning_candidate(task, ("torch.float64", (2, 3)), (2,)).decode()
    assert "torch.empty((2, 3), dtype=torch.float64, device=device)" in code
    namespace: dict = {}
    exec(compile(code, "<no-op>", "exec"), namespace)  # noqa: S102 - the harness's own code
    made = namespace[task.entry_point]((None, None, torch.zeros(1)))
    assert made.dtype == torch.float64 and made.shape == (2, 3)
    for kind in [
        ("torch.float64); import os; os.system('true'", (2,)),
        ("float64", (2,)),
        ("torch.float32", ("2); import os; (1",)),
        ("torch.float32", (-1,)),
        ("torch.float32", (True,)),
    ]:
        with pytest.raises(HarnessError, match="cannot calibrate an output"):
            returning_candidate(task, kind, (2,))


def test_the_reference_runs_only_in_the_parent_and_the_child_gets_its_inputs_as_bytes(harness, store_url):
    """parentonly_py's generate_input and check_implementation raise in any process without
    PARENT_ONLY_REFERENCE=parent, which the harness command has and its sandboxed children never
    have (their environment is scrubbed). A correct submission still passes `harness test` and
    both tournaments on the CPU: the parent made every input (a transposed tensor, an int, a
    float, a string, a nested tuple) and handed it over, and the child rebuilt it without the
    reference (the submission asserts the types, the stride, and that no `reference` module was
    imported in its process). A submission that returns the output buffer untouched fails with
    the task's own check_implementation message: the buffer's bytes, where the parent's
    reference wrote its answer, never reach the child."""
    parent = {"PARENT_ONLY_REFERENCE": "parent"}
    problem = PROBLEMS / "parentonly_py"
    ok(harness("task", "add", problem, env=parent))
    submissions = {}
    for kind in ("correct", "wrong"):
        out = ok(
            harness(
                "register",
                problem / "solutions" / f"{kind}.py",
                "--task",
                "parentonly",
                "--lineage",
                kind,
                env=parent,
            )
        )
        submissions[kind] = out.split()[2].rstrip(":")
    assert "pass" in ok(harness("test", submissions["correct"], "--device", "cpu", env=parent))
    reason = "GPU MODE check: output differs from the reference: "
    for mode in ("benchmark", "leaderboard"):
        some_failed(
            harness(
                "tournament",
                "--task",
                "parentonly",
                "--device",
                "cpu",
                "--mode",
                mode,
                "--budget",
                "0.2",
                env=parent,
                timeout=600,
            )
        )
        board = json.loads(ok(harness("leaderboard", "--task", "parentonly", "--format", "json")))
        assert board["mode"] == mode
        entries = {entry["lineage"]: entry for entry in board["entries"]}
        assert {name for name, entry in entries.items() if entry["rank"] is not None} == {
            "parentonly_reference",
            "correct",
        }, entries
        wrong = entries["wrong"]
        assert wrong["status"] == "wrong_answer" and reason in wrong["reason"] and "nan vs" in wrong["reason"]
    runs = rows(
        store_url, "SELECT r.filename, u.mode, u.status FROM runs u JOIN revisions r ON r.id = u.revision_id"
    )
    assert sorted(runs) == sorted(
        [("wrong.py", "test", "wrong_answer")]
        + [
            (filename, mode, "pass")
            for filename in ("correct.py", "parentonly_reference.py")
            for mode in ("test", "benchmark", "leaderboard")
        ]
    )


def test_the_calibrated_kind_is_the_smallest_written_output_by_its_dtype_and_shape():
    """What the child says of its outputs picks the no-op's kind, but their sizes come from dtype
    and shape (a child claiming a large output is small buys no slack), and an output the parent
    could not read (an unknown dtype, not written) counts for nothing."""
    from harness.sandbox.calibration import calibrated_kind
    from harness.wire import TensorInfo

    output = (2,)  # conv2d_v2's output buffer
    data = (torch.zeros(1), torch.zeros(1), torch.zeros(2, 3))  # the output buffer: float32 (2, 3)

    def info(dtype: str, shape: list[int], nbytes: int, written: bool = True) -> TensorInfo:
        return TensorInfo(
            type_name="Tensor", exact_tensor=True, dtype=dtype, shape=shape, nbytes=nbytes, written=written
        )

    assert calibrated_kind(output, data, []) is None
    assert calibrated_kind(output, data, [info("torch.float32", [2, 3], 24)]) is None
    large, small = info("torch.float64", [100, 100], 1), info("torch.float64", [2, 3], 48)
    assert calibrated_kind(output, data, [large, small]) == ("torch.float64", (2, 3))
    # the smallest is the buffer's kind: the no-op that returns the buffer serves
    assert calibrated_kind(output, data, [large, info("torch.float32", [2, 3], 24)]) is None
    unreadable = [info("torch.complex64", [1], 8), info("torch.float64", [1], 8, written=False)]
    assert calibrated_kind(output, data, unreadable) is None
    assert calibrated_kind(output, data, [*unreadable, large]) == ("torch.float64", (100, 100))
    # with several buffers the no-op returns them together (as helion's fp8_quant's reference
    # does): a candidate's output of one tensor is calibrated by a no-op returning its kind
    assert calibrated_kind((1, 2), data, [info("torch.float32", [2, 3], 24)]) == ("torch.float32", (2, 3))
    assert calibrated_kind((1, 2), data, []) is None


def test_the_bare_calibration_no_op_returns_every_output_buffer():
    from harness.sandbox.calibration import bare_noop_candidate
    from harness.tasks import load_task

    task = load_task("conv2d_v2")
    namespace: dict = {}
    exec(compile(bare_noop_candidate(task, (1, 2)), "<no-op>", "exec"), namespace)  # noqa: S102 - the harness's own code
    data = (torch.zeros(1), torch.ones(2), torch.ones(3))
    returned = namespace[task.entry_point](data)
    assert returned[0] is data[1] and returned[1] is data[2]


def test_gpu_modes_own_submission_directive_names_its_leaderboard_not_a_task_here(harness, tmp_path):
    """GPU MODE's submission.py files name their hosted leaderboard (`#!POPCORN leaderboard
    vectorsum_py`): the problem directory's name is the task added from it, and a leaderboard
    that is no task here does not contradict `--task`; a directive naming another task that is
    here still does (one line, exit 2)."""
    ok(harness("task", "add", PROBLEMS / "vectoradd_py"))
    ok(harness("task", "add", PROBLEMS / "matmul_py"))
    correct = (PROBLEMS / "vectoradd_py" / "solutions" / "correct.py").read_bytes()
    for number, (directive, lineage) in enumerate(
        (("vectoradd_py", "by_folder"), ("vectoradd_hosted_v2", "by_hosted_name")), start=1
    ):
        path = tmp_path / str(number) / "submission.py"
        path.parent.mkdir()
        path.write_bytes(f"#!POPCORN leaderboard {directive}\n".encode() + correct)
        ok(harness("register", path, "--task", "vectoradd", "--lineage", lineage))
        assert re.search(rf"{lineage} +r1 .* vectoradd", ok(harness("list", "--task", "vectoradd")))
    path = tmp_path / "3" / "submission.py"
    path.parent.mkdir()
    path.write_bytes(b"#!POPCORN leaderboard matmul_py\n" + correct)
    refused = harness("register", path, "--task", "vectoradd")
    assert refused.returncode == 2
    assert (
        "--task vectoradd conflicts with the file's `#!POPCORN leaderboard matmul` directive"
        in refused.stderr
    )
