"""A faster/slower verdict against the parent is drawn from one interleaved run only: the
parent's run of the same batch, or the parent re-timed in it (a Retiming); the spread between
the blocks of calls of the run's revisions widens the test; two runs are never compared (the leaderboard, and so
`harness history` and the evolution story).

Through the CLI (issue 28): `bench` and the tournament time the reference and the parent beside
what they evaluate, so that a speedup comes from one run; a revision timed alone says so instead
of a speedup; an older judge's result is not ranked and is run again."""

from __future__ import annotations

import json
import sqlite3
import statistics

import pytest
from conftest import record_timed_run, rows, timed_outcome, times_around

from harness.config import CANDIDATES_DIR
from harness.environment import Environment
from harness.judge import JUDGE_VERSION
from harness.report.history import history_header
from harness.sandbox.evaluation import Evaluation
from harness.scoring import FASTER, SAME, score
from harness.standing.board import build_leaderboard
from harness.store.models import RetimedShape, Retiming
from harness.store.revisions import register_revision
from harness.store.runs import claim_run, record_run
from harness.store.session import open_store
from harness.wire import ShapeCheck, TimingPass

TASK = "conv2d_v2"
CPU = Environment(
    device="cpu",
    device_name="test cpu",
    driver_version="",
    cuda_runtime="",
    torch="2.13.0",
    triton="3.9.0",
    python="3.11.7",
    harness="0.1.0",
    env_key="cpu-env",
)
SHAPES = [{"size": 16, "kernelsize": 3, "channels": 2, "batch": 1, "seed": 21}]


def _record(session, revision_id: int, mean_ms: float, batch: str | None) -> None:
    """A run of one shape timed in two blocks of calls (harness.timing, method 5.), both at `mean_ms`."""
    run = claim_run(session, revision_id, TASK, "benchmark", CPU, worker="w", ttl_s=600)
    times = times_around(mean_ms, 40)
    blocks = [
        TimingPass(times_ms=block, mean_ms=statistics.fmean(block)) for block in (times[:20], times[20:])
    ]
    outcome = timed_outcome(0, SHAPES[0], times, set_name="smoke", check=ShapeCheck(passes=blocks))
    evaluation = Evaluation(
        status="pass",
        task=TASK,
        filename="c.py",
        code_sha256="",
        device="cpu",
        mode="test",
        shape_set="smoke",
        shapes=[outcome],
    )
    assert record_run(session, run.id, "w", evaluation, score_ms=score([outcome.mean_ms]), batch=batch)


@pytest.fixture
def store(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    with store.session() as session:
        parent = register_revision(
            session, b"def custom_kernel(data):\n    return data[2]\n", "k.py", task=TASK
        )
        child = register_revision(
            session, b"def custom_kernel(data):\n    return data[2]  # child\n", "k.py", task=TASK
        )
        ids = parent.revision.id, child.revision.id
    yield store, ids
    store.close()


def _vs_parent(store, child_id: int) -> str | None:
    with store.session() as session:
        entry = next(
            e for e in build_leaderboard(session, TASK, "cpu").entries if e.submission_id == child_id
        )
        return entry.vs_parent, history_header(entry)


def test_runs_of_two_batches_are_never_compared(store):
    store, (parent, child) = store
    with store.session() as session:
        _record(session, parent, 2.0, batch="run-a")
        _record(session, child, 1.0, batch="run-b")  # twice as fast, but timed in another run
    verdict, header = _vs_parent(store, child)
    assert verdict is None
    assert f"not compared with parent {parent} in one run" in header


def test_runs_of_one_batch_are_compared(store):
    store, (parent, child) = store
    with store.session() as session:
        _record(session, parent, 2.0, batch="run-a")
        _record(session, child, 1.0, batch="run-a")
    assert _vs_parent(store, child)[0] == FASTER


def _retime(session, revision_id: int, batch: str, first_ms: float, last_ms: float) -> None:
    times = times_around(first_ms, 40) + times_around(last_ms, 40)
    session.add(
        Retiming(
            batch=batch,
            revision_id=revision_id,
            task=TASK,
            mode="benchmark",
            env_key=CPU.env_key,
            status="pass",
            score_ms=statistics.fmean(times),
            shapes=[RetimedShape(shape=SHAPES[0], times_ms=times, means_ms=[first_ms, last_ms])],
        )
    )


def test_a_parent_retimed_in_the_childs_run_is_compared_within_its_own_drift(store):
    store, (parent, child) = store
    with store.session() as session:
        _record(session, parent, 2.0, batch="old-run")
        _record(session, child, 1.0, batch="run-c")
        _retime(session, parent, "run-c", 1.98, 2.02)  # steady: 1 % apart
    assert _vs_parent(store, child)[0] == FASTER
    # The same child against a parent whose first and last timings in that run are 30 % apart:
    # 9 % faster than their joined mean (1.10 ms), significant by the per-call variance alone (z
    # about 6), not once the spread between blocks (the parent's two, the child's two) is.
    with store.session() as session:
        session.query(Retiming).delete()
        _retime(session, parent, "run-c", 0.95, 1.25)
    assert _vs_parent(store, child)[0] == SAME


# --- through the CLI: bench and the tournament time the reference in the same run ---------------

REFERENCE_FILE = CANDIDATES_DIR / "conv2d_v2_reference.py"
BUDGET = ("--device", "cpu", "--budget", "0.2")
# A byte-different copy of the reference times like it, but only within 2x on a loaded machine
# (0.61x in one CI run; 0.44x and 2.05x on 2 cores with a second suite running beside this one,
# 2026-12-03 and 2026-12-04). So a bound on a speedup cannot tell the run it was taken
# from: a speedup is checked against the scores of its own run exactly (`_speedup_in_run`), and
# the stored reference score in the first test is made CROSS_RUN x off, so that one taken across
# runs is about 10x away from it.
CROSS_RUN = 10


def _speedup_in_run(store_url: str, revision_id: int, reference: int) -> float:
    """The reference's score over `revision_id`'s, both as timed in `revision_id`'s benchmark run
    (the reference's run of that batch, or its retiming there)."""
    ((batch, score_ms),) = rows(
        store_url,
        "select batch, score_ms from runs where revision_id = ? and mode = 'benchmark'",
        revision_id,
    )
    in_run = rows(
        store_url,
        "select score_ms from runs where revision_id = ? and mode = 'benchmark' and batch = ? "
        "union all select score_ms from retimings where revision_id = ? and batch = ?",
        reference,
        batch,
        reference,
        batch,
    )
    assert len(in_run) == 1, (batch, in_run)
    return in_run[0][0] / score_ms


def _register(run_cli, store_url, path, *args) -> int:
    result = run_cli("register", path, *args)
    assert result.returncode == 0, result.stderr
    return rows(store_url, "select max(id) from revisions")[0][0]


def _copy(tmp_path, name: str) -> str:
    path = tmp_path / f"{name}.py"
    path.write_bytes(REFERENCE_FILE.read_bytes() + f"\n# {name}: a byte-different copy\n".encode())
    return str(path)


def _bench(run_cli, revision_id: int) -> dict[int, dict]:
    result = run_cli("bench", revision_id, *BUDGET, "--format", "json")
    assert result.returncode == 0, result.stdout + result.stderr
    return {item["submission_id"]: item for item in json.loads(result.stdout)}


def _board(run_cli) -> dict[int, dict]:
    result = run_cli("leaderboard", "--device", "cpu", "--format", "json")
    assert result.returncode == 0, result.stderr
    return {entry["submission_id"]: entry for entry in json.loads(result.stdout)["entries"]}


def _record_alone(store_url: str, revision_id: int) -> None:
    """A passing benchmark run of this machine's CPU environment on the task's smoke shapes, in a
    batch of its own: a revision timed without the reference (as a harness before issue 30
    timed it on a store without one; `bench` now registers the reference and times it beside)."""
    from harness.environment import probe_environment
    from harness.tasks import load_task

    shapes = [shape.model_dump() for shape in load_task(TASK).smoke]
    with open_store(store_url) as store, store.session() as session:
        environment = probe_environment("cpu")
        record_timed_run(
            session,
            revision_id,
            TASK,
            environment,
            shapes,
            [1.0] * len(shapes),
            batch="alone-batch",
            set_name="smoke",
            calls=40,
        )


def test_bench_times_the_reference_and_the_parent_in_the_same_run(tmp_path, run_cli, store_url):
    alone = _register(run_cli, store_url, _copy(tmp_path, "alone"), "--lineage", "copy")
    _record_alone(store_url, alone)
    shown = run_cli("bench", alone, *BUDGET)  # its stored result, compared within its own run
    assert shown.returncode == 0 and "no speedup: no reference in its run" in shown.stdout, shown.stdout
    # that bench found no reference in the store: it registered the task's and timed it
    assert "had no reference in the store: registered its reference candidate" in shown.stderr
    reference = _register(run_cli, store_url, REFERENCE_FILE, "--lineage", "conv2d_v2_reference")
    assert rows(store_url, "select count(*) from revisions")[0][0] == 2  # the same bytes: unchanged
    _bench(run_cli, reference)
    # The reference's stored result made 10x slower: a speedup taken from it would read ~10x.
    with sqlite3.connect(store_url.removeprefix("sqlite:///")) as connection:
        connection.execute(
            "update runs set score_ms = score_ms * ? where revision_id = ?", (CROSS_RUN, reference)
        )
    stored = rows(
        store_url, "select id, score_ms, batch, finished_at from runs where revision_id = ?", reference
    )

    child = _register(run_cli, store_url, _copy(tmp_path, "child"), "--parent", alone)
    benched = _bench(run_cli, child)
    speedup = benched[child]["speedup_vs_reference"]
    assert speedup == pytest.approx(_speedup_in_run(store_url, child, reference), rel=1e-6), speedup
    assert benched[child]["vs_parent"] is not None  # its parent timed beside it
    (batch,) = rows(store_url, "select batch from runs where revision_id = ?", child)[0]
    retimed = rows(
        store_url, "select revision_id, status, judge_version from retimings where batch = ?", batch
    )
    assert sorted(retimed) == [(alone, "pass", JUDGE_VERSION), (reference, "pass", JUDGE_VERSION)]
    assert (
        rows(store_url, "select id, score_ms, batch, finished_at from runs where revision_id = ?", reference)
        == stored
    )

    board = _board(run_cli)
    assert board[child]["speedup_vs_reference"] == pytest.approx(speedup)
    assert board[reference]["speedup_vs_reference"] == pytest.approx(1.0)  # its own run
    assert board[alone]["score_ms"] is not None and board[alone]["speedup_vs_reference"] is None
    assert board[alone]["speedup_note"] == "no reference in its run"
    assert board[child]["speedup_note"] is None
    ranked = sorted((entry for entry in board.values() if entry["rank"]), key=lambda entry: entry["rank"])
    assert [entry["score_ms"] for entry in ranked] == sorted(entry["score_ms"] for entry in ranked)

    if board[alone]["rank"] is None:  # flagged under load (issue 28 item 5): no speedup cell to explain
        assert board[alone]["status"] == "flagged", board[alone]
        return
    for fmt, legend in (
        ("table", "no reference in its run"),
        ("markdown", "speedup -: no reference in its run"),
    ):
        shown = run_cli("leaderboard", "--device", "cpu", "--format", fmt, env={"COLUMNS": "200"})
        assert shown.returncode == 0, shown.stderr
        assert legend in shown.stdout
    html = run_cli("leaderboard", "--device", "cpu", "--format", "html")
    assert 'title="no reference in its run"' in html.stdout and "speedup -: no reference" in html.stdout


def test_a_result_of_an_older_judge_is_not_ranked_and_the_tournament_runs_it_again(
    tmp_path, run_cli, store_url
):
    reference = _register(run_cli, store_url, REFERENCE_FILE, "--lineage", "conv2d_v2_reference")
    copy = _register(run_cli, store_url, _copy(tmp_path, "copy"), "--lineage", "copy")
    first = run_cli("tournament", "--mode", "benchmark", *BUDGET, timeout=600)
    assert first.returncode == 0, first.stdout + first.stderr
    assert _board(run_cli)[copy]["score_ms"] is not None
    with sqlite3.connect(store_url.removeprefix("sqlite:///")) as connection:
        connection.execute(
            "update runs set judge_version = ? where revision_id = ?", (JUDGE_VERSION - 1, copy)
        )
    query = "select revision_id, mode, judge_version, finished_at from runs order by revision_id, mode"
    before = rows(store_url, query)

    board = _board(run_cli)
    assert board[copy]["rank"] is None and board[copy]["status"] == "not_run"
    assert "older judge" in board[copy]["reason"]
    assert board[reference]["score_ms"] is not None

    again = run_cli("tournament", "--mode", "benchmark", *BUDGET, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    after = rows(store_url, query)
    assert [row for row in after if row[0] == reference] == [row for row in before if row[0] == reference]
    for old, new in zip([row for row in before if row[0] == copy], [row for row in after if row[0] == copy]):
        assert new[:2] == old[:2] and new[2] == JUDGE_VERSION and new[3] > old[3]
    board = _board(run_cli)
    assert board[copy]["status"] in ("pass", "flagged") and board[copy]["score_ms"] is not None
    # the reference timed again in its run
    assert board[copy]["speedup_vs_reference"] == pytest.approx(_speedup_in_run(store_url, copy, reference))


def test_with_a_worker_per_gpu_every_interleaved_run_times_the_reference(tmp_path, run_cli, store_url):
    """The timed phase's runs are shared out over two workers (two jobs, two batches): the
    reference is timed in each, as its run in one and as a retiming in the other."""
    reference = _register(run_cli, store_url, REFERENCE_FILE, "--lineage", "conv2d_v2_reference")
    copies = [
        _register(run_cli, store_url, _copy(tmp_path, f"copy{n}"), "--lineage", f"copy{n}") for n in (1, 2)
    ]
    done = run_cli("tournament", "--mode", "benchmark", "--gpus", "2", *BUDGET, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    batches = dict(rows(store_url, "select revision_id, batch from runs where mode = 'benchmark'"))
    assert len(set(batches.values())) == 2
    retimed = rows(store_url, "select revision_id, batch from retimings")
    assert retimed == [(reference, next(b for b in batches.values() if b != batches[reference]))]
    board = _board(run_cli)
    for copy in copies:
        assert board[copy]["score_ms"] is not None
        assert board[copy]["speedup_vs_reference"] == pytest.approx(
            _speedup_in_run(store_url, copy, reference)
        ), board[copy]
