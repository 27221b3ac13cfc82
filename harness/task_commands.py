"""`harness task add|list|show`: thin commands over harness.store.tasks (wired into harness.cli)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from harness.errors import HarnessError

task_app = typer.Typer(
    help="Tasks: GPU MODE problem directories, built in or added to the store.", no_args_is_help=True
)

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db", envvar="HARNESS_DB", help="SQLAlchemy URL of the store (default: db/harness.sqlite)."
    ),
]


@task_app.command("add")
def task_add(
    directory: Annotated[
        Path, typer.Argument(help="A GPU MODE problem directory (task.yml, reference.py, task.py).")
    ],
    name: Annotated[
        str | None, typer.Option(help="Task name (default: the directory's name without _py).")
    ] = None,
    db: DbOption = None,
) -> None:
    """Store a problem directory as a task (a new version when its files changed)."""
    from harness.store.session import open_store
    from harness.store.tasks import add_task
    from harness.tasks.problem import read_problem

    read_problem(directory)  # a bad directory fails before the store is opened or created
    store = open_store(db)
    try:
        with store.session() as session:
            outcome = add_task(session, directory, name)
            print(outcome.describe())
            if outcome.reference.created:
                print(f"  {outcome.reference.describe()}")
    finally:
        store.close()


@task_app.command("list")
def task_list(db: DbOption = None) -> None:
    """Every task: built in, and added (its latest version)."""
    from harness.store.session import open_store
    from harness.store.tasks import task_versions
    from harness.tasks import load_task
    from harness.tasks.spec import builtin_tasks

    store = open_store(db)
    try:
        with store.session() as session:
            latest = {version.name: version for version in task_versions(session)}
    finally:
        store.close()
    for name in [*builtin_tasks(), *sorted(latest)]:
        origin = (
            "built in" if name not in latest else f"version {latest[name].version} of {latest[name].source}"
        )
        try:
            spec = load_task(name)
        except HarnessError as exc:
            print(f"{name}  {origin}  {exc}")
            continue
        print(f"{name}  {origin}  verdicts: {', '.join(spec.verdicts)}  {_cpu(spec)}")


@task_app.command("show")
def task_show(name: Annotated[str, typer.Argument(help="Task name.")], db: DbOption = None) -> None:
    """One task: its versions and files, shapes, verdicts, ranking, and whether it runs on the CPU."""
    from harness.store.session import open_store
    from harness.store.tasks import runs_per_version, task_versions
    from harness.tasks import load_task

    store = open_store(db)
    try:
        spec = load_task(name)
        with store.session() as session:
            versions = task_versions(session, name)
            runs = runs_per_version(session, name)
            lines = [
                f"v{v.version}  files {v.files_sha256[:12]}  {', '.join(f.name for f in v.files)}  "
                f"added {v.created_at:%Y-%m-%d %H:%M} from {v.source}  runs: {runs.get(v.version, 0)}"
                for v in versions
            ]
    finally:
        store.close()
    print(
        f"task {spec.name}: "
        + (f"version {spec.version} (files {spec.files_sha256[:12]})" if versions else "built in")
    )
    description = spec.description.strip().splitlines()
    if description:
        print(f"  {description[0]}")
    print(
        f"  shapes: {len(spec.tests)} tests, {len(spec.benchmarks)} benchmarks, {len(spec.smoke)} smoke (CPU)"
    )
    print(f"  data: {_data(spec)}")
    if spec.exact_answer is None:
        rule = (
            "the problem's check_implementation"
            if spec.rtol is None
            else f"rtol={spec.rtol} atol={spec.atol}"
        )
        print(f"  verdicts: gpumode ({rule}); no exact answer, so no accurate verdict")
    else:
        print(
            f"  verdicts: gpumode (rtol={spec.rtol} atol={spec.atol}), accurate (exact answer: "
            f"{spec.exact_answer} in float64); ranked by {spec.verdict}"
        )
    print(f"  ranking_by: {spec.ranking_by}; {_cpu(spec)}")
    for line in lines:
        print(f"  {line}")


def _data(spec) -> str:
    """task.yml's names of the data, or what running the task's generate_input and reference on
    the CPU finds (harness.checking.data_layout: an evaluation learns it the same way)."""
    if spec.data:
        buffers = spec.output_buffers
        plural = "s" if len(buffers) > 1 else ""
        return ", ".join(spec.data) + (f" (output buffer{plural}: {', '.join(buffers)})" if buffers else "")
    from harness.checking import data_layout  # torch, as `devices_known` loads it

    try:
        layout = data_layout(spec, "cpu")
    except HarnessError as exc:
        return f"as generate_input returns it; its output buffers are learned when first run ({exc})"
    found = layout.describe_outputs()
    return f"as generate_input returns it; {found} (found by running it and the reference on the CPU)"


def _cpu(spec) -> str:
    return spec.devices_known()
