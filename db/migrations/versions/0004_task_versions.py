"""tasks from GPU MODE problem directories, by version

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 23:45:00

Issue 18: `harness task add DIR` keeps a problem directory's files content-addressed (blobs) as a
version of the task, and every run keeps the task version it was judged by (part of its key).
Runs written before are of the built-in conv2d_v2, version 1.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "task_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("files_sha256", sa.String(length=64), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_task_versions")),
        sa.UniqueConstraint("name", "version", name=op.f("uq_task_versions_name_version")),
    )
    op.create_table(
        "task_files",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("task_version_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(["sha256"], ["blobs.sha256"], name=op.f("fk_task_files_sha256_blobs")),
        sa.ForeignKeyConstraint(
            ["task_version_id"],
            ["task_versions.id"],
            name=op.f("fk_task_files_task_version_id_task_versions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_task_files")),
        sa.UniqueConstraint("task_version_id", "name", name=op.f("uq_task_files_task_version_id_name")),
    )
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("task_version", sa.Integer(), nullable=False, server_default="1"))
        batch.drop_constraint("uq_runs_revision_id_task_mode_env_key", type_="unique")
        batch.create_unique_constraint(
            "uq_runs_revision_id_task_task_version_mode_env_key",
            ["revision_id", "task", "task_version", "mode", "env_key"],
        )


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_constraint("uq_runs_revision_id_task_task_version_mode_env_key", type_="unique")
        batch.create_unique_constraint(
            "uq_runs_revision_id_task_mode_env_key", ["revision_id", "task", "mode", "env_key"]
        )
        batch.drop_column("task_version")
    op.drop_table("task_files")
    op.drop_table("task_versions")
