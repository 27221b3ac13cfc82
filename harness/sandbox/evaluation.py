"""`evaluate`: check one candidate against its task's reference in a sandboxed child.

The flow per shape: the parent makes the inputs and the reference (harness.checking), hands the
inputs to the child as raw bytes (harness.sandbox.transfer), asks it to run the entry point on
them, reads back the output and what the child saw of the inputs, and judges.
On the CPU, where the Triton interpreter cannot benchmark, every autotune config is checked: the
shape is run once per config index with every Autotuner forced to that config.

An evaluation stops at the first shape that ends in anything but `pass` or `wrong_answer` (a
crash, a timeout, an exception: after a CUDA error the context is gone); the shapes after it are
`not_run`.

A timed evaluation also warms up and times each shape after its check (`Evaluator`); the
per-shape statistics come from harness.timing and the score from harness.scoring.
"""

from __future__ import annotations

import functools
import hashlib
import math
import queue
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import replace
from time import perf_counter

import torch
from typing_extensions import Self

from harness import checking, scoring
from harness.config import get_settings
from harness.devices import default_shape_set, resolve_device
from harness.environment import confirm_device_name
from harness.errors import HarnessError
from harness.sandbox.calibration import CalibrationOutOfMemory, Calibrator, calibrated_kind
from harness.sandbox.devices import (
    INTERLEAVE_GROUP,
    MODES,
    check_parallelism,
    gpu_check_parallelism,
)
from harness.sandbox.isolation import IsolationLevel
from harness.sandbox.limits import SandboxLimits, bound_parent_memory
from harness.sandbox.pool import CHILD_POOL, ChildPool, child_key
from harness.sandbox.protocol import CallDone, ImportFailed, IsolationReport, Ready
from harness.sandbox.supervisor import SHUTDOWN_GRACE_S, ChildFailure, ChildProcess
from harness.sandbox.timed_cases import TimedCases
from harness.sandbox.transfer import read_output
from harness.tasks import Shape, TaskSpec, combine_seeds, load_reference
from harness.tasks.spec import TaskUnsupported, shape_label
from harness.timing import (
    BELOW_PHYSICAL_FLOOR,
    HOST_CLOCK_MISMATCH,
    HOST_CONFIRM_PASSES,
    TIMING_MISMATCH,
    TIMING_PASSES,
    BenchmarkStats,
    StoppingRule,
    clearly_slower,
    host_clock_verdict,
    parent_l2_flush,
    physical_floor_ms,
)
from harness.verdicts import Verdict, Verdicts
from harness.wire import (
    TIMING_STATISTICS,
    CheckReply,
    ConfigCheck,
    Evaluation,
    JoinedTiming,
    ShapeCheck,
    ShapeOutcome,
    TensorInfo,
    TimingPass,
    TimingRecord,
    shape_key,
)

LOG_TAIL_CHARS = 4000
WARMUP = {"cuda": (3, 0.1), "cpu": (1, 0.0)}  # timed shapes: at least (calls, seconds) of warm-up
WARMUP_AGAIN = (1, 0.0)  # a later pass of a shape: compiled, tuned and clocked up by the first
# what an evaluation does at a time (Evaluator.tell): its child starts and imports the candidate
# (extension builds and compiles at import included), its shapes are checked, a shape is timed,
# it waits for its next turn (interleaved: the others run their shape meanwhile), it has ended
ACTIVITIES = ("building", "checking", "timing", "waiting", "done")
KEEP_LIMIT = INTERLEAVE_GROUP  # children kept at most for a next phase (`keep_child`)
_keep_lock = threading.Lock()  # evaluators checked side by side keep their children from threads
STOP_WAIT_S = 2 * SHUTDOWN_GRACE_S + 5  # an interrupted side-by-side phase waits this long for its threads


def peak_bandwidth_gbs(device: str) -> float:
    """The peak bandwidth setting whose key is part of this device's name ("cpu" on the CPU)."""
    settings = get_settings()
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    for key, peak in settings.peak_bandwidth_gbs.items():
        if key.lower() in name.lower():
            return peak
    return settings.default_peak_bandwidth_gbs


def describe_isolation(level: IsolationLevel, report: IsolationReport | None, cgroups: str = "") -> str:
    """The level, what the child achieved in it, and the cgroups that apply (or that the watch does)."""
    if report is None or not level.full:
        return f"{level.name}; {cgroups}" if cgroups else level.name
    facts = []
    if report.read_only:
        facts.append("read-only file systems")
    if report.hidden:
        facts.append(f"{len(report.hidden)} directories hidden")
    if report.private_dev:
        facts.append("private /dev")
    if report.locked:
        facts.append("locked")
    facts += report.problems
    return f"{level.name} ({', '.join(facts)})" + (f"; {cgroups}" if cgroups else "")


def _config_label(chosen: dict[str, dict[str, str]] | None) -> str:
    if not chosen:
        return ""
    return "; ".join(
        f"{name}: " + ", ".join(f"{key}={value}" for key, value in kwargs.items() if value != "None")
        for name, kwargs in chosen.items()
    )


# What an `unsupported` candidate needs, by the error that said so (harness.sandbox.child's
# NO_CUDA_MESSAGES and a missing nvcc), in the harness's words.
UNSUPPORTED_NEEDS = (
    (
        "CUDA_HOME environment variable is not set",
        "needs a CUDA toolkit (CUDA_HOME unset) to build its extension",
    ),
    ("nvcc", "needs a CUDA toolkit (no nvcc found) to build its extension"),
    ("Torch not compiled with CUDA enabled", "needs CUDA: this torch was built without it"),
    ("No CUDA GPUs are available", "needs a CUDA GPU: none is visible here"),
    ("NVIDIA driver", "needs a CUDA GPU: no NVIDIA driver here"),
)


def error_reason(kind: str, error: str) -> str:
    """The reason stored for a candidate's error: the error itself, except that an `unsupported`
    one says what the candidate needs that this machine lacks, in the harness's words (a
    library's own advice, "Please set it to your CUDA install root", reads like an instruction
    to the user of the harness), with the type of the error after it."""
    if kind != "unsupported":
        return error
    needs = next((words for marker, words in UNSUPPORTED_NEEDS if marker in error), None)
    if needs is None:
        return f"needs CUDA, which is not here: {error}"
    return f"{needs} ({error.split(':', 1)[0]})"


def _judge(task: TaskSpec, case: checking.ReferenceCase, child: ChildProcess, reply: CheckReply):
    """(status, reason, the call's check, the output's comparison or None) of one call. `pass`
    when either verdict passes (harness.checking); the reason then says which one fails, if any."""
    if reply.error is not None:
        return reply.error.kind, error_reason(reply.error.kind, reply.error.error), ShapeCheck(), None
    problem = checking.output_problem(
        reply.output, case.expected, reply.output_aliases_input, same_shape_and_dtype=task.rtol is not None
    )
    details = ShapeCheck(output=reply.output)
    if problem is not None:
        return "wrong_answer", problem, details, None
    try:
        device = checking.output_device(case.expected)
        if reply.output.shared:  # in the shared output buffer (a device window or the memfd)
            received = child.read_shared_output(reply.output, device)
        else:
            received = read_output(child.io_fd, child.output_name(reply.id), reply.output, device)
    except (ValueError, OSError) as exc:
        return "wrong_answer", f"output could not be read back: {exc}", details, None
    check = checking.judge_output(task, received, case)
    details = ShapeCheck(output=reply.output, **check.model_dump(exclude={"verdicts", "accuracy"}))
    inputs_problem = checking.inputs_problem(task, case, reply)
    if inputs_problem is not None:
        reason = inputs_problem if not check.reason else f"{inputs_problem}; {check.reason}"
        return "wrong_answer", reason, details, None
    return ("pass" if check.passed else "wrong_answer"), check.reason, details, check


def _failed_verdicts(reason: str) -> Verdicts:
    """Both verdicts failed for an output that could not be compared (nothing returned, a wrong
    type or shape, modified inputs, an exception)."""
    return Verdicts(
        gpumode=Verdict(status="fail", reason=reason), accurate=Verdict(status="fail", reason=reason)
    )


def _record_comparison(
    outcome: ShapeOutcome, status: str, reason: str, check: checking.OutputCheck | None
) -> None:
    """Fold one output's verdicts and figures into the shape's (each verdict passes only where it
    passes for every output)."""
    verdicts = check.verdicts if check is not None else _failed_verdicts(reason or status)
    outcome.verdicts = verdicts if outcome.verdicts is None else outcome.verdicts.both(verdicts)
    if check is not None:
        outcome.accuracy = outcome.accuracy.worst(check.accuracy)


def checked_configs(count: int, cap: int, seed: int) -> list[int]:
    """The autotune config indices to check on a shape: all of them up to `cap`; above it config 0
    (the one timing uses) and `cap - 1` others drawn with the shape's seed (so the same shape and
    seed always check the same configs, and different shapes check different ones)."""
    if count <= cap:
        return list(range(count))
    return [0, *sorted(random.Random(seed).sample(range(1, count), max(cap - 1, 0)))]


def _check_shape(
    child: ChildProcess,
    task: TaskSpec,
    reference,
    outcome: ShapeOutcome,
    shape: Shape,
    seed: int,
    config_count: int,
    force_configs: bool,
    forget_tuning: bool = False,
) -> int:
    """Run and judge one shape (with `force_configs`, once per autotune config, or on a sample of
    them above limits.max_checked_autotune_configs: `checked_configs`); fills `outcome` and
    returns the config count, which grows if a call created new autotuners."""
    case = checking.reference_case(task, reference, shape, seed, child.device)
    child.allow_output(checking.output_nbytes(case.expected))
    where = f"{outcome.set_name}[{outcome.index}]"
    cap = child.limits.max_checked_autotune_configs
    configs: list[tuple[ConfigCheck, ShapeCheck]] = []  # each call's config and check
    first_failure = None
    first_reason = ""  # a verdict that fails on an output that passes the other one
    while True:
        done = {config.index or 0 for config, _ in configs}
        wanted = [i for i in checked_configs(max(config_count, 1), cap, seed) if i not in done]
        if not wanted:
            break
        index = wanted[0]
        forced = index if config_count else None
        phase = f"call on {where}" + (f" with autotune config {forced}" if forced is not None else "")
        reply = child.check(
            case.data,
            autotune_config=forced,
            phase=phase,
            forget_tuning=forget_tuning and index == 0,
            output_bytes=checking.output_nbytes(case.expected),
        )
        status, reason, details, check = _judge(task, case, child, reply)
        child.discard_files()
        if status in ("pass", "wrong_answer"):
            _record_comparison(outcome, status, reason, check)
        if outcome.call_s is None:
            outcome.call_s = reply.seconds
        if force_configs:
            config_count = max(config_count, max((len(t.configs) for t in reply.autotuners), default=0))
        label = _config_label(reply.autotune_config)
        configs.append(
            (
                ConfigCheck(
                    index=forced,
                    config=label,
                    status=status,
                    max_abs_err=details.max_abs_err,
                    rel_l2=details.rel_l2,
                ),
                details,
            )
        )
        if reason and status == "pass" and first_failure is None and not first_reason:
            first_reason = (f"autotune config {forced} ({label}): " if forced is not None else "") + reason
        if status != "pass" and first_failure is None:
            prefix = f"autotune config {forced} ({label}): " if forced is not None else ""
            first_failure = (status, prefix + reason, details)
        if status not in ("pass", "wrong_answer"):
            break
    status, reason, details = first_failure or ("pass", first_reason, configs[-1][1])
    if status == "pass" and outcome.verdicts is not None and not outcome.verdicts.either_passed:
        # every config passed one verdict, but not the same one
        status, reason = "wrong_answer", outcome.verdicts.reasons()
    outcome.status, outcome.reason = status, reason
    outcome.passed = status == "pass"
    outcome.check = details.model_copy()
    if len(configs) > 1 or configs[0][0].config:
        outcome.check.configs = [config for config, _ in configs]
    if config_count > cap:
        outcome.check.configs_sampled = (
            f"checked autotune configs {', '.join(str(config.index) for config, _ in configs)} of {config_count}: "
            f"config 0 and a sample drawn with the shape's seed (max_checked_autotune_configs={cap}); "
            "the rest were not run"
        )
    return config_count


class Evaluator:
    """One candidate in one long-lived sandboxed child, evaluated shape by shape.

    `evaluate` runs one to the end. A tournament holds one per revision and asks each in turn,
    shape by shape (A B C A B C ...), so that clock and temperature drift hits them all alike:

        evaluators = [Evaluator(code, name, task, device=..., timed=True) for ...]
        for ev in evaluators: ev.start()
        for k in range(shape_count):
            for ev in evaluators: ev.run_shape(k)
        evaluations = [ev.finish() for ev in evaluators]

    `timed`: after a shape passes its check it is warmed up and timed (harness.timing) in the same
    child, as long as every shape before it passed. In every mode each timed call's inputs come
    from a fresh secret seed, handed to the child (as bytes) only when it asks for that call
    (`_time_shape`), and every timed call's output is checked here, so that a candidate that
    caches or replays outputs fails; the modes differ in the checks' seeds (public in test
    mode, combined with the secret seed in leaderboard mode). `passes` (default: `TIMING_PASSES` when timed): each shape is timed in that
    many blocks of calls (`time_again`; evaluate_in_groups interleaves them), each under its
    share of `rule` (harness.timing, method 5.).
    """

    def __init__(
        self,
        code: bytes,
        filename: str,
        task: TaskSpec,
        *,
        device: str,
        mode: str = "test",
        timed: bool = False,
        shape_set: str | None = None,
        secret_seed: int | None = None,
        limits: SandboxLimits | None = None,
        rule: StoppingRule | None = None,
        keep_child: bool = False,
        calibrator: Calibrator | None = None,
        pool: ChildPool | None = None,
        resumed: list[ShapeOutcome] | None = None,
        passes: int | None = None,
        stop_at_failure: bool = False,
        slower_than: dict[str, float] | None = None,
    ) -> None:
        # what `again` needs to make a fresh evaluator of the same candidate
        self.arguments = {
            "code": code,
            "filename": filename,
            "task": task,
            "device": device,
            "mode": mode,
            "timed": timed,
            "shape_set": shape_set,
            "secret_seed": secret_seed,
            "limits": limits,
            "rule": rule,
            "keep_child": keep_child,
            "pool": pool,
            "passes": passes,
            "stop_at_failure": stop_at_failure,
            "slower_than": slower_than,
        }
        device = resolve_device(device)
        if passes is None:
            passes = TIMING_PASSES if timed else 1
        if passes < 1 or (passes > 1 and not timed):
            raise HarnessError(f"passes={passes}: only a timed evaluation times a shape, once or more")
        self.pool = pool or CHILD_POOL  # where its child may be kept or found (harness.sandbox.pool)
        if mode not in MODES:
            raise HarnessError(f"unknown mode {mode!r}: use {' or '.join(MODES)}")
        if mode == "leaderboard" and secret_seed is None:
            raise HarnessError("leaderboard mode needs the secret seed")
        shape_set = shape_set or default_shape_set(device, timed)
        self.shapes = task.shapes(shape_set)
        self.task, self.device, self.mode = task, device, mode
        bound_parent_memory(device)  # on the CPU: a reference too large fails an allocation, not the run
        self.timed, self.secret_seed = timed, secret_seed
        # blocks of timed calls of each shape in this one child (`time_again`), each under its
        # share of the rule (harness.timing, method 5.)
        self.passes = passes
        # an evolution's child stops at its first shape that fails, wrong answers included
        # (issue 31: its checks cost what its change needs; the shapes after stay `not_run`)
        self.stop_at_failure = stop_at_failure
        # an evolution's child: its parent's mean per shape (its parameters and seed as JSON with
        # sorted keys, as stored); a shape on which the child is clearly slower stops timing
        # early and is not timed again (harness.timing, method 4.)
        self.slower_than = slower_than or {}
        self.limits = limits or SandboxLimits.from_settings()
        self.rule = (rule or StoppingRule(budget_s=get_settings().shape_budget(device))).per_pass(passes)
        # the harness's own cost of a timed call per shape (evaluate_interleaved shares one)
        self.calibrator, self.own_calibrator = calibrator, None
        self._timed_case: tuple[tuple[str, int], checking.ReferenceCase] | None = None
        # the timed calls' seeds and cases, shared by the evaluators timed together
        # (harness.sandbox.timed_cases; evaluate_in_groups sets one per group), and how many
        # blocks of calls this evaluator timed per shape (a block's seeds are new to its child)
        self.timed_cases: TimedCases | None = None
        self._timed_blocks: dict[str, int] = {}
        # whether the timed calls' cases may be kept for the evaluators timed beside this one: not
        # in a retry after the memory ran out (`again`), where only the case in use is held
        self.keeps_cases = True
        code_sha256 = hashlib.sha256(code).hexdigest()
        try:
            self.reference, self.unsupported = load_reference(task), None
        except TaskUnsupported as exc:  # a module this machine lacks: no shape can run here
            self.reference, self.unsupported = None, str(exc)
        self.started = perf_counter()
        started_at = time.time()
        self.evaluation = Evaluation(
            status="pass",
            task=task.name,
            filename=filename,
            code_sha256=code_sha256,
            device=device,
            mode=mode,
            timed=timed,
            shape_set=shape_set,
            started_at=started_at,
            shapes=[
                ShapeOutcome(set_name=shape_set, index=i, shape={**s.parameters, "seed": s.seed})
                for i, s in enumerate(self.shapes)
            ],
        )
        self.resumed = self._take_over(resumed or [])
        force_configs = self.limits.check_all_autotune_configs
        self.force_configs = device == "cpu" if force_configs is None else force_configs
        self.config_count = 0
        self.stopped = False  # the import failed, or a shape ended the evaluation
        # told what the evaluation does now (ACTIVITIES), for progress; set by whoever runs it
        self.on_activity: Callable[[str], None] | None = None
        self.activity = ""
        # A child kept by an earlier evaluation of the same candidate is adopted, ready; with
        # `keep_child`, a child that passed everything is kept for the next one (`release_child`).
        # A child spawned early for this evaluation (`ChildPool.start_early`) is taken as it is.
        self.keep_child, self.kept = keep_child, False
        self.child_key = child_key(code_sha256, task.name, device, self.limits)
        kept, early = self.pool.take(self.child_key)
        self.adopted = kept is not None and kept.serving
        self.spawned_early = early is not None and not self.adopted
        self.forget_tuning = self.adopted
        if self.adopted:
            kept.log.clear()  # this evaluation's log starts here
            kept.spent_s = 0.0  # and its deadline
            self.child = kept
        elif self.spawned_early:
            self.child = early
        else:
            self.child = ChildProcess(
                code, task, device=device, limits=self.limits, code_sha256=code_sha256, pool=self.pool
            )
        for unused in (kept, early):
            if unused is not None and unused is not self.child:
                unused.close()

    def _take_over(self, resumed: list[ShapeOutcome]) -> set[int]:
        """Put the outcomes kept from an interrupted evaluation of this run in their places (each
        must be one of this evaluation's shapes, untimed, with a status the evaluation goes on
        after); `run_shape` hands them back without running them. Returns their indices."""
        if resumed and self.timed:
            raise HarnessError("a timed evaluation is evaluated whole: it cannot resume shapes")
        indices = set()
        for outcome in resumed:
            place = self.evaluation.shapes[outcome.index] if outcome.index < len(self.shapes) else None
            if (
                place is None
                or (place.set_name, place.shape) != (outcome.set_name, outcome.shape)
                or outcome.status not in ("pass", "wrong_answer")
            ):
                raise HarnessError(
                    f"a resumed shape that is not this evaluation's: {outcome.set_name}[{outcome.index}]"
                )
            self.evaluation.shapes[outcome.index] = outcome.model_copy(deep=True)
            indices.add(outcome.index)
        self.evaluation.resumed_shapes = sorted(indices)
        return indices

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def again(self) -> Evaluator:
        """A fresh evaluator of the same candidate, settings and calibrator (a new child), to
        evaluate it again alone (`retry_out_of_memory`)."""
        fresh = Evaluator(**self.arguments, calibrator=self.calibrator)
        fresh.on_activity = self.on_activity
        fresh.keeps_cases = False  # the parent's kept cases may be what ran out (pmpp grayscale on an H100)
        return fresh

    def close(self) -> None:
        """Stop the child and remove its files (also when it never started), unless it was kept
        for the next evaluation; idempotent."""
        if not self.kept:
            self.child.close()
        if self.own_calibrator is not None:
            self.own_calibrator.close()

    def release_child(self) -> None:
        """At the end of the evaluation: keep the child for the next evaluation of this candidate
        (with `keep_child`, when every shape passed and it can serve again), else ask it to stop
        without waiting (`finish` waits)."""
        passed = self.evaluation.status == "pass" and all(s.status == "pass" for s in self.evaluation.shapes)
        with _keep_lock:
            if (
                self.keep_child
                and passed
                and not self.stopped
                and self.child.serving
                and self.child_key not in self.pool.kept
                and len(self.pool.kept) < KEEP_LIMIT
            ):
                self.pool.kept[self.child_key] = self.child
                self.kept = True
        if not self.kept:
            self.child.request_shutdown()

    @functools.cached_property
    def peak_bandwidth_gbs(self) -> float:
        """Asked only when a shape is timed: on a GPU it reads the device name, which starts CUDA
        in this process, and that start belongs after the children's spawn (`start_evaluators`)."""
        return peak_bandwidth_gbs(self.device)

    @property
    def shape_count(self) -> int:
        return len(self.shapes)

    def tell(self, activity: str) -> None:
        """Say what the evaluation does from now on (one of ACTIVITIES), once per change."""
        if activity != self.activity:
            self.activity = activity
            if self.on_activity is not None:
                self.on_activity(activity)

    def begin_now(self) -> None:
        """The evaluation begins now, not when this Evaluator was made (it waited for its turn in
        `evaluate_side_by_side`): `wall_s` and `started_at` count from here."""
        self.started = perf_counter()
        self.evaluation.started_at = time.time()

    def start(self) -> bool:
        """Spawn the child and import the candidate; False when no shape can run.
        (`start_evaluators` does the same for several at once.)"""
        return self.spawn() and self.started_with(self.wait_ready())

    def spawn(self) -> bool:
        """Start the child without waiting for its imports; False (and the evaluation's status
        says why) when it died at once, or when the task cannot make its inputs on this device.
        An adopted child, or one spawned early, runs already."""
        unsupported = self.unsupported or self._unsupported_here()
        if unsupported is not None:
            self.evaluation.status, self.evaluation.reason = "unsupported", unsupported
            self.stopped = True
            return False
        if not self.adopted:
            self.tell("building")
        if self.adopted or self.spawned_early:
            return True
        try:
            self.child.spawn()
        except ChildFailure as failure:
            return self.started_with(failure)
        return True

    def _unsupported_here(self) -> str | None:
        """Why the task cannot run on this device, found off CUDA by making the first shape's
        inputs and reference (kept for its check, as `prefetch_reference` would): a generator
        that makes CUDA data only fails or makes it elsewhere (harness.tasks.spec.generate_inputs).
        On CUDA a reference that fails on this GPU says so at the check (`run_shape`)."""
        if self.device == "cuda":
            return None
        index = next((i for i in range(len(self.shapes)) if i not in self.resumed), None)
        if index is None:
            return None
        shape = self.shapes[index]
        try:
            checking.reference_case(self.task, self.reference, shape, self._check_seed(shape), self.device)
        except TaskUnsupported as exc:
            return f"task {self.task.name} {exc}" if str(exc).startswith("makes ") else str(exc)
        except Exception:  # noqa: BLE001 - the check computes it again and says what failed
            return None
        return None

    def wait_ready(self) -> Ready | ImportFailed | ChildFailure:
        """After `spawn`: the child's answer to the imports, or the failure that ended it. Touches
        only this evaluator's child, so evaluators may wait in threads at once."""
        if self.adopted:
            return self.child.ready
        try:
            return self.child.wait_ready()
        except ChildFailure as failure:
            return failure

    def started_with(self, first: Ready | ImportFailed | ChildFailure) -> bool:
        """Record how the start ended; False when no shape can run."""
        evaluation = self.evaluation
        if isinstance(first, ChildFailure):
            evaluation.status, evaluation.reason = first.status, first.reason
            self.stopped = True
            return False
        # an adopted child neither started nor imported anything for this evaluation
        evaluation.child_reused = self.adopted
        evaluation.startup_s = 0.0 if self.adopted else self.child.startup_s
        evaluation.compile_s = 0.0 if self.adopted else first.import_s
        if isinstance(first, ImportFailed):
            evaluation.status, evaluation.reason = first.kind, error_reason(first.kind, first.error)
            self.stopped = True
            return False
        evaluation.isolation = describe_isolation(
            self.child.level, first.isolation, self.child.cgroups.describe()
        )
        evaluation.autotuners = first.autotuners
        if self.force_configs:
            self.config_count = max((len(t.configs) for t in first.autotuners), default=0)
        return True

    def prefetch_reference(self, index: int = 0) -> None:
        """Compute shape `index`'s reference case now (harness.checking keeps the last one), as
        `run_shape` would on its check: `start_evaluators` does it while the children import, so
        that the parent's own CUDA initialization and first reference overlap their start. Any
        error is left for the check itself to raise."""
        index = next((i for i in range(index, len(self.shapes)) if i not in self.resumed), len(self.shapes))
        if index >= len(self.shapes):
            return
        shape = self.shapes[index]
        try:
            checking.reference_case(self.task, self.reference, shape, self._check_seed(shape), self.device)
        except Exception:  # noqa: BLE001, S110 - the check computes it again and raises there
            pass

    def _check_seed(self, shape: Shape) -> int:
        """The seed of a shape's checked call: its public seed, combined with the secret one in
        leaderboard mode."""
        return combine_seeds(shape.seed, self.secret_seed) if self.mode == "leaderboard" else shape.seed

    def run_shape(self, index: int, *, retried: bool = False) -> ShapeOutcome:
        """Check shape `index`, then time it when timed. After a shape that ended the evaluation
        (anything but pass or wrong_answer) the remaining shapes stay `not_run`. A resumed shape
        is handed back as it was kept. The parent's own work running out of memory (its
        reference, its comparison: a child beside it may hold the memory) is the shape's result,
        `crashed` with that reason, never an error out of the run: a check is tried once more
        after the parent freed what it keeps (`_parent_out_of_memory`)."""
        outcome = self.evaluation.shapes[index]
        if self.stopped or index in self.resumed:
            return outcome
        shape = self.shapes[index]
        seed = self._check_seed(shape)
        all_passed_before = all(s.status == "pass" for s in self.evaluation.shapes[:index])
        try:
            # A kept child's autotuners chose their configs on the previous phase's shapes (a key
            # that leaves out the batch, say, would reuse them here): the first check makes them
            # forget, so that this phase tunes on its own shapes as a fresh process would.
            forget, self.forget_tuning = self.forget_tuning, False
            self.tell("checking")
            self.config_count = _check_shape(
                self.child,
                self.task,
                self.reference,
                outcome,
                shape,
                seed,
                self.config_count,
                self.force_configs,
                forget,
            )
            if self.timed and outcome.status == "pass" and all_passed_before:
                self.tell("timing")
                self._time_shape(outcome, shape)
        except ChildFailure as failure:
            outcome.status, outcome.reason, outcome.passed = failure.status, failure.reason, False
        except TaskUnsupported as exc:  # the task's reference cannot run here (another GPU's)
            outcome.status, outcome.reason, outcome.passed = "unsupported", str(exc), False
        except Exception as exc:
            if checking.out_of_memory(exc) is None:
                raise
            if self._parent_out_of_memory(outcome, exc, retry=not retried):
                return self.run_shape(index, retried=True)
        if outcome.status not in ("pass", "wrong_answer") or (
            self.stop_at_failure and outcome.status != "pass"
        ):
            self.stopped = True
        return outcome

    def host_clock_flagged(self, index: int) -> bool:
        """Whether shape `index` passed, timed, with the flag `host_clock_mismatch` (the
        evaluation still going)."""
        if self.stopped or index >= len(self.evaluation.shapes):
            return False
        outcome = self.evaluation.shapes[index]
        return outcome.status == "pass" and HOST_CLOCK_MISMATCH in outcome.timing_flags

    def time_again(self, index: int) -> ShapeOutcome | None:
        """Time shape `index` once more in the same child (a later pass, `passes`), after a first
        timing that passed: a call of warm-up (`WARMUP_AGAIN`), then timed calls as in the first
        pass, under the same share of the rule, every output checked. The shape's figures become
        those of every pass's calls joined, each pass's own kept in `check.passes` (times,
        mean, flags); a pass that fails fails the shape. None: nothing to time (the shape did not
        pass, or the evaluation stopped)."""
        if self.stopped or index >= len(self.evaluation.shapes):
            return None
        outcome = self.evaluation.shapes[index]
        if outcome.status != "pass" or outcome.mean_ms is None:
            return None
        timing = outcome.check.timing
        if (
            timing is not None
            and timing.stopped_slower_than_ms is not None
            and HOST_CLOCK_MISMATCH not in outcome.timing_flags
        ):
            return None  # clearly slower than its parent: no later pass (a flagged one is confirmed)
        shape = self.shapes[index]
        if not outcome.check.passes:
            outcome.check.passes = [_pass_of(outcome)]
        passes = outcome.check.passes
        again = outcome.model_copy(deep=True)
        try:
            self.tell("timing")
            self._time_shape(again, shape, later=True)
        except ChildFailure as failure:
            again.status, again.reason, again.passed = failure.status, failure.reason, False
        except Exception as exc:
            if checking.out_of_memory(exc) is None:
                raise
            self._parent_out_of_memory(again, exc, retry=False)
        if again.status != "pass":
            outcome.status, outcome.passed = again.status, False
            outcome.reason = f"timed again: {again.reason}"
            outcome.verdicts = again.verdicts
            if outcome.status not in ("pass", "wrong_answer"):
                self.stopped = True
            return outcome
        passes.append(_pass_of(again))
        # the parent's clock judges every pass's calls at once (harness.timing.host_clock_verdict),
        # against the least of the shape's calibrations (on the CPU every block calibrates once more)
        verdict = host_clock_verdict(
            [time for item in passes for time in item.reported_ms],
            [bracket for item in passes for bracket in item.parent_ms],
            min(item.harness_ms for item in passes),
            dominant=self.device == "cuda",
            prelude_ms=[ms for item in passes for ms in item.prelude_ms],
            prelude_harness_ms=min(item.prelude_harness_ms for item in passes),
        )
        flags = {flag for item in passes for flag in item.flags if flag != HOST_CLOCK_MISMATCH}
        flags |= {HOST_CLOCK_MISMATCH} if verdict.flagged else set()
        _fill_timing(
            outcome,
            BenchmarkStats.from_times(
                verdict.times_ms, device=self.device, compile_s=outcome.compile_s or 0.0, flags=sorted(flags)
            ),
        )
        timing = outcome.check.timing
        if timing is not None:  # the first pass's (_time_shape)
            timing.flags = sorted(flags)  # what the store keeps (ShapeResult.timing_flags)
            timing.joined = JoinedTiming(
                hidden_ms=round(verdict.hidden_ms, 4),
                spread_ms=round(verdict.spread_ms, 4),
                rescored_calls=verdict.rescored_calls,
                prelude_excess_ms=round(verdict.prelude_excess_ms, 4),
            )
        outcome.verdicts = again.verdicts
        return outcome

    def _parent_out_of_memory(self, outcome: ShapeOutcome, exc: BaseException, *, retry: bool) -> bool:
        """After the parent's own work on `outcome`'s shape ran out of memory: free what the parent
        keeps (reference cases, CUDA's cache). Returns True when the shape should be run again (a
        check, when `retry`: the child waits between requests); else the shape is `crashed` with
        the reason, and a child stopped in a timing (mid-protocol) is killed."""
        self._timed_case = None
        if self.timed_cases is not None:  # the group's kept cases too, and none kept from now on
            self.timed_cases.forget()
            self.timed_cases.budget_bytes = 0
        checking.free_parent_memory()
        timing = self.activity == "timing"
        too_large = checking.larger_than_memory(exc, self.device)
        if too_large is not None:  # no neighbour's doing: the shape cannot run on this machine
            reason = f"too large to run here: {too_large}"
            if timing:
                self.child.abandon(reason)
            outcome.status, outcome.reason, outcome.passed = "unsupported", reason, False
            return False
        if retry and not timing:
            outcome.verdicts, outcome.check = None, ShapeCheck()
            return True
        where = f"{outcome.set_name}[{outcome.index}]"
        work = "timing (its reference or its check of a timed output)" if timing else "check"
        reason = (
            f"the harness ran out of memory in its own work on {where}'s {work}"
            f"{'' if timing else ', twice'}: {checking.one_line(checking.out_of_memory(exc))}; "
            "the memory is held elsewhere (by a child checked beside it?): not this revision's answer"
        )
        if timing:
            reason = self.child.abandon(reason).reason
        outcome.status, outcome.reason, outcome.passed = "crashed", reason, False
        return False

    def finish(self) -> Evaluation:
        """Stop the child and return the evaluation: its status is the first failing shape's, and
        a timed evaluation that passed everywhere gets the task's score."""
        evaluation = self.evaluation
        if not evaluation.isolation:
            evaluation.isolation = describe_isolation(self.child.level, None, self.child.cgroups.describe())
        self.close()  # first: the log is complete once the child is gone (a kept one goes on)
        evaluation.log_tail = self.child.log_tail(LOG_TAIL_CHARS)
        failed = next((s for s in evaluation.shapes if s.status not in ("pass", "not_run")), None)
        if evaluation.status == "pass" and failed is not None:
            label = shape_label(failed.shape)
            evaluation.status = failed.status
            evaluation.reason = f"{failed.set_name}[{failed.index}] ({label}): {failed.reason}"
        trimmed = self.child.trim_caches()
        if trimmed is not None and evaluation.status not in ("timeout", "crashed"):
            evaluation.status, evaluation.reason = "crashed", trimmed
        means = [s.mean_ms for s in evaluation.shapes]
        if self.timed and evaluation.status == "pass" and all(m is not None for m in means):
            evaluation.score_ms = scoring.score(means, self.task.ranking_by)
        evaluation.wall_s = perf_counter() - self.started
        evaluation.ended_at = time.time()
        self.tell("done")
        return evaluation

    def _time_shape(self, outcome: ShapeOutcome, shape: Shape, later: bool = False) -> None:
        """Warm up and time one shape that passed its check; fill the outcome's timing fields, or
        fail it (an exception, implausible times, a timed output that is wrong or missing).

        The warm-up runs on the check's inputs (the candidate has seen them; warm-up outputs are
        not checked; a later pass, `time_again`, warms up with `WARMUP_AGAIN`). Every timed call,
        in every mode, gets inputs from a fresh secret seed drawn for that call, handed over when
        the child asks for that call (its inputs and reference made before the parent's bracket
        opens), and its output is checked against the reference of that seed: no timed call runs
        on inputs the candidate has seen, so a candidate that keys kept answers on the inputs'
        values, their address or their shape gains nothing (its timed calls miss or fail). The
        modes differ only in the seeds of the checks (public in benchmark mode, combined with the
        secret seed in leaderboard mode) and in the name of a failed timed check."""
        leaderboard = self.mode == "leaderboard"
        seeds: dict[int, int] = {}
        problems: list[str] = []
        checked = 0
        if self.timed_cases is None:  # timed alone: a source of its own
            self.timed_cases = TimedCases(self.device, None if self.keeps_cases else 0)
        block = self._timed_blocks.get(shape.key(), 0)
        self._timed_blocks[shape.key()] = block + 1

        def inputs_for(index: int) -> tuple:
            """The inputs of timed call `index` (the child's count, warm-up included), made with
            its reference before the call. Its seed is that of the block's next timed call
            counted here (0, 1, ...), whatever the child's warm-up took: so the revisions timed
            together get the same inputs for their n-th timed calls (their warm-ups differ)."""
            if index not in seeds:
                seeds[index] = self.timed_cases.seed(shape.key(), block, len(seeds))
            return self._timed_case_for(shape, seeds[index]).data

        outputs: list[TensorInfo] = []  # what the child said of each timed output

        def on_output(done: CallDone) -> None:
            nonlocal checked
            checked += 1
            outputs.append(done.output)
            try:
                if not problems:
                    problem = self._timed_output_problem(outcome, shape, seeds.get(done.index), done)
                    if problem is not None:
                        problems.append(f"call {done.index} (seed {seeds.get(done.index)}): {problem}")
            finally:
                self.child.discard_files()

        # the check's case (cached): the warm-up's inputs, and the output's size (the shared buffer's)
        check_case = checking.reference_case(
            self.task, self.reference, shape, self._check_seed(shape), self.device
        )
        output_bytes = checking.output_nbytes(check_case.expected)
        warmup_calls, warmup_s = WARMUP_AGAIN if later else WARMUP[self.device]
        warmup_data = check_case.data
        slower_than = self.slower_than.get(shape_key(outcome.shape))
        timed = self.child.time(
            warmup_data=warmup_data,
            inputs_for=inputs_for,
            rule=self.rule if slower_than is None else replace(self.rule, slower_than_ms=slower_than),
            warmup_calls=warmup_calls,
            warmup_s=warmup_s,
            autotune_config=0 if self.config_count else None,
            on_output=on_output,
            phase=f"timing on {outcome.set_name}[{outcome.index}]",
            output_bytes=output_bytes,
            before_call=parent_l2_flush(self.device),
        )
        reply, parent_ms = timed.reply, list(timed.call_wall_ms.values())
        prelude_ms = list(timed.prelude_ms.values())
        times = reply.times_ms
        if reply.error is not None:
            reason = error_reason(reply.error.kind, reply.error.error)
            outcome.status, outcome.reason = reply.error.kind, f"during timing: {reason}"
        elif not 1 <= len(times) <= self.rule.max_runs or not all(0 < t < math.inf for t in times):
            outcome.status, outcome.reason = "crashed", "protocol violation during timing: implausible times"
        elif checked != len(times):
            outcome.status = "wrong_answer"
            outcome.reason = f"{len(times)} timed calls, but {checked} outputs handed over for checking"
        elif problems:
            check = "leaderboard recheck" if leaderboard else "timed output check"
            outcome.status, outcome.reason = "wrong_answer", f"{check}: {problems[0]}"
        elif outcome.verdicts is not None and not outcome.verdicts.either_passed:
            # each timed output passed one verdict, but not every one the same
            check = "leaderboard recheck" if leaderboard else "timed output check"
            outcome.status, outcome.reason = "wrong_answer", f"{check}: {outcome.verdicts.reasons()}"
        else:
            flags = [flag for flag in reply.flags if flag == TIMING_MISMATCH]
            calibrated = calibrated_kind(
                checking.data_layout(self.task, self.device, check_case.data).outputs,
                check_case.data,
                outputs,
            )
            calibrator = self._calibrator()
            try:
                harness_ms = calibrator.harness_ms(shape, output_bytes, calibrated)
                prelude_harness_ms = calibrator.prelude_ms(shape, output_bytes, calibrated)
            except CalibrationOutOfMemory as exc:  # the GPU's memory held by a neighbour, likely
                outcome.status, outcome.passed = "crashed", False
                outcome.reason = (
                    f"{exc}; the memory is held elsewhere (by a child checked beside it?): "
                    "not this revision's doing"
                )
                return
            verdict = host_clock_verdict(
                times,
                parent_ms,
                harness_ms,
                dominant=self.device == "cuda",
                prelude_ms=prelude_ms,
                prelude_harness_ms=prelude_harness_ms,
            )
            flags += [HOST_CLOCK_MISMATCH] if verdict.flagged else []
            flags += self._physical_floor_flags(times)
            stats = BenchmarkStats.from_times(
                verdict.times_ms, device=self.device, compile_s=reply.compile_s, flags=flags
            )
            _fill_timing(outcome, stats)
            outcome.check.timing = TimingRecord(
                device=self.device,
                compile_s=stats.compile_s,
                flags=stats.flags,
                parent_ms=[round(ms, 4) for ms in parent_ms],
                harness_ms=round(harness_ms, 4),
                # harness.timing.host_clock_verdict; `joined`: the same over every pass's calls
                reported_ms=list(times),
                hidden_ms=round(verdict.hidden_ms, 4),
                spread_ms=round(verdict.spread_ms, 4),
                rescored_calls=verdict.rescored_calls,
                prelude_ms=[round(ms, 4) for ms in prelude_ms],
                prelude_harness_ms=round(prelude_harness_ms, 4),
                prelude_excess_ms=round(verdict.prelude_excess_ms, 4),
                calibrated_output=None if calibrated is None else (calibrated[0], list(calibrated[1])),
            )
            if slower_than is not None and clearly_slower(verdict.times_ms, slower_than):
                # by the parent's own figures of the calls: no later pass (`time_again`)
                outcome.check.timing.stopped_slower_than_ms = slower_than
            return
        outcome.passed = False

    def _calibrator(self) -> Calibrator:
        """The shared calibrator, or one of this evaluator's own (closed with it)."""
        if self.calibrator is None:
            self.calibrator = self.own_calibrator = Calibrator(
                self.task, device=self.device, limits=self.limits
            )
        return self.calibrator

    def _physical_floor_flags(self, times: list[float]) -> list[str]:
        """`below_physical_floor` when the fastest reported call beats the shape's floor
        (harness.timing)."""
        flags = []
        input_bytes = 0
        if self._timed_case is not None:
            data = self._timed_case[1].data  # the timed calls' inputs
            layout = checking.data_layout(self.task, self.device, data)
            input_bytes = sum(
                getattr(data if key is None else data[key], "nbytes", 0) for key in layout.tensor_inputs(data)
            )
        if min(times) < physical_floor_ms(input_bytes, self.peak_bandwidth_gbs):
            flags.append(BELOW_PHYSICAL_FLOOR)
        return flags

    def _read_timed_output(self, done: CallDone, device: str):
        """A timed call's output: from the shared buffer, or from its file when it did not fit."""
        child = self.child
        if done.output is not None and done.output.shared:
            return child.read_shared_output(done.output, device)
        return read_output(child.io_fd, child.timed_output_name(done.id, done.index), done.output, device)

    def _timed_case_for(self, shape: Shape, seed: int) -> checking.ReferenceCase:
        """The inputs and reference of a timed call's seed: the case the evaluators timed with
        this one share (`timed_cases`, made by whichever asked first), or past its budget one
        of this evaluator's own, the previous one freed first; the exact answer only when a check
        asks for it."""
        key = (shape.key(), seed)
        if self._timed_case is None or self._timed_case[0] != key:
            self._timed_case = None  # free the previous case's memory before making the next

            def make() -> checking.ReferenceCase:
                return checking.make_reference_case(
                    self.reference,
                    shape,
                    seed,
                    self.device,
                    exact_now=False,
                    exact_answer=self.task.exact_answer,
                    exact_answer_at=self.task.exact_answer_at,
                    clone_inputs=lambda data: (
                        not checking.data_layout(self.task, self.device, data, shape).outputs
                    ),
                )

            case, _kept = self.timed_cases.case(shape.key(), seed, make)  # set by `_time_shape`
            self._timed_case = (key, case)
        return self._timed_case[1]

    def forget_timed_case(self) -> None:
        """Free the last timed call's case (its shape is done)."""
        self._timed_case = None

    def _timed_output_problem(
        self, outcome: ShapeOutcome, shape: Shape, seed: int | None, done: CallDone
    ) -> str | None:
        """Why a timed call's output is not the answer for its seed, or None; its verdicts are
        folded into the shape's. The fp32 reference is computed with the call's inputs, before
        the call, and the exact answer only where GPU MODE's check fails (no accuracy figures), to
        keep the check cheap."""
        if seed is None:
            return "an output for a call whose inputs were never sent"
        case = self._timed_case_for(shape, seed)
        problem = checking.output_problem(
            done.output,
            case.expected,
            done.output_aliases_input,
            same_shape_and_dtype=self.task.rtol is not None,
        )
        if problem is not None:
            return problem
        try:
            received = self._read_timed_output(done, checking.output_device(case.expected))
        except (ValueError, OSError) as exc:
            return f"output could not be read back: {exc}"
        check = checking.judge_output(self.task, received, case, figures=False)
        if not check.passed:
            return check.reason
        _record_comparison(outcome, "pass", check.reason, check)
        return None


def _fill_timing(outcome: ShapeOutcome, stats: BenchmarkStats) -> None:
    """A shape's timing figures from its statistics: every call, the summary, warm-up, flags."""
    for name in (*TIMING_STATISTICS, "times_ms"):
        setattr(outcome, name, getattr(stats, name))
    outcome.compile_s, outcome.timing_flags = stats.compile_s, stats.flags


def _pass_of(outcome: ShapeOutcome) -> TimingPass:
    """One timing pass of a shape, as `Evaluator.time_again` keeps it (harness.wire.TimingPass)."""
    timing = outcome.check.timing or TimingRecord(device="", reported_ms=outcome.times_ms)
    return TimingPass(
        times_ms=list(outcome.times_ms),
        mean_ms=outcome.mean_ms,
        flags=list(outcome.timing_flags),
        reported_ms=list(timing.reported_ms),
        parent_ms=list(timing.parent_ms),
        harness_ms=timing.harness_ms,
        prelude_ms=list(timing.prelude_ms),
        prelude_harness_ms=timing.prelude_harness_ms,
    )


def evaluate(
    code: bytes,
    filename: str,
    task: TaskSpec,
    *,
    device: str,
    mode: str = "test",
    timed: bool = False,
    shape_set: str | None = None,
    secret_seed: int | None = None,
    limits: SandboxLimits | None = None,
    rule: StoppingRule | None = None,
) -> Evaluation:
    """Check `code` on every shape of `shape_set` (default: `smoke` on the CPU; on CUDA `tests`,
    or `benchmarks` when timed) in one sandboxed child, and with `timed` time each shape after
    its check (see `Evaluator`). Leaderboard mode combines each shape's seed with `secret_seed`.
    Bad arguments raise HarnessError; anything the candidate does is a status in the result."""
    evaluator = Evaluator(
        code,
        filename,
        task,
        device=device,
        mode=mode,
        timed=timed,
        shape_set=shape_set,
        secret_seed=secret_seed,
        limits=limits,
        rule=rule,
    )
    return evaluate_interleaved([evaluator])[0]


def evaluate_interleaved(
    evaluators: list[Evaluator],
    on_shape: Callable[[Evaluator, ShapeOutcome], None] | None = None,
    *,
    group_size: int = INTERLEAVE_GROUP,
    parallel: int | None = None,
    on_evaluation: Callable[[Evaluator, Evaluation], None] | None = None,
    on_activity: Callable[[Evaluator, str], None] | None = None,
) -> list[Evaluation]:
    """Run several evaluators: the untimed ones side by side (`evaluate_side_by_side`, `parallel`
    at once: default settings.check_parallelism, `check_parallelism`), then the timed ones
    interleaved (`evaluate_in_groups`); with `parallel=1` the untimed ones are interleaved too, as
    before. Returns the evaluations in the evaluators' order; `on_shape` hears of every shape that
    ran, `on_evaluation` of every evaluation as it ends, and `on_activity` of what each does
    (ACTIVITIES) as it changes, all on this thread."""
    if on_activity is not None:
        for evaluator in evaluators:
            evaluator.on_activity = functools.partial(on_activity, evaluator)
    untimed = [evaluator for evaluator in evaluators if not evaluator.timed]
    count = side_by_side_count(untimed, parallel) if untimed else 1
    side_by_side = untimed if count > 1 else []
    rest = [evaluator for evaluator in evaluators if not (count > 1 and not evaluator.timed)]
    results: dict[int, Evaluation] = {}
    try:
        if side_by_side:
            done = evaluate_side_by_side(side_by_side, on_shape, on_evaluation, parallel=count)
            results.update(zip(map(id, side_by_side), done))
        if rest:
            done = evaluate_in_groups(rest, on_shape, on_evaluation, group_size=group_size)
            results.update(zip(map(id, rest), done))
    finally:
        for evaluator in evaluators:  # those that never ran (an interruption in the first part)
            evaluator.close()
    return [results[id(evaluator)] for evaluator in evaluators]


def side_by_side_count(evaluators: list[Evaluator], parallel: int | None = None) -> int:
    """How many of these untimed evaluators run at once: `parallel`, or the host's bound
    (`check_parallelism`) and, when automatic on CUDA, the GPU's free memory's."""
    if parallel is not None:
        return max(1, parallel)
    count = check_parallelism()
    if get_settings().check_parallelism == 0 and any(evaluator.device == "cuda" for evaluator in evaluators):
        count = min(count, gpu_check_parallelism())
    return count


def ran_out_of_memory(evaluation: Evaluation) -> bool:
    """Whether a failed evaluation failed for want of memory (its reason or the end of its log
    says so). The children checked together share one GPU's memory, and the host's, so such a
    failure may be a neighbour's doing. (A child killed at its own limit, `memory_bytes`, says
    so in other words and is not retried.)"""
    if evaluation.status in ("pass", "unsupported", "not_run"):
        return False
    text = f"{evaluation.reason or ''}\n{evaluation.log_tail[-4000:]}"
    return checking.says_out_of_memory(text)


def retry_out_of_memory(
    evaluators: list[Evaluator],
    evaluations: list[Evaluation],
    on_shape: Callable[[Evaluator, ShapeOutcome], None] | None = None,
) -> list[Evaluation]:
    """Issue 33, item 4: a candidate that holds the GPU's memory starves the children checked or
    timed beside it. The evaluations that ran out of memory while others shared the GPU are
    evaluated again, after the rest, with every kept or early child of the pool stopped first (a
    kept child holds its memory: a hog that passed, a revision retried before): together, when
    some of the group did not run out of memory (the hog is then among those left out, and a
    dozen starved revisions take one more round, not a dozen: seen on the H200, where they were
    retried one after another and the run did not end in 440 s); when every one of the group
    did (a hog that starves itself too is among them, or the children do not fit the GPU
    together), each half of them on its own, one after the other; alone, in a fresh child, when
    one did. A round's own retries go by the same rule (`evaluate_in_groups`), so the set shrinks
    at each level: one hog among n starved revisions costs about log2(n) failed rounds, not n
    rounds alone. Revisions of such a group whose timing the parent's clock flagged go with them
    (`clock_flagged`: their brackets held a neighbour's doing). Only what fails alone counts; its
    reason says it was retried. Returns the evaluations, the retried ones replaced."""
    if len(evaluators) < 2:
        return evaluations
    retried = [i for i, evaluation in enumerate(evaluations) if ran_out_of_memory(evaluation)]
    if not retried:
        return evaluations
    # and those the parent's clock flagged beside them: seen on the H200, where the reference,
    # retried with a hog that had run out of memory too, was timed beside the hog's child holding
    # the GPU's memory and came out flagged; alone it ranks (a cheat is flagged again alone)
    retried = sorted(retried + [i for i, evaluation in enumerate(evaluations) if clock_flagged(evaluation)])
    evaluations = list(evaluations)
    if 1 < len(retried) < len(evaluators) or len(retried) == 1:
        rounds = [retried]
    else:  # every one of the group ran out of memory: each half on its own, and so on
        rounds = [retried[: len(retried) // 2], retried[len(retried) // 2 :]]
    for indices in rounds:
        together = len(indices) > 1
        # before each: a revision retried before it that passed keeps its child for the next
        # phase, and a hog's kept child holds its memory (seen on the H200: two honest revisions
        # retried after the hog's retry ran out of memory again, alone but for it)
        for evaluator in evaluators:
            evaluator.pool.close_waiting()
        checking.free_parent_memory()  # the parent's kept cases and cached blocks too
        originals = {}
        fresh = []
        for i in indices:
            again = evaluators[i].again()
            originals[id(again)] = evaluators[i]
            fresh.append(again)

        def heard(again: Evaluator, outcome: ShapeOutcome, originals: dict = originals) -> None:
            if on_shape is not None:
                on_shape(originals.get(id(again), again), outcome)

        # the same protocol as any group (start, shapes, passes, finish, and its own retries)
        results = evaluate_in_groups(fresh, heard)
        if together:
            note = "evaluated again beside only revisions that had run out of memory too"
        else:
            note = "evaluated again alone: it had run out of memory beside other children"
        for i, evaluation in zip(indices, results):
            if evaluation.status != "pass" and note not in (evaluation.reason or ""):
                evaluation.reason = f"{evaluation.reason} ({note})"
            evaluation.log_tail = f"[harness] {note}\n{evaluation.log_tail}"[-LOG_TAIL_CHARS:]
            evaluations[i] = evaluation
    return evaluations


def evaluate_in_groups(
    evaluators: list[Evaluator],
    on_shape: Callable[[Evaluator, ShapeOutcome], None] | None = None,
    on_evaluation: Callable[[Evaluator, Evaluation], None] | None = None,
    *,
    group_size: int = INTERLEAVE_GROUP,
) -> list[Evaluation]:
    """Run several evaluators shape by shape: each checks (and times) shape k before any goes on
    to shape k + 1, so that clock and temperature drift hits every candidate alike. At most
    `group_size` children live at once (each holds a CUDA context, its inputs and a 256 MiB
    flush buffer): longer lists run in groups of that size, one after another. A group's
    children start together (`start_evaluators`: their imports overlap; no shape runs before
    every child of the group is ready, so no timing shares the machine with an import) and are
    asked to stop together. Timed evaluators of one task and device share one `Calibrator`
    (the harness's own cost of a timed call per shape). `on_shape` hears of every shape that ran
    (for progress). Every child is stopped on the way out, also when this raises."""
    evaluations: list[Evaluation] = []
    with ExitStack() as stack:
        for evaluator in evaluators:
            stack.enter_context(evaluator)
        calibrators: dict[tuple[str, str], Calibrator] = {}
        for evaluator in evaluators:
            if evaluator.timed and evaluator.calibrator is None:
                key = (evaluator.task.name, evaluator.device)
                if key not in calibrators:
                    calibrators[key] = stack.enter_context(
                        Calibrator(evaluator.task, device=evaluator.device, limits=evaluator.limits)
                    )
                    calibrators[key].spawn()  # starts beside the first group's children
                evaluator.calibrator = calibrators[key]
        for first in range(0, len(evaluators), group_size):
            group = evaluators[first : first + group_size]
            # the timed calls' seeds and cases, one source per task and device of the group
            sources: dict[tuple[str, str], TimedCases] = {}
            for evaluator in group:
                if evaluator.timed:
                    key = (evaluator.task.name, evaluator.device)
                    if key not in sources:
                        sources[key] = TimedCases(evaluator.device)
                    if not evaluator.keeps_cases:  # a retry after the memory ran out keeps none
                        sources[key].budget_bytes = 0
                    evaluator.timed_cases = sources[key]
            start_evaluators(group)
            for index in range(max(evaluator.shape_count for evaluator in group)):
                for evaluator in group:
                    if index < evaluator.shape_count and not evaluator.stopped:
                        outcome = evaluator.run_shape(index)
                        evaluator.tell("waiting")
                        if on_shape is not None:
                            on_shape(evaluator, outcome)
                # the further passes after everyone's first, every other one in reverse order
                # (P C1 C2 C2' C1' P'): a linear drift moves each revision's mean alike
                for again in range(1, max(evaluator.passes for evaluator in group)):
                    for evaluator in group[::-1] if again % 2 else group:
                        if evaluator.passes > again and (outcome := evaluator.time_again(index)) is not None:
                            evaluator.tell("waiting")
                            if on_shape is not None:
                                on_shape(evaluator, outcome)
                # a shape the parent's clock flagged is timed again (harness.timing, step 6)
                for _ in range(HOST_CONFIRM_PASSES):
                    flagged = [evaluator for evaluator in group if evaluator.host_clock_flagged(index)]
                    if not flagged:
                        break
                    for evaluator in flagged:
                        if (outcome := evaluator.time_again(index)) is not None:
                            evaluator.tell("waiting")
                            if on_shape is not None:
                                on_shape(evaluator, outcome)
                for evaluator in group:  # the next shape's calls get other seeds
                    evaluator.forget_timed_case()
                for source in sources.values():
                    source.forget()
            for evaluator in group:
                evaluator.release_child()
            for evaluator in group:
                evaluations.append(evaluator.finish())
                if on_evaluation is not None and not held_back(evaluators, evaluations[-1]):
                    on_evaluation(evaluator, evaluations[-1])
        return _after_retries(evaluators, evaluations, on_shape, on_evaluation)


def held_back(evaluators: list[Evaluator], evaluation: Evaluation) -> bool:
    """Whether an evaluation waits for `retry_out_of_memory` before anyone hears of it (one that
    ran out of memory, or one the parent's clock flagged: a neighbour's doing where another
    revision of the group ran out of memory)."""
    return len(evaluators) > 1 and (ran_out_of_memory(evaluation) or clock_flagged(evaluation))


def clock_flagged(evaluation: Evaluation) -> bool:
    """Whether a passing evaluation has a shape whose timing the parent's clock flagged."""
    return evaluation.status == "pass" and any(
        HOST_CLOCK_MISMATCH in (shape.timing_flags or []) for shape in evaluation.shapes
    )


def _after_retries(
    evaluators: list[Evaluator],
    evaluations: list[Evaluation],
    on_shape: Callable[[Evaluator, ShapeOutcome], None] | None,
    on_evaluation: Callable[[Evaluator, Evaluation], None] | None,
) -> list[Evaluation]:
    """The evaluations with those held back (`held_back`) evaluated again alone, each handed to
    `on_evaluation` once it is final."""
    held = [i for i, evaluation in enumerate(evaluations) if held_back(evaluators, evaluation)]
    evaluations = retry_out_of_memory(evaluators, evaluations, on_shape)
    if on_evaluation is not None:
        for i in held:
            on_evaluation(evaluators[i], evaluations[i])
    return evaluations


def evaluate_side_by_side(
    evaluators: list[Evaluator],
    on_shape: Callable[[Evaluator, ShapeOutcome], None] | None = None,
    on_evaluation: Callable[[Evaluator, Evaluation], None] | None = None,
    *,
    parallel: int,
) -> list[Evaluation]:
    """Untimed evaluators, `parallel` at once: each runs from its child's start to its finish on
    a thread of its own, shape after shape, while the others do the same; nothing here is timed,
    so nothing waits for anyone else. (A timing elsewhere in this process still runs alone: it
    stops every other child of the pool for its duration, `ChildPool.others_stopped`, and these
    children's deadlines stand still meanwhile.) The parent's share, making each shape's inputs
    and reference and judging the outputs, runs on the threads too; the cases of every shape are
    kept meanwhile (`checking.keeping_reference_cases`), made once each, by whichever thread
    wants one first.

    The callbacks come on this thread, `on_evaluation` as soon as an evaluation ends, so that a
    caller can write it at once. When interrupted (Ctrl-C) or when a thread fails in the harness
    (not a candidate: that is a status), every child is killed, the threads are waited for, and
    the exception goes on; evaluations that ended before were already handed over."""
    events: queue.SimpleQueue[tuple[str, Evaluator, object]] = queue.SimpleQueue()
    todo = deque(evaluators)
    interrupted = threading.Event()

    def relay(evaluator: Evaluator, activity: str) -> None:
        events.put(("activity", evaluator, activity))

    told = {
        id(evaluator): evaluator.on_activity for evaluator in evaluators if evaluator.on_activity is not None
    }
    for evaluator in evaluators:  # told on the evaluator's thread, heard on this one
        if id(evaluator) in told:
            evaluator.on_activity = functools.partial(relay, evaluator)

    def work() -> None:
        while not interrupted.is_set():
            try:
                evaluator = todo.popleft()
            except IndexError:
                return
            try:
                evaluator.begin_now()
                if evaluator.start():
                    for index in range(evaluator.shape_count):
                        if evaluator.stopped or interrupted.is_set():
                            break
                        events.put(("shape", evaluator, evaluator.run_shape(index)))
                evaluator.release_child()
                events.put(("done", evaluator, evaluator.finish()))
            except BaseException as exc:  # noqa: BLE001 - raised on the caller's thread below
                events.put(("error", evaluator, exc))
                return

    shape_count = max(evaluator.shape_count for evaluator in evaluators)
    threads = [
        threading.Thread(target=work, name=f"check-{index}", daemon=True)
        for index in range(min(parallel, len(evaluators)))
    ]
    results: dict[int, Evaluation] = {}
    with checking.keeping_reference_cases(shape_count + 1):
        try:
            for thread in threads:
                thread.start()
            if any(evaluator.device == "cuda" for evaluator in evaluators):
                confirm_device_name()  # as in start_evaluators: while the children import
            while len(results) < len(evaluators):
                try:
                    kind, evaluator, payload = events.get(timeout=0.5)
                except queue.Empty:
                    continue
                if kind == "error":
                    raise payload
                if kind == "activity":
                    told[id(evaluator)](payload)
                    continue
                if kind == "shape":
                    if on_shape is not None:
                        on_shape(evaluator, payload)
                    continue
                results[id(evaluator)] = payload
                if on_evaluation is not None and not held_back(evaluators, payload):
                    on_evaluation(evaluator, payload)
        except BaseException:
            interrupted.set()
            todo.clear()
            deadline = time.monotonic() + STOP_WAIT_S
            while any(thread.is_alive() for thread in threads) and time.monotonic() < deadline:
                for evaluator in evaluators:  # again and again: a thread may spawn one meanwhile
                    evaluator.child.kill_group()
                for thread in threads:
                    thread.join(timeout=0.1)
            for evaluator in evaluators:
                evaluator.close()
            raise
        evaluations = [results[id(evaluator)] for evaluator in evaluators]
        return _after_retries(evaluators, evaluations, on_shape, on_evaluation)


def start_evaluators(evaluators: list[Evaluator]) -> list[bool]:
    """`Evaluator.start` for several at once: spawn every child (quick), then wait for each in its
    own thread with its own deadlines, while this thread computes the first shape's reference
    (the parent's own CUDA start, the check of a kept GPU name and the first reference overlap the
    children's imports; a failed check stops the children and raises). Returns
    each evaluator's `start()` result, in order.

    What the numbers mean: `startup_s` is still spawn until torch is imported in the child, and
    `compile_s` the candidate's import on the child's clock; the children import side by side,
    so on a machine with fewer cores than children both include waiting for a core."""
    spawned = [evaluator for evaluator in evaluators if evaluator.spawn()]
    answers: dict[int, Ready | ImportFailed | ChildFailure | BaseException] = {}

    def wait(evaluator: Evaluator) -> None:
        try:
            answers[id(evaluator)] = evaluator.wait_ready()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread below
            answers[id(evaluator)] = exc

    threads = [
        threading.Thread(target=wait, args=(evaluator,), name=f"start-{index}", daemon=True)
        for index, evaluator in enumerate(spawned)
    ]
    try:
        for thread in threads:
            thread.start()
        if any(evaluator.device == "cuda" for evaluator in evaluators):
            # A GPU name kept from an earlier probe must be torch's (harness.environment): this
            # starts CUDA here, so it comes after the spawn, while the children import.
            confirm_device_name()
        if spawned:
            spawned[0].prefetch_reference(0)
        for thread in threads:
            thread.join()
    except BaseException:
        # Interrupted (Ctrl-C): end the children so that the waiting threads see their pipes
        # close and return, before the caller closes those pipes.
        for evaluator in spawned:
            evaluator.child.kill_group()
        for thread in threads:
            thread.join(timeout=2 * SHUTDOWN_GRACE_S)
        raise
    for evaluator in spawned:
        answer = answers[id(evaluator)]
        if not isinstance(answer, (Ready, ImportFailed, ChildFailure)):
            raise answer
    started = {id(evaluator): evaluator.started_with(answers[id(evaluator)]) for evaluator in spawned}
    return [started.get(id(evaluator), False) for evaluator in evaluators]
