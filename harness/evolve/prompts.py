"""Rendering the prompts agents read: jinja2 templates in prompts/ that users edit.

Templates: `system.j2` (who the agent is and the rules), `improve.j2` (make a passing revision
faster), `fix.j2` (make a failing revision pass); `_reply_format.j2` is included by both and
tells the agent the two reply forms that harness.evolve.edits accepts. Rendering is strict
(StrictUndefined): a template that uses a variable the context lacks is a HarnessError that
names the variable and the template line, never an empty string in a prompt.

The context every template gets (built by `prompt_context`):
- `task`: name, description, dtype, rtol, atol (None where the problem's check_implementation
  decides), correctness (the tolerance, or that check, in words), reference (the reference
  candidate's lineage), entry_point, ranking_by, score_rule (it in
  words), verdict (the one that ranks: `gpumode` or `accurate`), verdict_rule (it in words),
  benchmarks and tests
  (shape labels such as `size=128 kernelsize=8 channels=64 batch=4`);
- `parent`: id, lineage, number, author, message, filename, entry_point, flags, code (the exact
  text), fence (a backtick fence longer than any run of backticks in the code);
- `timing`: where the evaluation's times come from: device (the leaderboard's, or the one asked
  for; None before anything is timed), timed (whether anything was timed there), on_cpu,
  method (how that device times, in words), shape_set (`smoke` on the CPU, `benchmarks` on a
  GPU) and shapes (the labels of the shapes timed there, else of the set the device times);
- `evaluation`: the parent's standing on the leaderboard of one environment: device, status
  (`pass`, a failure status, or `not_run`), reason, score_ms, reference_ms, speedup, vs_parent,
  shapes (label, mean_ms, err_ms, reference_ms, speedup per benchmark shape), failures
  (label, summary per shape that failed its check), verdicts (for `gpumode` and `accurate`:
  label, status `pass`/`fail`/`not_checked`, reason, ranks: whether it is the ranking one) and
  accuracy (rel_l2, max_err_over_scale);
- `leaderboard`: the top ranked entries (rank, submission_id, lineage, revision, author,
  score_ms, speedup).
Filters: `ms` and `speedup` format numbers as the reports do.

Every `{{ ... }}` is shown with its control characters escaped (harness.report.text, the way
that keeps line breaks and tabs): the code, a reason, a name or a message from a candidate reaches
the agent (and `harness prompt render`'s terminal) as text, with no escape sequence, no carriage
return that hides a line and no bidi override that makes a line read differently from what it
holds. Code with such a character is shown with its escape, so an edit that quotes that line
does not match the file and fails loudly.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jinja2
from sqlalchemy import select
from sqlalchemy.orm import Session

from harness.config import PROMPTS_DIR
from harness.errors import HarnessError
from harness.report.leaderboard import format_ms, format_speedup
from harness.report.text import escape_template_value
from harness.standing.board import Leaderboard, LeaderboardEntry, build_leaderboard
from harness.store.models import Revision, Run
from harness.store.revisions import reference_lineage_name, revision_code
from harness.tasks import TaskSpec, load_task
from harness.tasks.spec import shape_label
from harness.verdicts import VERDICT_WORDS
from harness.wire import ShapeCheck, shape_key

TEMPLATE_SUFFIX = ".j2"
LEADERBOARD_SIZE = 5
MAX_FAILURES_SHOWN = 5
VERDICT_RULES = {  # harness.verdicts, in words
    "gpumode": "GPU MODE's rule: every output element within atol + rtol * |reference| of the fp32 reference",
    "accurate": (
        "accuracy: every output element within atol + rtol * |exact| of the exact answer (float64 from the "
        "same inputs) or within GPU MODE's tolerance of the fp32 reference; reduced precision (TF32, bf16, "
        "fp16) fails it, and you need not reproduce the reference's summation order"
    ),
}
SCORE_RULES = {  # harness.scoring's `ranking_by` choices, in words
    "geom": "the geometric mean over the timed shapes of the per-shape mean times",
    "mean": "the arithmetic mean over the timed shapes of the per-shape mean times",
    "last": "the mean time of the last timed shape",
}
TIMING_METHODS = {  # harness.timing's method on each kind of device, in words
    "cuda": "timed with CUDA events after a warm-up, with the L2 cache flushed before every call",
    "cpu": (
        "timed on the CPU with the host clock after a warm-up (no GPU in this run: a Triton kernel "
        "runs through the Triton interpreter, so these times say little about its speed on a GPU)"
    ),
}


def template_names(prompts_dir: Path = PROMPTS_DIR) -> list[str]:
    """The templates a user can render (files starting with `_` are parts included by others)."""
    return sorted(
        path.stem for path in prompts_dir.glob(f"*{TEMPLATE_SUFFIX}") if not path.name.startswith("_")
    )


def check_template(name: str, prompts_dir: Path = PROMPTS_DIR) -> str:
    """The template's canonical name (`improve` for `improve.j2`); HarnessError if there is no
    such template, so that a command can refuse before it opens the store."""
    name = name.removesuffix(TEMPLATE_SUFFIX)
    if name not in template_names(prompts_dir):
        known = ", ".join(template_names(prompts_dir)) or "none"
        raise HarnessError(f"no prompt template {name!r} in {prompts_dir} (templates: {known})")
    return name


def render_template(name: str, context: dict[str, Any], prompts_dir: Path = PROMPTS_DIR) -> str:
    """Render prompts/<name>.j2 with `context`; a missing template or variable -> HarnessError."""
    name = check_template(name, prompts_dir)
    filename = f"{name}{TEMPLATE_SUFFIX}"
    try:
        return _environment(prompts_dir).get_template(filename).render(context)
    except jinja2.UndefinedError as exc:
        where = _template_location(exc) or filename
        raise HarnessError(f"prompt template {where} uses an undefined variable: {exc.message}") from None
    except jinja2.TemplateSyntaxError as exc:
        raise HarnessError(
            f"prompt template {exc.name or filename} line {exc.lineno}: {exc.message}"
        ) from None
    except jinja2.TemplateNotFound as exc:  # an {% include %} of a part that is not there
        raise HarnessError(
            f"prompt template {filename} includes {exc.name}, which is not in {prompts_dir}"
        ) from None


def _environment(prompts_dir: Path) -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(prompts_dir),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        finalize=escape_template_value,
    )
    environment.filters.update(ms=format_ms, speedup=format_speedup)
    return environment


def _template_location(exc: BaseException) -> str | None:
    """`improve.j2 line 12`: the innermost template frame of the traceback (jinja2 rewrites its
    frames so that they carry the template's file name and line)."""
    location = None
    traceback = exc.__traceback__
    while traceback is not None:
        filename = traceback.tb_frame.f_code.co_filename
        if filename.endswith(TEMPLATE_SUFFIX):
            location = f"{Path(filename).name} line {traceback.tb_lineno}"
        traceback = traceback.tb_next
    return location


def render_step_prompt(template: str, context: dict[str, Any], prompts_dir: Path = PROMPTS_DIR) -> str:
    """What a proposer reads on stdin: the system prompt, then the step's prompt."""
    system = render_template("system", context, prompts_dir)
    return f"{system.rstrip()}\n\n{render_template(template, context, prompts_dir)}"


# --- the context ----------------------------------------------------------------------------


def prompt_context(
    session: Session,
    revision: Revision,
    *,
    device: str | None = None,
    leaderboard_size: int = LEADERBOARD_SIZE,
    board: Leaderboard | None = None,
) -> dict[str, Any]:
    """The variables of every template (listed in the module docstring) for `revision`.

    `device` picks the leaderboard's environment as `harness leaderboard --device` does; None
    takes the task's most recent one. A revision that was never run there has status `not_run`.
    `board`: that leaderboard, when the caller has built it already (evolution builds it once a
    generation, for the choice of the parent and its prompt); None builds it here.
    """
    task = load_task(revision.task)
    board = board if board is not None else _leaderboard(session, revision.task, device)
    return {
        "task": {
            "name": task.name,
            "description": task.description,
            "dtype": task.dtype,
            "rtol": task.rtol,
            "atol": task.atol,
            "correctness": (
                f"rtol={task.rtol}, atol={task.atol}, {task.dtype}"
                if task.rtol is not None
                else "the problem's own check_implementation"
            ),
            "reference": reference_lineage_name(task.name),
            "entry_point": task.entry_point,
            "ranking_by": task.ranking_by,
            "score_rule": SCORE_RULES[task.ranking_by],
            "verdict": board.verdict if board else task.verdict,
            "verdict_rule": VERDICT_RULES[board.verdict if board else task.verdict],
            "benchmarks": [shape.label() for shape in task.benchmarks],
            "tests": [shape.label() for shape in task.tests],
        },
        "parent": _revision_facts(revision),
        "timing": _timing(task, board, device),
        "evaluation": _evaluation(session, revision, board, device),
        "leaderboard": [
            _board_row(entry, board) for entry in (board.ranked()[:leaderboard_size] if board else [])
        ],
    }


def _timing(task: TaskSpec, board: Leaderboard | None, device: str | None) -> dict[str, Any]:
    """Where the evaluation's times come from: the device (None: nothing timed yet, and no
    device asked for), whether it is the CPU, how it times, and the shapes it timed (the board's;
    with nothing timed, those the device times: smoke shapes on the CPU, benchmarks on a GPU)."""
    name = board.device if board is not None else None
    on_cpu = "cpu" in name.casefold() if name is not None else device == "cpu"
    timed = [shape_label(shape) for shape in board.shapes()] if board is not None else []
    shapes = timed or [shape.label() for shape in (task.smoke if on_cpu else task.benchmarks)]
    return {
        "device": name or device,
        "timed": bool(timed),
        "on_cpu": on_cpu,
        "method": TIMING_METHODS["cpu" if on_cpu else "cuda"],
        "shape_set": "smoke" if on_cpu else "benchmarks",
        "shapes": shapes,
    }


def _leaderboard(session: Session, task: str, device: str | None) -> Leaderboard | None:
    has_runs = (
        session.scalar(select(Run.id).where(Run.task == task, Run.state == "done").limit(1)) is not None
    )
    if not has_runs:
        return None
    try:
        return build_leaderboard(session, task, device)
    except HarnessError:  # no completed run on that device yet
        return None


def _revision_facts(revision: Revision) -> dict[str, Any]:
    code = revision_code(revision).decode("utf-8", "replace")
    longest_run = max((len(run) for run in re.findall(r"`+", code)), default=0)
    return {
        "id": revision.id,
        "lineage": revision.lineage.name,
        "number": revision.number,
        "author": revision.author,
        "message": revision.message,
        "filename": revision.filename,
        "entry_point": revision.entry_point,
        "flags": [str(flag) for flag in revision.flags],
        "code": code,
        "fence": "`" * max(3, longest_run + 1),
    }


def _board_row(entry: LeaderboardEntry, board: Leaderboard) -> dict[str, Any]:
    return {
        "rank": entry.rank,
        "submission_id": entry.submission_id,
        "lineage": entry.lineage,
        "revision": entry.revision,
        "author": entry.author,
        "score_ms": entry.score_ms,
        "speedup": entry.speedup_vs_reference,
        "reference": entry.lineage == board.reference_lineage(),
    }


def _evaluation(
    session: Session, revision: Revision, board: Leaderboard | None, device: str | None
) -> dict[str, Any]:
    evaluation: dict[str, Any] = {
        "device": (board.device if board else None) or device or "no device yet",
        "status": "not_run",
        "reason": "no completed run yet",
        "score_ms": None,
        "reference_ms": board.reference_ms if board else None,
        "speedup": None,
        "vs_parent": None,
        "shapes": [],
        "failures": [],
        "verdicts": [],
        "accuracy": {"rel_l2": None, "max_err_over_scale": None},
    }
    entry = next((e for e in board.entries if e.submission_id == revision.id), None) if board else None
    if board is None or entry is None:
        return evaluation
    reference = _reference_timings(board)
    evaluation.update(
        status=entry.status,
        reason=entry.reason,
        score_ms=entry.score_ms,
        speedup=entry.speedup_vs_reference,
        vs_parent=entry.vs_parent,
        shapes=[
            {
                "label": shape_label(timing.shape),
                "mean_ms": timing.mean_ms,
                "err_ms": timing.err_ms,
                "reference_ms": reference.get(shape_key(timing.shape)),
                "speedup": (
                    reference[shape_key(timing.shape)] / timing.mean_ms
                    if timing.mean_ms and reference.get(shape_key(timing.shape))
                    else None
                ),
            }
            for timing in entry.benchmarks
        ],
        failures=_failures(session, revision) if entry.status not in ("pass", "not_run") else [],
        verdicts=[
            {
                "label": VERDICT_WORDS[name],
                "status": v.status,
                "reason": v.reason,
                "ranks": name == board.verdict,
            }
            for name, v in entry.verdicts.items()
        ],
        accuracy=entry.accuracy.model_dump(),
    )
    return evaluation


def _reference_timings(board: Leaderboard) -> dict[str, float]:
    """Per benchmark shape, the mean time of the best-scoring reference revision."""
    references = [entry for entry in board.ranked() if entry.lineage == reference_lineage_name(board.task)]
    if not references:
        return {}
    best = min(references, key=lambda entry: entry.score_ms or float("inf"))
    return {
        shape_key(timing.shape): timing.mean_ms for timing in best.benchmarks if timing.mean_ms is not None
    }


def _failures(session: Session, revision: Revision) -> list[dict[str, str]]:
    """The failed shapes of the revision's most recent failing run, each with a check summary."""
    run = session.scalar(
        select(Run)
        .where(Run.revision_id == revision.id, Run.state == "done", Run.status != "pass")
        .order_by(Run.finished_at.desc(), Run.id.desc())
        .limit(1)
    )
    if run is None:
        return []
    failed = [shape for shape in run.shapes if shape.passed is False]
    return [
        {
            "label": f"{shape.set_name} {shape_label(shape.shape)}",
            "summary": summarize_check(shape.reason, shape.check),
        }
        for shape in failed[:MAX_FAILURES_SHOWN]
    ]


def summarize_check(reason: str, check: ShapeCheck) -> str:
    """One line from a stored shape's reason and check (harness.wire.ShapeCheck): the reason, the
    mismatch count, the errors, and the first few mismatched positions with both values."""
    if not reason and check == ShapeCheck():
        return "failed (no details recorded)"
    parts = [reason] if reason else []
    if check.mismatches:
        not_finite = f" ({check.not_finite} not finite)" if check.not_finite else ""
        parts.append(f"{check.mismatches} mismatched elements{not_finite}")
    for value, label in ((check.max_abs_err, "max abs error"), (check.rel_l2, "relative L2 error")):
        if value is not None:
            parts.append(f"{label} {value:.3g}")
    first = [
        f"at {item.index} got {item.received} expected {item.expected}" for item in check.first_mismatches
    ]
    if first:
        parts.append("first: " + ", ".join(first[:3]))
    return ("; ".join(parts) or "failed")[:600]
