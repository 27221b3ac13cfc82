"""typed shape results

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-05 12:00:00

Issue 29: a shape result's status, reason and first call's seconds become columns
(`shape_results.status`, `reason`, `call_s`), moved out of the `check` JSON, and what stays in
`check` is one typed form (harness.wire.ShapeCheck: the comparison's figures, the child's view of
the output, the autotune configs, the timing record and its passes), read back as that model.

Existing rows: `check["status"]`, `["reason"]` and `["call_s"]` move into the columns (the stored
`reason` was the shape's, which had overwritten the comparison's own: the check keeps an empty
one). Keys the typed form has no field for are dropped: `within_tolerance_of_float64` (replaced
by the verdict columns, 0003) and anything else no current judge writes. A timing record written
without its device takes its run's. The key lists are this migration's own, frozen here, so that
later changes to harness.wire do not change what this step does.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CHECK_KEYS = (
    "output",
    "passed",
    "reason",
    "mismatches",
    "not_finite",
    "first_mismatches",
    "max_abs_err",
    "rel_l2",
    "reference_rel_l2",
    "mismatches_where_reference_is_off",
    "note",
    "configs",
    "configs_sampled",
    "timing",
    "passes",
)
MISMATCH_KEYS = ("index", "received", "expected")
CONFIG_KEYS = ("index", "config", "status", "max_abs_err", "rel_l2")
TIMING_KEYS = (
    "device",
    "compile_s",
    "flags",
    "parent_ms",
    "harness_ms",
    "reported_ms",
    "hidden_ms",
    "spread_ms",
    "rescored_calls",
    "prelude_ms",
    "prelude_harness_ms",
    "prelude_excess_ms",
    "calibrated_output",
    "joined",
)
JOINED_KEYS = ("hidden_ms", "spread_ms", "rescored_calls", "prelude_excess_ms")
PASS_KEYS = (
    "times_ms",
    "mean_ms",
    "flags",
    "reported_ms",
    "parent_ms",
    "harness_ms",
    "prelude_ms",
    "prelude_harness_ms",
)
TENSOR_INFO_KEYS = (
    "type_name",
    "exact_tensor",
    "shape",
    "dtype",
    "device",
    "contiguous",
    "nbytes",
    "written",
    "shared",
    "parts",
    "keys",
    "value",
)
MOVED = ("status", "reason", "call_s")

shape_results = sa.table(
    "shape_results",
    sa.column("id", sa.Integer()),
    sa.column("run_id", sa.Integer()),
    sa.column("check", sa.JSON()),
    sa.column("status", sa.String()),
    sa.column("reason", sa.Text()),
    sa.column("call_s", sa.Double()),
)
runs = sa.table("runs", sa.column("id", sa.Integer()), sa.column("device", sa.String()))


def _kept(value, keys: tuple[str, ...]) -> dict:
    return {key: value[key] for key in keys if key in value} if isinstance(value, dict) else {}


def _tensor_info(value):
    if not isinstance(value, dict):
        return None
    info = _kept(value, TENSOR_INFO_KEYS)
    if isinstance(info.get("parts"), list):
        info["parts"] = [_tensor_info(part) for part in info["parts"]]
    return info


def typed_check(check: dict, device: str) -> dict:
    """The typed form of an old check bag (its moved keys left out)."""
    typed = _kept(check, CHECK_KEYS)
    typed["reason"] = ""  # the stored reason was the shape's (the column now)
    if "output" in typed:
        typed["output"] = _tensor_info(typed["output"])
    if isinstance(typed.get("first_mismatches"), list):
        typed["first_mismatches"] = [_kept(item, MISMATCH_KEYS) for item in typed["first_mismatches"]]
    if isinstance(typed.get("configs"), list):
        typed["configs"] = [_kept(item, CONFIG_KEYS) for item in typed["configs"]]
    else:
        typed.pop("configs", None)
    if isinstance(typed.get("timing"), dict):
        timing = _kept(typed["timing"], TIMING_KEYS)
        timing.setdefault("device", device)
        if "joined" in timing:
            timing["joined"] = _kept(timing["joined"], JOINED_KEYS) if timing["joined"] else None
        typed["timing"] = timing
    else:
        typed.pop("timing", None)
    if isinstance(typed.get("passes"), list):
        typed["passes"] = [_kept(item, PASS_KEYS) for item in typed["passes"]]
    else:
        typed.pop("passes", None)
    return typed


def upgrade() -> None:
    with op.batch_alter_table("shape_results") as batch:
        batch.add_column(sa.Column("status", sa.String(length=30), nullable=False, server_default="not_run"))
        batch.add_column(sa.Column("reason", sa.Text(), nullable=False, server_default=""))
        batch.add_column(sa.Column("call_s", sa.Double(), nullable=True))
    connection = op.get_bind()
    rows = connection.execute(
        sa.select(shape_results.c.id, shape_results.c.check, runs.c.device).join(
            runs, runs.c.id == shape_results.c.run_id
        )
    ).all()
    for row_id, check, device in rows:
        check = check if isinstance(check, dict) else {}
        connection.execute(
            shape_results.update()
            .where(shape_results.c.id == row_id)
            .values(
                status=check.get("status") or "not_run",
                reason=check.get("reason") or "",
                call_s=check.get("call_s"),
                check=typed_check(check, device or ""),
            )
        )


def downgrade() -> None:
    connection = op.get_bind()
    rows = connection.execute(
        sa.select(
            shape_results.c.id,
            shape_results.c.check,
            shape_results.c.status,
            shape_results.c.reason,
            shape_results.c.call_s,
        )
    ).all()
    for row_id, check, status, reason, call_s in rows:
        # the bag as 0006's harness wrote it: no empty blocks, the shape's status, reason, call_s
        bag = {
            key: value
            for key, value in (check or {}).items()
            if not (key in ("timing", "configs_sampled") and value is None)
            and not (key in ("configs", "passes") and value == [])
        }
        bag |= {"status": status, "reason": reason, "call_s": call_s}
        connection.execute(shape_results.update().where(shape_results.c.id == row_id).values(check=bag))
    with op.batch_alter_table("shape_results") as batch:
        for name in reversed(MOVED):
            batch.drop_column(name)
