"""The typed data that crosses a process boundary and the results made of it, in one torch-free
module: what the sandboxed child reports of a call (`TensorInfo`, `CheckReply`, framed by
harness.sandbox.protocol and judged by harness.checking), an evaluation's results (`ShapeOutcome`,
`Evaluation`: made by the sandbox, carried by the executors, written by the plan into the store as
`Run` and `ShapeResult` rows; a shape's check, its timing and its timing passes in one typed form,
`ShapeCheck`, from the sandbox to the store, the reports and the prompts), and what a GPU worker or
a Ray task sends back (`WorkerMessage`).
Messages (`Message`) forbid unknown fields; a message that does not validate is an error, never
skipped.

Two durations keep their stored names: `Evaluation.compile_s` is the candidate's import in the
child (`Run.compile_s`), `ShapeOutcome.compile_s` the timing warm-up of one shape
(`ShapeResult.warmup_s`, kept in `ShapeCheck.timing.compile_s`).
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from typing_extensions import TypeAliasType

from harness.verdicts import Accuracy, Verdicts


def shape_key(shape: dict) -> str:
    """A shape as stored (ShapeOutcome.shape, ShapeResult.shape: its parameters and seed) as one
    stable string, to match the same shape across runs and revisions."""
    return json.dumps(shape, sort_keys=True)


# A shape's parameter (harness.tasks.Shape): a number, a string, or a list of them, nested
# (nvfp4_group_gemm's `m: [..]`).
ShapeValue = TypeAliasType("ShapeValue", "int | float | str | bool | list[ShapeValue]")


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- what the child reports of a call (harness.sandbox.protocol frames them) -----------------


class TensorInfo(Message):
    """What the child saw of a returned object or an input after the call. `written` says
    whether its bytes were copied to the file the parent named (only for an exact torch.Tensor)."""

    type_name: str
    exact_tensor: bool
    shape: list[int] | None = None
    dtype: str | None = None
    device: str | None = None
    contiguous: bool | None = None
    nbytes: int | None = None
    written: bool = False
    shared: bool = False  # its bytes are in the shared output buffer, not a file (timed calls)
    # an output of several parts (GPU MODE's protocol allows tuples, lists and dicts of tensors
    # and numbers): each part described, a dict's keys in the parts' order, and a number, string
    # or None by value; the tensors' bytes lie one after another in one file
    # (harness.sandbox.transfer.export_output)
    parts: list[TensorInfo] | None = None
    keys: list[str] | None = None
    value: bool | int | float | str | None = None


TensorInfo.model_rebuild()


class AutotunerInfo(Message):
    name: str
    configs: list[dict[str, str]]


class CallError(Message):
    kind: Literal["compile_error", "unsupported", "runtime_error"]
    error: str


class CheckReply(Message):
    type: Literal["check_reply"] = "check_reply"
    token: str
    id: int
    seconds: float | None = None
    error: CallError | None = None
    output: TensorInfo | None = None
    output_aliases_input: bool = False
    # each input tensor (the data's inputs that are tensors, in order) as the child holds it after
    # the call (not exported)
    inputs: list[TensorInfo] = []
    # per input tensor: elements that differ bit for bit from the child's copy taken before the
    # call (None: no longer a plain tensor of the same shape, dtype and device)
    inputs_changed: list[int | None] = []
    autotuners: list[AutotunerInfo] = []
    autotune_config: dict[str, dict[str, str]] | None = None  # per Autotuner: the config it ran


# --- an evaluation's results ----------------------------------------------------------------


# the per-shape timing statistics: ShapeOutcome's fields and ShapeResult's columns of the same names
TIMING_STATISTICS = ("runs", "mean_ms", "median_ms", "std_ms", "err_ms", "min_ms", "max_ms")
STATUSES = ("pass", "wrong_answer", "compile_error", "runtime_error", "timeout", "crashed", "unsupported")
Status = Literal[
    "pass", "wrong_answer", "compile_error", "runtime_error", "timeout", "crashed", "unsupported"
]
ShapeStatus = Literal[
    "pass", "wrong_answer", "compile_error", "runtime_error", "timeout", "crashed", "unsupported", "not_run"
]


class Mismatch(Message):
    """A mismatching element; NaN and infinities are kept as the strings "nan", "inf", "-inf"
    so that the JSON column stays standard JSON."""

    index: list[int]
    received: float | str
    expected: float | str


class OutputComparison(Message):
    """The figures of one output's comparison with the reference (harness.checking.OutputCheck
    adds its verdicts): whether it passed, why not, how many elements differ or are not finite,
    the first few, the errors."""

    passed: bool | None = None  # None: no output was compared (an error, a wrong type or shape)
    reason: str = ""
    mismatches: int = 0
    not_finite: int = 0
    first_mismatches: list[Mismatch] = []
    max_abs_err: float | None = None
    rel_l2: float | None = None
    reference_rel_l2: float | None = None
    # When GPU MODE's check fails: at how many of those elements the exact answer itself fails it
    # (the reference's own rounding, not the candidate's).
    mismatches_where_reference_is_off: int | None = None
    note: str | None = None


class ConfigCheck(Message):
    """One autotune config's checked call on a shape (`index` None: the config the autotuner
    chose; `config` its label)."""

    index: int | None
    config: str
    status: ShapeStatus
    max_abs_err: float | None = None
    rel_l2: float | None = None


class JoinedTiming(Message):
    """The parent's clock's verdict over every timing pass's calls of a shape joined
    (harness.timing.host_clock_verdict)."""

    hidden_ms: float
    spread_ms: float
    rescored_calls: int
    prelude_excess_ms: float


class TimingRecord(Message):
    """How a shape was timed (harness.sandbox.evaluation): the device, the warm-up's seconds
    (`compile_s`, ShapeResult.warmup_s), the flags the store keeps (ShapeResult.timing_flags), the
    parent's bracket of every timed call and the calibrated harness cost; the times as the child
    reported them, the work every bracket held beyond its reported call and the harness cost
    (`hidden_ms`, added to each call's time) and the calls' spread; each call's prelude (inputs
    handed over to the parent's go), the calibrated child's least and the least excess over it;
    what the harness's no-op returned when calibrating (None, or the output's dtype and shape);
    `joined`: the verdict over every pass's calls, when the shape was timed in several passes."""

    device: str
    compile_s: float = 0.0
    flags: list[str] = []
    parent_ms: list[float] = []
    harness_ms: float = 0.0
    reported_ms: list[float] = []
    hidden_ms: float = 0.0
    spread_ms: float = 0.0
    rescored_calls: int = 0
    prelude_ms: list[float] = []
    prelude_harness_ms: float = 0.0
    prelude_excess_ms: float = 0.0
    calibrated_output: tuple[str, list[int]] | None = None
    joined: JoinedTiming | None = None
    # an evolution's child clearly slower than its parent's mean (this, in ms) on the shape: its
    # calls stopped early, and no later pass timed it (harness.timing, method 4.)
    stopped_slower_than_ms: float | None = None


class TimingPass(Message):
    """One timing pass (block of calls) of a shape (harness.sandbox.evaluation.Evaluator.time_again):
    its scored times, mean and flags, and what the parent's clock judges (the reported times, the
    brackets, the harness's cost), so that the verdict can be made again over every pass's calls."""

    times_ms: list[float]
    mean_ms: float | None = None
    flags: list[str] = []
    reported_ms: list[float] = []
    parent_ms: list[float] = []
    harness_ms: float = 0.0
    prelude_ms: list[float] = []
    prelude_harness_ms: float = 0.0


class ShapeCheck(OutputComparison):
    """What a shape's check and timing found beyond its status, reason and statistics (the
    ShapeResult's `check` column, harness.store.models): the first failing (else the last)
    call's comparison, what the child said of its output, each autotune config's call when
    configs were forced (`configs`; `configs_sampled`: a sentence, when only a sample was
    checked), how it was timed (`timing`) and, timed in several passes, each pass (`passes`)."""

    output: TensorInfo | None = None
    configs: list[ConfigCheck] = []
    configs_sampled: str | None = None
    timing: TimingRecord | None = None
    passes: list[TimingPass] = []


class ShapeOutcome(BaseModel):
    """One shape of an evaluation. `shape` holds the parameters and the public seed (never the
    combined leaderboard seed, from which the secret could be recovered). The timing fields stay
    None until harness.timing fills them."""

    set_name: str
    index: int
    shape: dict[str, ShapeValue]
    status: ShapeStatus = "not_run"
    passed: bool | None = None
    reason: str = ""
    check: ShapeCheck = ShapeCheck()
    call_s: float | None = None
    runs: int | None = None
    mean_ms: float | None = None
    median_ms: float | None = None
    std_ms: float | None = None
    err_ms: float | None = None
    min_ms: float | None = None
    max_ms: float | None = None
    times_ms: list[float] = []
    compile_s: float | None = None  # the timing warm-up's seconds
    timing_flags: list[str] = []  # harness.timing.TIMING_MISMATCH
    # Both verdicts (harness.checking) over every output of the shape that was compared: the
    # checked call (each autotune config on the CPU) and every timed call.
    verdicts: Verdicts | None = None
    accuracy: Accuracy = Accuracy()


class Evaluation(BaseModel):
    status: Status
    reason: str = ""
    task: str
    filename: str
    code_sha256: str
    device: str
    mode: str
    timed: bool = False
    shape_set: str
    # the candidate's import (and anything it compiles there), on the child's clock
    compile_s: float | None = None
    # spawn until the child has imported torch, on the parent's clock (a group's children start
    # together: on fewer cores than children this includes waiting for a core)
    startup_s: float | None = None
    # the child was kept from this candidate's previous phase (startup_s and compile_s are then 0)
    child_reused: bool = False
    wall_s: float = 0.0
    # when the evaluation began (its child's spawn, or its turn with a kept one) and ended, in
    # seconds since the epoch on the evaluating host's clock: evaluations checked side by side
    # overlap (harness.sandbox.evaluation.evaluate_side_by_side)
    started_at: float | None = None
    ended_at: float | None = None
    isolation: str = ""
    autotuners: list[AutotunerInfo] = []
    # the shapes taken over from an interrupted evaluation of the same run (stored as they landed,
    # harness.store.runs.record_shape), not evaluated again
    resumed_shapes: list[int] = []
    shapes: list[ShapeOutcome] = []
    log_tail: str = ""
    score_ms: float | None = None  # timed and passed: the task's score (ranking_by) of the shape means


# --- what a GPU worker or a Ray task sends back (harness.executors) ---------------------------


class WorkerReady(Message):
    """The worker has imported what evaluations need (and started CUDA when asked)."""

    type: Literal["ready"] = "ready"


class ShapeDone(Message):
    """A shape of the job's request `key` ran (for progress; the job's evaluations follow)."""

    type: Literal["shape"] = "shape"
    key: int
    outcome: ShapeOutcome


class ActivityChanged(Message):
    """The job's request `key` does something else now (harness.sandbox.evaluation.ACTIVITIES)."""

    type: Literal["activity"] = "activity"
    key: int
    activity: Literal["building", "checking", "timing", "waiting", "done"]


class EvaluationDone(Message):
    """The job's request `key` ended: its evaluation, sent as soon as it ends (the job's
    `JobDone` then leaves it out), so that a job cut short loses none that ended."""

    type: Literal["evaluated"] = "evaluated"
    key: int
    evaluation: Evaluation


class JobDone(Message):
    """The job's evaluations not sent before (`EvaluationDone`), in the job's order."""

    type: Literal["done"] = "done"
    evaluations: list[Evaluation]


class JobFailed(Message):
    """The job could not run (a worker environment that differs from the job's, a malformed job):
    one line."""

    type: Literal["error"] = "error"
    error: str


class DeviceProbed(Message):
    """A Ray task's answer to a probe: the device resolved on a cluster GPU and its environment
    (harness.environment.Environment's fields)."""

    type: Literal["probed"] = "probed"
    device: str
    environment: dict


WorkerMessage = Annotated[
    WorkerReady | ShapeDone | ActivityChanged | EvaluationDone | JobDone | JobFailed | DeviceProbed,
    Field(discriminator="type"),
]
WORKER_MESSAGE: TypeAdapter[WorkerMessage] = TypeAdapter(WorkerMessage)
