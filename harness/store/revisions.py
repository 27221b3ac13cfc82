"""Registering revisions (the reports' submissions) and reading them back.

A revision's bytes live in the content-addressed blob table; the revision row holds where it
sits (lineage, number, parent), what it is for (task) and what parsing found (directives, entry
point, flags). Registration checks everything before it adds anything, so a rejected file leaves
the session as it was.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import func, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload

from harness.candidates import SeedRevision, check_candidate_content, parse_candidate
from harness.errors import HarnessError
from harness.store.models import Blob, Lineage, Revision, Secret
from harness.tasks import known_tasks, load_task

DEFAULT_TASK = "conv2d_v2"
_LINEAGE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_MAX_NAME = 200  # Lineage.name and Revision.author are String(200)
_MAX_ID = 2**63 - 1  # the largest integer that SQLite and PostgreSQL's bigint hold


@dataclass(frozen=True)
class RegisterOutcome:
    """`created` is False when the lineage already held these bytes; `revision` is then the
    revision that has them."""

    revision: Revision
    created: bool

    def describe(self) -> str:
        """One line saying what registration did (its lineage must be loaded: call it in the
        session)."""
        revision = self.revision
        if not self.created:
            return f"unchanged: these bytes are already submission {revision.id} ({revision.label})"
        parent = "no parent" if revision.parent_id is None else f"parent {revision.parent_id}"
        return f"registered submission {revision.id}: {revision.label} ({parent})"


def register_revision(
    session: Session,
    content: bytes,
    filename: str,
    *,
    lineage: str | None = None,
    parent_id: int | None = None,
    submission_id: int | None = None,
    message: str = "",
    author: str = "",
    task: str | None = None,
) -> RegisterOutcome:
    """Add `content` as the next revision of `lineage` (default: the parent's lineage when
    `parent_id` is given, else the file name's stem, or `STEM-TASK` when the stem's lineage is
    another task's).

    Defaults: parent = the lineage's latest revision; task = the `#!POPCORN leaderboard`
    directive, else the parent's or the lineage's, else conv2d_v2 (`_place`). `submission_id`
    keeps an external id. Bytes already in the lineage register nothing. HarnessError (nothing
    added) for bad content, a bad lineage name, an unknown task or parent, a taken id, or a
    task, directive, parent and lineage that disagree.
    """
    basename = Path(filename).name
    check_candidate_content(content, basename or filename)
    facts = parse_candidate(content)
    parent = None
    if parent_id is not None:
        parent = session.get(Revision, parent_id) if 0 < parent_id <= _MAX_ID else None
        if parent is None:
            raise HarnessError(f"unknown parent: there is no submission {parent_id}")
    lineage_name, lineage_row, task = _place(session, basename, facts.directives, lineage, parent, task)
    if len(author) > _MAX_NAME:
        raise HarnessError(f"author name is longer than {_MAX_NAME} characters")
    if task not in known_tasks():
        raise HarnessError(f"unknown task {task!r} (known: {', '.join(known_tasks()) or 'none'})")
    if submission_id is not None and not 0 < submission_id <= _MAX_ID:
        raise HarnessError(f"submission id must be an integer from 1 to {_MAX_ID}, not {submission_id}")

    sha256 = hashlib.sha256(content).hexdigest()
    if lineage_row is not None:
        existing = session.scalar(
            select(Revision)
            .where(Revision.lineage_id == lineage_row.id, Revision.code_sha256 == sha256)
            .order_by(Revision.number)
            .limit(1)
        )
        if existing is not None:
            return RegisterOutcome(existing, created=False)
    if submission_id is not None:
        taken = session.get(Revision, submission_id)
        if taken is not None:
            raise HarnessError(f"submission id {submission_id} is already taken ({taken.label})")

    if lineage_row is None:
        lineage_row = Lineage(name=lineage_name)
        session.add(lineage_row)
        session.flush()
        latest = None
    else:
        latest = session.scalar(
            select(Revision)
            .where(Revision.lineage_id == lineage_row.id)
            .order_by(Revision.number.desc())
            .limit(1)
        )
    if parent_id is None and latest is not None:
        parent_id = latest.id
    if session.get(Blob, sha256) is None:
        session.add(Blob(sha256=sha256, content=content, size=len(content)))
    revision = Revision(
        id=submission_id,
        lineage=lineage_row,
        number=(latest.number if latest is not None else 0) + 1,
        parent_id=parent_id,
        task=task,
        code_sha256=sha256,
        filename=basename,
        message=message,
        author=author,
        directives=dict(facts.directives),
        entry_point=facts.entry_point,
        flags=list(facts.flags),
        syntax_error=facts.syntax_error,
    )
    session.add(revision)
    session.flush()
    if submission_id is not None:
        _advance_id_sequence(session)
    return RegisterOutcome(revision, created=True)


def register_seeds(session: Session, seeds: list[SeedRevision]) -> list[RegisterOutcome]:
    """Register the revisions of a seed manifest (harness.candidates.read_seeds), in order."""
    outcomes: list[RegisterOutcome] = []
    for seed in seeds:
        outcome = register_revision(
            session,
            seed.content,
            seed.filename,
            lineage=seed.lineage,
            parent_id=outcomes[-1].revision.id if seed.follows_previous else None,
            submission_id=seed.submission_id,
            message=seed.message,
            author=seed.author,
            task=seed.task,
        )
        outcomes.append(outcome)
    return outcomes


def get_revision(session: Session, revision_id: int) -> Revision:
    revision = None
    if 0 < revision_id <= _MAX_ID:
        revision = session.get(Revision, revision_id, options=[selectinload(Revision.lineage)])
    if revision is None:
        raise HarnessError(f"there is no submission {revision_id}")
    return revision


def list_revisions(session: Session, task: str | None = None, lineage: str | None = None) -> list[Revision]:
    """Revisions in the order they were registered, their lineages loaded."""
    query = (
        select(Revision).options(selectinload(Revision.lineage)).order_by(Revision.created_at, Revision.id)
    )
    if task is not None:
        if task not in known_tasks():
            raise HarnessError(f"unknown task {task!r} (known: {', '.join(known_tasks()) or 'none'})")
        query = query.where(Revision.task == task)
    if lineage is not None:
        lineage_id = session.scalar(select(Lineage.id).where(Lineage.name == lineage))
        if lineage_id is None:
            raise HarnessError(f"unknown lineage {lineage!r}")
        query = query.where(Revision.lineage_id == lineage_id)
    return list(session.scalars(query))


def revision_code(revision: Revision) -> bytes:
    """The exact bytes registered (whitespace and a missing final newline kept)."""
    return revision.blob.content


def get_or_create_secret(session: Session, name: str) -> str:
    """A value kept in the store and never shown to candidates (a random 63-bit integer)."""
    secret = session.get(Secret, name)
    if secret is not None:
        return secret.value
    try:
        with session.begin_nested():  # another writer may create it at the same moment
            secret = Secret(name=name, value=str(secrets.randbits(63)))
            session.add(secret)
    except IntegrityError:
        secret = session.get(Secret, name, populate_existing=True)
    return secret.value


def _place(
    session: Session,
    basename: str,
    directives: dict[str, str],
    lineage: str | None,
    parent: Revision | None,
    task: str | None,
) -> tuple[str, Lineage | None, str]:
    """The lineage (its name and row, None when new) and the task of a new revision. A lineage
    holds one task's revisions, and a child has its parent's task: the task is `--task`, else the
    file's `#!POPCORN leaderboard` directive, else the parent's, else the lineage's, else
    conv2d_v2. The default lineage is the file name's stem, or `STEM-TASK` when the stem's lineage
    holds another task's revisions (GPU MODE's solution files of every task are named alike).
    Any two of these that disagree: HarnessError, nothing added. The directive names a GPU MODE
    leaderboard: its problem directory's name (`vectorsum_py`) is the task added from it
    (`vectorsum`), and one that names no task known here does not contradict `--task` (GPU MODE's
    own submission.py files name their hosted leaderboard, which `harness task add` may have
    added under another name)."""
    directive = directives.get("leaderboard")
    known = known_tasks()
    if directive and directive not in known and directive.removesuffix("_py") in known:
        directive = directive.removesuffix("_py")
    if task and directive and directive not in known:
        directive = None
    if task and directive and task != directive:
        raise HarnessError(
            f"--task {task} conflicts with the file's `#!POPCORN leaderboard {directive}` directive: "
            "drop --task or change the directive"
        )
    task = task or directive
    if parent is not None:
        if task and task != parent.task:
            raise HarnessError(
                f"parent {parent.id} is a revision of task {parent.task}, not {task}: "
                "a child has its parent's task"
            )
        task = parent.task
    if lineage is not None:
        _check_lineage_name(lineage, given=True)
        row = session.scalar(select(Lineage).where(Lineage.name == lineage))
        held = _lineage_task(session, row)
        if held is not None and task and task != held:
            raise HarnessError(
                f"lineage {lineage!r} holds revisions of task {held}, not {task}: name another lineage"
            )
        return lineage, row, task or held or DEFAULT_TASK
    if parent is not None:
        return parent.lineage.name, parent.lineage, task
    name = Path(basename).stem
    _check_lineage_name(name, given=False)
    row = session.scalar(select(Lineage).where(Lineage.name == name))
    held = _lineage_task(session, row)
    task = task or held or DEFAULT_TASK
    if held is None or held == task:
        return name, row, task
    name = f"{name}-{task}"
    _check_lineage_name(name, given=False)
    row = session.scalar(select(Lineage).where(Lineage.name == name))
    held = _lineage_task(session, row)
    if held is not None and held != task:
        raise HarnessError(
            f"lineage {name!r} holds revisions of task {held}, not {task}: name a lineage with --lineage"
        )
    return name, row, task


def _lineage_task(session: Session, lineage: Lineage | None) -> str | None:
    """The task of a lineage's latest revision (None: no such lineage, or no revision yet)."""
    if lineage is None:
        return None
    return session.scalar(
        select(Revision.task)
        .where(Revision.lineage_id == lineage.id)
        .order_by(Revision.number.desc())
        .limit(1)
    )


def _check_lineage_name(name: str, *, given: bool) -> None:
    if _LINEAGE_NAME.fullmatch(name) and len(name) <= _MAX_NAME:
        return
    hint = "" if given else " (name the lineage with --lineage)"
    raise HarnessError(
        f"{name!r} is not a valid lineage name: up to {_MAX_NAME} letters, digits, '_', '-', '.', "
        f"starting with a letter or digit{hint}"
    )


def _advance_id_sequence(session: Session) -> None:
    """After an explicit id, move PostgreSQL's id sequence past it so that generated ids do not
    collide with it. (SQLite's INTEGER PRIMARY KEY already continues after the largest id.)"""
    if session.get_bind().dialect.name == "postgresql":
        largest = session.scalar(select(func.max(Revision.id)))
        session.execute(
            text("SELECT setval(pg_get_serial_sequence('revisions', 'id'), :largest)"), {"largest": largest}
        )


def reference_lineage_name(task: str) -> str:
    """The lineage of the task's reference candidate (named after its file, as `harness seed`
    registers it)."""
    spec = load_task(task)
    return Path(spec.reference_candidate).stem if spec.reference_candidate else f"{task}_reference"


def reference_revision_id(session: Session, task: str) -> int | None:
    """The task's reference revision (the latest of its lineage), when it is registered."""
    return session.scalar(
        select(Revision.id)
        .join(Revision.lineage)
        .where(Lineage.name == reference_lineage_name(task), Revision.task == task)
        .order_by(Revision.number.desc())
        .limit(1)
    )


def reference_revision_ids(session: Session, task: str) -> list[int]:
    """Every revision of the task's reference lineage, oldest first."""
    return list(
        session.scalars(
            select(Revision.id)
            .join(Revision.lineage)
            .where(Lineage.name == reference_lineage_name(task), Revision.task == task)
            .order_by(Revision.number)
        )
    )
