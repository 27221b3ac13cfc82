"""Trusted checking, in the parent only: the reference, the comparison, both verdicts per call
(harness.verdicts says what each one accepts).

The parent alone makes each call's inputs with the task's own generator and seed (the child gets
them as raw bytes, harness.sandbox.transfer, and never runs the task's reference module), computes
the reference from them, and compares what the child sent back:

- the returned object must be an exact `torch.Tensor` (not a subclass) with the reference's
  shape, dtype and device type, and must not share memory with an input;
- the input tensors, as the child holds them after the call, must still be plain tensors of their
  shape and dtype and equal bit for bit to the child's own copy from before the call (compared in
  the child on the device, so that large inputs never travel back; like every report of the
  child, a candidate that rewrites the harness in its process can fake it, see
  docs/threat-model.md);
- every element must be finite (the output buffer is NaN before the call, so an element the
  candidate did not write stays NaN) and within `atol + rtol * |expected|` of the fp32
  reference, as GPU MODE's `verbose_allclose` has it.

Alongside the verdict: the count of mismatched elements with the first few (position, received,
expected), the largest absolute error, and the relative L2 error against a float64 reference
(computed on the CPU for small shapes and on the device for large ones; skipped, and said so,
only when it would take too long on a CPU).
"""

from __future__ import annotations

import gc
import math
import os
import re
import resource
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import ModuleType

import torch

from harness.errors import HarnessError
from harness.tasks import Shape, TaskSpec
from harness.tasks.layout import DataLayout, copied, learn_layout, structure
from harness.tasks.spec import TaskUnsupported, generate_inputs, load_reference, tensors_in
from harness.verdicts import Accuracy, Verdict, Verdicts
from harness.wire import CheckReply, Mismatch, OutputComparison, TensorInfo

MAX_PRINT = 5
SMALL_FOR_CPU_FLOAT64 = 1 << 22  # elements of all data together: float64 reference on the CPU
MAX_CPU_FLOAT64_FLOPS = 5e10  # above this the float64 reference is not computed on the CPU
SCAN_CHUNK = 1 << 20
# elements compared at once (`compare_output`): each float64 temporary of a chunk is 128 MiB, so
# that the parent's check of a large output needs about a byte per element beyond the tensors
# it holds, not five float64 copies (the parent shares the GPU with the children it checks)
COMPARE_CHUNK = 1 << 24
# A timed call's check where GPU MODE's rule fails at this many elements or fewer asks the task
# for the exact answer at those elements only (`ReferenceCase.exact_at`), when the task can give
# it, instead of the whole exact answer (on the H200 a float64 convolution costs 1.4-2.8x the
# fp32 reference: 5.4 s of the seed tournament's benchmark phase, where the tf32x3 revisions miss
# GPU MODE's tolerance at one element of three million)
EXACT_AT_MAX = 4096


# a library's own words for an allocation that failed (its workspace, its handle)
ALLOCATION_FAILED = ("can't allocate memory", "CUDA error: out of memory", "STATUS_ALLOC_FAILED")
# cuDNN's and cuBLAS's words for a failure that, with the GPU's memory held elsewhere, is one:
# on the H200 (2026-12-03) the parent's conv2d reference beside a candidate that held all but
# 256 MiB of the GPU failed with CUDNN_STATUS_INTERNAL_ERROR, and the run ended (exit 2)
INTERNAL_FAILURE = ("CUDNN_STATUS_INTERNAL_ERROR", "CUBLAS_STATUS_INTERNAL_ERROR")
MEMORY_WORDS = (  # CUDA's allocator, cuDNN's and cuBLAS's workspaces, the driver, the CPU's
    "out of memory",
    "OutOfMemoryError",
    "ALLOC_FAILED",
    "cudaErrorMemoryAllocation",
    "CUDA_ERROR_OUT_OF_MEMORY",
    "MemoryError",
    # a CUDA context that cannot be made while a neighbour holds the GPU's memory (seen on the H200)
    "cudaErrorDevicesUnavailable",
    # cuDNN's and cuBLAS's workspaces: ALLOC_FAILED, or INTERNAL_ERROR as the parent's own cuDNN
    # call gave beside a hog on the H200 (a retry costs only time: what fails alone counts)
    *ALLOCATION_FAILED,
    *INTERNAL_FAILURE,
)


def says_out_of_memory(text: str) -> bool:
    """Whether a child's error or log says that memory ran out (`MEMORY_WORDS`): a failure that
    may be a neighbour's doing where children share a GPU or a host."""
    return any(words in text for words in MEMORY_WORDS)


SCARCE_GPU_BYTES = 2 * 1024**3  # free GPU memory under which such a failure counts as memory's


def _gpu_memory_scarce() -> bool:
    """Whether the current GPU has under SCARCE_GPU_BYTES free (False without CUDA in use)."""
    if not torch.cuda.is_initialized():
        return False
    try:
        free, _total = torch.cuda.mem_get_info()
    except RuntimeError:
        return False
    return free < SCARCE_GPU_BYTES


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    """`exc` and the exceptions it was raised from or during, 16 at most."""
    seen = 0
    while exc is not None and seen < 16:
        yield exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1


def out_of_memory(exc: BaseException | None) -> BaseException | None:
    """`exc`, or the exception it was raised from, that is an allocation that failed (CUDA out of
    memory, from the caching allocator or from CUDA itself, a MemoryError, torch's CPU allocator
    giving up, cuDNN's or cuBLAS's ALLOC_FAILED), or an internal error of cuDNN or cuBLAS while
    the GPU's memory is scarce (`INTERNAL_FAILURE`); None when there is none."""
    for link in _chain(exc):
        if isinstance(link, MemoryError | torch.OutOfMemoryError):
            return link
        if isinstance(link, RuntimeError) and any(words in str(link) for words in ALLOCATION_FAILED):
            return link
        if (
            isinstance(link, RuntimeError)
            and any(words in str(link) for words in INTERNAL_FAILURE)
            and _gpu_memory_scarce()
        ):
            return link
    return None


_ASKED = re.compile(r"allocate (\d+) bytes|Tried to allocate ([\d.]+) (GiB|MiB|KiB|B)\b")
_UNITS = {"GiB": 1024**3, "MiB": 1024**2, "KiB": 1024, "B": 1}


def memory_bytes(device: str) -> int:
    """The memory of the device the parent works on in all: the current GPU's on CUDA (where torch
    sees one), else the host's."""
    if device == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def larger_than_memory(exc: BaseException, device: str) -> str | None:
    """When the allocation that failed (`out_of_memory`) asked for more than this machine's
    memory (the host's, or the GPU's on CUDA) has in all: the one line that says so; else None
    (the memory may be held elsewhere, and the work may fit another time)."""
    failed = out_of_memory(exc)
    found = _ASKED.search(str(failed)) if failed is not None else None
    if found is None:
        return None
    asked = int(found[1]) if found[1] else int(float(found[2]) * _UNITS[found[3]])
    total = memory_bytes(device)
    where = f"of this machine's {'GPU' if device == 'cuda' else 'memory'}"
    bound, _hard = resource.getrlimit(resource.RLIMIT_DATA)
    if device != "cuda" and bound != resource.RLIM_INFINITY and bound < total:
        # the harness's own bound on the CPU (harness.sandbox.limits.bound_parent_memory)
        total, where = bound, "the harness's own process may hold (parent_memory_bytes)"
    if asked <= total:
        return None
    return (
        f"the parent's inputs or reference asked for {asked / 1024**3:.4g} GiB at once, more than the "
        f"{total / 1024**3:.4g} GiB {where}"
    )


@dataclass
class ReferenceCase:
    """One shape's inputs and expected outputs, computed in the parent. The exact answer
    (`expected64`) and the output's scale are computed from `reference` when first asked for
    (`exact`, `scale`), unless given; `note` says why the exact answer is missing."""

    data: tuple  # or the one object generate_input returned (a tensor, a dict)
    expected: object  # a tensor, or a tuple, list or dict of tensors and values
    expected64: torch.Tensor | None = None
    note: str | None = None
    reference: ModuleType | None = field(default=None, repr=False)
    flops: float | None = None  # the reference module's `flops` of the shape, when it has one
    # the reference module's function that makes the exact answer on float64 inputs (the task's
    # `exact_answer`); None: the task has none
    exact_function: str | None = "ref_kernel"
    # the reference module's function that makes the exact answer at given output elements (the
    # task's `exact_answer_at`); None: only the whole exact answer
    exact_at_function: str | None = None
    _exact_done: bool = field(default=False, repr=False)
    _scale: torch.Tensor | None = field(default=None, repr=False)
    _scale_done: bool = field(default=False, repr=False)

    @torch.no_grad()
    def exact(self) -> torch.Tensor | None:
        """The exact answer: the task's reference in float64 on the same fp32 inputs (rounded once,
        at the end), computed once per case; None when skipped (`note` says why)."""
        if self.exact_function is None and not self._exact_done:
            self.note = "the task has no exact answer"
        elif not isinstance(self.expected, torch.Tensor) and not self._exact_done:
            self.note = "no exact answer for an output of several parts"
        elif self.expected64 is None and not self._exact_done and self.reference is not None:
            try:
                function = getattr(self.reference, self.exact_function)
                self.expected64, self.note = _exact_answer(function, self.data, self.flops)
            except Exception as exc:  # a task's reference that has no float64 path
                if (
                    out_of_memory(exc) is not None
                ):  # the parent's memory, not the task's reference: no verdict
                    raise
                self.note = (
                    f"exact answer not computed: the reference failed on float64 inputs ({_one_line(exc)})"
                )
            if self.expected64 is not None and tuple(self.expected64.shape) != tuple(self.expected.shape):
                shape = tuple(self.expected64.shape)
                self.expected64, self.note = (
                    None,
                    f"exact answer not used: its shape {shape} is not the reference's",
                )
        self._exact_done = True
        return self.expected64

    @torch.no_grad()
    def exact_at(self, positions: torch.Tensor) -> torch.Tensor | None:
        """The exact answer at the output elements `positions` (an [n, ndim] index tensor) as n
        float64 values: from the whole exact answer when it is made, else from the task's
        `exact_answer_at` function; None when there is neither, or that function fails or answers
        out of form (the caller then asks for the whole exact answer)."""
        if self.expected64 is not None:
            return self.expected64[tuple(positions.to(self.expected64.device).T)]
        if self.exact_at_function is None or self.exact_function is None or self._exact_done:
            return None
        try:
            values = getattr(self.reference, self.exact_at_function)(self.data, positions)
        except Exception as exc:  # a task function that cannot: the whole exact answer instead
            if out_of_memory(exc) is not None:
                raise
            return None
        if (
            not isinstance(values, torch.Tensor)
            or values.dtype != torch.float64
            or tuple(values.shape) != (positions.shape[0],)
        ):
            return None
        return values

    @torch.no_grad()
    def scale(self) -> torch.Tensor | None:
        """The natural scale of each output element, from the reference module's optional
        `output_scale(data)` (for conv2d: sqrt(sum (x*w)^2)); None without one."""
        if not self._scale_done and self.reference is not None and hasattr(self.reference, "output_scale"):
            try:
                scale = self.reference.output_scale(self.data)
            except Exception as exc:  # the figure is then not computed; nothing else depends on it
                if out_of_memory(exc) is not None:
                    raise
                scale = None
            usable = (
                isinstance(scale, torch.Tensor)
                and isinstance(self.expected, torch.Tensor)
                and tuple(scale.shape) == tuple(self.expected.shape)
            )
            self._scale = scale if usable else None
        self._scale_done = True
        return self._scale


class OutputCheck(OutputComparison):
    """The comparison of one output: both verdicts, the accuracy figures and the details of GPU
    MODE's comparison (harness.wire.OutputComparison). `passed`: either verdict passes (the
    output is worth timing); which one ranks is the caller's choice (the task's `verdict`)."""

    passed: bool
    verdicts: Verdicts
    accuracy: Accuracy = Accuracy()


def _synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


# the parent's CUDA caching allocator keeps at most this much in free blocks after its own work on
# a shape (the child keeps as much: harness.sandbox.child.CACHED_BYTES_KEPT)
PARENT_CACHED_BYTES_KEPT = 1024**3


def release_cached_gpu_memory(device: str) -> None:
    """After the parent's reference or a problem's own check on CUDA: the caching allocator's free
    blocks go back to the GPU when they add up to more than PARENT_CACHED_BYTES_KEPT. A
    reference's intermediates stay reserved otherwise, and the children checked at the same time
    cannot have them: on an H100, GPU MODE's amd mla-decode (8 GiB intermediates) and bioml trimul
    ran out of memory in every child, with 6 GiB and 0.1 GiB of the GPU free and the children
    holding 2.4 GiB, where GPU MODE's eval.py, one process, passes (2026-12-07)."""
    if device != "cuda" or not torch.cuda.is_initialized():
        return
    if torch.cuda.memory_reserved() - torch.cuda.memory_allocated() > PARENT_CACHED_BYTES_KEPT:
        torch.cuda.empty_cache()


@dataclass
class _CaseSlot:
    """A kept case, or one being made: whoever comes first makes it under `lock`, the others wait
    for it there (and only those that want the same case)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    case: ReferenceCase | None = None


_recent_cases: OrderedDict[tuple, _CaseSlot] = OrderedDict()  # the most recent cases, newest last
_recent_cases_lock = threading.Lock()  # guards the dict only; never held while a case is made
RECENT_CASES = 2  # a shape's check case and its timed calls' case (benchmark mode) in turn
_kept_case_counts: list[int] = []  # the counts asked for by `keeping_reference_cases`, innermost last


@contextmanager
def keeping_reference_cases(count: int) -> Iterator[None]:
    """Keep at least `count` recent cases for the duration: evaluations checked side by side in
    threads (harness.sandbox.evaluation) are at different shapes at once, and with only the last
    two kept each would make its shape's case again."""
    with _recent_cases_lock:
        _kept_case_counts.append(count)
    try:
        yield
    finally:
        with _recent_cases_lock:
            _kept_case_counts.remove(count)
            _evict_cases()


def forget_cases() -> None:
    """Drop every kept case (the parent ran out of memory: what no check holds any more is freed)."""
    with _recent_cases_lock:
        _recent_cases.clear()


def free_parent_memory() -> None:
    """Give back what the parent keeps for later: every kept case, then what nothing refers to any
    more, then the CUDA caching allocator's free blocks (the parent's own work ran out of memory,
    or children did beside it)."""
    forget_cases()
    gc.collect()
    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def kept_cases_budget(device: str) -> int:
    """The bytes of kept cases (inputs and references) beyond the newest: a quarter of the GPU's
    memory on CUDA, a quarter of the host's on the CPU. A case in use stays alive in its user's
    hands whatever is kept; the bound is on what is kept for later. With large shapes (GPU MODE's
    amd mla-decode, 1.7 GiB of inputs and a 1.2 GiB cache in its answer) the count alone kept as
    many cases as evaluations ran side by side, and on the 2-core CPU machine the parent grew to 17
    GiB and was ended by the kernel's OOM killer (2026-12-07). On CUDA an eighth: the children
    checked beside the parent need the GPU's memory more than the parent needs its cases (on an
    H100 the parent's cases held 57-65 GiB and GPU MODE's bioml trimul ran out of memory in every
    child, where eval.py passes)."""
    return memory_bytes(device) // (8 if device == "cuda" else 4)


class _WorkGate:
    """Bytes of the parent's own work on large shapes in flight at once, per device: a reference
    run or a problem's own check asks for about three times its case's bytes (a copy of the
    inputs, the reference's answer, the output it judges) and waits while the others' in flight
    and its own would pass `kept_cases_budget` x 2 (half the device's memory); one larger than that
    runs alone. Evaluations checked side by side in threads each made their shape's work at once:
    on the 2-core CPU machine GPU MODE's amd mla-decode (1.7 GiB of inputs, a 1.2 GiB cache in its
    answer) grew the parent to 16-17 GiB and the kernel's OOM killer ended it (2026-12-07)."""

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.in_flight: dict[str, int] = {}
        self._inside = threading.local()  # a thread's work within its own: never waits for itself

    @contextmanager
    def work(self, device: str, nbytes: int) -> Iterator[None]:
        pool = 2 * kept_cases_budget(device)
        if nbytes < pool // 64 or getattr(self._inside, "depth", 0):  # small work is never held back
            yield
            return
        with self.condition:
            self.condition.wait_for(
                lambda: self.in_flight.get(device, 0) == 0 or self.in_flight[device] + nbytes <= pool
            )
            self.in_flight[device] = self.in_flight.get(device, 0) + nbytes
        self._inside.depth = 1
        try:
            yield
        finally:
            self._inside.depth = 0
            with self.condition:
                self.in_flight[device] -= nbytes
                self.condition.notify_all()


_WORK_GATE = _WorkGate()


def data_nbytes(value: object) -> int:
    """The bytes of the tensors in data or an answer, those in its objects' attributes included."""
    return sum(t.nbytes for t in tensors_in(value))


def _case_nbytes(slot: _CaseSlot) -> int:
    """A kept case's bytes: its inputs, the reference's answer, and the exact answer and scale
    once made (float64: twice the answer's bytes; uncounted, GPU MODE's bioml trimul held the
    parent at 57-65 GiB of an H100's 80 with the kept cases' budget at 20, 2026-12-07)."""
    if slot.case is None:
        return 0
    case = slot.case
    return data_nbytes((case.data, case.expected, case.expected64, case._scale))


def _evict_cases() -> None:
    """Drop the oldest cases above the kept count, and while the kept ones but the newest hold more
    than `kept_cases_budget` of their device (the caller holds `_recent_cases_lock`)."""
    while len(_recent_cases) > max([RECENT_CASES, *_kept_case_counts]):
        _recent_cases.popitem(last=False)
    while len(_recent_cases) > 1:
        keys = list(_recent_cases)
        older = sum(_case_nbytes(_recent_cases[key]) for key in keys[:-1])
        if older <= kept_cases_budget(keys[0][-1]):
            break
        _recent_cases.popitem(last=False)


_layouts: dict[tuple, dict[tuple | None, DataLayout]] = {}  # by task version, then by structure
_layouts_lock = threading.Lock()


def data_layout(task: TaskSpec, device: str, data: object = None, shape: Shape | None = None) -> DataLayout:
    """Where the task's output buffers are in its data: named by task.yml (`harness: data`,
    `output_buffer`), or else learned in this process by running generate_input and the reference
    on a copy of its data (harness.tasks.layout; the task's errors as a reference case's:
    `task_code_errors`), once per task version and structure of the data (`structure`: a tuple
    built in a loop may be longer for another shape). For `data` (made for `shape`, the first
    smoke shape when not given) the layout of data like it; without, the first smoke shape's."""
    if task.data:
        outputs = tuple(task.data.index(name) for name in task.output_buffers)
        return DataLayout(outputs=outputs, names=tuple(task.data))
    version = (task.name, task.version, task.files_sha256, str(task.directory))
    wanted = None if data is None else structure(data)
    with _layouts_lock:
        learned = _layouts.setdefault(version, {})  # None: the first smoke shape's
        if wanted not in learned:
            probe = task.smoke[0] if data is None or shape is None else shape
            with task_code_errors(probe, probe.seed, device):
                found = learn_layout(load_reference(task), probe.parameters, probe.seed, device)
            learned.setdefault(found.structure, found)
            if probe is task.smoke[0]:
                learned[None] = found
            if wanted not in learned:
                raise HarnessError(
                    f"task {task.name}'s data is laid out otherwise than on {probe.label()}, where "
                    "its output buffers were learned"
                )
        return learned[wanted]


def reference_case(
    task: TaskSpec, reference: ModuleType, shape: Shape, seed: int, device: str, *, exact_now: bool = True
) -> ReferenceCase:
    """Inputs from the task's generator, the reference in the task's dtype, and the exact answer
    (`make_reference_case`), shared by every evaluation in this process.

    The last two cases are kept (more within `keeping_reference_cases`): a tournament checks shape
    k of every revision with the same seed, and (benchmark mode) times them on one secret seed per
    shape and run; computing a large reference and exact answer once instead of once per revision
    is most of the parent's work on big shapes. Nobody writes into a case, so sharing it is safe;
    a case made without `exact_now` computes its exact answer when first asked, once. Threads that
    want different cases make them at the same time; those that want the same one wait for the
    first to make it."""
    key = (task.name, reference.__name__, shape.key(), seed, device)
    with _recent_cases_lock:
        slot = _recent_cases.pop(key, None) or _CaseSlot()
        _recent_cases[key] = slot
        _evict_cases()
    with slot.lock:
        if slot.case is None:
            slot.case = make_reference_case(
                reference,
                shape,
                seed,
                device,
                exact_now=exact_now,
                exact_answer=task.exact_answer,
                exact_answer_at=task.exact_answer_at,
                clone_inputs=lambda data: not data_layout(task, device, data, shape).outputs,
            )
            with _recent_cases_lock:  # its bytes are known now
                _evict_cases()
        elif exact_now and slot.case.exact() is not None:
            slot.case.scale()
        return slot.case


@contextmanager
def task_code_errors(shape: Shape, seed: int, device: str) -> Iterator[None]:
    """The task's own code (generate_input, ref_kernel) failing is the task's error, said in one
    line; one that fails on this GPU with an error of the GPU's (a cuBLAS status, no kernel image
    for it) is a task for another GPU: `TaskUnsupported`."""
    try:
        yield
    except HarnessError:
        raise
    except Exception as exc:  # the task's own code failing is the task's error, said in one line
        if device == "cuda" and out_of_memory(exc) is None and _gpu_refuses(exc):
            name = torch.cuda.get_device_name()
            raise TaskUnsupported(
                f"the task's reference fails on this GPU ({name}): {_one_line(exc)}: it needs another GPU"
            ) from exc
        if _needs_cuda(exc, device):
            raise TaskUnsupported(
                f"the task's reference needs CUDA, which this machine lacks ({_one_line(exc)}): "
                "unsupported on cpu"
            ) from exc
        raise HarnessError(
            f"the task's reference failed on {shape.label()} (seed {seed}): {_one_line(exc)}"
        ) from exc


@torch.no_grad()
def make_reference_case(
    reference: ModuleType,
    shape: Shape,
    seed: int,
    device: str,
    *,
    exact_now: bool = True,
    exact_answer: str | None = "ref_kernel",
    exact_answer_at: str | None = None,
    clone_inputs: bool | Callable[[object], bool] = False,
) -> ReferenceCase:
    """The inputs, the reference, and with `exact_now` (a check: computed while children import)
    the exact answer and the scale; without it they are computed when first asked for (a timed
    call's check asks only where GPU MODE's rule fails). Whether the exact answer is computed, and
    where, is decided by the shape's arithmetic (the task's `flops`, when its reference module has
    one), not by a measured time, so that the same shape always gets the same measures.
    With `clone_inputs` (data without an output buffer; a function of the data: whether it has
    none) the reference runs on a copy, so that no answer it writes into the data reaches the
    child. Errors: `task_code_errors`. Nothing here records autograd's graph (`torch.no_grad`, as
    GPU MODE's eval.py runs amd mla-decode): a reference built of nn.Linear layers otherwise keeps
    every intermediate alive in its answer for as long as the case is kept (on an H100 the parent
    held 51-73 GiB for mla-decode, and every child beside it ran out of memory, 2026-12-07)."""
    with task_code_errors(shape, seed, device):
        data = generate_inputs(reference, shape.parameters, seed, device)
        clone = clone_inputs(data) if callable(clone_inputs) else clone_inputs
        with _WORK_GATE.work(device, 3 * data_nbytes(data)):
            expected = reference.ref_kernel(copied(data) if clone else data)
            _synchronize(device)
    release_cached_gpu_memory(device)
    flops = reference.flops(**shape.parameters) if hasattr(reference, "flops") else None
    case = ReferenceCase(
        data=data,
        expected=expected,
        reference=reference,
        flops=flops,
        exact_function=exact_answer,
        exact_at_function=exact_answer_at,
    )
    if exact_now and case.exact() is not None:
        case.scale()
    return case


GPU_REFUSALS = (
    "CUBLAS_STATUS",
    "no kernel image",
    "not supported on this device",
    "CUDNN_STATUS_NOT_SUPPORTED",
    "sm_",
)


# what torch says when code asks for CUDA on a machine without it (a CPU build; no driver; no GPU)
NO_CUDA = (
    "Torch not compiled with CUDA enabled",
    "Found no NVIDIA driver",
    "No CUDA GPUs are available",
    "no CUDA-capable device",
)


def _needs_cuda(exc: BaseException, device: str) -> bool:
    """Whether an error of the task's code on the CPU of a machine without CUDA is its asking for
    CUDA (a reference that makes its data on the device it is given and then calls `.cuda()`, or a
    check that moves the output there, as GPU MODE's amd mla-decode does): the task cannot run here."""
    if device != "cpu" or torch.cuda.is_available():
        return False
    return any(words in str(link) for link in _chain(exc) for words in NO_CUDA)


def _gpu_refuses(exc: BaseException) -> bool:
    """Whether an error of the task's reference is this GPU's refusal (an architecture the
    reference's kernels or library calls need and this one is not)."""
    text = str(exc)
    return any(words in text for words in GPU_REFUSALS)


def _exact_answer(function, data: tuple, flops: float | None) -> tuple[torch.Tensor | None, str | None]:
    """The reference on the inputs cast to float64: on the CPU for small, cheap shapes, else on
    the data's device; skipped (with the reason) on a CPU when it would take too long."""
    whole = not isinstance(data, tuple | list)
    items = (data,) if whole else data
    tensors = [t for t in items if isinstance(t, torch.Tensor)]
    device = tensors[0].device.type if tensors else "cpu"
    expensive = flops is not None and flops > MAX_CPU_FLOAT64_FLOPS
    if device == "cpu" and expensive:
        return None, f"exact answer skipped: a float64 reference of {flops:.3g} FLOPs is too slow on the CPU"
    small = sum(t.numel() for t in tensors) <= SMALL_FOR_CPU_FLOAT64 and not expensive
    device64 = "cpu" if small else device
    # float64: twice the inputs' bytes, and the reference's intermediates with them
    with _WORK_GATE.work(device64, 6 * data_nbytes(tensors)):
        data64 = tuple(
            t.to(device=device64, dtype=torch.float64)
            if isinstance(t, torch.Tensor) and t.is_floating_point()
            else t
            for t in items
        )
        try:
            expected64 = function(data64[0] if whole else data64)
            _synchronize(device64)
        finally:
            del data64
            release_cached_gpu_memory(device64)
    return expected64, None


def output_problem(
    info: TensorInfo | None, expected: object, aliases_input: bool, *, same_shape_and_dtype: bool = True
) -> str | None:
    """Why the returned object cannot be the answer, or None. The reference's answer is a tensor,
    or a tuple, list or dict of tensors and values (GPU MODE's protocol): the returned object must
    have its structure, each tensor checked as a returned tensor is. Without
    `same_shape_and_dtype` (a task judged by its own check_implementation, whose reference may
    answer in another dtype or form) shape, dtype and structure are left to that check; every
    returned tensor must still be one the parent can read, on the data's device."""
    if info is None:
        return "nothing was returned"
    problem = _part_problem(info, expected, same_shape_and_dtype, "", output_device(expected))
    if problem is not None:
        return problem
    if aliases_input:
        return "returned tensor shares memory with an input"
    if not info.written:
        return "returned tensor could not be exported"
    return None


def output_device(expected: object) -> str:
    """The device type of the reference's answer (its first tensor; the CPU without one)."""
    return next((t.device.type for t in output_parts(expected) if isinstance(t, torch.Tensor)), "cpu")


def output_parts(value: object) -> list[object]:
    """The leaves of an answer: the tensor itself, or the items of a tuple, list or dict, in order."""
    if isinstance(value, tuple | list):
        return [leaf for item in value for leaf in output_parts(item)]
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in output_parts(item)]
    return [value]


def output_nbytes(expected: object) -> int:
    """The bytes of the tensors of an answer."""
    return sum(t.nbytes for t in output_parts(expected) if isinstance(t, torch.Tensor))


MAX_OUTPUT_DEPTH = 4  # as the child describes an output (harness.sandbox.transfer)


def _part_problem(
    info: TensorInfo, expected: object, same: bool, where: str, device: str, depth: int = 0
) -> str | None:
    if info.parts is not None:
        if depth >= MAX_OUTPUT_DEPTH or (info.keys is not None and len(info.keys) != len(info.parts)):
            return f"{where}returned an output the harness cannot describe (nested too deep, or malformed)"
        if same and not isinstance(expected, tuple | list | dict):
            return f"{where}returned a {info.type_name}, expected a {_kind_of(expected)}"
        if same and isinstance(expected, dict) != (info.keys is not None):
            return f"{where}returned a {info.type_name}, expected a {_kind_of(expected)}"
        if same and len(info.parts) != len(expected):
            return f"{where}returned {len(info.parts)} items, expected {len(expected)}"
        if same and isinstance(expected, dict) and list(info.keys) != list(expected):
            return f"{where}returned the keys {info.keys}, expected {list(expected)}"
        for position, part in enumerate(info.parts):
            label = info.keys[position] if info.keys is not None else position
            below = (expected[label] if isinstance(expected, dict) else expected[position]) if same else None
            problem = _part_problem(part, below, same, f"{where}item {label!r}: ", device, depth + 1)
            if problem is not None:
                return problem
        return None
    if same and not isinstance(expected, torch.Tensor):
        if isinstance(expected, tuple | list | dict):
            return f"{where}returned a {info.type_name}, expected a {_kind_of(expected)}"
        return None  # a value: the comparison judges it
    if where and not same and (info.value is not None or info.type_name == "builtins.NoneType"):
        return None  # a value inside the output: the problem's check judges it
    if not info.exact_tensor:
        return f"{where}returned a {info.type_name}, not a torch.Tensor"
    if same and info.shape != list(expected.shape):
        return f"{where}returned shape {tuple(info.shape)}, expected {tuple(expected.shape)}"
    if same and info.dtype != str(expected.dtype):
        return f"{where}returned dtype {info.dtype}, expected {expected.dtype}"
    if info.device != device:
        return f"{where}returned a tensor on {info.device}, expected {device}"
    if not info.written:
        return f"{where}returned tensor could not be exported"
    return None


def _kind_of(value: object) -> str:
    if isinstance(value, tuple | list | dict):
        return f"{type(value).__name__} of {len(value)}"
    return "torch.Tensor" if isinstance(value, torch.Tensor) else type(value).__name__


def inputs_problem(task: TaskSpec, case: ReferenceCase, reply: CheckReply) -> str | None:
    """The first input tensor that the child no longer holds as the parent handed it over, or
    None. The reply carries, for each input of the data that is a tensor (in order:
    `harness.sandbox.transfer.tensor_inputs`), its description after the call and the count of its
    elements that differ bit for bit from the child's copy taken before the call."""
    layout = data_layout(task, output_device(case.data), case.data)  # on the data's device
    counted = layout.tensor_inputs(case.data)
    if not len(reply.inputs) == len(reply.inputs_changed) == len(counted):
        return "the inputs were not reported after the call"
    for position, key in enumerate(counted):
        info, changed = reply.inputs[position], reply.inputs_changed[position]
        before = case.data if key is None else case.data[key]
        name = layout.describe(key)
        if not info.exact_tensor:
            return f"input {name} is no longer a plain tensor after the call"
        if info.shape != list(before.shape) or info.dtype != str(before.dtype):
            return f"input {name} changed shape or dtype during the call"
        if changed is None:
            return f"input {name} could not be compared with its copy from before the call"
        if changed:
            return f"input {name} was modified ({changed} elements differ)"
    return None


def _first_positions(mask: torch.Tensor, count: int) -> list[list[int]]:
    """Positions of the first `count` True elements, scanning in chunks (no full nonzero())."""
    flat = mask.reshape(-1)
    found: list[int] = []
    for start in range(0, flat.numel(), SCAN_CHUNK):
        chunk = flat[start : start + SCAN_CHUNK]
        if bool(chunk.any()):
            found.extend((torch.nonzero(chunk).flatten()[: count - len(found)] + start).tolist())
            if len(found) >= count:
                break
    return [_unravel(i, tuple(mask.shape)) for i in found]


def _unravel(flat_index: int, shape: tuple[int, ...]) -> list[int]:
    """The position of element `flat_index` of a C-ordered tensor of `shape` (plain arithmetic:
    torch.unravel_index costs half a second on its first call in a process)."""
    position = []
    for size in reversed(shape):
        flat_index, rest = divmod(flat_index, size) if size else (flat_index, 0)
        position.append(rest)
    return position[::-1]


@torch.no_grad()
def compare_output(
    received: torch.Tensor, case: ReferenceCase, *, rtol: float, atol: float, figures: bool = True
) -> OutputCheck:
    """Both verdicts on one output (received may be on the CPU), and with `figures` the accuracy
    figures. Without `figures` (the recheck of timed calls) the exact answer is computed only when
    GPU MODE's check fails somewhere: where it passes, `accurate` passes too."""
    expected = case.expected
    received = received.to(expected.device)
    if not figures:
        passed = _surely_within(received, expected, rtol=rtol, atol=atol)
        if passed is not None:
            verdicts = Verdicts(
                gpumode=Verdict(status="pass", failures=0), accurate=Verdict(status="pass", failures=0)
            )
            return OutputCheck(passed=True, verdicts=verdicts, max_abs_err=passed, note=case.note)
    if received.shape != expected.shape:
        received, expected = torch.broadcast_tensors(received, expected)
    mismatched, mismatches, not_finite, max_abs_err = _gpumode_rule(received, expected, rtol=rtol, atol=atol)
    numel = received.numel()

    exact, at_elements = None, None
    if not figures and 0 < mismatches <= EXACT_AT_MAX:  # the exact answer where GPU MODE's rule fails
        positions = torch.nonzero(mismatched)
        values = case.exact_at(positions)
        if values is not None:
            at_elements = _exact_at_counts(received, expected, positions, values, rtol=rtol, atol=atol)
    if at_elements is None and (figures or mismatches):
        exact = case.exact()
    accuracy = Accuracy()
    accurate_failures, where_exact_fails, reference_rel_l2 = mismatches, None, None
    if at_elements is not None:
        accurate_failures, where_exact_fails = at_elements
    elif exact is not None:
        scale = case.scale() if figures else None
        exact_figures = _exact_figures(
            received, expected, exact, mismatched if mismatches else None, scale, rtol=rtol, atol=atol
        )
        if mismatches:
            accurate_failures, where_exact_fails = exact_figures["failures"], exact_figures["exact_fails"]
        if figures:
            norm = exact_figures["norm"]
            if norm > 0:
                if not_finite == 0:
                    accuracy.rel_l2 = _finite_or_none(exact_figures["error_norm"] / norm)
                reference_rel_l2 = exact_figures["reference_error_norm"] / norm
            if scale is not None and not_finite == 0 and exact_figures["over_scale"] is not None:
                accuracy.max_err_over_scale = _finite_or_none(exact_figures["over_scale"])

    first = []
    if mismatches:
        first = [
            Mismatch(
                index=p, received=_json_number(received[tuple(p)]), expected=_json_number(expected[tuple(p)])
            )
            for p in _first_positions(mismatched, MAX_PRINT)
        ]
    gpumode = Verdict(status="fail" if mismatches else "pass", failures=mismatches)
    if mismatches:
        gpumode.reason = _gpumode_reason(mismatches, numel, not_finite, where_exact_fails, first)
    accurate = Verdict(status="fail" if accurate_failures else "pass", failures=accurate_failures)
    if accurate_failures:
        accurate.reason = _accurate_reason(
            accurate_failures, numel, not_finite, exact is not None or at_elements is not None, case.note
        )
    verdicts = Verdicts(gpumode=gpumode, accurate=accurate)
    return OutputCheck(
        passed=verdicts.either_passed,
        reason=verdicts.reasons(),
        verdicts=verdicts,
        accuracy=accuracy,
        mismatches=mismatches,
        not_finite=not_finite,
        first_mismatches=first,
        max_abs_err=max_abs_err,
        rel_l2=accuracy.rel_l2,
        reference_rel_l2=reference_rel_l2,
        mismatches_where_reference_is_off=where_exact_fails,
        note=case.note,
    )


def _chunks(numel: int) -> Iterator[slice]:
    for start in range(0, numel, COMPARE_CHUNK):
        yield slice(start, min(start + COMPARE_CHUNK, numel))


def _gpumode_rule(
    received: torch.Tensor, expected: torch.Tensor, *, rtol: float, atol: float
) -> tuple[torch.Tensor, int, int, float | None]:
    """GPU MODE's elementwise rule in float64, COMPARE_CHUNK elements at a time: (the mask of
    failing elements, shaped like the output; how many fail; how many are NaN/Inf; the largest
    absolute error of the finite ones, or None)."""
    flat_received, flat_expected = received.reshape(-1), expected.reshape(-1)
    mismatched = torch.empty(flat_received.shape, dtype=torch.bool, device=received.device)
    counts, largest = [], []
    for part in _chunks(flat_received.numel()):
        chunk = flat_received[part]
        wide = flat_expected[part].to(torch.float64)
        finite = torch.isfinite(chunk)
        diff = (chunk.to(torch.float64) - wide).abs()
        bad = ~finite | ~(diff <= atol + rtol * wide.abs())
        mismatched[part] = bad
        counts.append(torch.stack([bad.sum(), (~finite).sum()]))
        largest.append(torch.where(finite, diff, -math.inf).max() if diff.numel() else None)
        del wide, diff, bad, finite
    if not counts:
        return mismatched.view(received.shape), 0, 0, None
    mismatches, not_finite = (int(value) for value in torch.stack(counts).sum(0).tolist())
    top = float(torch.stack([value for value in largest if value is not None]).max())
    return mismatched.view(received.shape), mismatches, not_finite, (top if top != -math.inf else None)


def _exact_at_counts(
    received: torch.Tensor,
    expected: torch.Tensor,
    positions: torch.Tensor,
    exact: torch.Tensor,
    *,
    rtol: float,
    atol: float,
) -> tuple[int, int]:
    """`_exact_figures`' two counts at the elements `positions` alone, given the exact answer
    there: how many are off the exact answer too, and at how many the exact answer itself fails
    GPU MODE's rule."""
    index = tuple(positions.T)
    got = received[index].to(torch.float64)
    reference = expected[index].to(device=got.device, dtype=torch.float64)
    exact = exact.to(got.device)
    within_exact, exact_fails = _against_exact(got - exact, reference, exact, rtol=rtol, atol=atol)
    return int((~within_exact).sum()), int(exact_fails.sum())


def _against_exact(
    error: torch.Tensor, reference: torch.Tensor, exact: torch.Tensor, *, rtol: float, atol: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per element (float64): whether the output's `error` is within the tolerance of the exact
    answer, and whether the exact answer itself fails GPU MODE's rule against the reference."""
    within_exact = error.abs() <= atol + rtol * exact.abs()
    exact_fails = ~((exact - reference).abs() <= atol + rtol * reference.abs())
    return within_exact, exact_fails


def _exact_figures(
    received: torch.Tensor,
    expected: torch.Tensor,
    exact: torch.Tensor,
    mismatched: torch.Tensor | None,
    scale: torch.Tensor | None,
    *,
    rtol: float,
    atol: float,
) -> dict:
    """What `compare_output` needs of the exact answer, COMPARE_CHUNK elements at a time on the
    exact answer's device: with `mismatched`, how many of those elements are off the exact answer
    too (`failures`) and where the exact answer itself fails GPU MODE's rule (`exact_fails`); the
    norms of the exact answer, of the output's error and of the reference's error; and with
    `scale`, the largest error over the scale where the scale is positive (`over_scale`)."""
    device = exact.device
    flat = [
        None if tensor is None else tensor.reshape(-1)
        for tensor in (received, expected, exact, mismatched, scale)
    ]
    norms: dict[str, list[torch.Tensor]] = {"norm": [], "error_norm": [], "reference_error_norm": []}
    counts, over_scale = [], []
    for part in _chunks(exact.numel()):
        received_part, expected_part, exact_part, mismatched_part, scale_part = (
            None if tensor is None else tensor[part] for tensor in flat
        )
        error = received_part.to(device=device, dtype=torch.float64) - exact_part
        reference = expected_part.to(device=device, dtype=torch.float64)
        norms["norm"].append(torch.linalg.vector_norm(exact_part))
        norms["error_norm"].append(torch.linalg.vector_norm(error))
        norms["reference_error_norm"].append(torch.linalg.vector_norm(reference - exact_part))
        if mismatched_part is not None:
            on_exact = mismatched_part.to(device)
            within_exact, exact_fails = _against_exact(error, reference, exact_part, rtol=rtol, atol=atol)
            counts.append(torch.stack([(on_exact & ~within_exact).sum(), (on_exact & exact_fails).sum()]))
            del on_exact, within_exact, exact_fails
        if scale_part is not None:
            scale_part = scale_part.to(device=device, dtype=torch.float64)
            positive = scale_part > 0
            ratio = torch.where(positive, error.abs() / torch.where(positive, scale_part, 1.0), -math.inf)
            over_scale.append(torch.stack([ratio.max(), positive.any().to(torch.float64)]))
            del positive, ratio
        del error, reference
    figures: dict = {
        name: float(torch.linalg.vector_norm(torch.stack(values))) if values else 0.0
        for name, values in norms.items()
    }
    failures = torch.stack(counts).sum(0).tolist() if counts else [0, 0]
    figures["failures"], figures["exact_fails"] = int(failures[0]), int(failures[1])
    figures["over_scale"] = None
    if over_scale:
        joined = torch.stack(over_scale)
        if bool(joined[:, 1].any()):
            figures["over_scale"] = float(joined[joined[:, 1] > 0, 0].max())
    return figures


def judge_output(
    task: TaskSpec, received: object, case: ReferenceCase, *, figures: bool = True
) -> OutputCheck:
    """The verdicts on one output: with the task's tolerance, GPU MODE's elementwise rule and the
    exact answer here (`compare_output`; for an output of several parts, on each of its tensors,
    `compare_parts`); without one, the problem's own check_implementation."""
    if task.rtol is None:
        return run_check_implementation(received, case)
    if isinstance(case.expected, torch.Tensor):
        return compare_output(received, case, rtol=task.rtol, atol=task.atol, figures=figures)
    return compare_parts(received, case, rtol=task.rtol, atol=task.atol)


def compare_parts(received: object, case: ReferenceCase, *, rtol: float, atol: float) -> OutputCheck:
    """GPU MODE's rule on each tensor of an output of several parts (whose structure
    `output_problem` matched to the reference's), values compared as they are; the first part
    that fails is the reason. No exact answer: `accurate` repeats GPU MODE's verdict."""
    for position, (got, want) in enumerate(
        zip(output_parts(received), output_parts(case.expected), strict=True)
    ):
        if isinstance(want, torch.Tensor):
            part = ReferenceCase(data=case.data, expected=want, exact_function=None)
            check = compare_output(got, part, rtol=rtol, atol=atol, figures=False)
            ok, message = check.verdicts.gpumode.status == "pass", check.verdicts.gpumode.reason
        else:
            ok = not isinstance(got, torch.Tensor) and bool(got == want)
            message = f"{got!r} vs {want!r}"[:200]
        if not ok:
            verdict = Verdict(status="fail", failures=1, reason=f"part {position}: {message}")
            return OutputCheck(
                passed=False,
                reason=verdict.reason,
                verdicts=Verdicts(gpumode=verdict, accurate=verdict.model_copy()),
                note="no exact answer for an output of several parts",
            )
    verdict = Verdict(status="pass", failures=0)
    return OutputCheck(
        passed=True,
        verdicts=Verdicts(gpumode=verdict, accurate=verdict.model_copy()),
        note="no exact answer for an output of several parts",
    )


@torch.no_grad()
def run_check_implementation(received: torch.Tensor, case: ReferenceCase) -> OutputCheck:
    """The `gpumode` verdict from the problem's check_implementation(data, output), called as GPU
    MODE's eval.py calls it: on a copy of the inputs. It returns (ok, message), a message (empty
    when ok) or a bool. Such a task has no exact answer: `accurate` repeats the verdict."""
    device = output_device(case.expected)
    with _WORK_GATE.work(device, 3 * data_nbytes((case.data, case.expected))):
        return _run_check_implementation(received, case, device)


@torch.no_grad()
def _run_check_implementation(received: object, case: ReferenceCase, device: str) -> OutputCheck:
    received = _to_device(received, device)
    data = copied(case.data)
    try:
        ok, message = _check_result(case.reference.check_implementation(data, received))
    except Exception as exc:  # a check that cannot judge this output fails it
        if out_of_memory(exc) is not None:  # the parent's memory: not this output's verdict
            raise
        if _needs_cuda(exc, device):
            raise TaskUnsupported(
                f"the task's check needs CUDA, which this machine lacks ({_one_line(exc)}): unsupported on cpu"
            ) from exc
        ok, message = False, f"check_implementation raised {_one_line(exc)}"
    finally:
        del data
        release_cached_gpu_memory(device)
    not_finite = sum(
        int((~torch.isfinite(t)).sum())
        for t in output_parts(received)
        if isinstance(t, torch.Tensor) and t.is_floating_point()
    )
    reason = "" if ok else f"GPU MODE check: {' '.join(message.split())[:1000] or 'failed'}"
    verdict = Verdict(status="pass" if ok else "fail", failures=0 if ok else 1, reason=reason)
    verdicts = Verdicts(gpumode=verdict, accurate=verdict.model_copy())
    return OutputCheck(
        passed=ok,
        reason=reason,
        verdicts=verdicts,
        not_finite=not_finite,
        note="the task has no exact answer",
    )


def _to_device(value: object, device: str) -> object:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, tuple | list):
        return type(value)(_to_device(item, device) for item in value)
    if isinstance(value, dict):
        return {key: _to_device(item, device) for key, item in value.items()}
    return value


def _check_result(result: object) -> tuple[bool, str]:
    if isinstance(result, tuple | list) and len(result) == 2 and isinstance(result[0], bool):
        return result[0], str(result[1] or "")
    if isinstance(result, str):
        return result == "", result
    if isinstance(result, bool):
        return result, ""
    raise TypeError(
        f"check_implementation returned {type(result).__name__}, not (ok, message), a message or a bool"
    )


# float32 rounds |received - expected| and atol + rtol * |expected| to within a few units of 2**-24
# of their exact values: an element whose float32 difference is under its float32 bound shrunk by
# 2**-20 is within GPU MODE's tolerance however the two round.
_SURE_MARGIN = 1.0 - 2.0**-20


def _surely_within(
    received: torch.Tensor, expected: torch.Tensor, *, rtol: float, atol: float
) -> float | None:
    """When every element of `received` is finite and surely within GPU MODE's tolerance of
    `expected`, the largest absolute error (float32); else None, and the caller decides element by
    element in float64. One pass and one synchronization: the recheck of every timed output."""
    if received.shape != expected.shape or received.numel() == 0:
        return None
    if received.dtype != torch.float32 or expected.dtype != torch.float32:
        return None
    flat_received, flat_expected = received.reshape(-1), expected.reshape(-1)
    parts = []
    for part in _chunks(flat_received.numel()):  # in COMPARE_CHUNK elements: bounded memory
        diff = (flat_received[part] - flat_expected[part]).abs()
        bound = flat_expected[part].abs().mul_(rtol).add_(atol).mul_(_SURE_MARGIN)
        parts.append(torch.stack([(diff <= bound).all().to(diff.dtype), diff.max()]))
        del diff, bound
    joined = torch.stack(parts)
    all_within, largest = torch.stack([joined[:, 0].min(), joined[:, 1].max()]).tolist()
    return largest if all_within == 1.0 else None


def _gpumode_reason(
    mismatches: int, numel: int, not_finite: int, where_exact_fails: int | None, first: list[Mismatch]
) -> str:
    """GPU MODE's verdict in words, like its "mismatch found!" message, with how many of the
    failing elements the exact answer fails too."""
    text = f"GPU MODE check: fails {mismatches} of {numel} elements"
    if where_exact_fails:
        text += f", {where_exact_fails} of them where the exact answer fails too"
    if not_finite:
        text += f"; {not_finite} NaN/Inf (unwritten elements stay NaN)"
    shown = ", ".join(
        f"at {tuple(m.index)}: output {_number(m.received)}, reference {_number(m.expected)}"
        for m in first[:3]
    )
    return f"{text}; first {shown}" if shown else text


def _accurate_reason(failures: int, numel: int, not_finite: int, exact: bool, note: str | None) -> str:
    if not exact:
        return f"accurate check: no exact answer ({note or 'not computed'}), so GPU MODE's rule decides"
    text = (
        f"accurate check: {failures} of {numel} elements are off the exact answer and off GPU MODE's "
        "tolerance of the reference"
    )
    return f"{text} ({not_finite} NaN/Inf)" if not_finite else text


def _finite_or_none(value: float) -> float | None:
    """A figure as stored and shown: None where the exact answer itself is not finite."""
    return value if math.isfinite(value) else None


def one_line(exc: BaseException) -> str:
    """An exception as one short line: its type and the first line of its message."""
    return _one_line(exc)


def _one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]


def _json_number(value: torch.Tensor) -> float | str:
    number = float(value)
    return number if math.isfinite(number) else str(number)


def _number(value: float | str) -> str:
    return value if isinstance(value, str) else f"{value:.6g}"
