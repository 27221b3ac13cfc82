"""two verdicts per shape

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 21:50:00

Issue 14: each shape result keeps both verdicts (GPU MODE's rule, and accuracy against the exact
answer) and the accuracy figures as columns. Rows written before: a shape that passed GPU MODE's
rule passes both (the accurate verdict accepts everything GPU MODE accepts); any other keeps None,
which makes its run stale, so that the next tournament judges it again (harness.store.runs).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = (
    ("gpumode_status", lambda: sa.Column("gpumode_status", sa.String(length=10), nullable=True)),
    ("gpumode_failures", lambda: sa.Column("gpumode_failures", sa.Integer(), nullable=True)),
    ("gpumode_reason", lambda: sa.Column("gpumode_reason", sa.Text(), nullable=False, server_default="")),
    ("accurate_status", lambda: sa.Column("accurate_status", sa.String(length=10), nullable=True)),
    ("accurate_failures", lambda: sa.Column("accurate_failures", sa.Integer(), nullable=True)),
    ("accurate_reason", lambda: sa.Column("accurate_reason", sa.Text(), nullable=False, server_default="")),
    ("rel_l2", lambda: sa.Column("rel_l2", sa.Double(), nullable=True)),
    ("max_err_over_scale", lambda: sa.Column("max_err_over_scale", sa.Double(), nullable=True)),
)


def upgrade() -> None:
    with op.batch_alter_table("shape_results") as batch:
        for _name, column in COLUMNS:
            batch.add_column(column())
    op.execute(
        sa.text(
            "UPDATE shape_results SET gpumode_status = 'pass', gpumode_failures = 0, "
            "accurate_status = 'pass', accurate_failures = 0 WHERE passed"
        )
    )


def downgrade() -> None:
    with op.batch_alter_table("shape_results") as batch:
        for name, _column in reversed(COLUMNS):
            batch.drop_column(name)
