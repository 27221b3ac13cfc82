"""Messages between the supervisor (parent) and the sandboxed child: pydantic models, one JSON
object per line, on two private pipes (requests: parent -> child; replies: child -> parent).

The parent speaks first: `Hello` (the per-run token and what the child needs to set itself up).
The child answers `Started` once torch is imported (the import/compile time limit starts then),
then `Ready` or `ImportFailed`, then one reply per request, in order: the child
serves a sequence of requests (check shape k, later time shape k) until `Shutdown`, so that a
tournament can interleave several children shape by shape. Every reply carries the token and the
request's id; the parent rejects anything else as a protocol violation.

Tensors never travel in messages: the child copies them as raw bytes into files in a directory
the parent created (see `harness.sandbox.transfer`) and describes them with `TensorInfo`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from harness.wire import AutotunerInfo, CallError, CheckReply, TensorInfo

MAX_MESSAGE_BYTES = 4 * 1024 * 1024


class Message(BaseModel):
    """A message of the protocol (those that checking reads too live in harness.wire)."""

    model_config = ConfigDict(extra="forbid")


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


class Hello(Message):
    type: Literal["hello"] = "hello"
    token: str
    device: Literal["cpu", "cuda"]
    entry_point: str  # called entry(data)
    unpacked_entry_points: list[str] = []  # when entry_point is missing: the first found, entry(*data)
    output_index: int | None
    input_indices: list[int]
    workdir: str
    io_dir: str
    isolation: IsolationPlan = IsolationPlan()


class CheckRequest(Message):
    """Run the entry point once on the inputs of one shape, and export output and inputs."""

    type: Literal["check"] = "check"
    id: int
    shape: dict[str, int | float | str | bool]
    seed: int
    autotune_config: int | None = None  # force every Autotuner to its config (index mod count)
    # before the call, every Triton autotuner forgets the configs it chose, as in a fresh process
    # (the first check of a child kept from the candidate's previous phase)
    forget_tuning: bool = False


class Shutdown(Message):
    type: Literal["shutdown"] = "shutdown"


class TimeRequest(Message):
    """Warm up and time the entry point on one shape (harness.timing.time_calls with this rule).
    Before every call the child asks for that call's seed (`SeedWanted`, answered by `CallSeed`),
    so that no call's inputs are known before it is made; after every timed call it sends
    `CallDone` once the output is in a file for the parent to check; it ends with `TimeReply`."""

    type: Literal["time"] = "time"
    id: int
    shape: dict[str, int | float | str | bool]
    warmup_calls: int = 1
    warmup_s: float = 0.0
    min_runs: int = 3
    max_runs: int = 100
    max_rel_err: float = 0.001
    budget_s: float = 10.0
    autotune_config: int | None = None
    # the size of the shared output buffer for this phase (harness.sandbox.transfer): an output
    # that fits goes there, a larger one (a wrong shape) to a file
    shared_output_bytes: int = 0


class CallSeed(Message):
    """The seed of call `index` of a `TimeRequest`'s shape (its inputs come from this seed)."""

    type: Literal["call_seed"] = "call_seed"
    id: int
    index: int
    seed: int


Request = Annotated[CheckRequest | TimeRequest | CallSeed | Shutdown, Field(discriminator="type")]
REQUEST = TypeAdapter(Request)


# --- child -> parent ------------------------------------------------------------------------


class IsolationReport(Message):
    namespaces: list[str] = []
    read_only: bool = False
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


class SeedWanted(Message):
    type: Literal["seed_wanted"] = "seed_wanted"
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
    Started | Ready | ImportFailed | CheckReply | SeedWanted | CallDone | TimeReply,
    Field(discriminator="type"),
]
REPLY = TypeAdapter(Reply)


class InitStatus(Message):
    """Written once by the pid-namespace init on its own pipe when the worker ends."""

    exit_code: int | None = None
    signal: int | None = None


def encode(message: BaseModel) -> bytes:
    return message.model_dump_json().encode() + b"\n"
