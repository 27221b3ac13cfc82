"""The parent's checks on real tensors: the tolerance rule, NaN/Inf, the error measures, the
returned object's metadata, the inputs' integrity (counted in the child, judged in the parent),
and the raw-bytes transfer from the child."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from harness import checking
from harness.sandbox.transfer import changed_elements, describe, export_tensor, read_tensor
from harness.tasks import Shape, load_reference, load_task
from harness.wire import CheckReply

TASK = load_task("conv2d_v2")
REFERENCE = load_reference(TASK)
SHAPE = Shape(size=12, kernelsize=4, channels=4, batch=2, seed=7)  # output [2, 4, 9, 9]


@pytest.fixture(scope="module")
def case() -> checking.ReferenceCase:
    return checking.reference_case(TASK, REFERENCE, SHAPE, SHAPE.seed, "cpu")


def compare(received: torch.Tensor, case: checking.ReferenceCase) -> checking.OutputCheck:
    return checking.compare_output(received, case, rtol=TASK.rtol, atol=TASK.atol)


def test_reference_case_regenerates_the_inputs_and_has_a_float64_reference(case):
    again = REFERENCE.generate_input(**SHAPE.parameters, seed=SHAPE.seed, device="cpu")
    assert torch.equal(case.data[0], again[0]) and torch.equal(case.data[1], again[1])
    assert case.expected64 is not None and case.expected64.dtype == torch.float64
    assert torch.allclose(case.expected.double(), case.expected64, rtol=1e-5, atol=1e-5)


def test_the_exact_reference_passes_with_its_own_small_errors(case):
    check = compare(case.expected.clone(), case)
    assert check.passed and check.mismatches == 0 and check.reason == ""
    assert check.max_abs_err == 0.0
    assert check.rel_l2 is not None and check.rel_l2 == check.reference_rel_l2 < 1e-6


def test_errors_within_tolerance_pass_and_just_beyond_it_fail(case):
    expected = case.expected
    tolerance = TASK.atol + TASK.rtol * expected.abs()
    inside = expected + 0.5 * tolerance
    assert compare(inside, case).passed
    outside = expected.clone()
    outside[0, 1, 2, 3] += 3 * tolerance[0, 1, 2, 3]
    check = compare(outside, case)
    assert not check.passed and check.mismatches == 1
    assert check.first_mismatches[0].index == [0, 1, 2, 3]
    assert check.first_mismatches[0].expected == pytest.approx(float(expected[0, 1, 2, 3]))
    assert check.max_abs_err == pytest.approx(float(3 * tolerance[0, 1, 2, 3]), rel=1e-3)
    assert "1 of" in check.reason and "(0, 1, 2, 3)" in check.reason


@pytest.mark.parametrize("factor", [0.5, 1.0 - 2.0**-21, 1.0, 1.0 + 2.0**-22, 1.0 + 2.0**-20, 3.0])
def test_the_timed_recheck_judges_every_element_as_the_full_check_does(case, factor):
    """The recheck of timed outputs (`figures=False`) decides in float32 only when every element
    is surely inside the tolerance: at and around its edge it agrees with the float64 check."""
    expected = case.expected
    tolerance = TASK.atol + TASK.rtol * expected.abs().double()
    signs = torch.where(torch.arange(expected.numel()).reshape(expected.shape) % 2 == 0, 1.0, -1.0).double()
    received = (expected.double() + signs * factor * tolerance).float()
    full = compare(received, case)
    quick = checking.compare_output(received, case, rtol=TASK.rtol, atol=TASK.atol, figures=False)
    assert (quick.passed, quick.mismatches, quick.verdicts.gpumode.status) == (
        full.passed,
        full.mismatches,
        full.verdicts.gpumode.status,
    )
    if factor == 0.5:
        assert full.passed and quick.max_abs_err == pytest.approx(full.max_abs_err, rel=1e-6)
    for bad in (float("nan"), float("inf")):
        received[0, 0, 0, 0] = bad
        assert not checking.compare_output(
            received, case, rtol=TASK.rtol, atol=TASK.atol, figures=False
        ).passed


def test_nan_and_inf_never_pass_and_are_reported_as_strings(case):
    received = case.expected.clone()
    received[0, 0, 0, 0] = float("nan")
    received[1, 3, 2, 1] = float("inf")
    check = compare(received, case)
    assert not check.passed and check.not_finite == 2 and check.mismatches == 2
    assert check.rel_l2 is None, "no L2 error over non-finite values"
    assert check.max_abs_err == 0.0, "the finite elements are exact"
    assert [m.received for m in check.first_mismatches] == ["nan", "inf"]
    assert "NaN/Inf" in check.reason


def test_only_the_first_five_mismatches_are_listed(case):
    received = case.expected + 1.0
    check = compare(received, case)
    assert check.mismatches == received.numel()
    assert len(check.first_mismatches) == checking.MAX_PRINT
    assert [m.index for m in check.first_mismatches][:2] == [[0, 0, 0, 0], [0, 0, 0, 1]]


def test_first_positions_scans_across_chunks(monkeypatch):
    mask = torch.zeros(3, 1000, dtype=torch.bool)
    mask[2, 999] = True
    mask[1, 5] = True
    monkeypatch.setattr(checking, "SCAN_CHUNK", 64)
    assert checking._first_positions(mask, 5) == [[1, 5], [2, 999]]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "nothing was returned"),
        ([1.0], "returned a builtins.list"),
        (torch.zeros(2, 4, 9, 9).as_subclass(type("Lazy", (torch.Tensor,), {})), "not a torch.Tensor"),
        (torch.zeros(2, 4, 9, 8), "returned shape (2, 4, 9, 8)"),
        (torch.zeros(2, 4, 9, 9, dtype=torch.float64), "returned dtype torch.float64"),
    ],
)
def test_output_problem_names_what_is_wrong_with_the_returned_object(case, tmp_path: Path, value, message):
    info = None if value is None else export_tensor(value, tmp_path / "out.bin")
    assert message in checking.output_problem(info, case.expected, aliases_input=False)


def test_output_problem_accepts_the_right_tensor_unless_it_aliases_an_input(case, tmp_path: Path):
    info = export_tensor(case.expected, tmp_path / "out.bin")
    assert checking.output_problem(info, case.expected, aliases_input=False) is None
    assert "shares memory" in checking.output_problem(info, case.expected, aliases_input=True)


def _reply(case, changed: list[int | None]) -> CheckReply:
    inputs = [describe(case.data[i]) for i in checking.data_layout(TASK, "cpu").tensor_inputs(case.data)]
    return CheckReply(token="t", id=1, inputs=inputs, inputs_changed=changed)


def test_a_single_changed_bit_is_counted_and_judged(case):
    before = [case.data[i].clone() for i in checking.data_layout(TASK, "cpu").tensor_inputs(case.data)]
    after = [b.clone() for b in before]
    assert [changed_elements(b, a) for b, a in zip(before, after)] == [0, 0]
    assert checking.inputs_problem(TASK, case, _reply(case, [0, 0])) is None
    after[1].view(torch.int32)[0, 0, 0, 0] ^= 1  # one bit of one element of the kernel
    counts = [changed_elements(b, a) for b, a in zip(before, after)]
    assert counts == [0, 1]
    assert (
        checking.inputs_problem(TASK, case, _reply(case, counts))
        == "input 'kernel' was modified (1 elements differ)"
    )
    # NaN stays NaN as a value, but its bits are compared: a changed NaN payload is counted
    nan = torch.full((3,), float("nan"))
    other = nan.clone()
    other.view(torch.int32)[1] ^= 1
    assert changed_elements(nan, nan.clone()) == 0 and changed_elements(nan, other) == 1


def test_inputs_that_changed_kind_are_named(case):
    before = case.data[0]
    assert changed_elements(before, before.reshape(-1)) is None  # another shape
    assert changed_elements(before, before.double()) is None
    assert changed_elements(before, [1.0]) is None
    reply = _reply(case, [0, None])
    assert "could not be compared" in checking.inputs_problem(TASK, case, reply)
    reply.inputs[0] = describe([1.0])
    assert "no longer a plain tensor" in checking.inputs_problem(TASK, case, reply)
    reply = _reply(case, [0, 0])
    reply.inputs[1] = describe(case.data[1].reshape(-1))
    assert "changed shape or dtype" in checking.inputs_problem(TASK, case, reply)
    assert "not reported" in checking.inputs_problem(TASK, case, _reply(case, [0]))


def test_the_float64_reference_is_skipped_and_said_so_when_the_shape_is_too_big_for_the_cpu(monkeypatch):
    monkeypatch.setattr(checking, "MAX_CPU_FLOAT64_FLOPS", 0.0)
    shape = TASK.smoke[0]
    # A seed no other test uses: the parent keeps its last reference case for the next caller.
    case = checking.reference_case(TASK, REFERENCE, shape, shape.seed + 1, "cpu")
    assert case.expected64 is None and "exact answer skipped" in case.note
    check = checking.compare_output(case.expected.clone(), case, rtol=TASK.rtol, atol=TASK.atol)
    assert check.passed and check.rel_l2 is None and check.note == case.note
    wrong = case.expected.clone()
    wrong.view(-1)[0] += 1.0
    check = checking.compare_output(wrong, case, rtol=TASK.rtol, atol=TASK.atol)
    assert check.verdicts.gpumode.status == check.verdicts.accurate.status == "fail"
    assert "no exact answer (exact answer skipped" in check.verdicts.accurate.reason


def _read(directory: Path, name: str, info) -> torch.Tensor:
    directory_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return read_tensor(directory_fd, name, info)
    finally:
        os.close(directory_fd)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_tensors_travel_as_raw_bytes_and_come_back_equal(tmp_path: Path, dtype):
    value = (torch.arange(24).reshape(2, 3, 4) % 3).to(dtype)
    transposed = value.transpose(0, 2)  # not contiguous: exported in C order
    info = export_tensor(transposed, tmp_path / "t.bin")
    assert info.written and info.contiguous is False and info.shape == [4, 3, 2]
    assert torch.equal(_read(tmp_path, "t.bin", info), transposed)
    empty = export_tensor(torch.empty(0, 3, dtype=dtype), tmp_path / "e.bin")
    assert _read(tmp_path, "e.bin", empty).shape == (0, 3)


def test_a_file_that_does_not_match_its_description_is_refused(tmp_path: Path):
    info = export_tensor(torch.ones(4, 4), tmp_path / "t.bin")
    (tmp_path / "t.bin").write_bytes(b"\0" * 60)
    with pytest.raises(ValueError, match="holds 60 bytes"):
        _read(tmp_path, "t.bin", info)
    lying = info.model_copy(update={"dtype": "torch.complex64"})
    with pytest.raises(ValueError, match="no tensor"):
        _read(tmp_path, "t.bin", lying)


def test_a_file_replaced_by_a_link_fifo_or_directory_is_refused_without_a_look_at_its_target(tmp_path: Path):
    """The parent never follows a link the child made, never waits on a FIFO, never reads another
    file (issue 15): the reason says only what the child did."""
    hidden = tmp_path / "hidden.bin"
    info = export_tensor(torch.ones(4, 4), hidden)  # the right size: following the link would read it
    io_dir = tmp_path / "io"
    io_dir.mkdir()
    (io_dir / "link.bin").symlink_to(hidden)
    os.mkfifo(io_dir / "fifo.bin")
    (io_dir / "dir.bin").mkdir()
    os.link(hidden, io_dir / "hard.bin")
    refusals = {
        "link.bin": "replaced by a symbolic link",
        "fifo.bin": "replaced by a FIFO",
        "dir.bin": "replaced by a directory",
        "hard.bin": "replaced by a hard link",
        "absent.bin": "is missing",
    }
    for name, reason in refusals.items():
        with pytest.raises(ValueError, match=reason) as refused:
            _read(io_dir, name, info)
        assert str(tmp_path) not in str(refused.value) and "64" not in str(refused.value)


def test_objects_other_than_exact_tensors_are_described_not_exported(tmp_path: Path):
    class Sneaky(torch.Tensor):
        pass

    info = export_tensor(torch.ones(3).as_subclass(Sneaky), tmp_path / "s.bin")
    assert not info.exact_tensor and not info.written and info.type_name.endswith("Sneaky")
    assert not (tmp_path / "s.bin").exists()
    assert describe((1, 2)).type_name == "builtins.tuple"


def test_a_mismatch_where_the_reference_itself_is_off_is_named(case):
    """A reference whose own rounding is off at one element: an output equal to the exact answer
    fails GPU MODE's check there, passes the accurate one, and the reason says the exact answer
    fails GPU MODE's check there too."""
    expected = case.expected.clone()
    expected[0, 0, 0, 0] += 0.01  # the 'reference' is off the float64 answer beyond tolerance here
    noisy = checking.ReferenceCase(data=case.data, expected=expected, expected64=case.expected64)
    exact = case.expected64.to(torch.float32)
    check = checking.compare_output(exact, noisy, rtol=TASK.rtol, atol=TASK.atol)
    assert check.passed and check.mismatches == 1, "timed: it passes one verdict"
    assert check.verdicts.gpumode.status == "fail" and check.verdicts.gpumode.failures == 1
    assert check.verdicts.accurate.status == "pass" and check.verdicts.accurate.reason == ""
    assert check.mismatches_where_reference_is_off == 1
    assert check.reason.startswith(
        "GPU MODE check: fails 1 of 648 elements, 1 of them where the exact answer fails too"
    )


def test_a_wrong_output_is_not_excused_by_the_reference(case):
    wrong = case.expected.clone()
    wrong[0, 0, 0, 0] += 0.5
    check = compare(wrong, case)
    assert not check.passed
    assert check.verdicts.gpumode.failures == check.verdicts.accurate.failures == 1
    assert check.mismatches_where_reference_is_off == 0 and "fails too" not in check.reason
    assert "accurate check: 1 of 648 elements are off the exact answer" in check.reason


WIDE = Shape(size=24, kernelsize=8, channels=16, batch=1, seed=11)  # K = C*k*k = 1024 terms a sum


@pytest.fixture(scope="module")
def wide_case() -> checking.ReferenceCase:
    return checking.make_reference_case(REFERENCE, WIDE, WIDE.seed, "cpu")


def _exact_sum_of(data: tuple, rounded: callable) -> torch.Tensor:
    """The convolution of the inputs as `rounded` leaves them, summed exactly (float64), in fp32."""
    x, w, _ = data
    return torch.nn.functional.conv2d(rounded(x).double(), rounded(w).double()).float()


def _to_tf32(t: torch.Tensor) -> torch.Tensor:
    """Round to TF32's 10-bit mantissa (round half away from zero on the bits)."""
    bits = t.contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)


def test_the_rounded_exact_answer_passes_accurate_where_the_reference_is_off(wide_case):
    """Seeded noise of one fp32 ulp-scale on the reference stands in for cuDNN's rounding: where it
    moves the reference past the tolerance the exact answer fails GPU MODE's rule, never accurate."""
    exact = wide_case.exact().float()
    off = wide_case.expected.clone()
    off.view(-1)[::97] += 0.003
    shifted = checking.ReferenceCase(
        data=wide_case.data, expected=off, expected64=wide_case.exact(), reference=REFERENCE
    )
    check = checking.compare_output(exact, shifted, rtol=TASK.rtol, atol=TASK.atol)
    assert check.verdicts.gpumode.status == "fail" and check.verdicts.accurate.status == "pass"
    assert check.mismatches_where_reference_is_off == check.mismatches > 0
    assert check.accuracy.rel_l2 < 1e-7 and check.accuracy.max_err_over_scale < 1e-6


@pytest.mark.parametrize("rounded", [_to_tf32, lambda t: t.to(torch.bfloat16).float()], ids=["tf32", "bf16"])
def test_reduced_precision_inputs_fail_both_verdicts_even_when_summed_exactly(wide_case, rounded):
    check = compare(_exact_sum_of(wide_case.data, rounded), wide_case)
    assert check.verdicts.gpumode.status == check.verdicts.accurate.status == "fail"
    assert not check.passed and check.verdicts.accurate.failures > 0
    assert check.accuracy.rel_l2 > 1e-4


@pytest.mark.parametrize("damage", ["nan", "inf", "unwritten"])
def test_nan_inf_and_a_partial_write_fail_both_verdicts(wide_case, damage):
    output = wide_case.exact().float()
    if damage == "unwritten":
        output[0, :, 5:] = float("nan")  # the buffer is NaN before the call: what was not written
    else:
        output[0, 0, 0, 0] = float(damage)
    check = compare(output, wide_case)
    assert check.verdicts.gpumode.status == check.verdicts.accurate.status == "fail"
    assert check.not_finite > 0 and "NaN/Inf" in check.verdicts.accurate.reason
    assert check.accuracy.rel_l2 is None and check.accuracy.max_err_over_scale is None


def test_the_reference_passes_both_verdicts_and_measures_its_own_error(wide_case):
    check = compare(wide_case.expected.clone(), wide_case)
    assert check.verdicts.gpumode.passed and check.verdicts.accurate.passed
    assert 0 < check.accuracy.rel_l2 < 1e-6 and 0 < check.accuracy.max_err_over_scale < 1e-5


@pytest.mark.parametrize("shape", [(4, 64, 121, 121), (3,), (2, 1, 5), (1, 1)])
def test_mismatch_positions_are_torchs_unravelled_indices(shape):
    numel = 1
    for size in shape:
        numel *= size
    for flat in {0, 1, numel - 1, numel // 3, numel // 2}:
        assert checking._unravel(flat, shape) == [
            int(v) for v in torch.unravel_index(torch.tensor(flat), shape)
        ]


def test_a_large_tensor_travels_in_slices_and_comes_back_equal(tmp_path: Path):
    from harness.sandbox import transfer

    value = torch.randn(3, 1500, 1300).transpose(1, 2)  # 23 MB, above PARALLEL_IO_BYTES, not contiguous
    assert value.numel() * 4 > transfer.PARALLEL_IO_BYTES
    info = export_tensor(value, tmp_path / "big.bin")
    assert (tmp_path / "big.bin").stat().st_size == value.numel() * 4
    assert torch.equal(_read(tmp_path, "big.bin", info), value)


def test_timed_outputs_travel_in_a_sealed_shared_buffer_that_the_parent_sizes():
    """The memfd a child writes its timed outputs to: it cannot shrink it (a mapping in the parent
    never loses its pages), nor seal it against growing; whatever it grows it to, the parent reads
    only the size it set itself; an output that does not fit is not put there (it goes to a file)."""
    import fcntl
    import os

    from harness.sandbox.transfer import SharedBuffer, export_shared, read_shared
    from harness.sandbox.workspace import create_shared_memory

    fd = create_shared_memory("harness-timed-output")
    os.ftruncate(fd, 4096)
    child_fd = os.dup(fd)
    with pytest.raises(OSError):
        os.ftruncate(child_fd, 100)
    with pytest.raises(OSError):
        fcntl.fcntl(child_fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_GROW)
    child, parent = SharedBuffer(child_fd, cuda=False), SharedBuffer(fd, cuda=False)
    try:
        value = torch.randn(4, 8)
        info = export_shared(value, child, 4096)
        assert info.written and info.shared and info.nbytes == 128
        received = read_shared(parent, 4096, info)
        assert torch.equal(received, value)
        child.tensor.fill_(0)
        assert torch.equal(received, value), "the parent holds a copy, not the child's memory"
        assert not export_shared(torch.randn(2000), child, 4096).written, "8000 bytes do not fit"
        os.ftruncate(child_fd, 1 << 40)  # the child grows it: the parent still maps what it set
        with pytest.raises(ValueError, match="needs 16384 bytes, the shared buffer holds 4096"):
            read_shared(parent, 4096, info.model_copy(update={"shape": [64, 64]}))
        assert parent.size == 4096
    finally:
        child.close()
        parent.close()
        os.close(child_fd)
        os.close(fd)


def test_a_reference_without_a_float64_path_or_scale_leaves_gpu_modes_rule_to_decide(tmp_path):
    """A task's reference that fails on float64 inputs, and an `output_scale` that raises: no exact
    answer and no scale, said so, and the accurate verdict is GPU MODE's rule (never a crash)."""
    from harness.tasks.spec import _load_module_file

    source = (
        Path(REFERENCE.__file__).read_text()
        + """

_real = ref_kernel


def ref_kernel(data):
    if data[0].dtype == torch.float64:
        raise TypeError("this reference computes in float32 only")
    return _real(data)


def output_scale(data):
    raise RuntimeError("no scale here")
"""
    )
    path = tmp_path / "fp32_only_reference.py"
    path.write_text(source)
    (tmp_path / "utils.py").write_bytes((Path(REFERENCE.__file__).parent.parent / "utils.py").read_bytes())
    reference = _load_module_file(path)
    case = checking.make_reference_case(reference, SHAPE, 99, "cpu")
    assert case.expected64 is None and "the reference failed on float64 inputs (TypeError" in case.note
    assert case.scale() is None
    good = compare(case.expected.clone(), case)
    assert good.passed and good.verdicts.accurate.passed and good.accuracy.rel_l2 is None
    wrong = case.expected.clone()
    wrong.view(-1)[0] += 1.0
    check = compare(wrong, case)
    assert check.verdicts.gpumode.status == check.verdicts.accurate.status == "fail"
    assert "no exact answer (exact answer not computed" in check.verdicts.accurate.reason


def test_inputs_travel_to_the_child_as_raw_bytes_in_the_parents_memfd_never_the_output_buffer():
    """The parent's data tuple, item by item: tensors of every kind as bytes in its memfd (a
    transposed one keeps its stride), numbers, strings, None, NaN, nested tuples, lists and dicts
    by value; the output buffer only by dtype and shape (the reference wrote its answer into the
    parent's), made NaN (floats) or zeros in the child. The child's tensors are its own."""
    import fcntl

    from harness.errors import HarnessError
    from harness.sandbox.protocol import REQUEST, CheckRequest, OutputBufferItem, TensorItem
    from harness.sandbox.transfer import InputsWriter, SharedBuffer, output_keys, read_inputs, tensor_inputs
    from harness.sandbox.workspace import create_shared_memory

    weights = torch.randn(3, 5).t()  # dense, not contiguous
    answer = torch.full((2, 2), 42.0)  # the reference's answer, written into the output buffer
    data = (
        torch.randn(4, 8),
        weights,
        torch.arange(6, dtype=torch.int64)[::2],  # a slice with gaps: handed over contiguous
        torch.tensor([True, False]),
        torch.randn(3, dtype=torch.bfloat16),
        torch.empty(0, 3),
        7,
        2.5,
        float("nan"),
        None,
        "mean",
        (1, (2.0, "x"), [3, {"scale": 0.5, "bias": torch.ones(2)}]),
        answer,
        torch.zeros(2, dtype=torch.int32),
    )
    fd = create_shared_memory("harness-inputs")
    writer = InputsWriter(fd, cuda=False)
    items = writer.write(data, output_keys=(12,))
    assert isinstance(items[12], OutputBufferItem) and isinstance(items[13], TensorItem)
    assert items[1].stride == [1, 5] and items[2].stride is None
    assert all(item.offset % 256 == 0 for item in items if isinstance(item, TensorItem))
    # the request that carries them is plain JSON, and the answer's bytes are nowhere in the memfd
    request = REQUEST.validate_json(CheckRequest(id=1, data=items).model_dump_json())
    memory = os.pread(fd, os.fstat(fd).st_size, 0)
    assert answer.numpy().tobytes()[:8] not in memory
    child_fd = os.dup(fd)
    with pytest.raises(OSError):
        os.ftruncate(child_fd, 0)  # sealed: the parent's mapping never loses its pages
    with pytest.raises(OSError):
        fcntl.fcntl(child_fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_GROW)
    reader = SharedBuffer(child_fd, cuda=False)
    try:
        rebuilt = read_inputs(request.data, reader, "cpu")
        for index in (0, 1, 2, 3, 4, 5, 13):
            assert rebuilt[index].dtype == data[index].dtype and torch.equal(rebuilt[index], data[index])
        assert rebuilt[1].stride() == (1, 5) and rebuilt[2].is_contiguous()
        assert rebuilt[6:11] == (7, 2.5, rebuilt[8], None, "mean") and rebuilt[8] != rebuilt[8]
        assert type(rebuilt[6]) is int and type(rebuilt[7]) is float
        nested = rebuilt[11]
        assert nested[:2] == (1, (2.0, "x")) and isinstance(nested[2], list) and nested[2][0] == 3
        assert nested[2][1]["scale"] == 0.5 and torch.equal(nested[2][1]["bias"], torch.ones(2))
        assert rebuilt[12].shape == (2, 2) and bool(rebuilt[12].isnan().all())
        assert output_keys(request.data) == (12,)  # the child finds the buffer in the items
        assert tensor_inputs(rebuilt, (12,)) == [0, 1, 2, 3, 4, 5, 13]
        rebuilt[0].fill_(0)
        assert not torch.equal(read_inputs(request.data, reader, "cpu")[0], rebuilt[0]), (
            "a copy, not the memfd"
        )
        # a second, larger tuple grows the memfd; the child maps it anew
        bigger = (torch.randn(4096), 1)
        rebuilt = read_inputs(writer.write(bigger, output_keys=()), reader, "cpu")
        assert torch.equal(rebuilt[0], bigger[0]) and rebuilt[1] == 1
        # a dict's output buffer, by its key
        mapping = {"x": torch.randn(3), "out": torch.full((3,), 42.0), "scale": 2}
        items = writer.write(mapping, output_keys=("out",))
        rebuilt = read_inputs(items, reader, "cpu")
        assert output_keys(items) == ("out",) and bool(rebuilt["out"].isnan().all())
        assert torch.equal(rebuilt["x"], mapping["x"]) and rebuilt["scale"] == 2
        assert tensor_inputs(rebuilt, ("out",)) == ["x"]
        # several output buffers (helion's fp8_quant: values and scales), neither's bytes travel
        quantised = (torch.randn(8), torch.full((8,), 7, dtype=torch.int8), torch.full((2,), 42.0))
        items = writer.write(quantised, output_keys=(1, 2))
        rebuilt = read_inputs(items, reader, "cpu")
        assert output_keys(items) == (1, 2) and isinstance(items[0], TensorItem)
        assert not rebuilt[1].any() and bool(rebuilt[2].isnan().all())
        assert torch.equal(rebuilt[0], quantised[0]) and tensor_inputs(rebuilt, (1, 2)) == [0]
    finally:
        reader.close()
        writer.close()
        os.close(child_fd)
        os.close(fd)
    with pytest.raises(HarnessError, match=r"item 1\[0\] is a object: only tensors"):
        InputsWriter(create_shared_memory("x"), cuda=False).write((1, (object(),)), output_keys=())
    with pytest.raises(HarnessError, match="complex"):
        InputsWriter(create_shared_memory("x"), cuda=False).write(
            (torch.zeros(2, dtype=torch.complex128),), ()
        )


def test_cudnn_and_cublas_allocation_failures_are_out_of_memory_and_their_internal_errors_only_when_memory_is_scarce():
    """On the H200 (2026-12-03) the parent's cuDNN reference beside a GPU memory hog failed with
    CUDNN_STATUS_INTERNAL_ERROR and the run ended with exit 2: the libraries' own words for a
    failed allocation count as running out of memory, through the exceptions raised from them,
    and an internal error counts only while the GPU's memory is scarce (never without CUDA)."""
    from harness.checking import out_of_memory
    from harness.errors import HarnessError

    for words in (
        "cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
        "CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate",
    ):
        try:
            try:
                raise RuntimeError(words)
            except RuntimeError as inner:
                raise HarnessError("the task's reference failed on smoke[0]") from inner
        except HarnessError as outer:
            assert out_of_memory(outer) is outer.__cause__
    internal = RuntimeError("cuDNN error: CUDNN_STATUS_INTERNAL_ERROR")
    if not torch.cuda.is_available():
        assert out_of_memory(internal) is None
    assert out_of_memory(RuntimeError("cuDNN error: CUDNN_STATUS_BAD_PARAM")) is None


def test_a_timed_check_asks_for_the_exact_answer_only_where_gpu_modes_rule_fails():
    """Where GPU MODE's rule fails at a few elements, the timed check (`figures=False`) takes the
    exact answer at those elements from the task's `exact_answer_at` (conv2d's `ref_kernel_at`)
    and reaches the verdicts the whole exact answer reaches, without making it; a function that
    fails sends it back to the whole exact answer."""
    assert TASK.exact_answer_at == "ref_kernel_at"
    data = REFERENCE.generate_input(**SHAPE.parameters, seed=SHAPE.seed, device="cpu")
    exact = REFERENCE.ref_kernel(tuple(t.double() for t in data))
    expected = exact.float()
    expected[0, 1, 2, 3] += 1.0  # the reference off at one element: there only `accurate` passes
    received = exact.float()
    received[1, 0, 4, 5] += 1.0  # the candidate off at another: both verdicts fail there
    received[1, 3, 8, 8] = float("nan")

    def judged(exact_at: str | None) -> tuple[checking.ReferenceCase, checking.OutputCheck]:
        case = checking.ReferenceCase(
            data=data,
            expected=expected,
            reference=REFERENCE,
            exact_function="ref_kernel",
            exact_at_function=exact_at,
        )
        return case, checking.compare_output(received, case, rtol=TASK.rtol, atol=TASK.atol, figures=False)

    at_elements, quick = judged("ref_kernel_at")
    whole, full = judged(None)
    assert at_elements.expected64 is None and whole.expected64 is not None
    assert (quick.verdicts.gpumode.failures, quick.verdicts.accurate.failures) == (3, 2)
    assert quick.mismatches_where_reference_is_off == full.mismatches_where_reference_is_off == 1
    assert quick.verdicts == full.verdicts and quick.reason == full.reason
    failing, fallback = judged("generate_input")  # called as f(data, positions): it raises
    assert failing.expected64 is not None and fallback.verdicts == full.verdicts


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cpu_tensors_in_data_made_on_cuda_reach_the_child_on_the_cpu():
    """GPU MODE's data may mix devices (nvfp4_group_gemm hands its scale factors on the CPU beside
    CUDA tensors): on CUDA such data is the task's (not `unsupported`), and the child gets each
    tensor, the output buffer included, on the device it was made on."""
    import types

    from harness.sandbox.transfer import InputsWriter, SharedBuffer, read_inputs
    from harness.sandbox.workspace import create_shared_memory
    from harness.tasks.spec import generate_inputs

    def generate_input(size: int, seed: int):
        return torch.randn(size, device="cuda"), torch.arange(size), torch.empty(size)

    data = generate_inputs(types.SimpleNamespace(generate_input=generate_input), {"size": 4}, 1, "cuda")
    fd = create_shared_memory("harness-inputs")
    items = InputsWriter(fd, cuda=True).write(data, output_keys=(2,))
    rebuilt = read_inputs(items, SharedBuffer(os.dup(fd), cuda=True), "cuda")
    assert [t.device.type for t in rebuilt] == ["cuda", "cpu", "cpu"]
    assert torch.equal(rebuilt[0], data[0]) and torch.equal(rebuilt[1], data[1])
    assert bool(rebuilt[2].isnan().all())


def _huge(nbytes: int) -> torch.Tensor:
    """A tensor whose nbytes is `nbytes` but holds one element (an expanded view)."""
    return torch.zeros(1, dtype=torch.uint8).expand(nbytes)


def test_the_parents_large_works_run_one_at_a_time_and_small_ones_never_wait():
    import threading
    import time

    gate = checking._WorkGate()
    pool = 2 * checking.kept_cases_budget("cpu")
    inside, leave, order = threading.Event(), threading.Event(), []

    def first():
        with gate.work("cpu", pool * 3 // 4):
            order.append("first in")
            inside.set()
            leave.wait(10)
            order.append("first out")

    def second():
        with gate.work("cpu", pool * 3 // 4):
            order.append("second in")

    threads = [threading.Thread(target=first)]
    threads[0].start()
    assert inside.wait(10)
    threads.append(threading.Thread(target=second))
    threads[1].start()
    with gate.work("cpu", 1024):  # small work goes by
        order.append("small")
    time.sleep(0.2)
    assert "second in" not in order  # held back while the first's work is in flight
    leave.set()
    for thread in threads:
        thread.join(10)
    assert order == ["first in", "small", "first out", "second in"]
    with gate.work("cpu", pool * 2):  # larger than the pool: runs alone, never refused
        assert gate.in_flight["cpu"] == pool * 2
    assert gate.in_flight["cpu"] == 0


def test_kept_cases_beyond_the_newest_stay_within_their_budget():
    budget = checking.kept_cases_budget("cpu")
    checking.forget_cases()
    try:
        with checking.keeping_reference_cases(8):  # the count alone would keep eight
            for k in range(4):
                slot = checking._CaseSlot()
                slot.case = checking.ReferenceCase(data=(_huge(budget // 3),), expected=_huge(1))
                with checking._recent_cases_lock:
                    checking._recent_cases[("t", "r", k, 0, "cpu")] = slot
                    checking._evict_cases()
            kept = [key[2] for key in checking._recent_cases]
        assert kept == [1, 2, 3]  # the newest and the two older ones that fit the budget
    finally:
        checking.forget_cases()


def test_a_kept_cases_exact_answer_counts_against_the_budget():
    # the float64 exact answer is twice the reference's bytes: uncounted, the kept cases held three
    # times their budget (bioml trimul on an H100: the parent at 57-65 GiB, every child out of memory)
    budget = checking.kept_cases_budget("cpu")
    checking.forget_cases()
    try:
        with checking.keeping_reference_cases(8):
            for k in range(4):
                slot = checking._CaseSlot()
                slot.case = checking.ReferenceCase(
                    data=(_huge(1),), expected=_huge(1), expected64=_huge(budget // 3)
                )
                with checking._recent_cases_lock:
                    checking._recent_cases[("t", "r", k, 0, "cpu")] = slot
                    checking._evict_cases()
            kept = [key[2] for key in checking._recent_cases]
        assert kept == [1, 2, 3]
    finally:
        checking.forget_cases()


def test_the_parents_reference_and_checks_record_no_autograd_graph():
    # a reference of nn.Linear layers (GPU MODE's amd mla-decode, bioml trimul): with autograd on,
    # its answer keeps every intermediate alive for as long as the case is kept (on an H100 the
    # parent held 51-73 GiB for mla-decode and every child beside it ran out of memory)
    import types

    seen = []

    def generate_input(n: int, seed: int):
        return (torch.randn(n, 8, generator=torch.Generator().manual_seed(seed)),)

    def ref_kernel(data):
        layer = torch.nn.Linear(8, 8, dtype=data[0].dtype)  # its weight requires grad
        seen.append(torch.is_grad_enabled())
        return layer(data[0])

    def check_implementation(data, output):
        seen.append(torch.is_grad_enabled())
        return "" if output.shape == (data[0].shape[0], 8) else "wrong shape"

    reference = types.SimpleNamespace(
        __name__="linear_reference",
        generate_input=generate_input,
        ref_kernel=ref_kernel,
        check_implementation=check_implementation,
    )
    case = checking.make_reference_case(reference, Shape(n=4, seed=3), 3, "cpu")
    assert case.expected.grad_fn is None and not case.expected.requires_grad
    assert case.exact() is not None and case.exact().grad_fn is None
    assert checking.run_check_implementation(case.expected.clone(), case).passed
    assert seen and not any(seen)


def test_work_within_a_threads_own_large_work_never_waits_for_it():
    # the float64 exact answer asks the gate from wherever it is computed: inside a reference run
    # or a check that holds the gate already it would otherwise wait for itself
    import threading

    gate = checking._WorkGate()
    pool = 2 * checking.kept_cases_budget("cpu")
    seen = []

    def nested():
        with gate.work("cpu", pool * 3 // 4), gate.work("cpu", pool * 3 // 4):
            seen.append(gate.in_flight["cpu"])

    thread = threading.Thread(target=nested, daemon=True)  # waiting for itself, it never ends
    thread.start()
    thread.join(20)
    assert seen == [pool * 3 // 4] and gate.in_flight["cpu"] == 0
