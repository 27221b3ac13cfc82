"""Tasks added from GPU MODE problem directories: their versions in the store, and making them
known to the rest of the harness (harness.tasks.load_task) when a store is opened.

A version's files are blobs (content-addressed, as candidate code is), so a result stays tied to
the exact files it was judged by. Adding the files of the latest version again changes nothing;
other files make the next version, and the runs of the old one stay with it. The reference of
the problem (its `ref_kernel`) is registered as a candidate, the lineage `<task>_reference`,
so that the tournament times it beside the others and the leaderboard has its speedups.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from harness.candidates import read_candidate_file, read_manifest
from harness.config import CANDIDATES_DIR, get_settings
from harness.errors import HarnessError
from harness.store.models import Blob, Run, TaskFile, TaskVersion
from harness.store.revisions import (
    RegisterOutcome,
    reference_lineage_name,
    reference_revision_id,
    register_revision,
)
from harness.tasks import TaskSpec, load_task, use_task
from harness.tasks.problem import (
    ProblemFiles,
    check_task_name,
    default_task_name,
    load_problem,
    read_problem,
)
from harness.tasks.spec import builtin_tasks, use_task_error

REFERENCE_CANDIDATE = '''"""The reference of task {task} as a candidate: its ref_kernel, called as a submission would be.
Registered by `harness task add`; timed beside the other revisions for the speedups."""

from reference import ref_kernel


def custom_kernel(data):
    return ref_kernel(data)
'''


@dataclass(frozen=True)
class AddOutcome:
    version: TaskVersion
    created: bool
    reference: RegisterOutcome

    def describe(self) -> str:
        version = self.version
        if not self.created:
            return f"unchanged: these files are already task {version.name} version {version.version}"
        names = ", ".join(f.name for f in version.files)
        return f"added task {version.name} version {version.version} ({names}; files {version.files_sha256[:12]})"


def add_task(session: Session, directory: Path, name: str | None = None) -> AddOutcome:
    """Store the problem directory as the task's next version, unless its files are the latest
    version's; register the reference candidate. HarnessError (nothing written) for a directory
    that is not a problem, or a name taken by a built-in task."""
    directory = Path(directory)
    name = check_task_name(name or default_task_name(directory))
    if name in builtin_tasks():
        raise HarnessError(f"task {name!r} is built in: add the directory under another --name")
    problem = read_problem(directory)
    latest = latest_version(session, name)
    if latest is not None and latest.files_sha256 == problem.sha256:
        return AddOutcome(latest, created=False, reference=_register_reference(session, name))
    version = TaskVersion(
        name=name,
        version=(latest.version if latest is not None else 0) + 1,
        files_sha256=problem.sha256,
        source=str(directory.resolve()),
    )
    for file_name, content in sorted(problem.files.items()):
        sha256 = hashlib.sha256(content).hexdigest()
        if session.get(Blob, sha256) is None:
            session.add(Blob(sha256=sha256, content=content, size=len(content)))
        version.files.append(TaskFile(name=file_name, sha256=sha256))
    session.add(version)
    session.flush()
    _use(version)
    return AddOutcome(version, created=True, reference=_register_reference(session, name))


def _register_reference(session: Session, name: str) -> RegisterOutcome:
    code = REFERENCE_CANDIDATE.format(task=name).encode()
    return register_revision(
        session,
        code,
        f"{name}_reference.py",
        lineage=f"{name}_reference",
        task=name,
        message=f"the reference of task {name} (ref_kernel)",
        author="harness task add",
    )


def register_missing_reference(session: Session, task: str) -> RegisterOutcome | None:
    """The task's reference candidate registered when the store has none (a fresh store before
    `harness seed`): a built-in task's `reference_candidate` file from candidates/, with the
    message and author that the seed manifest gives it, so that `harness seed` finds it there.
    None when the store has it already, or the task names no such file."""
    spec = load_task(task)
    if reference_revision_id(session, task) is not None or not spec.reference_candidate:
        return None
    path = CANDIDATES_DIR / spec.reference_candidate
    if not path.is_file():
        return None
    lineage = reference_lineage_name(task)
    message, author = f"the reference of task {task}", "harness"
    manifest = CANDIDATES_DIR / "manifest.yml"
    if manifest.is_file():
        for listed in read_manifest(manifest).lineages:
            entry = next((e for e in listed.revisions if e.file == spec.reference_candidate), None)
            if listed.name == lineage and entry is not None:
                message, author = entry.message, listed.author
    return register_revision(
        session,
        read_candidate_file(path),
        path.name,
        lineage=lineage,
        task=task,
        message=message,
        author=author,
    )


def latest_version(session: Session, name: str) -> TaskVersion | None:
    return session.scalar(
        select(TaskVersion)
        .where(TaskVersion.name == name)
        .options(selectinload(TaskVersion.files).selectinload(TaskFile.blob))
        .order_by(TaskVersion.version.desc())
        .limit(1)
    )


def task_versions(session: Session, name: str | None = None) -> list[TaskVersion]:
    query = (
        select(TaskVersion)
        .options(selectinload(TaskVersion.files))
        .order_by(TaskVersion.name, TaskVersion.version)
    )
    if name is not None:
        query = query.where(TaskVersion.name == name)
    return list(session.scalars(query))


def runs_per_version(session: Session, name: str) -> dict[int, int]:
    """Finished runs per task version."""
    rows = session.execute(
        select(Run.task_version, func.count())
        .where(Run.task == name, Run.state == "done")
        .group_by(Run.task_version)
    )
    return {version: count for version, count in rows}


def use_stored_tasks(session: Session) -> None:
    """Write each stored task's latest version into the cache (once per version) and make it
    known to harness.tasks.load_task in this process."""
    latest = (
        select(TaskVersion.name, func.max(TaskVersion.version).label("version"))
        .group_by(TaskVersion.name)
        .subquery()
    )
    versions = session.scalars(
        select(TaskVersion)
        .join(latest, (TaskVersion.name == latest.c.name) & (TaskVersion.version == latest.c.version))
        .options(selectinload(TaskVersion.files).selectinload(TaskFile.blob))
    )
    for version in versions:
        try:
            _use(version)
        except HarnessError as exc:  # one unreadable task leaves the others and the store usable
            use_task_error(
                version.name, f"task {version.name} version {version.version} cannot be used: {exc}"
            )


def _use(version: TaskVersion) -> TaskSpec:
    directory = Path(get_settings().cache_dir, "tasks", version.files_sha256)
    files = ProblemFiles({f.name: f.blob.content for f in version.files})
    if files.sha256 != version.files_sha256:
        raise HarnessError(
            f"task {version.name} version {version.version}: its stored files do not match their hash"
        )
    files.write_to(directory)
    spec = load_problem(directory, version.name, version=version.version, files_sha256=version.files_sha256)
    use_task(spec)
    return spec
