"""GPU MODE's protocol as its problems use it (issue 34), through the `harness` command line on
the CPU: data that is one tensor judged by a property check, tuple outputs without an output
buffer (by the problem's check, and by the harness's tolerance part by part), a problem with its
own protocol (two entry points), a reference importing a module this machine lacks, a shape
larger than the machine's memory. Each ends in a result or one line, never a traceback.

The problems in tests/data/gpumode_problems/ (cholesky_py, tupleout_py, twoentry_py,
missingmodule_py, hugeshape_py, twobuffers_py, multigpu_py, objectdata_py,
tightmemory_py) were written for these tests in GPU MODE's format."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from conftest import rows

PROBLEMS = Path(__file__).parent / "data" / "gpumode_problems"


def ok(result) -> str:
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    return result.stdout


def register(harness, path: Path, task: str, lineage: str) -> str:
    out = ok(harness("register", path, "--task", task, "--lineage", lineage))
    return out.split()[2].rstrip(":")


def board(harness, task: str) -> dict[str, dict]:
    entries = json.loads(ok(harness("leaderboard", "--task", task, "--format", "json")))["entries"]
    return {entry["lineage"]: entry for entry in entries}


def refused_in_one_line(harness, store_url: str, dump_store, problem: Path) -> str:
    """`harness task add PROBLEM` on an initialised store: exit 2, one line on stderr, nothing
    written; returns the line."""
    ok(harness("init"))
    before = dump_store(store_url)
    result = harness("task", "add", problem)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ")
    assert dump_store(store_url) == before
    return result.stderr


def _correct_ranked_wrong_not(harness, problem: Path, task: str) -> dict[str, dict]:
    """Registers the problem's solutions/correct.py and wrong.py, runs a CPU tournament (exit 1:
    a revision failed, no traceback) and returns the board's entries by lineage, the reference
    and the correct one ranked, nothing else."""
    for kind in ("correct", "wrong"):
        register(harness, problem / "solutions" / f"{kind}.py", task, kind)
    result = harness("tournament", "--task", task, "--device", "cpu", "--mode", "benchmark", timeout=600)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    entries = board(harness, task)
    ranked = {name for name, entry in entries.items() if entry["rank"] is not None}
    assert ranked == {f"{task}_reference", "correct"}, entries
    return entries


def test_one_tensor_as_the_data_judged_by_a_property_check(harness):
    """cholesky_py's generate_input returns one tensor (no `return a, b, ...` to read: the
    structure is what the call returns), takes no `device` but makes CPU data without a GPU (as
    linalg's do: found by calling it), and its check is a property check, not elementwise: a
    factor computed another way passes, the right values in the wrong triangle fail."""
    ok(harness("task", "add", PROBLEMS / "cholesky_py"))
    shown = ok(harness("task", "show", "cholesky"))
    assert (
        "data: as generate_input returns it; no output buffer (found by running it and the reference on the CPU)"
        in shown
    )
    entries = _correct_ranked_wrong_not(harness, PROBLEMS / "cholesky_py", "cholesky")
    wrong = entries["wrong"]
    assert wrong["status"] == "wrong_answer"
    assert "GPU MODE check: not lower triangular:" in wrong["reason"]


def test_tuple_outputs_without_an_output_buffer(harness, store_url):
    """tupleout_py's reference answers (q, scales), an int8 and a float32 tensor, and its data has
    no output buffer. Both go through the child, the parent's check, the timed calls' checks and
    the store; a dict where the tuple is expected is the problem's check's verdict."""
    ok(harness("task", "add", PROBLEMS / "tupleout_py"))
    for kind in ("correct", "wrong", "dict"):
        register(harness, PROBLEMS / "tupleout_py" / "solutions" / f"{kind}.py", "tupleout", kind)
    result = harness(
        "tournament", "--task", "tupleout", "--device", "cpu", "--mode", "benchmark", timeout=600
    )
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    entries = board(harness, "tupleout")
    assert {name for name, entry in entries.items() if entry["rank"] is not None} == {
        "tupleout_reference",
        "correct",
    }
    assert entries["wrong"]["status"] == "wrong_answer"
    assert entries["wrong"]["reason"].endswith("GPU MODE check: scales differ")
    assert entries["dict"]["reason"].endswith("GPU MODE check: expected (q, scales), got dict")
    described = [
        json.loads(check)["output"]
        for check, name in rows(
            store_url,
            'SELECT s."check", l.name FROM shape_results s JOIN runs r ON r.id = s.run_id '
            "JOIN revisions v ON v.id = r.revision_id JOIN lineages l ON l.id = v.lineage_id "
            "WHERE r.mode = 'test'",
        )
        if name == "correct"
    ]
    assert [part["dtype"] for part in described[0]["parts"]] == ["torch.int8", "torch.float32"]


def test_tuple_outputs_under_the_harness_tolerance_are_compared_part_by_part(harness, tmp_path):
    """With `harness: tolerance` the harness judges each tensor of the tuple itself (GPU MODE's
    elementwise rule): off by one in q passes at atol 1, a wrong dtype or a wrong scale fails,
    each naming the part."""
    problem = Path(shutil.copytree(PROBLEMS / "tupleout_py", tmp_path / "tupleout_py"))
    (problem / "task.yml").write_text(
        (problem / "task.yml").read_text() + "harness:\n  tolerance: {rtol: 0.000001, atol: 1}\n"
    )
    (problem / "solutions" / "float.py").write_text(
        "def custom_kernel(data):\n    x, block = data\n"
        "    s = x.view(-1, block).abs().amax(dim=1) / 127.0\n"
        "    return (x.view(-1, block) / s[:, None]).round().view(-1), s\n"
    )
    ok(harness("task", "add", problem))
    results = {}
    for kind in ("correct", "wrong", "float"):
        submission = register(harness, problem / "solutions" / f"{kind}.py", "tupleout", kind)
        results[kind] = harness("test", submission, "--device", "cpu", timeout=300)
    assert "pass" in ok(results["correct"])
    entries = board(harness, "tupleout")
    assert entries["correct"]["status"] == "pass"
    assert entries["wrong"]["status"] == "wrong_answer"
    assert "part 0: GPU MODE check: fails" in entries["wrong"]["reason"]  # q, from the wrong scales
    assert entries["float"]["status"] == "wrong_answer"
    assert "item 0: returned dtype torch.float32, expected torch.int8" in entries["float"]["reason"]


def test_a_problem_with_its_own_protocol_is_refused_in_one_line(harness, store_url, dump_store):
    """twoentry_py (as princeton's cross_entropy) has two entry points judged by its own eval.py,
    no generate_input, ref_kernel or check_implementation and no task.py: one line naming what
    is missing, exit 2, nothing written."""
    line = refused_in_one_line(harness, store_url, dump_store, PROBLEMS / "twoentry_py")
    assert "reference.py: defines no generate_input, ref_kernel, check_implementation" in line
    assert "own eval.py runs another protocol than custom_kernel(data)" in line


def test_data_holding_objects_of_the_tasks_own_classes_is_handed_to_the_child_and_judged(harness):
    """Issue 34: objectdata_py's generate_input hands a Config dataclass (a float, an int, a
    tensor, a named tuple holding a tensor, a dtype) and a Cache nn.Module (a registered buffer, a plain attribute, an nn.Linear
    submodule), as amd's mla-decode hands a Config and a KVCache module (on the H200 it was
    `unsupported`, 2026-12-07). The child rebuilds them from typed items (harness.sandbox.protocol
    .ObjectItem, nothing unpickled; the tensors through the inputs memory). The module's forward
    writes into its buffer and counts itself up, as mla-decode's KVCache does: the parent's
    reference runs on a deep copy, so the child gets the data as generated (else the correct
    solution was a wrong answer). The correct solution passes and ranks beside the reference, one
    that forgets the module's buffer is a wrong answer."""
    ok(harness("task", "add", PROBLEMS / "objectdata_py"))
    solutions = PROBLEMS / "objectdata_py" / "solutions"
    register(harness, solutions / "correct.py", "objectdata", "correct")
    register(harness, solutions / "wrong.py", "objectdata", "wrong")
    harness("tournament", "--task", "objectdata", "--device", "cpu", "--budget", "0.2", timeout=300)
    entries = board(harness, "objectdata")
    assert set(entries) == {"objectdata_reference", "correct", "wrong"}
    for name in ("objectdata_reference", "correct"):
        assert entries[name]["status"] == "pass" and entries[name]["rank"] is not None, entries[name]
    assert entries["wrong"]["status"] == "wrong_answer" and entries["wrong"]["rank"] is None, entries["wrong"]


def test_an_object_of_a_class_the_child_cannot_find_is_unsupported_in_one_line():
    """Only objects of the task's own files' classes (and torch.nn's) are rebuilt in the child:
    an object of any other class (here a SimpleNamespace; a class local to a function) is
    `unsupported`, the item named (a result of every evaluation, never an error of the run)."""
    from types import SimpleNamespace

    from harness.errors import TaskUnsupported
    from harness.sandbox.transfer import lay_out_inputs

    class Local:
        pass

    for value, name in ((SimpleNamespace(scale=2.0), "SimpleNamespace"), (Local(), "Local")):
        with pytest.raises(TaskUnsupported) as raised:
            lay_out_inputs((value, torch.zeros(3)), ())
        assert f"generate_input's item 0 is a {name}: only tensors, numbers" in str(raised.value)
        assert str(raised.value).endswith("can be handed to the child: unsupported here")


def test_a_multi_gpu_problem_is_refused_in_one_line(harness, store_url, dump_store):
    """multigpu_py (as amd_distributed's all2all) says `multi_gpu: true` and its generate_input
    takes the rank and world size that GPU MODE's eval.py hands each process under
    torch.distributed: one line naming what the harness does not run, exit 2, nothing written."""
    line = refused_in_one_line(harness, store_url, dump_store, PROBLEMS / "multigpu_py")
    assert "multi_gpu: the problem runs one process per GPU under torch.distributed" in line


def test_a_generator_parameter_that_no_shape_gives_is_refused_in_one_line(
    harness, store_url, dump_store, tmp_path
):
    """A generate_input with a parameter without a default that the shapes do not give (the
    harness gives only the seed, and the device where it is taken) would fail at every call: the
    problem is refused at `task add`, naming the parameter; one with a default is accepted."""
    problem = tmp_path / "scaled_py"
    shutil.copytree(PROBLEMS / "vectoradd_py", problem)
    shutil.copy(PROBLEMS / "utils.py", tmp_path / "utils.py")
    reference = problem / "reference.py"
    source = reference.read_text()
    reference.write_text(
        source.replace(
            "def generate_input(size: int, seed: int,",
            "def generate_input(size: int, seed: int, scale: float,",
        )
    )
    line = refused_in_one_line(harness, store_url, dump_store, problem)
    assert "tests[0] lacks scale, which generate_input needs" in line
    reference.write_text(
        source.replace(
            "def generate_input(size: int, seed: int,",
            "def generate_input(size: int, seed: int, scale: float = 1.0,",
        )
    )
    ok(harness("task", "add", problem))


def test_a_reference_that_imports_a_missing_module_is_unsupported_in_one_line(harness):
    ok(harness("task", "add", PROBLEMS / "missingmodule_py"))
    line = (
        "task missingmodule's reference imports 'harness_tests_module_nobody_has', "
        "which this machine lacks: unsupported here"
    )
    assert line in ok(harness("task", "list"))
    register(harness, PROBLEMS / "missingmodule_py" / "copy.py", "missingmodule", "copy")
    ok(harness("tournament", "--task", "missingmodule", "--device", "cpu", timeout=300))
    entries = board(harness, "missingmodule")
    assert {(entry["status"], entry["reason"]) for entry in entries.values()} == {("unsupported", line)}


@pytest.mark.skipif(
    os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") >= 2**44, reason="a machine with 16 TiB"
)
def test_a_shape_larger_than_the_machine_is_unsupported_not_a_crash_of_the_run(harness):
    """hugeshape_py's second smoke shape needs 16 TiB of inputs: the parent cannot make them,
    says so in one line (not a neighbour's doing, so not retried), and the first shape's result
    stays."""
    ok(harness("task", "add", PROBLEMS / "hugeshape_py"))
    register(harness, PROBLEMS / "hugeshape_py" / "negate.py", "hugeshape", "negate")
    ok(harness("tournament", "--task", "hugeshape", "--device", "cpu", "--mode", "test", timeout=300))
    entries = board(harness, "hugeshape")
    for entry in entries.values():
        assert entry["status"] == "unsupported"
        assert entry["reason"].startswith("smoke[1] (size=4398046511104): too large to run here: ")
        assert "GiB at once, more than the" in entry["reason"]
        assert entry["verdicts"]["gpumode"]["status"] == "pass"  # smoke[0]


@pytest.mark.skipif(
    os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") < 10 * 1024**3, reason="a machine under 10 GiB"
)
def test_a_reference_larger_than_the_harness_may_hold_is_a_result_not_the_oom_killers(harness):
    """bigreference_py's reference takes an 8 GiB intermediate on its second smoke shape (never
    touched, so nothing is really used); with the harness's own process bounded to 6 GiB the
    allocation fails there, and the shape is `unsupported` with one line, the first shape's result
    kept. Unbounded, such a reference (GPU MODE's amd mla-decode made to run on the CPU) grew the
    tournament's process to 22.8 GB of 24 and the kernel's OOM killer ended the run."""
    env = {"HARNESS_PARENT_MEMORY_BYTES": str(6 * 1024**3)}
    ok(harness("task", "add", PROBLEMS / "bigreference_py", env=env))
    register(harness, PROBLEMS / "bigreference_py" / "negate.py", "bigreference", "negate")
    result = harness(
        "tournament", "--task", "bigreference", "--device", "cpu", "--mode", "test", env=env, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    entries = board(harness, "bigreference")
    assert set(entries) == {"negate", "bigreference_reference"}
    for entry in entries.values():
        assert entry["status"] == "unsupported", entry["reason"]
        assert entry["reason"].startswith("smoke[1] (size=64 scratch=8589934592): too large to run here: ")
        assert "the harness's own process may hold (parent_memory_bytes)" in entry["reason"]
        assert entry["verdicts"]["gpumode"]["status"] == "pass"  # smoke[0]


def test_the_timed_calls_cases_kept_for_a_group_give_way_when_the_parents_memory_runs_out(harness):
    """tightmemory_py's generate_input fails as an allocator does when more than six of its
    inputs are alive in the parent: the cases a group keeps for its timed calls fill that. The
    revision whose timing ran out is evaluated again alone keeping no case, and the group keeps
    none from then on: both revisions rank (on an H100, pmpp's grayscale reference was `crashed`
    on its 16384^2 shape, alone too, the parent out of memory with the cases it kept)."""
    ok(harness("task", "add", PROBLEMS / "tightmemory_py"))
    register(harness, PROBLEMS / "tightmemory_py" / "negate.py", "tightmemory", "negate")
    ok(harness("tournament", "--task", "tightmemory", "--device", "cpu", "--mode", "benchmark", timeout=600))
    entries = board(harness, "tightmemory")
    assert set(entries) == {"negate", "tightmemory_reference"}
    for entry in entries.values():
        assert entry["status"] == "pass", entry["reason"]
        assert entry["rank"] is not None


def test_outputs_of_several_parts_round_trip_through_one_file(tmp_path):
    """The child's export of a nested output and the parent's read of it: each tensor back with
    its dtype and shape, values as they were, a dict's keys in order; a file of another size is
    refused."""
    from harness.sandbox.transfer import export_output, read_output

    value = {
        "q": torch.arange(5, dtype=torch.int8),
        "rest": [torch.ones(2, 3).t(), (1.5, None, torch.zeros(0))],
        "n": 7,
    }
    info = export_output(value, tmp_path / "out.bin")
    assert info.written and info.keys == ["q", "rest", "n"]
    directory = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        back = read_output(directory, "out.bin", info)
        assert list(back) == ["q", "rest", "n"] and back["n"] == 7
        assert torch.equal(back["q"], value["q"]) and back["q"].dtype == torch.int8
        assert torch.equal(back["rest"][0], value["rest"][0]) and isinstance(back["rest"], list)
        assert back["rest"][1][:2] == (1.5, None) and back["rest"][1][2].shape == (0,)
        with open(tmp_path / "out.bin", "ab") as file:
            file.write(b"x")
        with pytest.raises(ValueError, match="exported file holds"):
            read_output(directory, "out.bin", info)
    finally:
        os.close(directory)
    unreadable = export_output((torch.ones(1), object()), tmp_path / "other.bin")
    assert not unreadable.written


def test_the_parent_judges_the_structure_the_child_describes_never_trusting_it():
    """What the child says of an output of several parts is hostile input: a dict whose keys and
    parts differ in number, nesting deeper than the child's own export makes, a structure other
    than the reference's (with the harness's tolerance) are each one reason, never an exception."""
    from harness.checking import output_problem
    from harness.wire import TensorInfo

    def container(parts, keys=None):
        return TensorInfo(
            type_name="builtins.dict" if keys is not None else "builtins.tuple",
            exact_tensor=False,
            parts=parts,
            keys=keys,
            written=True,
        )

    expected = (torch.zeros(2), torch.zeros(3, dtype=torch.int8))
    malformed = container([], keys=["a"])
    assert "cannot describe" in output_problem(malformed, expected, False, same_shape_and_dtype=False)
    deep = container([])
    for _ in range(6):
        deep = container([deep])
    assert "cannot describe" in output_problem(deep, expected, False, same_shape_and_dtype=False)
    tensor = TensorInfo(
        type_name="torch.Tensor",
        exact_tensor=True,
        shape=[2],
        dtype="torch.float32",
        device="cpu",
        written=True,
    )
    assert output_problem(container([tensor]), expected, False) == "returned 1 items, expected 2"
    assert output_problem(container([tensor, tensor]), expected, False) == (
        "item 1: returned shape (2,), expected (3,)"
    )
    assert output_problem(container([tensor, tensor]), expected, False, same_shape_and_dtype=False) is None
    assert output_problem(tensor, expected, False) == "returned a torch.Tensor, expected a tuple of 2"


def _test(harness, problem: Path, task: str, kinds: tuple[str, ...]) -> dict[str, dict]:
    """Each of the problem's solutions registered and tested on the CPU; the board's entries."""
    for kind in kinds:
        submission = register(harness, problem / "solutions" / f"{kind}.py", task, kind)
        result = harness("test", submission, "--device", "cpu", timeout=300)
        assert "Traceback" not in result.stderr, result.stderr
    return board(harness, task)


def test_an_output_buffer_in_a_tuple_built_in_a_loop_is_learned_by_calling_the_task(harness):
    """loopbuffer_py's generate_input builds its tuple in a loop and ends in `return data`, and
    its reference answers with a new tensor and leaves the buffer alone: the buffer is the item
    generate_input made empty and never wrote, learned in the parent by running both. A
    submission that answers in the buffer passes (were the buffer taken for an input, writing it
    would fail the check); one that writes into an input fails, the input named by position."""
    ok(harness("task", "add", PROBLEMS / "loopbuffer_py"))
    shown = ok(harness("task", "show", "loopbuffer"))
    assert "data: as generate_input returns it; output buffer data[2] (found by running" in shown
    entries = _test(harness, PROBLEMS / "loopbuffer_py", "loopbuffer", ("correct", "modifies"))
    assert entries["correct"]["status"] == "pass", entries["correct"]["reason"]
    assert entries["modifies"]["status"] == "wrong_answer"
    assert entries["modifies"]["reason"].startswith("smoke[0] (size=8 terms=2): input data[0] was modified (")


def test_an_output_buffer_in_a_dict_is_learned_and_its_other_tensors_are_inputs(harness):
    """dictbuffer_py's data is one dict whose "out" the reference writes into and returns: "out"
    is the output buffer (the child gets it NaN-filled, not the reference's answer: a submission
    returning it untouched fails), and "x" an input that must come back unchanged."""
    problem = PROBLEMS / "dictbuffer_py"
    ok(harness("task", "add", problem))
    shown = ok(harness("task", "show", "dictbuffer"))
    assert "output buffer data['out'] (found by running" in shown
    entries = _test(harness, problem, "dictbuffer", ("correct", "modifies"))
    untouched = register(harness, PROBLEMS / "dictbuffer_py" / "untouched.py", "dictbuffer", "untouched")
    assert harness("test", untouched, "--device", "cpu", timeout=300).returncode == 1
    entries = board(harness, "dictbuffer")
    assert entries["correct"]["status"] == "pass"
    assert entries["modifies"]["status"] == "wrong_answer"
    assert "input data['x'] was modified (" in entries["modifies"]["reason"]
    assert entries["untouched"]["status"] == "wrong_answer"
    assert "input" not in entries["untouched"]["reason"]


def test_several_output_buffers_are_learned_and_the_inputs_still_checked(harness):
    """twobuffers_py's data is (x, q_out, s_out), as helion's fp8_quant's: its reference writes
    into both buffers and returns them, so both are output buffers (the child gets them emptied,
    never the reference's answer: a submission returning them untouched fails), and x is an
    input. Answering in the buffers or with new tensors passes; a scale left unwritten fails, and
    so does scaling x in place on the way to right answers."""
    problem = PROBLEMS / "twobuffers_py"
    ok(harness("task", "add", problem))
    shown = ok(harness("task", "show", "twobuffers"))
    assert "data: as generate_input returns it; output buffers data[1], data[2] (found by running" in shown
    for kind in ("correct", "fresh", "wrong", "modifies"):
        register(harness, problem / "solutions" / f"{kind}.py", "twobuffers", kind)
    register(harness, problem / "untouched.py", "twobuffers", "untouched")
    result = harness(
        "tournament", "--task", "twobuffers", "--device", "cpu", "--mode", "benchmark", timeout=900
    )
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    entries = board(harness, "twobuffers")
    ranked = {name for name, entry in entries.items() if entry["rank"] is not None}
    assert ranked == {"twobuffers_reference", "correct", "fresh"}, entries
    assert entries["correct"]["status"] == entries["fresh"]["status"] == "pass"
    assert entries["wrong"]["status"] == "wrong_answer"
    assert entries["wrong"]["reason"].endswith("GPU MODE check: scales differ"), entries["wrong"]["reason"]
    assert entries["modifies"]["status"] == "wrong_answer"
    assert "input data[0] was modified (" in entries["modifies"]["reason"], entries["modifies"]["reason"]
    assert entries["untouched"]["status"] == "wrong_answer"
    assert "input" not in entries["untouched"]["reason"], entries["untouched"]["reason"]


def test_the_layout_of_two_output_buffers_is_learned_by_running_the_reference():
    """learn_layout on twobuffers_py: the reference writes into q_out (int8) and s_out (float32)
    and returns them, both buffers; x is the one tensor input."""
    from harness.tasks import load_reference
    from harness.tasks.layout import learn_layout
    from harness.tasks.problem import load_problem
    from harness.tasks.spec import generate_inputs

    task = load_problem(PROBLEMS / "twobuffers_py", "twobuffers")
    shape, reference = task.smoke[0], load_reference(task)
    layout = learn_layout(reference, shape.parameters, shape.seed, "cpu")
    assert layout.outputs == (1, 2)
    assert layout.tensor_inputs(generate_inputs(reference, shape.parameters, shape.seed, "cpu")) == [0]
    assert layout.describe_outputs() == "output buffers data[1], data[2]"


def test_shapes_whose_parameters_hold_lists(harness):
    """groupsizes_py's shapes hold a list (`m`, a row count per group, as nvfp4_group_gemm's) and
    a nested list (`scales`), which generate_input takes as they are; labels write them
    compactly, and a tournament on the CPU ranks the right submission and fails the wrong one."""
    problem = PROBLEMS / "groupsizes_py"
    out = ok(harness("task", "add", problem))
    assert out.startswith("added task groupsizes version 1")
    shown = ok(harness("task", "show", "groupsizes"))
    assert "shapes: 2 tests, 1 benchmarks, 2 smoke (CPU)" in shown
    entries = _correct_ranked_wrong_not(harness, problem, "groupsizes")
    assert entries["wrong"]["reason"] == (
        "smoke[0] (m=[3,5,2] k=4 scales=[[1,0],[2,1],[0.5,-1]]): GPU MODE check: group 1 differs"
    )
    table = ok(harness("leaderboard", "--task", "groupsizes"))
    assert "correct" in table


def test_where_a_generator_makes_its_inputs_is_read_inside_its_objects_too():
    """A generate_input without `device` is judged by where its tensors are: those inside an
    object of the data (a config's weights) count as the top-level ones do."""
    from dataclasses import dataclass
    from types import ModuleType

    from harness.errors import TaskUnsupported
    from harness.tasks.spec import generate_inputs

    @dataclass
    class Config:
        weight: torch.Tensor

    reference = ModuleType("reference")
    reference.generate_input = lambda size, seed: (Config(torch.empty(size, device="meta")), 1.0)
    with pytest.raises(TaskUnsupported) as raised:
        generate_inputs(reference, {"size": 4}, 1, "cpu")
    assert (
        str(raised.value)
        == "makes its inputs on meta (its generate_input takes no `device`): unsupported on cpu"
    )
    reference.generate_input = lambda size, seed: (Config(torch.zeros(size)), 1.0)
    config, scale = generate_inputs(reference, {"size": 4}, 1, "cpu")
    assert config.weight.shape == (4,) and scale == 1.0
