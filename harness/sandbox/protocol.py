"""Messages between the supervisor (parent) and the sandboxed child: pydantic models, one JSON
object per line, on two private pipes (requests: parent -> child; replies: child -> parent).

The parent speaks first: `Hello` (the per-run token and what the child needs to set itself up).
The child answers `Started` once torch is imported (the import/compile time limit starts then),
then `Ready` or `ImportFailed`, then one reply per request, in order: the child
serves a sequence of requests (check shape k, later time shape k) until `Shutdown`, so that a
tournament can interleave several children shape by shape. Every reply carries the token and the
request's id; the parent rejects anything else as a protocol violation.

Tensors never travel in messages, and nothing is ever pickled. The parent makes every input
(harness.checking, from the task's generate_input) and copies its tensors as raw bytes into a
memfd of its own that the child maps; a request describes the data tuple item by item
(`DataItem`: a tensor's dtype, shape, stride and place in that memory; numbers, strings and None
by value; tuples, lists and dicts of those), and the child rebuilds it on its device
(harness.sandbox.transfer). The child copies what a call returned as raw bytes into files in a
directory the parent created, or into a second memfd, and describes it with `TensorInfo`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, TypeAdapter

from harness.wire import AutotunerInfo, CallError, CheckReply, TensorInfo

MAX_MESSAGE_BYTES = 4 * 1024 * 1024


class Message(BaseModel):
    """A message of the protocol (those that checking reads too live in harness.wire)."""

    # NaN and the infinities are written as JSON's NaN/Infinity constants (a value of the data
    # tuple may be one), never as null
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")


# --- the data tuple, parent -> child ----------------------------------------------------------


class TensorItem(Message):
    """A tensor whose bytes (C order) lie at `offset` in the inputs memory; the child makes it on
    its device with `stride` (None: contiguous)."""

    kind: Literal["tensor"] = "tensor"
    dtype: str  # a key of harness.sandbox.transfer.DTYPES
    shape: list[NonNegativeInt]
    stride: list[NonNegativeInt] | None = None
    offset: NonNegativeInt
    nbytes: NonNegativeInt
    # made on the CPU whatever the child's device: GPU MODE's data may mix the two (nvfp4_group_gemm
    # hands its scale factors on the CPU beside CUDA tensors), and a submission gets it as made
    on_cpu: bool = False


class OutputBufferItem(Message):
    """One of the task's output buffers: its bytes never travel (the reference may have written its
    answer there); the child makes it empty, NaN for a floating dtype and zeros otherwise."""

    kind: Literal["output_buffer"] = "output_buffer"
    dtype: str
    shape: list[NonNegativeInt]
    stride: list[NonNegativeInt] | None = None
    on_cpu: bool = False  # as TensorItem's


class ValueItem(Message):
    """A number, a string, a bool or None, as it is."""

    kind: Literal["value"] = "value"
    value: bool | int | float | str | None


class DtypeItem(Message):
    """A torch.dtype (a config's `dtype`), by its name (a key of harness.sandbox.transfer.DTYPES)."""

    kind: Literal["dtype"] = "dtype"
    name: str


class SequenceItem(Message):
    kind: Literal["tuple", "list"]
    items: list[DataItem]


class MappingItem(Message):
    kind: Literal["dict"] = "dict"
    items: dict[str, DataItem]


class ObjectItem(Message):
    """An object of a class of the task's own files (GPU MODE's amd/mla-decode hands a `Config`
    dataclass and a `KVCache` nn.Module) or of torch.nn: the child imports `module` (`reference`,
    `task` or `utils` beside the submission, or a torch.nn module), finds `qualname` there and
    makes an object of it without calling its `__init__` (a named tuple, `fields`, is made from
    `state` as its fields): an nn.Module gets nn.Module's own `__init__`, then `parameters`,
    `buffers` and `modules` registered as such and `training`; every object then the attributes in
    `state` (its other instance attributes), each made as the data's items are (tensors through
    the inputs memory). Nothing is unpickled: the child builds what the items say."""

    kind: Literal["object"] = "object"
    module: str
    qualname: str
    state: dict[str, DataItem] = {}
    parameters: dict[str, DataItem] = {}
    buffers: dict[str, DataItem] = {}
    modules: dict[str, DataItem] = {}
    training: bool | None = None  # None: not an nn.Module
    fields: bool = False  # a named tuple: made as `cls(**state)`


class WholeItem(Message):
    """The data is this one object (one tensor, a dict), not a tuple of items: the only item of
    a data list that holds it, and nowhere else."""

    kind: Literal["whole"] = "whole"
    item: DataItem


DataItem = Annotated[
    TensorItem
    | OutputBufferItem
    | ValueItem
    | DtypeItem
    | SequenceItem
    | MappingItem
    | ObjectItem
    | WholeItem,
    Field(discriminator="kind"),
]
SequenceItem.model_rebuild()
MappingItem.model_rebuild()
ObjectItem.model_rebuild()
WholeItem.model_rebuild()


# --- parent -> child ------------------------------------------------------------------------


class IsolationPlan(Message):
    """What the child sets up before it imports anything of the candidate's.

    `mount`: the child is in its own mount namespace: it hides `hidden` under empty tmpfs mounts,
    keeps `writable` writable and remounts everything else read-only. `pid_init`: the child is
    pid 1 of its own pid namespace: it forks, stays behind as init (reaping, reporting the
    worker's exit on the status pipe) and the worker serves. `lock`: the worker enters a nested
    user and mount namespace so that the candidate cannot undo the mounts. Each hiding mount, and
    each `private` directory (its files copied into a fresh tmpfs: the working directory), is a
    tmpfs of `tmpfs_bytes`."""

    mount: bool = False
    pid_init: bool = False
    lock: bool = False
    hidden: list[str] = []
    writable: list[str] = []
    private: list[str] = []
    tmpfs_bytes: int = 256 * 1024**2
    visible: list[str] = []  # needed directories under a hidden one: bound back read-only
    devices: list[str] | None = None  # a private /dev with these host nodes (None: the host's, read-only)


class Hello(Message):
    type: Literal["hello"] = "hello"
    token: str
    device: Literal["cpu", "cuda"]
    entry_point: str  # called entry(data)
    unpacked_entry_points: list[str] = []  # when entry_point is missing: the first found, entry(*data)
    workdir: str
    io_dir: str
    isolation: IsolationPlan = IsolationPlan()


class CheckRequest(Message):
    """Run the entry point once on `data` (in the inputs memory), and export the output."""

    type: Literal["check"] = "check"
    id: int
    data: list[DataItem]
    autotune_config: int | None = None  # force every Autotuner to its config (index mod count)
    # the size of a new device window for the inputs, whose descriptor the parent sent over the
    # fd socket just before (harness.sandbox.device_memory); None: the inputs memory as before
    inputs_memory: int | None = None
    # with device windows: a new output window (as in TimeRequest), and the bytes of it the
    # output may fill (0: the output goes to its file, as on the CPU)
    output_memory: int | None = None
    shared_output_bytes: int = 0
    # before the call, every Triton autotuner forgets the configs it chose, as in a fresh process
    # (the first check of a child kept from the candidate's previous phase)
    forget_tuning: bool = False


class Shutdown(Message):
    type: Literal["shutdown"] = "shutdown"


class TimeRequest(Message):
    """Warm up and time the entry point on one shape (harness.timing.time_calls with this rule).
    Every warm-up call runs on `warmup_data` (in the inputs memory; warm-up outputs are not
    checked). Before every timed call the child asks for that call's inputs (`InputsWanted`,
    answered by `CallInputs`), so that no timed call's inputs are known before it is made; with
    `wait_for_go`, once it holds them on its device (the output buffers emptied) it says so
    (`InputsReady`) and waits for `CallGo`, which the parent sends after flushing the GPU's L2
    cache from its own process;
    after every timed call it sends `CallDone` once the output is in the shared buffer or a file
    for the parent to check; it ends with `TimeReply`."""

    type: Literal["time"] = "time"
    id: int
    warmup_data: list[DataItem]
    warmup_calls: int = 1
    warmup_s: float = 0.0
    min_runs: int = 3
    max_runs: int = 100
    max_rel_err: float = 0.001
    budget_s: float = 10.0
    # stop once the calls are clearly slower than this mean (harness.timing.StoppingRule)
    slower_than_ms: float | None = None
    autotune_config: int | None = None
    # the size of the shared output buffer for this phase (harness.sandbox.transfer): an output
    # that fits goes there, a larger one (a wrong shape) to a file
    shared_output_bytes: int = 0
    # before every timed call: InputsReady, then wait for CallGo (the parent's flush; on a GPU)
    wait_for_go: bool = False
    # new device windows (harness.sandbox.device_memory) whose descriptors the parent sent over
    # the fd socket just before, the output's first: their sizes; None: the memory as before
    output_memory: int | None = None
    inputs_memory: int | None = None


class CallInputs(Message):
    """The inputs of timed call `index` of a `TimeRequest`, in the inputs memory; None: the
    inputs of the call before it (warm-up included) again, as the child holds them (benchmark
    mode repeats one seed per shape)."""

    type: Literal["call_inputs"] = "call_inputs"
    id: int
    index: int
    data: list[DataItem] | None = None
    inputs_memory: int | None = None  # a new device window for them (as in CheckRequest)


class CallGo(Message):
    """Make timed call `index` now: the parent has timed the call's prelude (from handing over its
    inputs to here) and, on a GPU, flushed the L2 cache from its own process."""

    type: Literal["call_go"] = "call_go"
    id: int
    index: int


Request = Annotated[CheckRequest | TimeRequest | CallInputs | CallGo | Shutdown, Field(discriminator="type")]
REQUEST = TypeAdapter(Request)


# --- child -> parent ------------------------------------------------------------------------


class IsolationReport(Message):
    namespaces: list[str] = []
    read_only: bool = False
    private_dev: bool = False
    hidden: list[str] = []
    locked: bool = False
    problems: list[str] = []


class Started(Message):
    type: Literal["started"] = "started"
    token: str


class Ready(Message):
    type: Literal["ready"] = "ready"
    token: str
    import_s: float
    autotuners: list[AutotunerInfo]
    isolation: IsolationReport


class ImportFailed(Message):
    type: Literal["import_failed"] = "import_failed"
    token: str
    kind: Literal["compile_error", "unsupported", "runtime_error"]
    error: str
    import_s: float


class InputsWanted(Message):
    """The child is ready for timed call `index` (indices grow) and waits for its `CallInputs`."""

    type: Literal["inputs_wanted"] = "inputs_wanted"
    token: str
    id: int
    index: int


class FirstCallDone(Message):
    """The warm-up's first call (compiles, autotuning and lazy loading included) is over and the
    warm-up goes on: from here the parent bounds the rest of the warm-up by its own clock (the
    child ends it by a clock the candidate can replace)."""

    type: Literal["first_call_done"] = "first_call_done"
    token: str
    id: int


class InputsReady(Message):
    """Timed call `index`'s inputs are on the child's device and its output buffers emptied; the
    child waits for `CallGo`."""

    type: Literal["inputs_ready"] = "inputs_ready"
    token: str
    id: int
    index: int


class CallDone(Message):
    """Call `index` was timed and its output is in the file the parent named."""

    type: Literal["call_done"] = "call_done"
    token: str
    id: int
    index: int
    output: TensorInfo | None = None
    output_aliases_input: bool = False


class TimeReply(Message):
    """Every timed call's time in ms (event time, or the call's wall time where work escaped the
    timed stream), the warm-up seconds and the timing flags; or the error that ended the calls."""

    type: Literal["time_reply"] = "time_reply"
    token: str
    id: int
    error: CallError | None = None
    times_ms: list[float] = []
    compile_s: float = 0.0
    flags: list[str] = []


Reply = Annotated[
    Started
    | Ready
    | ImportFailed
    | CheckReply
    | FirstCallDone
    | InputsWanted
    | InputsReady
    | CallDone
    | TimeReply,
    Field(discriminator="type"),
]
REPLY = TypeAdapter(Reply)


class InitStatus(Message):
    """Written once by the pid-namespace init on its own pipe when the worker ends."""

    exit_code: int | None = None
    signal: int | None = None


def encode(message: BaseModel) -> bytes:
    return message.model_dump_json().encode() + b"\n"
