"""The store's tables as SQLAlchemy 2 typed models. Alembic (db/migrations) owns the schema:
every change to a model here is a new migration in db/migrations/versions/, numbered after the
last one; tests/test_store.py fails while the migrations and the models differ.

- `Blob`: the exact bytes of a file, keyed by sha256 (content addressing).
- `Lineage`: one named candidate; `Revision`: one submitted version of it (a submission, as the
  CLI calls it).
- `Run`: one evaluation of a revision for a task (and task version), of one run kind, in one
  environment.
- `ShapeResult`: per shape of a run: the check, both verdicts and, when timed, the timing
  statistics.
- `TaskVersion`, `TaskFile`: tasks added from GPU MODE problem directories, by version.
- `Secret`: values the candidate must never see (the leaderboard seed).
- `Experiment`, `ExperimentStep`: evolution experiments and their generations (harness.evolve).

Run kinds (the column is `Run.mode`; harness.plan.phases): `test` (`harness test` and the
tournament's checks, public seeds), `test-leaderboard` (`harness test --mode leaderboard`: secret
seeds, checks only), `benchmark` (timed, public seeds) and `leaderboard` (timed with a fresh
secret seed per call, every timed output checked).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, TypeAdapter
from sqlalchemy import JSON, ForeignKey, LargeBinary, MetaData, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import TypeDecorator

from harness.judge import JUDGE_VERSION
from harness.verdicts import Accuracy, Verdict, Verdicts
from harness.wire import ShapeCheck


def utcnow() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


class TypedJSON(TypeDecorator[Any]):
    """A value of a pydantic type (`annotation`: a model, or a list of them) kept as JSON (every
    field, None included): written from the type, read back as it, so that nothing reads a stored
    result as a bag."""

    impl = JSON
    cache_ok = True

    def __init__(self, annotation: Any) -> None:
        super().__init__()
        self.annotation = annotation
        self.adapter: TypeAdapter[Any] = TypeAdapter(annotation)

    def process_bind_param(self, value: Any, dialect: Any) -> Any:
        return None if value is None else self.adapter.dump_python(value, mode="json")

    def process_result_value(self, value: Any, dialect: Any) -> Any:
        return None if value is None else self.adapter.validate_python(value)


class RetimedShape(BaseModel):
    """One timed shape of a `Retiming`: its parameters (with the public seed), every timed call's
    time and its blocks' means (scoring.block_means; [] in rows written before blocks were kept,
    or for a shape timed in one block)."""

    model_config = ConfigDict(extra="forbid")

    shape: dict[str, Any]
    times_ms: list[float]
    means_ms: list[float] = []


class Base(DeclarativeBase):
    # Named constraints, so that a later migration can drop or alter them (SQLite batch mode
    # recreates tables and needs the names).
    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(table_name)s_%(column_0_N_name)s",
            "uq": "uq_%(table_name)s_%(column_0_N_name)s",
            "ck": "ck_%(table_name)s_%(constraint_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, list[Any]: JSON}


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
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("revisions.id"))
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
    entry_point: Mapped[str | None] = mapped_column(String(100))
    flags: Mapped[list[Any]] = mapped_column(default=list)
    syntax_error: Mapped[str | None] = mapped_column(Text)

    lineage: Mapped[Lineage] = relationship(back_populates="revisions")
    blob: Mapped[Blob] = relationship()
    parent: Mapped[Revision | None] = relationship(remote_side=[id])
    runs: Mapped[list[Run]] = relationship(back_populates="revision")

    @property
    def label(self) -> str:
        """The name every output gives a revision, "LINEAGE rN" (it reads the lineage: in a session)."""
        return f"{self.lineage.name} r{self.number}"


class TaskVersion(Base):
    """One version of a task added from a GPU MODE problem directory (`harness task add`): its
    files (TaskFile, content-addressed in `blobs`) and their joint hash. Runs keep the version
    they were judged by; a built-in task (harness/tasks/) is version 1 and not stored here."""

    __tablename__ = "task_versions"
    __table_args__ = (UniqueConstraint("name", "version"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100))
    version: Mapped[int]
    files_sha256: Mapped[str] = mapped_column(String(64))
    source: Mapped[str] = mapped_column(Text, default="")  # the directory it was added from
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    files: Mapped[list[TaskFile]] = relationship(order_by="TaskFile.name", cascade="all, delete-orphan")


class TaskFile(Base):
    __tablename__ = "task_files"
    __table_args__ = (UniqueConstraint("task_version_id", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    task_version_id: Mapped[int] = mapped_column(ForeignKey("task_versions.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(100))  # task.yml, reference.py, task.py, utils.py
    sha256: Mapped[str] = mapped_column(ForeignKey("blobs.sha256"))

    blob: Mapped[Blob] = relationship()


class Run(Base):
    """One evaluation: (revision, task, task version, run kind, environment) is unique; `state`
    is `claimed` while a worker holds it and `done` once its result is complete (a claimed run is
    never a result)."""

    __tablename__ = "runs"
    __table_args__ = (UniqueConstraint("revision_id", "task", "task_version", "mode", "env_key"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    revision_id: Mapped[int] = mapped_column(ForeignKey("revisions.id"))
    task: Mapped[str] = mapped_column(String(100))
    # the task's files it was judged by (TaskVersion.version; 1 for a built-in task)
    task_version: Mapped[int] = mapped_column(default=1, server_default="1")
    # the judge that produced it (harness.judge.JUDGE_VERSION; 1 for rows written before it was
    # kept): an older judge's result is never ranked beside a newer one, and is run again
    judge_version: Mapped[int] = mapped_column(default=JUDGE_VERSION, server_default="1")
    mode: Mapped[str] = mapped_column(
        String(20)
    )  # the run kind: test | test-leaderboard | benchmark | leaderboard
    env_key: Mapped[str] = mapped_column(String(64))
    device: Mapped[str] = mapped_column(String(20))  # cpu | cuda
    device_name: Mapped[str] = mapped_column(String(200), default="")
    environment: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # claimed | done | partial (an untimed run interrupted with finished shapes: resumed by the
    # next claim, never a result; harness.store.runs)
    state: Mapped[str] = mapped_column(String(20), default="claimed")
    claimed_by: Mapped[str] = mapped_column(String(200), default="")
    claim_expires_at: Mapped[datetime | None]
    status: Mapped[str | None] = mapped_column(String(30))
    reason: Mapped[str] = mapped_column(Text, default="")
    compile_s: Mapped[float | None]  # the candidate's import in the child (Evaluation.compile_s)
    wall_s: Mapped[float | None]
    score_ms: Mapped[float | None]
    details: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # The interleaved run (one job: revisions evaluated together, shape by shape) this result
    # came from; a faster/slower verdict compares timings of one batch only (harness.standing).
    batch: Mapped[str | None] = mapped_column(String(32), index=True)
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None]

    revision: Mapped[Revision] = relationship(back_populates="runs")
    shapes: Mapped[list[ShapeResult]] = relationship(
        back_populates="run", order_by="ShapeResult.index", cascade="all, delete-orphan"
    )


class ShapeResult(Base):
    """One shape of a run: its status, reason and first call's seconds (`call_s`), the check
    (`check`: harness.wire.ShapeCheck, the comparison's figures, autotune configs, timing record
    and passes) and, when timed, the statistics of the per-call times in milliseconds (`times_ms`
    keeps every call for significance tests)."""

    __tablename__ = "shape_results"
    __table_args__ = (UniqueConstraint("run_id", "set_name", "index"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    set_name: Mapped[str] = mapped_column(String(20))  # tests | benchmarks | smoke
    index: Mapped[int]
    shape: Mapped[dict[str, Any]] = mapped_column(default=dict)  # e.g. {"size": 32, "kernelsize": 4, ...}
    # harness.wire.ShapeStatus; reason in words; the shape's first checked call, in seconds
    status: Mapped[str] = mapped_column(String(30), default="not_run", server_default="not_run")
    reason: Mapped[str] = mapped_column(Text, default="", server_default="")
    call_s: Mapped[float | None]
    passed: Mapped[bool | None]
    check: Mapped[ShapeCheck] = mapped_column(TypedJSON(ShapeCheck), default=ShapeCheck)
    runs: Mapped[int | None]
    mean_ms: Mapped[float | None]
    median_ms: Mapped[float | None]
    std_ms: Mapped[float | None]
    err_ms: Mapped[float | None]
    min_ms: Mapped[float | None]
    max_ms: Mapped[float | None]
    times_ms: Mapped[list[Any]] = mapped_column(default=list)
    # Both verdicts (harness.checking) over every compared output of the shape, with the accuracy
    # figures against the exact answer; None in a shape that produced no output to compare (and
    # in rows written before the verdicts existed).
    gpumode_status: Mapped[str | None] = mapped_column(String(10))  # pass | fail
    gpumode_failures: Mapped[int | None]
    gpumode_reason: Mapped[str] = mapped_column(Text, default="")
    accurate_status: Mapped[str | None] = mapped_column(String(10))  # pass | fail
    accurate_failures: Mapped[int | None]
    accurate_reason: Mapped[str] = mapped_column(Text, default="")
    rel_l2: Mapped[float | None]
    max_err_over_scale: Mapped[float | None]

    run: Mapped[Run] = relationship(back_populates="shapes")

    @property
    def verdicts(self) -> Verdicts | None:
        if self.gpumode_status is None or self.accurate_status is None:
            return None
        return Verdicts(
            gpumode=Verdict(
                status=self.gpumode_status, failures=self.gpumode_failures or 0, reason=self.gpumode_reason
            ),
            accurate=Verdict(
                status=self.accurate_status, failures=self.accurate_failures or 0, reason=self.accurate_reason
            ),
        )

    @property
    def accuracy(self) -> Accuracy:
        return Accuracy(rel_l2=self.rel_l2, max_err_over_scale=self.max_err_over_scale)

    @property
    def timing_flags(self) -> list[str]:
        """The timing's flags (harness.timing), kept in `check.timing`; [] when untimed."""
        return [] if self.check.timing is None else list(self.check.timing.flags)

    @property
    def warmup_s(self) -> float:
        """The timing warm-up's seconds (ShapeOutcome.compile_s, kept in `check.timing`), 0 when
        untimed; the candidate's import is the run's `compile_s`."""
        return 0.0 if self.check.timing is None else self.check.timing.compile_s


class Retiming(Base):
    """A revision timed again in an interleaved run beside revisions it is compared with (an
    evolution step re-times the parent beside its children), without a run of its own: the
    leaderboard ranks runs; a comparison reads the per-call times of one batch."""

    __tablename__ = "retimings"
    __table_args__ = (UniqueConstraint("batch", "revision_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    batch: Mapped[str] = mapped_column(String(32), index=True)
    revision_id: Mapped[int] = mapped_column(ForeignKey("revisions.id"))
    task: Mapped[str] = mapped_column(String(100))
    mode: Mapped[str] = mapped_column(String(20))
    env_key: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(30))
    score_ms: Mapped[float | None]
    judge_version: Mapped[int] = mapped_column(default=JUDGE_VERSION, server_default="1")  # as Run's
    # per timed shape, in the run's order: its parameters, per-call times and block means
    shapes: Mapped[list[RetimedShape]] = mapped_column(TypedJSON(list[RetimedShape]), default=list)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Secret(Base):
    __tablename__ = "secrets"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


# --- evolution (issue 6): experiments and their steps ----------------------------------------


class Experiment(Base):
    """One `harness evolve` run: its settings (json: generations, population, seed, device,
    proposer, time limit, where it started), where it stands, and its steps.

    `status`: `running` while it runs (also what an experiment killed with -9 is left in),
    `interrupted` (Ctrl-C), `finished`, `stopped` (it could not go on: `reason` says why),
    `failed` (every generation ended without a child to evaluate: `reason` says how).
    """

    __tablename__ = "experiments"

    id: Mapped[int] = mapped_column(primary_key=True)
    task: Mapped[str] = mapped_column(String(100))
    lineage_id: Mapped[int] = mapped_column(ForeignKey("lineages.id"))
    proposer: Mapped[str] = mapped_column(String(200))
    settings: Mapped[dict[str, Any]] = mapped_column(default=dict)
    status: Mapped[str] = mapped_column(String(20), default="running")
    reason: Mapped[str] = mapped_column(Text, default="")
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None]

    lineage: Mapped[Lineage] = relationship()
    steps: Mapped[list[ExperimentStep]] = relationship(
        back_populates="experiment", order_by="ExperimentStep.generation", cascade="all, delete-orphan"
    )


class ExperimentStep(Base):
    """One generation of an experiment: the parent, the prompt as the proposer read it, the reply
    as it came back, what it cost, and the outcome.

    `status` is the child's evaluation status (`pass`, `wrong_answer`, ...) or why there is no
    child to evaluate (`proposer_failed`, `proposer_timeout`, `edit_failed`, `unchanged`,
    `duplicate`); `proposing` while the proposer is asked, `evaluating` while the child is
    registered but its result not recorded yet. `finished_at` is set once the step is complete: a
    resumed experiment asks again or completes every step without it.

    With `--parallel K` steps overlap: `sees` is how many steps had landed (finished) when this
    one chose its parent (it chose among those steps' children only), `arrival` the order in which
    this one landed. `compared_in` names the interleaved run (a `Run.batch`) in which the child
    and its parent were timed together; `vs_parent` comes from that run only, and
    `parent_score_ms` is the parent's score there.
    """

    __tablename__ = "experiment_steps"
    __table_args__ = (UniqueConstraint("experiment_id", "generation"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    experiment_id: Mapped[int] = mapped_column(ForeignKey("experiments.id", ondelete="CASCADE"))
    generation: Mapped[int]
    parent_id: Mapped[int] = mapped_column(ForeignKey("revisions.id"))
    template: Mapped[str] = mapped_column(String(50))  # improve | fix
    prompt: Mapped[str] = mapped_column(Text)
    reply: Mapped[str] = mapped_column(Text, default="")
    proposer: Mapped[str] = mapped_column(String(200))
    summary: Mapped[str] = mapped_column(Text, default="")
    elapsed_s: Mapped[float | None]  # the proposer's wall time
    tokens: Mapped[int | None]
    cost: Mapped[float | None]
    meta: Mapped[dict[str, Any]] = mapped_column(default=dict)  # other HARNESS-META keys
    child_id: Mapped[int | None] = mapped_column(ForeignKey("revisions.id"))
    status: Mapped[str] = mapped_column(String(30))
    reason: Mapped[str] = mapped_column(Text, default="")
    score_ms: Mapped[float | None]  # the child's score, when it passed and was timed
    vs_parent: Mapped[str | None] = mapped_column(String(30))  # faster | slower | same within noise
    compared_in: Mapped[str | None] = mapped_column(String(32))
    parent_score_ms: Mapped[float | None]
    stderr: Mapped[str] = mapped_column(Text, default="")  # the proposer's, its tail
    sees: Mapped[int] = mapped_column(default=0)
    arrival: Mapped[int | None]
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None]

    experiment: Mapped[Experiment] = relationship(back_populates="steps")
    parent: Mapped[Revision] = relationship(foreign_keys=[parent_id])
    child: Mapped[Revision | None] = relationship(foreign_keys=[child_id])
