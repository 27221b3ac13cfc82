"""The store: the migration builds exactly the models' schema, SQLite settings, transactions,
upgrades, and every way opening a store can fail. The migration tests run on SQLite and on
PostgreSQL (`any_store_url`: the PostgreSQL case needs HARNESS_TEST_POSTGRES_URL)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, func, select

from harness.errors import HarnessError
from harness.store.models import Base, Secret
from harness.store.session import alembic_config, open_store


def _sqlite_path(url: str) -> Path:
    return Path(url.removeprefix("sqlite:///"))


def test_the_migrated_schema_matches_the_models(any_store_url):
    store = open_store(any_store_url)
    try:
        with store.engine.connect() as connection:
            differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    finally:
        store.close()
    assert differences == [], "models.py and db/migrations differ: run db/regenerate_initial.py"


def test_opening_an_empty_store_creates_the_schema_once(any_store_url):
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    first = open_store(any_store_url)
    first.close()
    assert (first.previous_revision, first.schema_revision, first.migrated) == (None, head, True)
    second = open_store(any_store_url)
    second.close()
    assert (second.previous_revision, second.schema_revision, second.migrated) == (head, head, False)


def test_a_store_at_the_first_revision_is_upgraded_to_head(any_store_url):
    scripts = ScriptDirectory.from_config(alembic_config())
    first_revision = scripts.get_base()
    engine = create_engine(any_store_url)
    with engine.connect() as connection, connection.begin():
        command.upgrade(alembic_config(connection), first_revision)
    engine.dispose()

    store = open_store(any_store_url)
    try:
        assert store.previous_revision == first_revision
        assert store.schema_revision == scripts.get_current_head()
        with store.engine.connect() as connection:
            assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
    finally:
        store.close()


def test_sqlite_runs_in_wal_mode_with_foreign_keys_and_a_busy_timeout(store_url):
    store = open_store(store_url)
    try:
        with store.engine.connect() as connection:
            pragma = connection.exec_driver_sql
            assert pragma("PRAGMA journal_mode").scalar() == "wal"
            assert pragma("PRAGMA foreign_keys").scalar() == 1
            assert pragma("PRAGMA busy_timeout").scalar() >= 1000
    finally:
        store.close()


def test_a_session_commits_on_success_and_rolls_back_on_error(store_url):
    store = open_store(store_url)
    try:
        with store.session() as session:
            session.add(Secret(name="kept", value="1"))
        with pytest.raises(RuntimeError), store.session() as session:
            session.add(Secret(name="dropped", value="2"))
            session.flush()
            raise RuntimeError("boom")
        with store.session() as session:
            assert session.scalars(select(Secret.name)).all() == ["kept"]
    finally:
        store.close()


def test_harness_db_in_the_environment_is_the_default_url(store_url, monkeypatch):
    monkeypatch.setenv("HARNESS_DB", store_url)
    open_store().close()
    assert _sqlite_path(store_url).is_file()


def test_processes_that_open_a_fresh_store_together_create_its_schema_once(any_store_url):
    program = (
        "import sys\nfrom harness.store.session import open_store\n"
        "store = open_store(sys.argv[1])\nprint(store.previous_revision)\n"
    )
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", program, any_store_url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    results = [process.communicate(timeout=120) + (process.returncode,) for process in processes]
    assert [returncode for _, _, returncode in results] == [0, 0, 0], results
    assert sorted(stdout.strip() for stdout, _, _ in results).count("None") == 1  # exactly one created it
    store = open_store(any_store_url)
    try:
        with store.session() as session:
            assert session.scalar(select(func.count()).select_from(Secret)) == 0
    finally:
        store.close()


def test_a_store_newer_than_the_harness_is_refused_and_left_alone(store_url):
    open_store(store_url).close()
    path = _sqlite_path(store_url)
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE alembic_version SET version_num = 'f00dfeed'")
    connection.close()
    before = path.read_bytes()
    with pytest.raises(HarnessError, match=r"store schema is newer than this harness.*f00dfeed"):
        open_store(store_url)
    assert path.read_bytes() == before


def _broken_urls(tmp_path: Path) -> list[tuple[str, str]]:
    a_file = tmp_path / "a_file"
    a_file.write_text("not a directory")
    return [
        ("sqlite:////nonexistent/dir/x.sqlite", "directory /nonexistent/dir does not exist"),
        (f"sqlite:///{a_file}/x.sqlite", "is not a directory"),
        (f"sqlite:///{tmp_path}", "is a directory"),
        ("nosuchdb://x", "unknown database kind 'nosuchdb'"),
        ("not a url at all", "is not a database URL"),
        ("postgresql+nosuchdriver://user@localhost/x", "unknown database kind"),
    ]


@pytest.mark.parametrize("case", range(6))
def test_a_broken_url_is_one_clear_error_and_creates_nothing(tmp_path, case):
    url, message = _broken_urls(tmp_path)[case]
    before = sorted(tmp_path.iterdir())
    with pytest.raises(HarnessError, match=message) as raised:
        open_store(url)
    assert "\n" not in str(raised.value)
    assert sorted(tmp_path.iterdir()) == before


def test_an_unreachable_or_driverless_server_is_one_clear_error():
    # Without psycopg2 the driver is missing; with it, nothing listens on port 1.
    with pytest.raises(
        HarnessError, match=r"cannot open store postgresql://harness:\*\*\*@127\.0\.0\.1:1/x: "
    ) as raised:
        open_store("postgresql://harness:secret@127.0.0.1:1/x")
    assert "secret" not in str(raised.value) and "\n" not in str(raised.value)


def test_a_store_that_fails_after_its_file_was_created_leaves_no_file(store_url):
    path = _sqlite_path(store_url)
    Path(f"{path}-wal").mkdir()  # SQLite cannot write its WAL, after it has created the main file
    with pytest.raises(HarnessError, match="cannot open store"):
        open_store(store_url)
    assert not path.exists()


def test_a_postgresql_stores_socket_directories_are_hidden_from_the_child(tmp_path, monkeypatch):
    """A network namespace cuts TCP, not unix sockets: the server's socket directories (the URL's,
    PGHOST's, the default one) go into the sandbox's hidden paths; /tmp is left to the supervisor."""
    from harness.plan.phases import store_limits
    from harness.sandbox.limits import SandboxLimits
    from harness.store.session import Store, postgres_socket_directories

    url_dir, env_dir = tmp_path / "url-socket", tmp_path / "env-socket"
    url_dir.mkdir()
    env_dir.mkdir()
    monkeypatch.setenv("PGHOST", str(env_dir))
    defaults = [d for d in ("/var/run/postgresql", "/run/postgresql") if Path(d).is_dir()]
    default = [str(Path(defaults[0]).resolve())] if defaults else []
    found = postgres_socket_directories(f"postgresql+psycopg://u@/db?host={url_dir}")
    assert found == [str(url_dir), str(env_dir), *default]
    monkeypatch.delenv("PGHOST")
    assert postgres_socket_directories("postgresql+psycopg://u@db.example:5432/db") == default
    assert postgres_socket_directories(f"postgresql://u@/db?host={tmp_path / 'missing'}") == default
    assert postgres_socket_directories("postgresql://u@/db?host=/tmp") == default
    assert postgres_socket_directories(f"sqlite:///{tmp_path / 's.sqlite'}") == []

    engine = create_engine(f"postgresql+psycopg://u@/db?host={url_dir}")  # connects to nothing
    store = Store(engine=engine, url="x", schema_revision="x", previous_revision=None)
    limits = store_limits(store, SandboxLimits(hidden_paths=["/srv/other"]))
    assert limits.hidden_paths == ["/srv/other", str(url_dir), *default]
    store = Store(
        engine=create_engine(f"sqlite:///{tmp_path / 's.sqlite'}"),
        url="x",
        schema_revision="x",
        previous_revision=None,
    )
    assert store_limits(store, SandboxLimits()).hidden_paths == [str(tmp_path)]


def test_results_stored_before_the_judge_kept_its_version_migrate_as_an_older_judges(store_url):
    """db/migrations 0006: existing runs and retimings get judge version 1, older than the
    harness's, so that they are run again and never ranked beside the current judge's."""
    from harness.judge import JUDGE_VERSION
    from harness.store.models import Retiming, Run
    from harness.store.revisions import register_revision

    store = open_store(store_url)
    with store.session() as session:
        revision = register_revision(session, b"def custom_kernel(data):\n    return data[2]\n", "k.py")
        session.add(
            Run(revision_id=revision.revision.id, task="conv2d_v2", mode="test", env_key="e", device="cpu")
        )
        session.add(
            Retiming(
                batch="b",
                revision_id=revision.revision.id,
                task="conv2d_v2",
                mode="benchmark",
                env_key="e",
                status="pass",
            )
        )
    with store.session() as session:
        assert [run.judge_version for run in session.scalars(select(Run))] == [JUDGE_VERSION]
    with store.engine.connect() as connection, connection.begin():
        command.downgrade(alembic_config(connection), "0005")
    store.close()

    store = open_store(store_url)  # upgraded to head again
    try:
        assert store.previous_revision == "0005"
        with store.session() as session:
            assert [run.judge_version for run in session.scalars(select(Run))] == [1]
            assert [row.judge_version for row in session.scalars(select(Retiming))] == [1]
        assert JUDGE_VERSION > 1
    finally:
        store.close()


# A shape's check as the harness of 0006 stored it (harness/sandbox/evaluation.py and
# harness/store/runs.py then): the comparison's figures and the child's view of the output, the
# autotune configs, the timing record and two passes, with the shape's status, reason and first
# call's seconds mixed in, and a key of an older judge (`within_tolerance_of_float64`).
CHECK_AT_0006 = {
    "output": {
        "type_name": "torch.Tensor",
        "exact_tensor": True,
        "shape": [1, 2, 14, 14],
        "dtype": "torch.float32",
        "device": "cpu",
        "contiguous": True,
        "nbytes": 1568,
        "shared": True,
        "parts": None,
        "keys": None,
        "value": None,
    },
    "passed": True,
    "reason": "accurate: 2 of 392 elements off the exact answer",  # the shape's, over the check's
    "mismatches": 0,
    "not_finite": 0,
    "first_mismatches": [],
    "max_abs_err": 1.9e-06,
    "rel_l2": 2.1e-07,
    "reference_rel_l2": 1.2e-07,
    "mismatches_where_reference_is_off": None,
    "note": None,
    "within_tolerance_of_float64": True,
    "configs": [
        {"index": 0, "config": "BLOCK=32", "status": "pass", "max_abs_err": 1.9e-06, "rel_l2": 2.1e-07},
        {"index": 1, "config": "BLOCK=64", "status": "pass", "max_abs_err": 1.1e-06, "rel_l2": 1.4e-07},
    ],
    "timing": {
        "device": "cpu",
        "compile_s": 0.42,
        "flags": ["host_clock_mismatch"],
        "parent_ms": [1.31, 1.29],
        "harness_ms": 0.2,
        "reported_ms": [1.01, 1.0],
        "hidden_ms": 0.05,
        "spread_ms": 0.01,
        "rescored_calls": 0,
        "prelude_ms": [0.08, 0.07],
        "prelude_harness_ms": 0.06,
        "prelude_excess_ms": 0.01,
        "calibrated_output": ["torch.float32", [1, 2, 14, 14]],
        "joined": {"hidden_ms": 0.04, "spread_ms": 0.02, "rescored_calls": 1, "prelude_excess_ms": 0.0},
    },
    "passes": [
        {
            "times_ms": [1.06, 1.05],
            "mean_ms": 1.055,
            "flags": [],
            "reported_ms": [1.01, 1.0],
            "parent_ms": [1.31, 1.29],
            "harness_ms": 0.2,
            "prelude_ms": [0.08, 0.07],
            "prelude_harness_ms": 0.06,
        },
        {"times_ms": [1.04, 1.07], "mean_ms": 1.055, "flags": ["host_clock_mismatch"]},
    ],
    "status": "pass",
    "call_s": 0.75,
}


def test_shape_results_stored_before_the_typed_check_migrate_to_its_columns_and_model(store_url):
    """db/migrations 0007: a shape row written at 0006 (status, reason and call_s inside the
    `check` JSON) reads back with them as columns and its check as harness.wire.ShapeCheck; a
    row written at head goes down to 0006's form and up again unchanged."""
    import json

    from sqlalchemy import text

    from harness.store.models import Run, ShapeResult
    from harness.store.revisions import register_revision
    from harness.wire import ShapeCheck, TimingRecord

    store = open_store(store_url)
    with store.session() as session:
        revision = register_revision(session, b"def custom_kernel(data):\n    return data[2]\n", "k.py")
        run = Run(
            revision_id=revision.revision.id, task="conv2d_v2", mode="benchmark", env_key="e", device="cpu"
        )
        session.add(run)
        session.flush()
        run_id = run.id
        session.add(
            ShapeResult(
                run_id=run_id,
                set_name="smoke",
                index=1,
                shape={"size": 8},
                status="wrong_answer",
                reason="3 mismatched",
                call_s=0.5,
                passed=False,
                check=ShapeCheck(
                    passed=False, mismatches=3, timing=TimingRecord(device="cpu", compile_s=0.1)
                ),
            )
        )
    with store.engine.connect() as connection, connection.begin():
        command.downgrade(alembic_config(connection), "0006")
        connection.execute(
            text(
                'INSERT INTO shape_results (run_id, set_name, "index", shape, passed, "check", runs, mean_ms, '
                "times_ms) VALUES (:run_id, 'smoke', 0, :shape, 1, :check, 4, 1.055, :times)"
            ),
            {
                "run_id": run_id,
                "shape": json.dumps({"size": 16, "seed": 3}),
                "check": json.dumps(CHECK_AT_0006),
                "times": json.dumps([1.06, 1.05, 1.04, 1.07]),
            },
        )
        down = json.loads(
            connection.execute(text('SELECT "check" FROM shape_results WHERE "index" = 1')).scalar_one()
        )
        assert (down["status"], down["reason"], down["call_s"]) == ("wrong_answer", "3 mismatched", 0.5)
        assert "configs" not in down and "passes" not in down and down["timing"]["compile_s"] == 0.1
    store.close()

    store = open_store(store_url)  # upgraded to head again
    try:
        assert store.previous_revision == "0006"
        with store.session() as session:
            old, new = session.scalars(select(ShapeResult).order_by(ShapeResult.index)).all()
        assert (old.status, old.reason, old.call_s) == ("pass", CHECK_AT_0006["reason"], 0.75)
        check = old.check
        assert isinstance(check, ShapeCheck) and check.passed is True and check.reason == ""
        assert check.output is not None and check.output.shape == [1, 2, 14, 14] and check.output.shared
        assert [(config.index, config.config, config.status) for config in check.configs] == [
            (0, "BLOCK=32", "pass"),
            (1, "BLOCK=64", "pass"),
        ]
        assert check.timing is not None and check.timing.calibrated_output == (
            "torch.float32",
            [1, 2, 14, 14],
        )
        assert check.timing.joined is not None and check.timing.joined.rescored_calls == 1
        assert [item.mean_ms for item in check.passes] == [1.055, 1.055] and check.passes[1].parent_ms == []
        assert old.timing_flags == ["host_clock_mismatch"] and old.warmup_s == 0.42
        assert (new.status, new.reason, new.call_s) == ("wrong_answer", "3 mismatched", 0.5)
        assert new.check == ShapeCheck(
            passed=False, mismatches=3, timing=TimingRecord(device="cpu", compile_s=0.1)
        )
    finally:
        store.close()


def test_a_retimings_shapes_read_back_typed_and_rows_without_block_means_have_none(store_url):
    """Retiming.shapes is kept as json and read back as RetimedShape; a row written before block
    means were kept (no `means_ms`) reads with none."""
    from sqlalchemy import text

    from harness.store.models import RetimedShape, Retiming
    from harness.store.revisions import register_revision

    store = open_store(store_url)
    try:
        with store.session() as session:
            revision = register_revision(session, b"def custom_kernel(data):\n    return data[2]\n", "k.py")
            for batch in ("new", "old"):
                session.add(
                    Retiming(
                        batch=batch,
                        revision_id=revision.revision.id,
                        task="conv2d_v2",
                        mode="benchmark",
                        env_key="e",
                        status="pass",
                        shapes=[RetimedShape(shape={"size": 8}, times_ms=[1.0, 1.5], means_ms=[1.25])],
                    )
                )
        with store.engine.connect() as connection, connection.begin():
            connection.execute(
                text("UPDATE retimings SET shapes = :shapes WHERE batch = 'old'"),
                {"shapes": '[{"shape": {"size": 8}, "times_ms": [1.0, 1.5]}]'},
            )
        with store.session() as session:
            rows = {row.batch: row.shapes for row in session.scalars(select(Retiming))}
        assert rows["new"] == [RetimedShape(shape={"size": 8}, times_ms=[1.0, 1.5], means_ms=[1.25])]
        assert rows["old"] == [RetimedShape(shape={"size": 8}, times_ms=[1.0, 1.5], means_ms=[])]
    finally:
        store.close()
