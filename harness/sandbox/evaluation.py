"""`evaluate`: check one candidate against its task's reference in a sandboxed child.

The flow per shape: the parent makes the inputs and the reference (harness.checking), asks the
child to run the entry point on the same seed, reads back the output and the inputs, and judges.
On the CPU, where the Triton interpreter cannot benchmark, every autotune config is checked: the
shape is run once per config index with every Autotuner forced to that config.

An evaluation stops at the first shape that ends in anything but `pass` or `wrong_answer` (a
crash, a timeout, an exception: after a CUDA error the context is gone); the shapes after it are
`not_run`.
"""

from __future__ import annotations

import hashlib
from time import perf_counter
from typing import Literal

import torch
from pydantic import BaseModel

from harness import checking
from harness.errors import HarnessError
from harness.sandbox.protocol import AutotunerInfo, CheckReply, ImportFailed, IsolationReport
from harness.sandbox.supervisor import ChildFailure, ChildProcess, IsolationLevel, SandboxLimits
from harness.sandbox.transfer import read_tensor
from harness.tasks import Shape, TaskSpec, combine_seeds, load_reference

STATUSES = ("pass", "wrong_answer", "compile_error", "runtime_error", "timeout", "crashed", "unsupported")
Status = Literal["pass", "wrong_answer", "compile_error", "runtime_error", "timeout", "crashed", "unsupported"]
ShapeStatus = Literal[
    "pass", "wrong_answer", "compile_error", "runtime_error", "timeout", "crashed", "unsupported", "not_run"
]
MODES = ("test", "leaderboard")
LOG_TAIL_CHARS = 4000


class ShapeOutcome(BaseModel):
    """One shape of an evaluation. `shape` holds the parameters and the public seed (never the
    combined leaderboard seed, from which the secret could be recovered). The timing fields stay
    None until harness.timing fills them."""

    set_name: str
    index: int
    shape: dict[str, int | float | str | bool]
    status: ShapeStatus = "not_run"
    passed: bool | None = None
    reason: str = ""
    check: dict = {}
    call_s: float | None = None
    runs: int | None = None
    mean_ms: float | None = None
    median_ms: float | None = None
    std_ms: float | None = None
    err_ms: float | None = None
    min_ms: float | None = None
    max_ms: float | None = None
    times_ms: list[float] = []


class Evaluation(BaseModel):
    status: Status
    reason: str = ""
    task: str
    filename: str
    code_sha256: str
    device: str
    mode: str
    shape_set: str
    compile_s: float | None = None  # the candidate's import (and anything it compiles there)
    startup_s: float | None = None  # spawn until the child has imported torch (parent's clock)
    wall_s: float = 0.0
    isolation: str = ""
    autotuners: list[AutotunerInfo] = []
    shapes: list[ShapeOutcome] = []
    log_tail: str = ""


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def default_shape_set(device: str) -> str:
    return "tests" if device == "cuda" else "smoke"


def describe_isolation(level: IsolationLevel, report: IsolationReport | None) -> str:
    if report is None or not level.full:
        return level.name
    facts = []
    if report.read_only:
        facts.append("read-only file systems")
    if report.hidden:
        facts.append(f"{len(report.hidden)} directories hidden")
    if report.locked:
        facts.append("locked")
    facts += report.problems
    return f"{level.name} ({', '.join(facts)})"


def _config_label(chosen: dict[str, dict[str, str]] | None) -> str:
    if not chosen:
        return ""
    return "; ".join(
        f"{name}: " + ", ".join(f"{key}={value}" for key, value in kwargs.items() if value != "None")
        for name, kwargs in chosen.items()
    )


def _judge(task: TaskSpec, case: checking.ReferenceCase, child: ChildProcess, reply: CheckReply):
    """(status, reason, check details) of one call."""
    if reply.error is not None:
        return reply.error.kind, reply.error.error, {}
    problem = checking.output_problem(reply.output, case.expected, reply.output_aliases_input)
    details: dict = {"output": reply.output.model_dump(exclude={"written"}) if reply.output else None}
    if problem is not None:
        return "wrong_answer", problem, details
    returned_inputs = []
    for index, info in zip(task.input_indices, reply.inputs):
        try:
            returned_inputs.append(read_tensor(child.input_path(reply.id, index), info))
        except (ValueError, OSError):
            returned_inputs.append(None)
    try:
        received = read_tensor(child.output_path(reply.id), reply.output)
    except (ValueError, OSError) as exc:
        return "wrong_answer", f"output could not be read back: {exc}", details
    check = checking.compare_output(received, case, rtol=task.rtol, atol=task.atol)
    details.update(check.model_dump())
    inputs_problem = checking.inputs_problem(task, case, returned_inputs)
    if inputs_problem is not None:
        reason = inputs_problem if check.passed else f"{inputs_problem}; {check.reason}"
        return "wrong_answer", reason, details
    return ("pass", "", details) if check.passed else ("wrong_answer", check.reason, details)


def _check_shape(
    child: ChildProcess,
    task: TaskSpec,
    reference,
    outcome: ShapeOutcome,
    shape: Shape,
    seed: int,
    config_count: int,
    force_configs: bool,
) -> int:
    """Run and judge one shape (with `force_configs`, once per autotune config); fills
    `outcome` and returns the config count, which grows if a call created new autotuners."""
    case = checking.reference_case(task, reference, shape, seed, child.device)
    where = f"{outcome.set_name}[{outcome.index}]"
    configs: list[dict] = []
    first_failure = None
    index = 0
    while True:
        forced = index if config_count else None
        phase = f"call on {where}" + (f" with autotune config {forced}" if forced is not None else "")
        reply = child.check(shape.parameters, seed, autotune_config=forced, phase=phase)
        status, reason, details = _judge(task, case, child, reply)
        child.discard_files()
        if outcome.call_s is None:
            outcome.call_s = reply.seconds
        if force_configs:
            config_count = max(config_count, max((len(t.configs) for t in reply.autotuners), default=0))
        label = _config_label(reply.autotune_config)
        configs.append({"index": forced, "config": label, "status": status, "details": details})
        if status != "pass" and first_failure is None:
            prefix = f"autotune config {forced} ({label}): " if forced is not None else ""
            first_failure = (status, prefix + reason, details)
        index += 1
        if status not in ("pass", "wrong_answer") or index >= max(config_count, 1):
            break
    status, reason, details = first_failure or ("pass", "", configs[-1]["details"])
    outcome.status, outcome.reason = status, reason
    outcome.passed = status == "pass"
    outcome.check = dict(details)
    if len(configs) > 1 or configs[0]["config"]:
        outcome.check["configs"] = [
            {
                "index": c["index"],
                "config": c["config"],
                "status": c["status"],
                "max_abs_err": c["details"].get("max_abs_err"),
                "rel_l2": c["details"].get("rel_l2"),
            }
            for c in configs
        ]
    return config_count


def evaluate(
    code: bytes,
    filename: str,
    task: TaskSpec,
    *,
    device: str,
    mode: str = "test",
    shape_set: str | None = None,
    secret_seed: int | None = None,
    limits: SandboxLimits | None = None,
) -> Evaluation:
    """Check `code` on every shape of `shape_set` (default: `smoke` on the CPU, `tests` on CUDA)
    in one sandboxed child. Leaderboard mode combines each shape's seed with `secret_seed`.
    Bad arguments raise HarnessError; anything the candidate does is a status in the result."""
    if device not in ("cpu", "cuda"):
        raise HarnessError(f"unknown device {device!r}: use cpu or cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise HarnessError("--device cuda, but torch sees no CUDA GPU here")
    if mode not in MODES:
        raise HarnessError(f"unknown mode {mode!r}: use {' or '.join(MODES)}")
    if mode == "leaderboard" and secret_seed is None:
        raise HarnessError("leaderboard mode needs the secret seed")
    shape_set = shape_set or default_shape_set(device)
    shapes = task.shapes(shape_set)
    limits = limits or SandboxLimits.from_settings()
    code_sha256 = hashlib.sha256(code).hexdigest()
    reference = load_reference(task)
    started = perf_counter()
    evaluation = Evaluation(
        status="pass",
        task=task.name,
        filename=filename,
        code_sha256=code_sha256,
        device=device,
        mode=mode,
        shape_set=shape_set,
        shapes=[
            ShapeOutcome(set_name=shape_set, index=i, shape={**s.parameters, "seed": s.seed})
            for i, s in enumerate(shapes)
        ],
    )
    force_configs = limits.check_all_autotune_configs
    if force_configs is None:
        force_configs = device == "cpu"
    with ChildProcess(code, task, device=device, limits=limits, code_sha256=code_sha256) as child:
        try:
            first = child.start()
            evaluation.startup_s = child.startup_s
            evaluation.compile_s = first.import_s
            if isinstance(first, ImportFailed):
                evaluation.status, evaluation.reason = first.kind, first.error
            else:
                evaluation.isolation = describe_isolation(child.level, first.isolation)
                evaluation.autotuners = first.autotuners
                config_count = max((len(t.configs) for t in first.autotuners), default=0) if force_configs else 0
                for outcome, shape in zip(evaluation.shapes, shapes):
                    seed = combine_seeds(shape.seed, secret_seed) if mode == "leaderboard" else shape.seed
                    try:
                        config_count = _check_shape(
                            child, task, reference, outcome, shape, seed, config_count, force_configs
                        )
                    except ChildFailure as failure:
                        outcome.status, outcome.reason, outcome.passed = failure.status, failure.reason, False
                    if outcome.status not in ("pass", "wrong_answer"):
                        break
        except ChildFailure as failure:
            evaluation.status, evaluation.reason = failure.status, failure.reason
        if not evaluation.isolation:
            evaluation.isolation = describe_isolation(child.level, None)
        evaluation.log_tail = child.log_tail(LOG_TAIL_CHARS)
    failed = next((s for s in evaluation.shapes if s.status not in ("pass", "not_run")), None)
    if evaluation.status == "pass" and failed is not None:
        shape_label = " ".join(f"{k}={v}" for k, v in failed.shape.items() if k != "seed")
        evaluation.status = failed.status
        evaluation.reason = f"{failed.set_name}[{failed.index}] ({shape_label}): {failed.reason}"
    evaluation.wall_s = perf_counter() - started
    return evaluation
