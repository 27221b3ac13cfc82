"""Thin typer commands: parse options, call one function, print. No logic lives here.

Each concern keeps its commands in its own section below; `main` turns a `HarnessError` or a
usage error into one line on stderr and exit code 2. Text from a candidate or its registration
(names, messages, reasons, code) is printed with its control characters escaped
(harness.report.text); JSON escapes them itself.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Literal

import typer
from typer.exceptions import Abort, Exit, TyperException

from harness import interrupts
from harness.errors import HarnessError
from harness.task_commands import task_app

app = typer.Typer(
    help="Kernel evolution harness: register revisions, check and time them, rank them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _show_version(value: bool) -> None:
    if value:
        from harness import __version__

        print(f"harness {__version__}")
        raise Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_show_version, help="Print the harness version and exit."
        ),
    ] = False,
) -> None:
    """Kernel evolution harness: register revisions, check and time them, rank them."""


DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        envvar="HARNESS_DB",
        help="SQLAlchemy URL of the store (default: db/harness.sqlite in a checkout, else "
        "$XDG_DATA_HOME/harness/harness.sqlite; `harness init` prints it).",
    ),
]
DeviceOption = Annotated[
    str | None, typer.Option("--device", help="cpu or cuda (default: cuda when torch sees a GPU, else cpu).")
]
BudgetOption = Annotated[
    float | None, typer.Option("--budget", help="Seconds of timed calls per shape (default: settings, 10).")
]


def _stopping_rule(budget: float | None):
    """The timing's stopping rule for `--budget` (None: the settings' budget for the device)."""
    if budget is None:
        return None
    if budget <= 0:
        raise HarnessError(f"--budget must be positive, got {budget:g}")
    from harness.timing import StoppingRule

    return StoppingRule(budget_s=budget)


DataFormat = Literal["table", "json"]
FormatOption = Annotated[DataFormat, typer.Option("--format", help="table (for people) or json (for tools).")]
# Exit codes (README, "Exit codes"): 0 all passed, 1 some revision failed, 2 bad input, 130 interrupted.
EXIT_REVISION_FAILED = 1
# Leaderboard statuses that fail the tournament's exit code (not `unsupported`, `not_run`, `flagged`).
FAILED_STATUSES = ("wrong_answer", "compile_error", "runtime_error", "timeout", "crashed")


def _escaped(text: str, *, block: bool = False) -> str:
    from harness.report.text import escape_controls

    return escape_controls(text, block=block)


def _print_json(text: str) -> None:
    from harness.report.text import escape_json_controls

    text = escape_json_controls(text)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


# --- store and registration (issue 2) -------------------------------------------------------


@app.command()
def version() -> None:
    """Print the harness version (as `harness --version`)."""
    _show_version(True)


@app.command()
def init(db: DbOption = None) -> None:
    """Create the store, or upgrade it to this harness's schema."""
    from harness.store.session import open_store

    with open_store(db) as store:
        if store.previous_revision is None:
            state = "created"
        elif store.migrated:
            state = f"upgraded from {store.previous_revision}"
        else:
            state = "already current"
    print(f"store {store.url}: schema {store.schema_revision} ({state})")
    if db is None:
        from harness.config import IN_CHECKOUT

        where = (
            "db/ of the checkout the harness runs from"
            if IN_CHECKOUT
            else "your data folder ($XDG_DATA_HOME/harness)"
        )
        print(f"the default store: {where}; --db URL or HARNESS_DB picks another")


@app.command()
def register(
    file: Annotated[Path, typer.Argument(help="The candidate file.", show_default=False)],
    lineage: Annotated[
        str | None,
        typer.Option(help="Lineage name (default: the parent's lineage, else the file name's stem)."),
    ] = None,
    parent: Annotated[
        int | None,
        typer.Option(
            help="Parent submission id (default: the lineage's latest); the child joins the parent's lineage."
        ),
    ] = None,
    submission_id: Annotated[
        int | None, typer.Option("--id", help="Keep this external submission id.")
    ] = None,
    message: Annotated[str, typer.Option("--message", "-m", help="What changed.")] = "",
    author: Annotated[str, typer.Option(help="A person's or an agent's name.")] = "",
    task: Annotated[
        str | None,
        typer.Option(
            help="Task (default: the #!POPCORN leaderboard directive, else the parent's or the lineage's, "
            "else conv2d_v2); a lineage holds one task."
        ),
    ] = None,
    db: DbOption = None,
) -> None:
    """Register a candidate file as the next revision of its lineage."""
    from harness.candidates import read_candidate_file
    from harness.store.revisions import register_revision
    from harness.store.session import open_store

    content = read_candidate_file(file)
    with open_store(db) as store, store.session() as session:
        outcome = register_revision(
            session,
            content,
            str(file),
            lineage=lineage,
            parent_id=parent,
            submission_id=submission_id,
            message=message,
            author=author,
            task=task,
        )
        lines = [_escaped(outcome.describe())]
        if outcome.created and outcome.revision.flags:
            error = outcome.revision.syntax_error
            flags = ", ".join(outcome.revision.flags) + (f" ({error})" if error else "")
            lines.append(f"  flags: {_escaped(flags)}")
    # Committed before a word is printed: a reader that stops early (`| head -1`) loses nothing.
    print("\n".join(lines), flush=True)


@app.command()
def seed(
    manifest: Annotated[
        Path | None,
        typer.Option(help="Seed manifest (default: candidates/manifest.yml).", show_default=False),
    ] = None,
    db: DbOption = None,
) -> None:
    """Register the seed revisions that the manifest lists (a second run registers nothing)."""
    from harness.candidates import read_seeds
    from harness.config import CANDIDATES_DIR
    from harness.store.revisions import register_seeds
    from harness.store.session import open_store

    seeds = read_seeds(manifest or CANDIDATES_DIR / "manifest.yml")
    with open_store(db) as store, store.session() as session:
        outcomes = register_seeds(session, seeds)
        lines = [_escaped(outcome.describe()) for outcome in outcomes]
    print("\n".join(lines))
    created = sum(outcome.created for outcome in outcomes)
    if created:
        print(f"{created} registered, {len(outcomes) - created} already there")
    else:
        print(f"nothing new: all {len(outcomes)} seed revisions are already registered")


@app.command("list")
def list_revisions_command(
    task: Annotated[str | None, typer.Option(help="Only this task's revisions.")] = None,
    lineage: Annotated[str | None, typer.Option(help="Only this lineage's revisions.")] = None,
    output_format: FormatOption = "table",
    db: DbOption = None,
) -> None:
    """List registered revisions (submissions) in the order they were registered."""
    import json

    from rich.text import Text

    from harness.report.evaluations import revision_record
    from harness.report.terminal import fit_table, output_width, plain_table, print_renderable
    from harness.store.revisions import list_revisions
    from harness.store.session import open_store

    columns = ("id", "lineage", "rev", "parent", "task", "author", "created (UTC)", "flags")
    rows, records = [], []
    with open_store(db, read_only=True) as store, store.session() as session:
        revisions = list_revisions(session, task=task, lineage=lineage)
        for revision in revisions:
            cells = (
                revision.id,
                revision.lineage.name,
                f"r{revision.number}",
                "" if revision.parent_id is None else revision.parent_id,
                revision.task,
                revision.author,
                f"{revision.created_at:%Y-%m-%d %H:%M}",
                ", ".join(revision.flags),
            )
            rows.append([Text(_escaped(str(cell))) for cell in cells])
            records.append(revision_record(revision))

    def build(hidden: tuple[str, ...]):
        """Names, numbers and times whole (never cut inside a word); the flags wrap between flags."""
        table = plain_table()
        shown = [index for index, column in enumerate(columns) if column not in hidden]
        for index in shown:
            table.add_column(columns[index], no_wrap=columns[index] != "flags", overflow="fold")
        for row in rows:
            table.add_row(*(row[index] for index in shown))
        return table

    width = output_width()
    table, hidden = fit_table(build, width, ("author", "created (UTC)"))
    if output_format == "json":
        _print_json(json.dumps(records, indent=2))
    elif revisions:
        print_renderable(table)
        if hidden:
            print(f"({', '.join(hidden)} not shown at {width} columns: see --format json)")
    else:
        print(
            "no submissions"
            + (" match" if task or lineage else " yet: register one with `harness register FILE`")
        )


@app.command()
def show(
    submission_id: Annotated[int, typer.Argument(metavar="ID", help="Submission id.", show_default=False)],
    output_format: FormatOption = "table",
    db: DbOption = None,
) -> None:
    """Show one revision: its metadata, flags, its stored results (status, score, reason per
    shape), then its code (control characters escaped, line breaks and tabs kept)."""
    import json

    from harness.report.evaluations import render_runs, revision_record, run_report
    from harness.store.revisions import get_revision, revision_code
    from harness.store.session import open_store

    with open_store(db, read_only=True) as store, store.session() as session:
        revision = get_revision(session, submission_id)
        code = revision_code(revision)
        label = revision.label
        runs = sorted(
            (run for run in revision.runs if run.state == "done"), key=lambda run: (run.finished_at, run.id)
        )
        reports = [run_report(revision.id, label, run) for run in runs]
        fields = {
            "parent": "none" if revision.parent_id is None else revision.parent_id,
            "task": revision.task,
            "file": revision.filename,
            "author": revision.author,
            "created": f"{revision.created_at:%Y-%m-%d %H:%M:%S} UTC",
            "sha256": revision.code_sha256,
            "directives": ", ".join(f"{key}={value}" for key, value in revision.directives.items()) or "none",
            "entry point": revision.entry_point or "none",
            "flags": ", ".join(revision.flags) or "none",
            **({"syntax error": revision.syntax_error} if revision.syntax_error else {}),
            "message": revision.message,
        }
        header = _escaped(f"submission {revision.id}: {label}")
        record = {
            **revision_record(revision, full=True),
            "results": [report.model_dump(mode="json") for report in reports],
            "code": code.decode("utf-8", errors="replace"),
        }
    if output_format == "json":
        _print_json(json.dumps(record, indent=2))
        return
    lines = [header] + [f"{name + ':':<12} {_escaped(str(value))}" for name, value in fields.items()]
    lines.append(render_runs(reports))
    lines.append(f"--- {_escaped(fields['file'])} ({len(code)} bytes) ---")
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()
    text = code.decode("utf-8", errors="backslashreplace")
    sys.stdout.buffer.write(_escaped(text, block=True).encode("utf-8"))
    sys.stdout.buffer.flush()


# --- runner and timing (issues 3, 4) ---------------------------------------------------------


@app.command("test")
def test_command(
    ids: Annotated[list[int], typer.Argument(help="Submission ids to check.", show_default=False)],
    device: DeviceOption = None,
    mode: Annotated[str, typer.Option(help="test (public seeds) or leaderboard (secret seeds).")] = "test",
    force: Annotated[bool, typer.Option(help="Check again even if this environment has a result.")] = False,
    call_timeout: Annotated[
        float | None, typer.Option(help="Seconds allowed per call (default: settings).")
    ] = None,
    output_format: FormatOption = "table",
    db: DbOption = None,
) -> None:
    """Check revisions against the task's reference in a sandbox; store one run per environment.
    Exit code 1 when a revision fails (`unsupported` on this device is no failure)."""
    from harness.devices import resolve_device
    from harness.plan.checks import check_revisions
    from harness.report.evaluations import any_failed, checks_json, render_checks, render_summary
    from harness.report.terminal import print_renderable
    from harness.sandbox.limits import SandboxLimits
    from harness.store.session import open_store

    device = resolve_device(device)
    limits = SandboxLimits.from_settings(call_timeout_s=call_timeout)
    with open_store(db, create=False) as store:
        checked = check_revisions(store, ids, device=device, mode=mode, force=force, limits=limits)
    if output_format == "json":
        _print_json(checks_json(checked))
    else:
        print_renderable(render_summary(checked, device))
        print_renderable(render_checks(checked))
    if any_failed(checked):
        raise Exit(EXIT_REVISION_FAILED)


@app.command()
def bench(
    ids: Annotated[list[int], typer.Argument(help="Submission ids to time.", show_default=False)],
    device: DeviceOption = None,
    mode: Annotated[
        str,
        typer.Option(
            help="benchmark (public seeds) or leaderboard (a secret seed per call, every output checked)."
        ),
    ] = "benchmark",
    force: Annotated[bool, typer.Option(help="Time again even if this environment has a result.")] = False,
    budget: BudgetOption = None,
    output_format: FormatOption = "table",
    db: DbOption = None,
) -> None:
    """Time revisions with the task's reference in the same run; store and print per-shape tables.
    Exit code 1 when a revision fails (`unsupported` on this device is no failure)."""
    from harness.devices import resolve_device
    from harness.environment import probe_environment
    from harness.plan.bench import bench_revisions
    from harness.report.evaluations import any_failed, bench_json, render_bench
    from harness.report.terminal import print_renderable
    from harness.store.session import open_store

    device = resolve_device(device)
    rule = _stopping_rule(budget)
    environment = probe_environment(device)
    with open_store(db, create=False) as store:
        benched = bench_revisions(
            store,
            ids,
            device=device,
            mode=mode,
            force=force,
            rule=rule,
            environment=environment,
            progress=lambda line, _advance=1: typer.echo(_escaped(line), err=True),
        )
    if output_format == "json":
        _print_json(bench_json(benched))
    else:
        print_renderable(render_bench(benched, environment))
    if any_failed(benched):
        raise Exit(EXIT_REVISION_FAILED)


# --- tournament and reports (issue 5) -------------------------------------------------------


TaskOption = Annotated[str, typer.Option("--task", help="Task name.")]


def _write_report(text: str, out: Path | None) -> None:
    if out is None:
        sys.stdout.write(text)
        return
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise HarnessError(f"cannot write {out}: {exc.strerror}") from None


def _print_exact(text: str, *, page: bool = False) -> None:
    """Write text byte for byte (UTF-8, no markup, no wrapping; control characters escaped, line
    breaks and tabs kept) and a final newline (the diff text ends without one). On a terminal,
    diff lines are coloured, and with `page` a text longer than the screen goes through the
    pager (harness.report.terminal.page: $PAGER, else `less` with LESS=FRX, as git does)."""
    from harness.report.terminal import stdout_is_terminal

    text = _escaped(text, block=True)
    if not stdout_is_terminal():
        sys.stdout.buffer.write(text.encode("utf-8") + b"\n")
        sys.stdout.flush()
        return
    import shutil

    from rich.console import Console

    from harness.report.terminal import colored_diff

    console = Console(highlight=False, soft_wrap=True)
    if page and text.count("\n") + 1 > shutil.get_terminal_size().lines:
        from harness.report.terminal import page as show_in_pager

        with console.capture() as captured:
            console.print(colored_diff(text))
        show_in_pager(captured.get())
    else:
        console.print(colored_diff(text))


VerdictOption = Annotated[
    Literal["gpumode", "accurate"] | None,
    typer.Option(
        "--verdict",
        help="The verdict that ranks: gpumode (GPU MODE's rule) or accurate (the exact answer); default: the task's.",
    ),
]


WideOption = Annotated[
    bool | None,
    typer.Option(
        "--wide/--narrow",
        help="Per-shape timings, author, accuracy figures and flags in the table (default: when they fit).",
        show_default=False,
    ),
]


@app.command()
def tournament(
    task: TaskOption = "conv2d_v2",
    device: DeviceOption = None,
    mode: Annotated[
        Literal["test", "benchmark", "leaderboard"],
        typer.Option(
            help="test (check only), benchmark (check, then time), leaderboard (and recheck with secret seeds)."
        ),
    ] = "benchmark",
    only: Annotated[
        list[int] | None, typer.Option("--only", help="Just these submission ids (repeat the option).")
    ] = None,
    force: Annotated[
        bool, typer.Option(help="Evaluate again even where this environment has results.")
    ] = False,
    budget: BudgetOption = None,
    gpus: Annotated[
        str | None,
        typer.Option(help="One worker per GPU: a count or 'all' (default: everything in this process)."),
    ] = None,
    executor: Annotated[
        Literal["local", "ray"],
        typer.Option(help="local (this node) or ray (a Ray cluster, one GPU per job)."),
    ] = "local",
    ray_address: Annotated[
        str | None, typer.Option(help="The Ray cluster to join (default: RAY_ADDRESS or a local one).")
    ] = None,
    verdict: VerdictOption = None,
    wide: WideOption = None,
    db: DbOption = None,
) -> None:
    """Check, time and rank every revision of the task that has no result in this environment yet.
    Exit code 1 when a revision fails (`unsupported` on this device is no failure)."""
    from harness.store.session import open_store

    rule = _stopping_rule(budget)
    if ray_address is not None and executor != "ray":
        raise HarnessError("--ray-address needs --executor ray")
    from harness.executors import make_executor

    runner = make_executor(
        executor, gpus=gpus, ray_address=ray_address, device=device
    )  # bad --gpus: nothing opened
    try:
        with open_store(db, create=False) as store:
            if executor == "local" and gpus is None and device in (None, "cpu", "cuda"):
                # The sandbox's isolation probe (on a GPU, a process that starts CUDA: seconds) runs
                # while this process imports torch and claims its runs, not after.
                from harness.environment import likely_device
                from harness.sandbox.isolation import start_isolation_probe

                start_isolation_probe(device or likely_device())
            from rich.console import Console

            from harness.plan.tournament import run_tournament
            from harness.report.html import render_leaderboard
            from harness.report.progress import RichTournamentProgress, phase_summary
            from harness.report.terminal import output_width, stdout_is_terminal
            from harness.standing.board import build_leaderboard

            with RichTournamentProgress(Console(stderr=True)) as progress:
                result = run_tournament(
                    store,
                    task=task,
                    device=device,
                    mode=mode,
                    only=only,
                    force=force,
                    rule=rule,
                    progress=progress,
                    executor=runner,
                )
            for phase in result.phases:
                print(phase_summary(phase))
            busy = sum(phase.busy for phase in result.phases)
            with store.session() as session:
                try:
                    board = build_leaderboard(
                        session, result.task, result.environment.device_name or result.device, verdict
                    )
                except HarnessError:
                    if not busy:
                        raise
                    print(
                        f"no finished runs here yet: {busy} held by other workers; `harness leaderboard` later"
                    )
                    return
                text = render_leaderboard(
                    session, board, "table", color=stdout_is_terminal(), width=output_width(), wide=wide
                )
            _write_report(text, None)
            tournament_ids = set(result.phases[0].revision_ids) if result.phases else set()
            if any(
                entry.status in FAILED_STATUSES
                for entry in board.entries
                if entry.submission_id in tournament_ids
            ):
                raise Exit(EXIT_REVISION_FAILED)
    finally:
        runner.close()


@app.command()
def leaderboard(
    task: TaskOption = "conv2d_v2",
    device: Annotated[
        str | None,
        typer.Option(
            "--device", help="Device (cpu, cuda) or device name; default: the most recent run's environment."
        ),
    ] = None,
    output_format: Annotated[
        Literal["table", "json", "markdown", "html"],
        typer.Option("--format", help="table, json (the contract for tools), markdown or html."),
    ] = "table",
    out: Annotated[Path | None, typer.Option("--out", help="Write to this file instead of stdout.")] = None,
    verdict: VerdictOption = None,
    wide: WideOption = None,
    db: DbOption = None,
) -> None:
    """Ranked revisions of a task in one environment; failing revisions below with their reason."""
    from harness.report.html import render_leaderboard
    from harness.report.terminal import output_width, stdout_is_terminal
    from harness.standing.board import build_leaderboard
    from harness.store.session import open_store

    with open_store(db, read_only=True) as store, store.session() as session:
        board = build_leaderboard(session, task, device, verdict)
        to_terminal = out is None and stdout_is_terminal()
        width = output_width() if out is None else None
        text = render_leaderboard(session, board, output_format, color=to_terminal, width=width, wide=wide)
    _write_report(text, out)


@app.command()
def diff(
    submission_id: Annotated[int, typer.Argument(metavar="ID", help="Submission id of the revision.")],
    against: Annotated[
        int | None,
        typer.Option("--against", metavar="ID", help="Diff against this revision instead of the parent."),
    ] = None,
    db: DbOption = None,
) -> None:
    """A revision's diff against its parent, in the seeds' format (exact bytes, then a newline;
    coloured on a terminal)."""
    from harness.report.history import revision_diff
    from harness.store.session import open_store

    with open_store(db, read_only=True) as store, store.session() as session:
        text = revision_diff(session, submission_id, against)
    _print_exact(text)


@app.command()
def history(
    lineage: Annotated[str | None, typer.Argument(help="Only this lineage.")] = None,
    rank: Annotated[bool, typer.Option("--rank", help="Best first instead of submission order.")] = False,
    task: TaskOption = "conv2d_v2",
    device: Annotated[
        str | None, typer.Option("--device", help="Device or device name of the results shown.")
    ] = None,
    verdict: VerdictOption = None,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit", "-n", min=1, help="Only the first N revisions (the latest N without --rank)."
        ),
    ] = None,
    output_format: FormatOption = "table",
    db: DbOption = None,
) -> None:
    """Every revision as `harness diff` shows it, under a line with its status, score and
    comparison with its parent; on a terminal, a long history goes through the pager."""
    from harness.report.history import build_history, history_json, render_history
    from harness.store.session import open_store

    with open_store(db, read_only=True) as store, store.session() as session:
        items = build_history(session, task, lineage, rank=rank, device=device, verdict=verdict)
    if limit is not None:
        items = items[:limit] if rank else items[-limit:]
    if output_format == "json":
        _print_json(history_json(items))
        return
    _print_exact(render_history(items), page=True)


# --- evolution (issue 6) ---------------------------------------------------------------------

prompt_app = typer.Typer(help="The prompts agents read (jinja2 templates in prompts/).", no_args_is_help=True)
app.add_typer(prompt_app, name="prompt")
experiments_app = typer.Typer(help="Evolution experiments: list them, or tell one's story.")
app.add_typer(experiments_app, name="experiments")
app.add_typer(task_app, name="task")


@app.command()
def evolve(
    from_id: Annotated[
        int | None,
        typer.Option(
            "--from", metavar="ID", help="Start from this revision (its lineage gets the children)."
        ),
    ] = None,
    lineage: Annotated[str | None, typer.Option(help="Start from this lineage's revisions.")] = None,
    resume: Annotated[
        int | None, typer.Option("--resume", metavar="ID", help="Continue an interrupted experiment.")
    ] = None,
    generations: Annotated[int | None, typer.Option(help="Number of generations (one child each).")] = None,
    proposer: Annotated[
        str | None, typer.Option(help="builtin:mutate, or a command that reads the prompt on stdin.")
    ] = None,
    population: Annotated[
        int, typer.Option(help="Parents are chosen among the best K passing revisions.")
    ] = 4,
    seed: Annotated[int, typer.Option(help="Seed of every random choice (parents, mutations).")] = 0,
    device: DeviceOption = None,
    proposer_timeout: Annotated[float, typer.Option(help="Seconds a proposer may take per reply.")] = 600.0,
    max_fix_attempts: Annotated[int, typer.Option(help="Fix prompts per failing revision, at most.")] = 2,
    budget: BudgetOption = None,
    parallel: Annotated[
        int,
        typer.Option(help="Proposals in flight at once (children waiting for the GPU: up to K - 1 more)."),
    ] = 1,
    gpus: Annotated[
        str | None,
        typer.Option(help="Evaluate on one worker per GPU: a count or 'all' (default: this process)."),
    ] = None,
    db: DbOption = None,
) -> None:
    """Evolve revisions: choose a parent, prompt a proposer, register and evaluate the child."""
    from harness.evolve.experiment import create_experiment, run_experiment
    from harness.store.session import open_store

    if resume is not None:
        own_settings = {
            "--from": from_id,
            "--lineage": lineage,
            "--generations": generations,
            "--proposer": proposer,
            "--device": device,
            "--budget": budget,
            "--parallel": parallel if parallel != 1 else None,
            "--gpus": gpus,
        }
        given = [name for name, value in own_settings.items() if value is not None]
        if given:
            raise HarnessError(
                f"--resume continues with the experiment's own settings; drop {', '.join(given)}"
            )
    elif generations is None or proposer is None:
        raise HarnessError("give --generations N and --proposer P (or --resume ID)")
    with open_store(db, create=False) as store:
        if resume is None:
            experiment_id = create_experiment(
                store,
                proposer=proposer,
                device=device,
                generations=generations,
                from_id=from_id,
                lineage=lineage,
                population=population,
                seed=seed,
                proposer_timeout_s=proposer_timeout,
                max_fix_attempts=max_fix_attempts,
                budget_s=budget,
                parallel=parallel,
                gpus=gpus,
            )
            print(f"experiment {experiment_id}")
        else:
            experiment_id = resume
        try:
            status = _run_experiment_live(store, experiment_id, run_experiment)
        except KeyboardInterrupt:  # typer would turn it into a return value, and exit 0
            print(
                f"error: interrupted; `harness evolve --resume {experiment_id}` continues it", file=sys.stderr
            )
            sys.exit(130)
    print(f"experiment {experiment_id}: {status}; `harness experiments show {experiment_id}` tells the story")
    if status in ("failed", "stopped"):  # every generation failed, or no parent was left to try
        raise Exit(EXIT_REVISION_FAILED)


def _run_experiment_live(store, experiment_id: int, run_experiment) -> str:
    """A live line per step in flight on a terminal; one line per event otherwise."""
    from rich.console import Console

    from harness.report.terminal import stdout_is_terminal

    if not stdout_is_terminal():
        return run_experiment(store, experiment_id, report=lambda line: print(_escaped(line)))
    console = Console(highlight=False)
    from harness.evolve.experiment import ExperimentSettings, get_experiment
    from harness.evolve.live import LiveEvents

    with store.session() as session:
        total = ExperimentSettings.model_validate(get_experiment(session, experiment_id).settings).generations
    with LiveEvents(console, total) as events:
        return run_experiment(store, experiment_id, events=events)


@prompt_app.command("render")
def prompt_render(
    template: Annotated[
        str, typer.Argument(help="Template name: improve, fix, system (or a file in prompts/).")
    ],
    from_id: Annotated[int, typer.Option("--from", metavar="ID", help="The revision the prompt is about.")],
    device: Annotated[
        str | None, typer.Option("--device", help="Results of this device (default: the most recent run's).")
    ] = None,
    db: DbOption = None,
) -> None:
    """Print a rendered prompt for a revision (an unknown template variable is an error)."""
    from harness.evolve.prompts import check_template, prompt_context, render_template
    from harness.store.revisions import get_revision
    from harness.store.session import open_store

    name = check_template(template)
    with open_store(db, read_only=True) as store, store.session() as session:
        text = render_template(name, prompt_context(session, get_revision(session, from_id), device=device))
    sys.stdout.write(text)


@experiments_app.callback(invoke_without_command=True)
def experiments_list(ctx: typer.Context, output_format: FormatOption = "table", db: DbOption = None) -> None:
    """List experiments (`harness experiments show ID` tells one step by step)."""
    if ctx.invoked_subcommand is not None:
        return
    from harness.evolve.story import list_experiments
    from harness.report.experiment import experiments_table
    from harness.report.terminal import print_renderable
    from harness.store.session import open_store

    with open_store(db, read_only=True) as store, store.session() as session:
        summaries = list_experiments(session)
    if output_format == "json":
        import dataclasses
        import json

        _print_json(json.dumps([dataclasses.asdict(summary) for summary in summaries], indent=2))
    elif summaries:
        print_renderable(experiments_table(summaries))
    else:
        print("no experiments yet: start one with `harness evolve --from ID --generations N --proposer P`")


@experiments_app.command("show")
def experiments_show(
    experiment_id: Annotated[int, typer.Argument(metavar="ID", help="Experiment id.")],
    full: Annotated[
        bool, typer.Option("--full", help="Print every prompt, reply and proposer stderr in full.")
    ] = False,
    fmt: Annotated[
        str, typer.Option("--format", help="text (the story) or html (the tree of revisions, one page).")
    ] = "text",
    out: Annotated[Path | None, typer.Option("--out", help="Write to this file instead of stdout.")] = None,
    db: DbOption = None,
) -> None:
    """Tell an experiment's story: each generation's parent, prompt, reply, cost and outcome."""
    from harness.evolve.story import experiment_view
    from harness.report.experiment import render_story
    from harness.store.session import open_store

    if fmt not in ("text", "html"):
        raise HarnessError(f"unknown format {fmt!r} (choose from text, html)")
    with open_store(db, read_only=True) as store, store.session() as session:
        view = experiment_view(session, experiment_id)
        if fmt == "html":
            from harness.evolve.tree import build_tree
            from harness.report.experiment import render_experiment_html

            text = render_experiment_html(view, build_tree(session, view.experiment))
        else:
            text = render_story(view, full=full) + "\n"
    _write_report(text, out)


def main() -> None:
    interrupts.install()
    try:
        _main()
    finally:
        workspace = sys.modules.get("harness.sandbox.workspace")
        if workspace is not None:  # the command made sandboxed children: nothing of theirs stays
            workspace.remove_files_of_this_process()


def _main() -> None:
    try:
        # Without standalone mode, typer returns an exit code (130 after Ctrl-C) instead of exiting.
        code = app(standalone_mode=False)
    except HarnessError as exc:
        print(f"error: {_escaped(str(exc).strip(), block=True)}", file=sys.stderr)
        sys.exit(2)
    except Exit as exc:
        sys.exit(exc.exit_code)
    except Abort:
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)
    except TyperException as exc:
        message = exc.format_message().strip().replace("Value error, ", "")
        if message:  # an empty message follows the help text printed for a bare `harness`
            print(f"error: {_escaped(message, block=True)}", file=sys.stderr)
        sys.exit(2)
    if isinstance(code, int) and code:
        if code == 130:
            print("error: interrupted", file=sys.stderr)
        sys.exit(code)
