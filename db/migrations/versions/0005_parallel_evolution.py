"""parallel evolution

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 23:50:00

Issue 19: a run keeps the interleaved run (batch) it was timed in, so that a faster/slower
verdict compares timings of one run only; `retimings` keeps a revision timed again beside others
(an evolution step's parent beside its children); an experiment step keeps the proposer's
stderr, the arrivals it saw when it chose its parent and its own arrival, and the run its
comparison with its parent came from. Steps written before: each saw every earlier generation
and arrived in generation order (the loop was serial).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

STEP_COLUMNS = (
    ("compared_in", lambda: sa.Column("compared_in", sa.String(length=32), nullable=True)),
    ("parent_score_ms", lambda: sa.Column("parent_score_ms", sa.Double(), nullable=True)),
    ("stderr", lambda: sa.Column("stderr", sa.Text(), nullable=False, server_default="")),
    ("sees", lambda: sa.Column("sees", sa.Integer(), nullable=False, server_default="0")),
    ("arrival", lambda: sa.Column("arrival", sa.Integer(), nullable=True)),
)


def upgrade() -> None:
    op.create_table(
        "retimings",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("batch", sa.String(length=32), nullable=False),
        sa.Column("revision_id", sa.Integer(), nullable=False),
        sa.Column("task", sa.String(length=100), nullable=False),
        sa.Column("mode", sa.String(length=20), nullable=False),
        sa.Column("env_key", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=30), nullable=False),
        sa.Column("score_ms", sa.Double(), nullable=True),
        sa.Column("shapes", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["revision_id"], ["revisions.id"], name=op.f("fk_retimings_revision_id_revisions")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_retimings")),
        sa.UniqueConstraint("batch", "revision_id", name=op.f("uq_retimings_batch_revision_id")),
    )
    op.create_index(op.f("ix_retimings_batch"), "retimings", ["batch"], unique=False)
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("batch", sa.String(length=32), nullable=True))
        batch.create_index(batch.f("ix_runs_batch"), ["batch"], unique=False)
    with op.batch_alter_table("experiment_steps") as batch:
        for _name, column in STEP_COLUMNS:
            batch.add_column(column())
    op.execute(sa.text("UPDATE experiment_steps SET sees = generation - 1"))
    op.execute(sa.text("UPDATE experiment_steps SET arrival = generation WHERE finished_at IS NOT NULL"))


def downgrade() -> None:
    with op.batch_alter_table("experiment_steps") as batch:
        for name, _column in reversed(STEP_COLUMNS):
            batch.drop_column(name)
    with op.batch_alter_table("runs") as batch:
        batch.drop_index(batch.f("ix_runs_batch"))
        batch.drop_column("batch")
    op.drop_index(op.f("ix_retimings_batch"), table_name="retimings")
    op.drop_table("retimings")
