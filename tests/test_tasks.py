"""Task specs: conv2d_v2 as GPU MODE has it, the loader's errors, the seeded input generator, the
reference against an independent computation, and the leaderboard seeds."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
import torch

from harness import checking
from harness.errors import HarnessError
from harness.tasks import (
    SHAPE_SETS,
    Shape,
    combine_seeds,
    known_tasks,
    load_reference,
    load_task,
    revision_secret,
)
from harness.tasks.problem import load_problem
from harness.tasks.spec import PROBLEMS_DIR, load_task_file

CONV2D = load_task("conv2d_v2")


def test_conv2d_v2_is_known_and_copies_gpu_modes_shapes():
    assert "conv2d_v2" in known_tasks()
    assert len(CONV2D.tests) == 5 and len(CONV2D.benchmarks) == 5
    # GPU MODE reference-kernels problems/pmpp_v2/conv2d_py/task.yml, first and last of each list
    assert CONV2D.tests[0].parameters == {"size": 32, "kernelsize": 4, "channels": 16, "batch": 1}
    assert CONV2D.tests[0].seed == 4242
    assert CONV2D.benchmarks[-1].parameters == {"size": 256, "kernelsize": 32, "channels": 128, "batch": 1}
    assert CONV2D.benchmarks[-1].seed == 6252
    assert (CONV2D.rtol, CONV2D.atol, CONV2D.dtype) == (1e-3, 1e-3, "float32")
    assert CONV2D.ranking_by == "geom" and CONV2D.gpumode_ranking_by == "last"
    assert CONV2D.reference_candidate == "conv2d_v2_reference.py"
    layout = checking.data_layout(CONV2D, "cpu")  # named by its task.yml
    assert (layout.outputs, layout.names) == ((2,), ("input", "kernel", "output"))


def test_smoke_shapes_are_small_and_distinct_in_seed():
    smoke = CONV2D.smoke
    assert {shape.parameters["batch"] for shape in smoke} == {1, 2}
    for shape in smoke:
        p = shape.parameters
        assert 2 <= p["channels"] <= 4 and 8 <= p["size"] <= 16 and 2 <= p["kernelsize"] <= 4
    assert len({shape.seed for shape in smoke}) == len(smoke)
    dimensions = [tuple(shape.parameters.values()) for shape in smoke]
    assert len(set(dimensions)) < len(dimensions), "one shape repeats with a new seed (catches caching)"


def test_every_shape_set_is_reachable_and_an_unknown_one_is_an_error():
    for name in SHAPE_SETS:
        assert CONV2D.shapes(name)
    with pytest.raises(HarnessError, match="unknown shape set"):
        CONV2D.shapes("huge")


def test_unknown_task_is_an_error_naming_the_known_ones():
    with pytest.raises(HarnessError, match="unknown task 'conv3d'.*conv2d_v2"):
        load_task("conv3d")
    with pytest.raises(HarnessError, match="unknown task"):
        load_task("../conv2d_v2")


def _write_problem(directory: Path, harness: dict | None = None, **changes: object) -> Path:
    """A copy of conv2d_v2's problem directory under `directory` (its utils.py one folder up, as
    GPU MODE keeps it) with `changes` to task.yml and `harness` to its `harness:` mapping."""
    import shutil

    import yaml

    shutil.copy(PROBLEMS_DIR / "utils.py", directory / "utils.py")
    problem = Path(shutil.copytree(PROBLEMS_DIR / "conv2d_v2_py", directory / "conv2d_copy_py"))
    raw = yaml.safe_load((problem / "task.yml").read_text())
    raw.update(changes)
    raw["harness"].update(harness or {})
    (problem / "task.yml").write_text(yaml.safe_dump(raw))
    return problem


def test_a_problem_directory_elsewhere_loads_with_its_files_in_it(tmp_path: Path):
    problem = _write_problem(tmp_path)
    task = load_problem(problem, "conv2d_copy")
    assert task.name == "conv2d_copy"
    assert task.reference_file == problem / "reference.py"
    assert task.shim_file == problem / "task.py"
    assert task.utils_file == tmp_path / "utils.py"
    assert task.model_dump(exclude={"name", "directory", "files_sha256"}) == CONV2D.model_dump(
        exclude={"name", "directory", "files_sha256"}
    )


def test_task_yml_names_one_output_buffer_or_several(tmp_path: Path):
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    one = load_problem(_write_problem(tmp_path / "one", {"output_buffer": "output"}), "conv2d_copy")
    several = load_problem(
        _write_problem(tmp_path / "two", {"output_buffer": ["kernel", "output"]}), "conv2d_copy"
    )
    assert checking.data_layout(one, "cpu").outputs == (2,)
    assert checking.data_layout(several, "cpu").outputs == (1, 2)
    assert checking.data_layout(several, "cpu").describe_outputs() == "output buffers 'kernel', 'output'"


@pytest.mark.parametrize(
    ("changes", "harness", "message"),
    [
        ({}, {"tolerance": {"rtol": "tight", "atol": 1e-3}}, "rtol"),
        ({}, {"output_buffer": "result"}, "output_buffer 'result'"),
        ({}, {"output_buffer": ["output", "result"]}, "output_buffer 'result'"),
        ({}, {"output_buffer": ["output", "output"]}, "names an item twice"),
        ({}, {"ranking_by": "best"}, "ranking_by"),
        ({"tests": [{"size": 32}]}, {}, "seed"),
        ({"tests": [{"size": {"rows": 2}, "seed": 1}]}, {}, "size"),
        ({}, {"surprise": 1}, "surprise"),
    ],
)
def test_a_malformed_problem_is_one_harness_error(tmp_path: Path, changes: dict, harness: dict, message: str):
    with pytest.raises(HarnessError, match="task.yml") as raised:
        load_problem(_write_problem(tmp_path, harness, **changes), "conv2d_copy")
    assert message in str(raised.value)


def test_a_task_file_that_is_not_yaml_or_missing_is_an_error(tmp_path: Path):
    broken = tmp_path / "broken.yml"
    broken.write_text("name: [unclosed\n")
    with pytest.raises(HarnessError, match="malformed"):
        load_task_file(broken)
    with pytest.raises(HarnessError, match="cannot read"):
        load_task_file(tmp_path / "absent.yml")


def test_generate_input_is_deterministic_per_seed_and_shaped_as_the_task_says():
    reference = load_reference(CONV2D)
    shape = CONV2D.smoke[1]
    first = reference.generate_input(**shape.parameters, seed=shape.seed, device="cpu")
    again = reference.generate_input(**shape.parameters, seed=shape.seed, device="cpu")
    other = reference.generate_input(**shape.parameters, seed=shape.seed + 1, device="cpu")
    p = shape.parameters
    out_size = p["size"] - p["kernelsize"] + 1
    assert first[0].shape == (p["batch"], p["channels"], p["size"], p["size"])
    assert first[1].shape == (p["channels"], p["channels"], p["kernelsize"], p["kernelsize"])
    assert first[2].shape == (p["batch"], p["channels"], out_size, out_size)
    assert all(t.dtype == torch.float32 for t in first)
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    assert not torch.equal(first[0], other[0])


def test_ref_kernel_matches_an_independent_float64_convolution():
    """The reference against im2col + matmul in float64: no padding, stride 1, cross-correlation."""
    reference = load_reference(CONV2D)
    shape = CONV2D.tests[0]
    data = reference.generate_input(**shape.parameters, seed=shape.seed, device="cpu")
    x, w, _ = data
    k = w.shape[-1]
    columns = torch.nn.functional.unfold(x.double(), k)  # [B, C*k*k, L]
    expected = (w.double().reshape(w.shape[0], -1) @ columns).reshape(data[2].shape)
    flags = (torch.backends.cudnn.deterministic, torch.backends.cudnn.allow_tf32)
    got = reference.ref_kernel(data)
    assert got.dtype == torch.float32
    assert torch.allclose(got.double(), expected, rtol=1e-5, atol=1e-4)
    assert (torch.backends.cudnn.deterministic, torch.backends.cudnn.allow_tf32) == flags, "flags restored"


def test_the_reference_flags_survive_threads_computing_references_at_once():
    from concurrent.futures import ThreadPoolExecutor

    reference = load_reference(CONV2D)
    flags = (torch.backends.cudnn.deterministic, torch.backends.cudnn.allow_tf32)
    data = reference.generate_input(**CONV2D.smoke[0].parameters, seed=1, device="cpu")
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(lambda _: reference.ref_kernel(data), range(600)))
    assert (torch.backends.cudnn.deterministic, torch.backends.cudnn.allow_tf32) == flags


def test_combine_seeds_is_gpu_modes_cantor_construction():
    pairs = [(seed, secret) for seed in range(40) for secret in range(40)]
    combined = {combine_seeds(seed, secret) for seed, secret in pairs}
    assert len(combined) == len(pairs), "distinct pairs give distinct seeds"
    big_secret = 2**31 + 12345
    for seed in (0, 1, 4242, 93246):
        assert combine_seeds(seed, big_secret) > big_secret**2 // 2  # a large secret keeps it large
        assert combine_seeds(seed, 2**32 - 1) < 2**64  # torch.Generator.manual_seed's range


def test_revision_secret_is_stable_per_revision_and_differs_between_revisions():
    first = revision_secret("store-secret", "a" * 64)
    assert first == revision_secret("store-secret", "a" * 64)
    assert first != revision_secret("store-secret", "b" * 64)
    assert first != revision_secret("other-secret", "a" * 64)
    assert 2**31 <= first < 2**32


def _reference(source: str) -> types.ModuleType:
    """A reference module made from source, as a task's reference.py would be loaded."""
    module = types.ModuleType("layout_reference")
    exec(compile("import torch\n" + source, "<reference>", "exec"), module.__dict__)  # noqa: S102 - the test's own code
    return module


@pytest.mark.parametrize(
    ("generate", "reference", "outputs"),
    [
        # returned: a buffer made by zeros, written and returned
        (
            "return (torch.ones(3, device=device), torch.zeros(3, device=device))",
            "x, out = data\n    out.copy_(x * 2)\n    return out",
            (1,),
        ),
        # written without being returned, in a list built in a loop
        (
            "items = []\n    for _ in range(3):\n        items.append(torch.ones(2, device=device))\n    return items",
            "data[1].fill_(5)\n    return 0",
            (1,),
        ),
        # left alone by the reference: the item made empty and never written
        (
            "a = torch.empty(4, device=device).uniform_()\n    b = torch.empty_like(a)\n    return a, b",
            "return data[0] * 2",
            (1,),
        ),
        # no buffer: every item an input
        ("return torch.ones(2, device=device), 3", "return data[0] + data[1]", ()),
        # a dict's key
        (
            "return {'x': torch.ones(2, device=device), 'out': torch.empty(2, device=device)}",
            "torch.neg(data['x'], out=data['out'])\n    return data['out']",
            ("out",),
        ),
        # one tensor: never a buffer
        ("return torch.ones(2, device=device)", "data.zero_()\n    return data", ()),
    ],
)
def test_the_output_buffer_is_learned_by_calling_generate_input_and_the_reference(
    generate, reference, outputs
):
    from harness.tasks.layout import learn_layout

    module = _reference(
        f"def generate_input(seed, device):\n    {generate}\n\ndef ref_kernel(data):\n    {reference}\n"
    )
    assert learn_layout(module, {}, 1, "cpu").outputs == outputs


def test_every_item_the_reference_returns_or_writes_into_is_an_output_buffer():
    """GPU MODE's protocol allows several preallocated buffers (helion's fp8_quant: values and
    scales): each item the reference writes into or returns is one, the rest are inputs, and an
    empty item it answers in wins over one it leaves alone."""
    from harness.tasks.layout import learn_layout

    module = _reference(
        "def generate_input(seed, device):\n"
        "    return torch.ones(4), torch.empty(4, dtype=torch.int8), torch.empty(2), torch.empty(3)\n\n"
        "def ref_kernel(data):\n    data[1].fill_(1)\n    torch.neg(data[0][:2], out=data[2])\n"
        "    return data[1], data[2]\n"
    )
    layout = learn_layout(module, {}, 1, "cpu")
    assert layout.outputs == (1, 2)
    assert layout.tensor_inputs(module.generate_input(1, "cpu")) == [0, 3]
    assert layout.describe_outputs() == "output buffers data[1], data[2]"


def test_shapes_hold_lists_with_compact_labels_and_stable_keys():
    shape = Shape.model_validate({"m": [64, 128], "k": 256, "pairs": [[1, 2.5], [3]], "seed": 7})
    assert shape.label() == "m=[64,128] k=256 pairs=[[1,2.5],[3]]"
    assert shape.key() == '{"k": 256, "m": [64, 128], "pairs": [[1, 2.5], [3]]}'
    with pytest.raises(ValueError):
        Shape.model_validate({"m": {"rows": 2}, "seed": 7})
