"""judge version

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02 09:00:00

Issue 28: every run and retiming records the version of the judge that produced it
(harness.judge.JUDGE_VERSION). Rows written before get version 1, older than any judge that
records its version: they are never ranked beside a newer judge's results, and the next
tournament runs them again.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("runs", "retimings")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("judge_version", sa.Integer(), nullable=False, server_default="1"))


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("judge_version")
