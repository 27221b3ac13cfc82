"""The store's tables as SQLAlchemy 2 typed models. Alembic (db/migrations) owns the schema:
change a model here, then add a migration.

- `Blob`: the exact bytes of a file, keyed by sha256 (content addressing).
- `Lineage`: one named candidate; `Revision`: one submitted version of it.
- `Run`: one evaluation of a revision for a task, in one mode, in one environment.
- `ShapeResult`: per shape of a run: the check verdict and, when timed, the timing statistics.
- `Secret`: values the candidate must never see (the leaderboard seed).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Optional

from sqlalchemy import JSON, ForeignKey, LargeBinary, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def utcnow() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class Blob(Base):
    __tablename__ = "blobs"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    content: Mapped[bytes] = mapped_column(LargeBinary)
    size: Mapped[int]


class Lineage(Base):
    __tablename__ = "lineages"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    revisions: Mapped[list[Revision]] = relationship(back_populates="lineage", order_by="Revision.number")


class Revision(Base):
    """A submission: one file's bytes in a lineage, with the facts parsed from it."""

    __tablename__ = "revisions"
    __table_args__ = (UniqueConstraint("lineage_id", "number"),)

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    lineage_id: Mapped[int] = mapped_column(ForeignKey("lineages.id"))
    number: Mapped[int]
    parent_id: Mapped[Optional[int]] = mapped_column(ForeignKey("revisions.id"))
    task: Mapped[str] = mapped_column(String(100))
    code_sha256: Mapped[str] = mapped_column(ForeignKey("blobs.sha256"))
    filename: Mapped[str] = mapped_column(String(500))
    message: Mapped[str] = mapped_column(Text, default="")
    author: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # Parsed facts (harness.candidates.CandidateFacts): directives such as
    # {"leaderboard": "conv2d_v2", "gpu": "B200"}, the entry point name or None,
    # static flags such as ["library_delegation", "tf32_switch"], a syntax error message or None.
    directives: Mapped[dict[str, Any]] = mapped_column(default=dict)
    entry_point: Mapped[Optional[str]] = mapped_column(String(100))
    flags: Mapped[list[Any]] = mapped_column(default=list)
    syntax_error: Mapped[Optional[str]] = mapped_column(Text)

    lineage: Mapped[Lineage] = relationship(back_populates="revisions")
    blob: Mapped[Blob] = relationship()
    parent: Mapped[Optional[Revision]] = relationship(remote_side=[id])
    runs: Mapped[list[Run]] = relationship(back_populates="revision")


class Run(Base):
    """One evaluation: (revision, task, mode, environment) is unique; `state` is `claimed` while a
    worker holds it and `done` once its result is complete (a claimed run is never a result)."""

    __tablename__ = "runs"
    __table_args__ = (UniqueConstraint("revision_id", "task", "mode", "env_key"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    revision_id: Mapped[int] = mapped_column(ForeignKey("revisions.id"))
    task: Mapped[str] = mapped_column(String(100))
    mode: Mapped[str] = mapped_column(String(20))  # test | benchmark | leaderboard
    env_key: Mapped[str] = mapped_column(String(64))
    device: Mapped[str] = mapped_column(String(20))  # cpu | cuda
    device_name: Mapped[str] = mapped_column(String(200), default="")
    environment: Mapped[dict[str, Any]] = mapped_column(default=dict)
    state: Mapped[str] = mapped_column(String(20), default="claimed")  # claimed | done
    claimed_by: Mapped[str] = mapped_column(String(200), default="")
    claim_expires_at: Mapped[Optional[datetime]]
    status: Mapped[Optional[str]] = mapped_column(String(30))
    reason: Mapped[str] = mapped_column(Text, default="")
    compile_s: Mapped[Optional[float]]
    wall_s: Mapped[Optional[float]]
    score_ms: Mapped[Optional[float]]
    details: Mapped[dict[str, Any]] = mapped_column(default=dict)
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[Optional[datetime]]

    revision: Mapped[Revision] = relationship(back_populates="runs")
    shapes: Mapped[list[ShapeResult]] = relationship(
        back_populates="run", order_by="ShapeResult.index", cascade="all, delete-orphan"
    )


class ShapeResult(Base):
    """One shape of a run: the check (passed, mismatches, errors) and, when timed, the statistics
    of the per-call times in milliseconds (`times_ms` keeps every call for significance tests)."""

    __tablename__ = "shape_results"
    __table_args__ = (UniqueConstraint("run_id", "set_name", "index"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    set_name: Mapped[str] = mapped_column(String(20))  # tests | benchmarks | smoke
    index: Mapped[int]
    shape: Mapped[dict[str, Any]] = mapped_column(default=dict)  # e.g. {"size": 32, "kernelsize": 4, ...}
    passed: Mapped[Optional[bool]]
    check: Mapped[dict[str, Any]] = mapped_column(default=dict)  # mismatches, rel_l2, max_abs, first few
    runs: Mapped[Optional[int]]
    mean_ms: Mapped[Optional[float]]
    median_ms: Mapped[Optional[float]]
    std_ms: Mapped[Optional[float]]
    err_ms: Mapped[Optional[float]]
    min_ms: Mapped[Optional[float]]
    max_ms: Mapped[Optional[float]]
    times_ms: Mapped[list[Any]] = mapped_column(default=list)

    run: Mapped[Run] = relationship(back_populates="shapes")


class Secret(Base):
    __tablename__ = "secrets"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    value: Mapped[str] = mapped_column(Text)
