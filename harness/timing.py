"""Timing candidate calls, measured the way GPU MODE's eval.py and `triton.testing.do_bench` do.

Method, per shape (`time_calls`):

1. Warm-up: at least `warmup_calls` calls (at least one) and `warmup_s` seconds of the loop's
   wall clock (the inputs' preparation before each call, the NaN fill in the sandbox, included),
   each call followed by a device-wide synchronize. The calls' host seconds are returned as
   `compile_s`, so that JIT compilation, Triton autotuning and cuDNN algorithm search stay out
   of the timed calls. (Counting only the calls' seconds, a candidate whose calls take
   microseconds and whose work hides before them, in the fill, stretched its warm-up to tens
   of thousands of calls: 77 s of one benchmark phase on an H100, 2026-12-06.)
   Their inputs may come from elsewhere than the timed calls' (`warmup_inputs`: in the sandbox,
   inputs handed over once with the request, without a round trip to the parent per call); their
   outputs are not checked.
2. Timed calls, on CUDA. The inputs are made outside the timed region (in the sandbox the
   parent then flushes the L2 from its own process before it lets the call go:
   `parent_l2_flush`, so that a candidate that skips the flush below gains nothing, and flushes
   again until the GPU serves a flush as fast as ever, `wait_for_quiet_gpu`, so that kernels
   another, stopped child left queued are done before the call). Then: a device-wide
   synchronize; the persisting-L2 carve-out set to nothing and its lines made normal again
   (`_reset_persisting_l2`: a call may mark its data persisting, which a flush would not evict);
   the L2 cache flushed by writing zeros over a 256 MiB buffer; an event `start`; the
   call; an event `end`; the host waits for `end`, then for the whole device (so a call ends only
   when all work on the device is done, not only the current stream's). The call's time is
   `start -> end`. Like GPU MODE, the host's launch overhead runs while the device flushes.
3. Work left behind. The host's wait for the whole device after `end` completed is work the call
   left on other streams (or threads): when it is longer than `MISMATCH_MARGIN_MS +
   MISMATCH_MARGIN_REL * event time`, that call counts as its event time plus that wait, always;
   the shape is flagged `timing_mismatch` when at least half of its timed calls did so
   (`left_work_flagged`). (Measured from `end`'s completion, not from the call's start, so that
   the host's own time to launch a sub-millisecond kernel through Python is never taken for
   hidden work: on the H200 that flagged GPU MODE's own matmul and histogram references. Not
   on one call: the wait is on the host's clock, and a host that deschedules the child between
   the two waits looks the same; on the H200 an honest Triton kernel had one such call of 100,
   1 ms long, and lost its rank. A candidate that hides work in fewer calls gains nothing: each
   of those calls is counted whole.)
4. Stopping rule (GPU MODE): at least 3 timed calls, at most 100; stop once the standard error is
   under 0.1 % of the mean or the shape's budget (host seconds spent in the timed loop) is spent.
   An evolution's child (issue 31) may also stop as soon as it is clearly slower than its parent
   on the shape (`StoppingRule.slower_than_ms`, `clearly_slower`): after `SLOWER_MIN_RUNS` calls,
   once its mean less `SLOWER_Z` standard errors exceeds the parent's stored mean plus
   `SLOWER_MARGIN_REL`. Its figures stay what its calls measured, from fewer calls (a wider
   error); no later pass times it again. The child runs this rule and could ignore it: stopping
   early only makes its figures noisier, never faster.
5. Passes: an evaluation times each shape in `TIMING_PASSES` blocks of calls (harness.sandbox.
   evaluation: P C1 C2 C2' C1' P' shape by shape, the later pass in reverse order so that a
   linear drift moves every revision's mean alike), each under the rule's share
   (`StoppingRule.per_pass`: the calls, the budget and the error target split, so that the
   total is GPU MODE's). The shape's statistics are those of all its calls; each block's mean
   is kept, because the spread between blocks of one revision measures what per-call variance
   misses (a loaded host, clocks, a burst: harness.scoring.block_spread).

On the CPU the times come from the host clock (`perf_counter` around the call), with no flush;
the statistics are the same and are labelled `cpu`.

Checks in the parent, which does not trust the child's clock (the candidate shares its process
and can replace `perf_counter`, `torch.cuda.Event` or this whole loop there), flag a shape for
review:

6. The parent's clock (`host_clock_verdict`): the parent's own monotonic clock brackets every
   timed call, from starting to hand over the call's inputs (the parent makes them, and no timed
   call's inputs reach the child before its bracket opens) to hearing that its output is in the
   shared buffer or its file (every timed output is checked, so the work must lie in between).
   Whatever the child does for a call (making inputs, the NaN fill, the L2 flush, the export)
   lies in the bracket too; `harness_ms`, measured per shape in a child that runs only harness
   code around the task's own reference (harness.sandbox.calibration), is that cost. Over all of
   a shape's timed calls, the quietest bracket less `harness_ms` and the fastest reported call
   is work the child hid from its timer (noise only lengthens brackets, and not all alike; never
   less than the least excess of a bracket over its own call):
   above a small floor it is added to every call's time, so that what the child reports can
   make its score worse, never better; far above it, or when a call is reported longer than its
   whole bracket, the shape is flagged `host_clock_mismatch`; on a GPU also when the call's
   prelude (to the parent's go, harness code only) exceeds the calibrated one by
   `PRELUDE_MARGIN_MS` and `PRELUDE_MARGIN_REL` of it: work there runs on hot inputs. A flagged shape is timed again, in
   up to `HOST_CONFIRM_PASSES` more blocks after everyone's passes, and judged over all of its
   calls each time: load that delayed every call of its blocks (a loaded 2-core host flagged
   an honest child that way in CI) is gone from a later quiet block, whose calls lower the least
   excess; work hidden in every call is in every block, and the flag stands.
7. `below_physical_floor`: the fastest call took less than reading the shape's inputs once at the
   device's peak memory bandwidth (`settings.peak_bandwidth_gbs`). Bytes, not FLOPs: the FLOPs a
   result needs depend on the algorithm (cuDNN's transform-based convolutions do far fewer than
   a direct one, and honestly beat a FLOP-based floor), while every input element must be read
   at least once, and after the L2 flush that read comes from device memory. The output is not
   counted: it can still sit in the L2 cache when the call ends.

The inputs are the caller's `make_inputs` (in the sandbox: fresh inputs from a new seed for every
timed call, in every mode); `after_call` hands every timed call's output to the checker. Both run
outside the timed region, inside the parent's bracket.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from time import perf_counter
from typing import Any

L2_FLUSH_BYTES = 256 * 1024 * 1024
MISMATCH_MARGIN_MS = 0.1
MISMATCH_MARGIN_REL = 0.05
TIMING_MISMATCH = "timing_mismatch"
HOST_FLOOR_MS = 0.02  # on a GPU, hidden work under this (plus HOST_FLOOR_REL of the call) is not added
HOST_FLOOR_REL = 0.05
# ... plus this share of the harness's calibrated cost: the cost (inputs copied onto the device,
# the output exported) varies from one candidate's calls to another's by a share of itself. On
# the H200 (2026-12-02) honest seeds and the champion had 0.4-1.0 ms of excess over calibrated
# costs of 2.2-5.8 ms, which the floor without this term charged to their scores (up to 19% of a
# shape's time). Not on the CPU (`_host_floor_ms`): there it forgave a whole smoke shape's work.
HOST_FLOOR_HARNESS_REL = 0.3
HOST_MARGIN_MS = 5.0  # hidden work over this (plus HOST_MARGIN_REL of the call) is flagged
HOST_MARGIN_REL = 1.0
HOST_SPREAD_FACTOR = 3.0  # ... plus this many times the calls' own spread
HOST_FEW_CALLS_REL = 0.5  # a call reported under this share of the median is judged by its bracket
# on a GPU, hidden work over the reported call by this much is flagged, not only added (`dominant`)
HOST_DOMINANT_MS = 0.25
HOST_SLACK_MS = 0.05  # a reported call may exceed its bracket by this much (clock granularity)
# on a GPU, a prelude (inputs handed over to the parent's go: harness code only) longer than the
# calibrated one by this much, plus this share of it, is flagged: work done there runs on inputs
# the child has just written, hot in the L2 cache that the call then finds flushed
PRELUDE_MARGIN_MS = 0.25
PRELUDE_MARGIN_REL = 0.3
HOST_CLOCK_MISMATCH = "host_clock_mismatch"
BELOW_PHYSICAL_FLOOR = "below_physical_floor"
TIMING_PASSES = 2  # blocks of timed calls per shape of a timed evaluation (method, 5.)
HOST_CONFIRM_PASSES = 2  # at most this many more blocks of a shape flagged `host_clock_mismatch` (6.)
# a child clearly slower than its parent stops timing a shape early (4.): after this many calls,
# once its mean less this many standard errors is over the parent's mean plus this share
SLOWER_MIN_RUNS = 10
SLOWER_Z = 5.0
SLOWER_MARGIN_REL = 0.1


@dataclass
class BenchmarkStats:
    """Statistics of one shape's timed calls, in milliseconds; `times_ms` keeps every call."""

    device: str
    runs: int
    mean_ms: float
    median_ms: float
    std_ms: float
    err_ms: float
    min_ms: float
    max_ms: float
    times_ms: list[float]
    compile_s: float = 0.0
    flags: list[str] = field(default_factory=list)

    @classmethod
    def from_times(
        cls, times_ms: Sequence[float], *, device: str, compile_s: float = 0.0, flags: Sequence[str] = ()
    ) -> BenchmarkStats:
        """Sample statistics as GPU MODE computes them: std with n - 1, err = std / sqrt(n)."""
        if not times_ms:
            raise ValueError("no timed calls")
        times = [float(t) for t in times_ms]
        mean = statistics.fmean(times)
        std = statistics.stdev(times, mean) if len(times) > 1 else 0.0
        return cls(
            device=device,
            runs=len(times),
            mean_ms=mean,
            median_ms=statistics.median(times),
            std_ms=std,
            err_ms=std / math.sqrt(len(times)),
            min_ms=min(times),
            max_ms=max(times),
            times_ms=times,
            compile_s=compile_s,
            flags=list(flags),
        )


@dataclass(frozen=True)
class StoppingRule:
    """GPU MODE's rule: at least `min_runs` timed calls, at most `max_runs`; in between, stop once
    the standard error is under `max_rel_err` of the mean or `budget_s` seconds are spent; with
    `slower_than_ms` (the parent's mean on the shape: an evolution's child), also once the calls
    are clearly slower than that (`clearly_slower`)."""

    min_runs: int = 3
    max_runs: int = 100
    max_rel_err: float = 0.001
    budget_s: float = 10.0
    slower_than_ms: float | None = None

    def done(self, times_ms: Sequence[float], elapsed_s: float) -> bool:
        runs = len(times_ms)
        if runs >= self.max_runs:
            return True
        if runs < self.min_runs:
            return False
        if elapsed_s >= self.budget_s:
            return True
        if self.slower_than_ms is not None and clearly_slower(times_ms, self.slower_than_ms):
            return True
        mean = statistics.fmean(times_ms)
        err = statistics.stdev(times_ms, mean) / math.sqrt(runs)
        return err < self.max_rel_err * mean

    def per_pass(self, passes: int) -> StoppingRule:
        """The rule for one of `passes` blocks of a shape's calls: the calls and the budget split
        evenly, and the error target widened by sqrt(passes), so that the blocks together make
        what this rule makes (the joined mean's standard error shrinks by sqrt(passes)); each
        block has at least two calls (a standard error needs them)."""
        if passes == 1:
            return self
        min_runs = max(2, math.ceil(self.min_runs / passes))
        return StoppingRule(
            min_runs=min_runs,
            max_runs=max(min_runs, self.max_runs // passes),
            max_rel_err=self.max_rel_err * math.sqrt(passes),
            budget_s=self.budget_s / passes,
            slower_than_ms=self.slower_than_ms,
        )


def clearly_slower(times_ms: Sequence[float], than_ms: float) -> bool:
    """Whether calls that took `times_ms` are clearly slower than a mean of `than_ms` (method, 4.):
    at least `SLOWER_MIN_RUNS` of them, and their mean less `SLOWER_Z` standard errors over
    `than_ms` plus `SLOWER_MARGIN_REL` of it. Checked after every call (a sequential test): the
    wide z and margin keep an honest child within noise of its parent from ever being stopped
    by a few slow calls."""
    runs = len(times_ms)
    if runs < SLOWER_MIN_RUNS or than_ms <= 0:
        return False
    mean = statistics.fmean(times_ms)
    err = statistics.stdev(times_ms, mean) / math.sqrt(runs)
    return mean - SLOWER_Z * err > than_ms * (1 + SLOWER_MARGIN_REL)


def time_calls(
    call: Callable[[Any], Any],
    make_inputs: Callable[[int], Any],
    *,
    device: str,
    rule: StoppingRule = StoppingRule(),
    warmup_calls: int = 1,
    warmup_s: float = 0.0,
    warmup_inputs: Callable[[int], Any] | None = None,
    after_call: Callable[[int, Any, Any], None] | None = None,
) -> BenchmarkStats:
    """Warm up, then time `call(make_inputs(k))` until `rule` says stop (method: module docstring).

    The warm-up is at least `warmup_calls` calls (at least one) and at least `warmup_s` seconds
    of its loop's wall clock (so that the GPU's clocks are up), each on `warmup_inputs(k)`
    (default: `make_inputs(k)`).
    `k` counts the shape's calls from 0, warm-up included. `after_call(k, inputs, output)` runs
    after each timed call, outside the timed region.
    """
    if device not in ("cuda", "cpu"):
        raise ValueError(f"unknown device {device!r}")
    timed_call = _cuda_timed_call if device == "cuda" else _cpu_timed_call
    compile_s = 0.0
    calls = 0
    warmup_started = perf_counter()
    while calls < max(1, warmup_calls) or perf_counter() - warmup_started < warmup_s:
        inputs = (warmup_inputs or make_inputs)(calls)
        started = perf_counter()
        call(inputs)
        _synchronize(device)
        compile_s += perf_counter() - started
        calls += 1

    times_ms: list[float] = []
    mismatched_calls = 0
    loop_started = perf_counter()
    while not rule.done(times_ms, perf_counter() - loop_started):
        index = calls + len(times_ms)
        inputs = make_inputs(index)
        output, event_ms, wall_ms = timed_call(call, inputs)  # wall_ms: event time plus work left behind
        if wall_ms > event_ms + MISMATCH_MARGIN_MS + MISMATCH_MARGIN_REL * event_ms:
            mismatched_calls += 1
            times_ms.append(wall_ms)
        else:
            times_ms.append(event_ms)
        if after_call is not None:
            after_call(index, inputs, output)
        del output
    flags = [TIMING_MISMATCH] if left_work_flagged(mismatched_calls, len(times_ms)) else []
    return BenchmarkStats.from_times(times_ms, device=device, compile_s=compile_s, flags=flags)


def left_work_flagged(calls_with_work_left: int, timed_calls: int) -> bool:
    """Whether a shape is flagged `timing_mismatch` (step 3): at least half of its timed calls
    left work on the device after their end event. Every such call is counted with that work
    whatever this says; the flag marks a pattern, not one host hiccup."""
    return calls_with_work_left > 0 and 2 * calls_with_work_left >= timed_calls


@dataclass
class HostClockVerdict:
    """What the parent's brackets say of a shape's reported times (method, step 6)."""

    times_ms: list[float]  # the times the shape is scored by: the reported ones, raised by hidden_ms
    hidden_ms: float  # work every bracket holds beyond its reported call and the harness's cost
    spread_ms: float  # the quiet calls' noise: the excess's first quartile less its least
    flagged: bool  # `host_clock_mismatch`
    rescored_calls: int = 0  # calls reported far below the others, scored by their brackets
    prelude_excess_ms: float = 0.0  # the least prelude less the calibrated one (0 without preludes)


def host_clock_verdict(
    times_ms: Sequence[float],
    parent_ms: Sequence[float],
    harness_ms: float = 0.0,
    *,
    dominant: bool = False,
    prelude_ms: Sequence[float] = (),
    prelude_harness_ms: float = 0.0,
) -> HostClockVerdict:
    """Judge a shape's reported times by the parent's brackets (method, step 6), over all of the
    shape's timed calls: `parent_ms[i]` is the parent's bracket of the call reported as
    `times_ms[i]`, `harness_ms` the harness's own cost of a call in a bracket (calibrated per
    shape: harness.sandbox.calibration).

    Per call, the excess d_i = parent_ms[i] - harness_ms - times_ms[i] is work in the bracket that
    the child did not report, plus noise. Noise on the host (load, scheduling) only lengthens a
    bracket, and not every bracket alike; work the candidate hides from its timer (in the NaN
    fill, the input rebuild, the export: anything before or after the call in its own process) is
    in every bracket. So the least excess estimates the hidden work from below, with the calls'
    noise taken out as far as the quietest call allows; `hidden_ms` is the least bracket less
    `harness_ms` and the least reported call, `max(0, min_i parent_ms[i] - harness_ms -
    min_i times_ms[i])`, never less than `min_i d_i`: where the work is hidden in most calls but
    not all (reported at a microsecond, the least excess an honest call's), the quietest bracket
    still holds it while the least report is a hiding call's (a NaN fill that computed on 4 calls
    of 5 ranked first at 1.6x the reference on the CPU under `min_i d_i`, 2026-12-06). An honest
    candidate's quietest bracket is its quietest call, whose report is about its fastest.

    Score: when `hidden_ms` exceeds `HOST_FLOOR_MS + HOST_FLOOR_REL * median(times_ms) +
    HOST_FLOOR_HARNESS_REL * harness_ms` on a GPU (clock granularity, the calibration's own error,
    the harness cost's variation between candidates), `HOST_FLOOR_REL * median(times_ms)` on the
    CPU (`_host_floor_ms`), it is added to every call's time: the shape is
    scored by the brackets less the harness's cost, never by less than the child reported. (No
    allowance for the calls' spread here: on a loaded 2-core host a quarter of 20 sub-millisecond
    calls were delayed by over a millisecond, and such an allowance let a computation hidden in
    the NaN fill through at 40x. On a loaded host an honest candidate pays the delay its
    quietest call still had.) Flag: `host_clock_mismatch` when `hidden_ms` exceeds
    `HOST_MARGIN_MS + HOST_MARGIN_REL * median(times_ms) + HOST_SPREAD_FACTOR * spread_ms`, where
    `spread_ms = q1(d) - min(d)`, the first quartile of the excesses less their least, is the
    noise of the calls' quietest quarter (hidden work shifts every call alike, a loaded host
    delays them unevenly), or when a call is reported longer than its whole bracket: a lie far
    beyond the noise. The quietest quarter, not the median: the least excess is one of the quiet
    calls, and only their noise says how far above the truth it may lie. Beside a second test
    suite most calls of a block wait for a busy core (about 8 ms each on the 2-core machine) and
    a few do not; the median's spread then grew past 5 ms and 3 x it swallowed 20 ms hidden in
    every call (tests/adversarial/hides_work_for_a_while.py unflagged, 2026-12-05).

    Work hidden in some calls only (a NaN fill that computes on 2 calls of 5, the others honest:
    1.37x the reference on the CPU, unflagged, before this) leaves the least excess to the honest
    calls. Such calls are reported far below the others (a fixed shape's honest calls differ by
    load, which only lengthens them): a call reported under `HOST_FEW_CALLS_REL` of the median is
    scored by its bracket less the harness cost and the median excess of the other calls, when
    that is more (`rescored_calls` counts them). Of the median, not the longest: tried on the CPU
    (2026-12-06), half the longest call rescored an honest revision's short calls on a loaded host
    by their loaded brackets (its smallest shape 12x its reports) while a candidate reporting
    every call at a microsecond paid only the quietest bracket's work, and ranked first.

    With `dominant` (the GPU): hidden work that exceeds the median reported call by more than
    `HOST_DOMINANT_MS` and the floor's share of the harness cost (its variation between
    candidates: on the H200 the honest reference's least excess on a 0.15 ms test shape was
    about 0.26 ms, against a calibrated cost of 0.94 ms) is flagged too. An honest call's work is in its call; most of it outside
    is a candidate working where the harness cannot time it, and there adding it is not enough:
    work done before the call on inputs just made runs with them hot in the GPU's L2 cache, which
    the harness flushes before every call. On the H200 (2026-12-03) the convolution hidden in the
    NaN fill, scored by its brackets, came out 16 % under the honest reference on a shape whose
    inputs fit the L2 (1.206 against 1.439 ms; 7.5 % at 932b707). Honest revisions there carried
    at most about 1 ms of hidden work on calls of 43-76 ms, none on the small shapes. (Not on the
    CPU: an honest CPU candidate's brackets run 0.3-0.6 ms over the bare calibration, its thread
    pool's cost, against sub-millisecond calls.)

    `prelude_ms[i]`, where given, is the part of bracket i before the parent's go (inputs handed
    over and rebuilt on the device, output buffers emptied, the parent's L2 flush), in which an
    honest child runs harness code only; `prelude_harness_ms` the calibrated child's least
    prelude. Their least excess is `prelude_excess_ms` (it is in the bracket, so the score
    above already holds it). With `dominant`, an excess over `PRELUDE_MARGIN_MS +
    PRELUDE_MARGIN_REL * prelude_harness_ms` is flagged whatever the call reported: a candidate
    that does part of its work there has it on hot inputs, and adding that time does not make up
    for it."""
    times = [float(t) for t in times_ms]
    prelude_excess = max(0.0, min(prelude_ms) - prelude_harness_ms) if len(prelude_ms) else 0.0
    calls = list(zip(times, parent_ms))
    if not calls:
        return HostClockVerdict(times, 0.0, 0.0, False)
    excess = [bracket - harness_ms - reported for reported, bracket in calls]
    # the quietest bracket against the fastest report, not call by call: never less than the
    # least excess, and work hidden in most calls (their reports at a microsecond, an honest call
    # among them the least excess) is in every bracket but the honest call's
    hidden = max(0.0, min(bracket for _, bracket in calls) - harness_ms - min(times))
    spread = _first_quartile(excess) - min(excess)
    middle = statistics.median(times)
    flagged = hidden > HOST_MARGIN_MS + HOST_MARGIN_REL * middle + HOST_SPREAD_FACTOR * spread or any(
        reported > bracket + HOST_SLACK_MS for reported, bracket in calls
    )
    flagged = flagged or (
        dominant and hidden > middle + HOST_DOMINANT_MS + HOST_FLOOR_HARNESS_REL * harness_ms
    )
    flagged = flagged or (
        dominant and prelude_excess > PRELUDE_MARGIN_MS + PRELUDE_MARGIN_REL * prelude_harness_ms
    )
    if hidden <= _host_floor_ms(middle, harness_ms, dominant):
        hidden = 0.0
    # work hidden in some calls: they are reported far below the others; each is scored by its
    # bracket less the harness cost and the other calls' typical excess (the median call is among
    # those others, so they are never none)
    short = HOST_FEW_CALLS_REL * middle
    typical = statistics.median(d for t, d in zip(times, excess) if t >= short)
    scored, rescored = [], 0
    for reported, d in zip(times, excess):
        score = reported + hidden
        if reported < short and reported + d - typical > score:
            score, rescored = reported + d - typical, rescored + 1
        scored.append(score)
    return HostClockVerdict(scored, hidden, spread, flagged, rescored, prelude_excess)


def _host_floor_ms(middle_ms: float, harness_ms: float, gpu: bool) -> float:
    """The hidden work a shape's calls may carry unscored (`host_clock_verdict`'s floor). On a GPU:
    `HOST_FLOOR_MS`, `HOST_FLOOR_REL` of the median reported call and `HOST_FLOOR_HARNESS_REL` of
    the calibrated harness cost (events' granularity, the harness cost's variation between
    candidates). On the CPU only `HOST_FLOOR_REL` of the median reported call: the absolute terms
    there (0.06-0.07 ms on conv2d_v2's smoke shapes) were more than a whole honest call of the
    smallest shape, so a convolution hidden in the NaN fill of smoke[0] (reported 0.0004 ms, its
    least excess 0.04-0.05 ms) went unscored, 100x the reference on that shape, and ranked first
    in a default CPU tournament at 3.6x (2026-12-06). An honest CPU child's own excess over the
    calibration (its thread pool, its output's allocation) is scored too: CPU scores are the
    brackets' upper bounds, for every revision alike."""
    if not gpu:
        return HOST_FLOOR_REL * middle_ms
    return HOST_FLOOR_MS + HOST_FLOOR_REL * middle_ms + HOST_FLOOR_HARNESS_REL * harness_ms


def _first_quartile(values: Sequence[float]) -> float:
    """The first quartile of `values` (inclusive: interpolated between the sorted values, the
    least of one value)."""
    if len(values) < 2:
        return min(values)
    return statistics.quantiles(values, n=4, method="inclusive")[0]


def host_clock_disagrees(
    times_ms: Sequence[float], parent_ms: Sequence[float], harness_ms: float = 0.0
) -> bool:
    """Whether `host_clock_verdict` flags these times `host_clock_mismatch`."""
    return host_clock_verdict(times_ms, parent_ms, harness_ms).flagged


def physical_floor_ms(input_bytes: int, peak_bandwidth_gbs: float) -> float:
    """The least time reading `input_bytes` once takes at `peak_bandwidth_gbs` (step 7)."""
    return input_bytes / (peak_bandwidth_gbs * 1e9) * 1e3


def _synchronize(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def _cpu_timed_call(call: Callable[[Any], Any], inputs: Any) -> tuple[Any, float, float]:
    started = perf_counter()
    output = call(inputs)
    wall_ms = (perf_counter() - started) * 1e3
    return output, wall_ms, wall_ms


@cache
def _l2_flush_buffer() -> Any:
    """One 256 MiB buffer per process, written over before every timed call."""
    import torch

    return torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device="cuda")


CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06  # CUlimit, cuda.h


@cache
def _persisting_l2_reset() -> Callable[[], None] | None:
    """The CUDA driver's reset of the persisting-L2 carve-out for the current context: its limit
    set to 0 bytes (`cuCtxSetLimit`) and every persisting line made normal
    (`cuCtxResetPersistingL2Cache`), so that the flush that follows evicts what a candidate's
    earlier call marked persisting (an access policy window). None where the driver library or
    its functions are missing (no GPU, an older driver): then nothing is reset. Their error codes
    are ignored (a GPU without the carve-out answers "not supported"; nothing is then kept)."""
    import ctypes

    try:
        driver = ctypes.CDLL("libcuda.so.1")
        set_limit, reset = driver.cuCtxSetLimit, driver.cuCtxResetPersistingL2Cache
    except (OSError, AttributeError):
        return None
    set_limit.argtypes, set_limit.restype = [ctypes.c_int, ctypes.c_size_t], ctypes.c_int
    reset.argtypes, reset.restype = [], ctypes.c_int

    def reset_persisting_l2() -> None:
        set_limit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, 0)
        reset()

    return reset_persisting_l2


def _reset_persisting_l2() -> None:
    reset = _persisting_l2_reset()
    if reset is not None:
        reset()


# the parent's flush waits for a GPU that serves it as fast as ever (`parent_l2_flush`): another
# flush when one took over QUIET_FLUSH_FACTOR x the quickest seen plus QUIET_FLUSH_SLACK_S, for
# at most QUIET_WAIT_S before each call
QUIET_FLUSH_FACTOR = 3.0
QUIET_FLUSH_SLACK_S = 50e-6
QUIET_WAIT_S = 30.0  # an honest revision leaves nothing queued: only a cheat's work is waited for
# after a wait that found no quiet GPU (another process's work on a shared GPU, say), the next
# waits are this short until one finds it quiet again: a GPU busy for good costs QUIET_WAIT_S once
QUIET_WAIT_AFTER_NONE_S = 0.1
QUIET_BASELINE_FLUSHES = 3


def _flush_seconds() -> float:
    """One flush of the L2 cache from this process, waited for: its wall seconds."""
    import torch

    started = perf_counter()
    _l2_flush_buffer().zero_()
    torch.cuda.synchronize()
    return perf_counter() - started


class QuietWait:
    """Flushes until a flush is served as fast as ever (`wait`); `flush` does one flush and
    returns its wall seconds (this process's GPU flush, `_flush_seconds`, by default)."""

    def __init__(self, flush: Callable[[], float] = _flush_seconds) -> None:
        self.flush = flush
        self.quickest_s: float | None = None  # the quickest flush seen
        self.found_quiet = True  # whether the last wait ended on a quick flush

    def wait(self, wait_s: float | None = None) -> tuple[int, float]:
        """Flush until a flush takes no longer than the quickest seen (times QUIET_FLUSH_FACTOR,
        plus QUIET_FLUSH_SLACK_S), for at most `wait_s`. A child stopped after its turn still
        has the kernels it queued before the stop run (the GPU shares its time between
        processes' contexts): one that queues seconds of work at the end of its timing would
        otherwise slow whichever revision is timed next, the reference included, and rank above
        it. While such work runs, this process's flush waits for its share of the GPU and takes
        longer; the next call goes once the GPU serves a flush as fast as ever, or after
        `wait_s` (the work then shares the GPU with the next call): by default QUIET_WAIT_S, or
        QUIET_WAIT_AFTER_NONE_S after a wait that found no quiet GPU, so that a GPU another
        process keeps busy for good costs the long wait once. Returns (extra flushes, seconds)."""
        if wait_s is None:
            wait_s = QUIET_WAIT_S if self.found_quiet else QUIET_WAIT_AFTER_NONE_S
        if self.quickest_s is None:
            self.quickest_s = min(self.flush() for _ in range(QUIET_BASELINE_FLUSHES))
        started = perf_counter()
        extra = 0
        while True:
            took = self.flush()
            self.quickest_s = min(self.quickest_s, took)
            quiet = took <= QUIET_FLUSH_FACTOR * self.quickest_s + QUIET_FLUSH_SLACK_S
            if quiet or perf_counter() - started > wait_s:
                self.found_quiet = quiet
                return extra, perf_counter() - started
            extra += 1


_QUIET = QuietWait()  # this process's GPU


def wait_for_quiet_gpu(wait_s: float | None = None) -> tuple[int, float]:
    """`QuietWait.wait` on this process's GPU."""
    return _QUIET.wait(wait_s)


def parent_l2_flush(device: str) -> Callable[[], None] | None:
    """On CUDA, the parent's own flush of the GPU's L2 cache before every timed call of a child
    (harness.sandbox.supervisor's `before_call`): the cache is one for every process on the GPU,
    and this flush runs in a process no candidate code reaches, after the child has made the
    call's inputs and before it is told to call, so a child that skips its own flush still calls
    on a cold cache. Waits for this process's device work, and flushes again until the GPU serves
    a flush as fast as ever (`wait_for_quiet_gpu`: kernels another, stopped child queued before
    its stop are done first). A child's kernels that share the GPU meanwhile lengthen the prelude
    it is part of. None elsewhere."""
    if device != "cuda":
        return None

    def flush() -> None:
        _reset_persisting_l2()
        wait_for_quiet_gpu()

    return flush


def _cuda_timed_call(call: Callable[[Any], Any], inputs: Any) -> tuple[Any, float, float]:
    """One timed call on the GPU: (output, event ms, event ms plus the work still running on the
    device once the end event completed). The second figure exceeds the first only when the call
    left work on other streams: the host waits for the end event, then for the whole device. (The
    host's own time to launch the call is not in it: a sub-millisecond kernel behind a Python
    wrapper is not hidden work.)"""
    import torch

    cuda = torch.cuda
    flush_buffer = _l2_flush_buffer()
    start, end = (cuda.Event(enable_timing=True) for _ in range(2))
    cuda.synchronize()
    _reset_persisting_l2()
    flush_buffer.zero_()
    start.record()
    output = call(inputs)
    end.record()
    end.synchronize()
    ended = perf_counter()
    cuda.synchronize()
    trailing_ms = (perf_counter() - ended) * 1e3
    event_ms = start.elapsed_time(end)
    return output, event_ms, event_ms + trailing_ms


def ms_text(value: float | None) -> str:
    """A time in ms as `harness bench` writes it: 4 decimals under 1 ms, 3 under 100, then 1."""
    if value is None:
        return "-"
    return f"{value:.4f}" if value < 1 else f"{value:.3f}" if value < 100 else f"{value:.1f}"
