"""A faster/slower verdict against the parent is drawn from one interleaved run only: the
parent's run of the same batch, or the parent re-timed in it (a Retiming); the spread between
the blocks of calls of the run's revisions widens the test; two runs are never compared (the leaderboard, and so
`harness history` and the evolution story)."""

from __future__ import annotations

import statistics

import pytest

from harness.environment import Environment
from harness.report.history import history_header
from harness.report.leaderboard import build_leaderboard
from harness.sandbox.evaluation import Evaluation, ShapeOutcome
from harness.scoring import FASTER, SAME, score
from harness.store.models import Retiming
from harness.store.revisions import register_revision
from harness.store.runs import claim_run, record_run
from harness.store.session import open_store

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


def _times(mean_ms: float, calls: int = 40) -> list[float]:
    return [mean_ms * (1 + 0.002 * ((i % 5) - 2)) for i in range(calls)]


def _record(session, revision_id: int, mean_ms: float, batch: str | None) -> None:
    """A run of one shape timed in two blocks of calls (harness.timing, method 5.), both at `mean_ms`."""
    run = claim_run(session, revision_id, TASK, "benchmark", CPU, worker="w", ttl_s=600)
    times = _times(mean_ms)
    outcome = ShapeOutcome(
        check={
            "passes": [
                {"times_ms": block, "mean_ms": statistics.fmean(block)} for block in (times[:20], times[20:])
            ]
        },
        set_name="smoke",
        index=0,
        shape=SHAPES[0],
        status="pass",
        passed=True,
        times_ms=times,
        runs=len(times),
        mean_ms=statistics.fmean(times),
        err_ms=statistics.stdev(times) / len(times) ** 0.5,
    )
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
    times = _times(first_ms) + _times(last_ms)
    session.add(
        Retiming(
            batch=batch,
            revision_id=revision_id,
            task=TASK,
            mode="benchmark",
            env_key=CPU.env_key,
            status="pass",
            score_ms=statistics.fmean(times),
            shapes=[{"shape": SHAPES[0], "times_ms": times, "means_ms": [first_ms, last_ms]}],
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
