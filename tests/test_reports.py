"""Leaderboard, history and diff reports, read from a real SQLite store.

The store holds the seed revisions (registered from candidates/manifest.yml) plus one extra
revision, and runs in two environments: an H200 (benchmark and leaderboard runs with per-call
times) and a CPU. Scores are computed with harness.scoring from the per-call times, as the runner
does, so the expected order follows from the times chosen below, not from stored ranks.
"""

from __future__ import annotations

import json
import os
import pty
import re
import statistics
import subprocess
import tty
from pathlib import Path

import pytest
import yaml
from conftest import HARNESS_SCRIPT

from harness.candidates import read_seeds
from harness.config import CANDIDATES_DIR
from harness.environment import Environment
from harness.errors import HarnessError
from harness.report.diff import render_diff
from harness.report.history import build_history, render_history, revision_diff
from harness.report.html import build_chart, render_markdown
from harness.sandbox.evaluation import Evaluation, ShapeOutcome
from harness.scoring import FASTER, SAME, score
from harness.standing.board import Leaderboard, build_leaderboard
from harness.store.revisions import get_revision, register_revision, register_seeds, revision_code
from harness.store.runs import claim_run, record_run
from harness.store.session import open_store

SEEDS_DIR = Path(__file__).resolve().parent / "data" / "seeds"
TASK = "conv2d_v2"
GPU_SHAPES = [
    {"size": 1024, "kernelsize": 3, "channels": 16, "batch": 2, "seed": 11},
    {"size": 512, "kernelsize": 5, "channels": 32, "batch": 4, "seed": 12},
]
CPU_SHAPES = [{"size": 16, "kernelsize": 3, "channels": 2, "batch": 1, "seed": 21}]


def _environment(device: str, device_name: str, env_key: str) -> Environment:
    return Environment(
        device=device,
        device_name=device_name,
        driver_version="570.1" if device == "cuda" else "",
        cuda_runtime="12.8" if device == "cuda" else "",
        torch="2.13.0",
        triton="3.9.0",
        python="3.11.7",
        harness="0.1.0",
        env_key=env_key,
    )


H200 = _environment("cuda", "NVIDIA H200", "h200-env")
CPU = _environment("cpu", "AMD EPYC 7B13", "cpu-env")
WORKER = "test-worker"

# Mean time per shape (ms) of each revision's H200 benchmark run.
GPU_MEANS = {
    1: [1.0, 2.0],  # the reference
    2: [4.0, 8.0],  # conv2d_a100_ultra r1
    99237: [2.0, 4.0],  # conv2d_a100_ultra r2: twice as fast as its parent
    512024: [0.5, 1.0],  # conv2d_parallel_oh r2: its parent timed out
    779808: [0.3, 0.6],  # conv2d_cudnn_wrap r2: fastest, but its leaderboard recheck fails
}
EXTRA_ID = 900001  # conv2d_a100_ultra r3: same times as r2, so "same within noise"


def _times(mean_ms: float, calls: int = 30) -> list[float]:
    """Per-call times around `mean_ms` with a 0.2 % spread (exactly `mean_ms` on average)."""
    return [mean_ms * (1 + 0.002 * ((i % 5) - 2)) for i in range(calls)]


def _record(
    session,
    revision_id: int,
    env: Environment,
    mode: str,
    status: str,
    reason: str = "",
    means: list[float] | None = None,
    shapes: list[dict] | None = None,
) -> None:
    """Claim and record a run through the store's functions, as the runner does; `means` gives
    each shape per-call times (and the run a score), else the run is a check without timings."""
    shapes = shapes or GPU_SHAPES
    run = claim_run(session, revision_id, TASK, mode, env, worker=WORKER, ttl_s=600)
    outcomes = []
    for index, shape in enumerate(shapes):
        outcome = ShapeOutcome(
            set_name="benchmarks" if env is H200 else "smoke",
            index=index,
            shape=shape,
            status=status,
            passed=status == "pass",
        )
        if means is not None:
            times = _times(means[index])
            outcome = outcome.model_copy(
                update={
                    "times_ms": times,
                    "runs": len(times),
                    "mean_ms": statistics.fmean(times),
                    "err_ms": statistics.stdev(times) / len(times) ** 0.5,
                }
            )
        outcomes.append(outcome)
    evaluation = Evaluation(
        status=status,
        reason=reason,
        task=TASK,
        filename="candidate.py",
        code_sha256="",
        device=env.device,
        mode=mode,
        shape_set=outcomes[0].set_name,
        shapes=outcomes,
    )
    score_ms = score([outcome.mean_ms for outcome in outcomes]) if means is not None else None
    # one batch per environment: as if every run of it came from one interleaved tournament job
    assert record_run(session, run.id, WORKER, evaluation, score_ms=score_ms, batch=env.env_key) is not None


SEED_LINEAGES = {"conv2d_v2_reference", "conv2d_a100_ultra", "conv2d_parallel_oh", "conv2d_cudnn_wrap"}


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("reports")
    url = f"sqlite:///{folder / 'store.sqlite'}"
    # The seed lineages of the real manifest (later lineages such as the champion's stay out, so
    # that the expectations below do not change when candidates are added).
    manifest = yaml.safe_load((CANDIDATES_DIR / "manifest.yml").read_text())
    manifest["lineages"] = [lineage for lineage in manifest["lineages"] if lineage["name"] in SEED_LINEAGES]
    for lineage in manifest["lineages"]:
        for revision in lineage["revisions"]:
            revision["file"] = str(CANDIDATES_DIR / revision["file"])
    (folder / "manifest.yml").write_text(yaml.safe_dump(manifest))
    store = open_store(url)
    with store.session() as session:
        register_seeds(session, read_seeds(folder / "manifest.yml"))
        extra = (CANDIDATES_DIR / "conv2d_a100_ultra.py").read_bytes() + b"\n# same kernel, new comment\n"
        register_revision(
            session,
            extra,
            "conv2d_a100_ultra.py",
            lineage="conv2d_a100_ultra",
            submission_id=EXTRA_ID,
            author="agent-7",
        )
        # Older CPU results: never mixed into the H200 board.
        for revision_id in (1, 2, 99237):
            _record(session, revision_id, CPU, "benchmark", "pass", means=[10.0], shapes=CPU_SHAPES)
        for revision_id in (1, 2, 99237, 512024, 779808, EXTRA_ID):
            _record(session, revision_id, H200, "test", "pass", "5/5 shapes pass")
        for revision_id, means in GPU_MEANS.items():
            _record(session, revision_id, H200, "benchmark", "pass", means=means)
        _record(session, EXTRA_ID, H200, "benchmark", "pass", means=GPU_MEANS[99237])
        _record(session, 99238, H200, "test", "timeout", "shape 3: the call ran past 120 s")
        _record(
            session,
            512025,
            H200,
            "test",
            "wrong_answer",
            "shape 1: 12 of 4096 elements differ [first at (0, 1, 2, 3)]",
        )
        _record(session, 779808, H200, "leaderboard", "wrong_answer", "output replayed from an earlier call")
        # A claimed run is work in progress (no status yet): it must not count at all.
        assert claim_run(session, 2, TASK, "leaderboard", H200, worker=WORKER, ttl_s=600) is not None
    store.close()
    return url


@pytest.fixture(scope="module")
def board(store_url: str) -> Leaderboard:
    with open_store(store_url).session() as session:
        return build_leaderboard(session, TASK)


def _cli(store_url: str, *args: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [str(HARNESS_SCRIPT), *(str(arg) for arg in args)],
        capture_output=True,
        env={**os.environ, "HARNESS_DB": store_url},
        timeout=120,
        check=False,
    )


# --- the leaderboard ------------------------------------------------------------------------


def test_ranks_passing_revisions_by_score_then_lists_the_rest(board: Leaderboard):
    ranked = [(entry.rank, entry.submission_id) for entry in board.entries if entry.rank is not None]
    # 99237 and EXTRA_ID have the same times: a tie shares rank 3 (competition ranking)
    assert ranked == [(1, 512024), (2, 1), (3, 99237), (3, EXTRA_ID), (5, 2)]
    scores = [entry.score_ms for entry in board.entries if entry.rank is not None]
    assert scores == sorted(scores)
    assert scores[0] == pytest.approx(score(GPU_MEANS[512024]))

    unranked = board.entries[len(ranked) :]
    assert [(e.submission_id, e.status) for e in unranked] == [
        (99238, "timeout"),
        (512025, "wrong_answer"),
        (779808, "wrong_answer"),
    ]
    assert all(e.rank is None and e.score_ms is None and e.speedup_vs_reference is None for e in unranked)
    assert unranked[0].reason == "shape 3: the call ran past 120 s"
    assert unranked[2].reason == "output replayed from an earlier call"  # the leaderboard recheck wins


def test_reference_speedups_and_parent_comparisons(board: Leaderboard):
    entries = {entry.submission_id: entry for entry in board.entries}
    assert board.device == "NVIDIA H200"
    assert board.reference_ms == pytest.approx(score(GPU_MEANS[1]))
    assert entries[1].lineage == "conv2d_v2_reference" and entries[1].speedup_vs_reference == pytest.approx(
        1.0
    )
    assert entries[512024].speedup_vs_reference == pytest.approx(2.0)
    assert entries[2].speedup_vs_reference == pytest.approx(0.25)
    assert entries[99237].vs_parent == FASTER
    assert entries[EXTRA_ID].vs_parent == SAME
    assert entries[2].vs_parent is None  # a first revision
    assert entries[512024].vs_parent is None  # its parent timed out: nothing to compare
    assert [b.shape for b in entries[99237].benchmarks] == GPU_SHAPES
    assert entries[99237].benchmarks[1].mean_ms == pytest.approx(4.0)
    assert entries[99237].benchmarks[1].runs == 30
    assert "library_delegation" in entries[779808].flags


def test_device_picks_one_environment_and_never_mixes_cpu_with_gpu(store_url: str):
    with open_store(store_url).session() as session:
        cpu = build_leaderboard(session, TASK, device="cpu")
        by_name = build_leaderboard(session, TASK, device="nvidia h200")
        with pytest.raises(HarnessError, match="no completed runs .* 'tpu'"):
            build_leaderboard(session, TASK, device="tpu")
    assert cpu.device == "cpu (AMD EPYC 7B13)"
    assert [(e.rank, e.submission_id) for e in cpu.ranked()] == [(1, 1), (1, 2), (1, 99237)]
    assert all(e.status == "not_run" for e in cpu.unranked())
    assert [b.shape for b in cpu.ranked()[0].benchmarks] == CPU_SHAPES
    assert by_name.device == "NVIDIA H200" and len(by_name.ranked()) == 5


def test_json_is_exactly_the_contract(store_url: str, board: Leaderboard):
    result = _cli(store_url, "leaderboard", "--format", "json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(data) == {
        "task",
        "device",
        "verdict",
        "exact_answer",
        "mode",
        "reference_ms",
        "entries",
        "judge_version",  # added by issue 28
        "ranking_by",  # added by issue 34
        "gpumode_ranking_by",  # added by issue 34
    }
    assert data["verdict"] == "accurate" and data["exact_answer"] is True and data["mode"] == "benchmark"
    for entry in data["entries"]:
        assert set(entry) == {
            "rank",
            "submission_id",
            "lineage",
            "revision",
            "parent_id",
            "author",
            "status",
            "reason",
            "score_ms",
            "speedup_vs_reference",
            "vs_parent",
            "flags",
            "benchmarks",
            "verdicts",
            "accuracy",
            "speedup_note",  # added by issue 28
            "gpumode_score_ms",  # added by issue 34
        }
        assert set(entry["verdicts"]) == {"gpumode", "accurate"}
        assert all(set(v) == {"status", "reason"} for v in entry["verdicts"].values())
        assert set(entry["accuracy"]) == {"rel_l2", "max_err_over_scale"}
        for timing in entry["benchmarks"]:
            assert set(timing) == {"shape", "mean_ms", "err_ms", "runs", "verdicts", "accuracy"}
        assert (entry["rank"] is None) == (entry["status"] != "pass" or entry["score_ms"] is None)
    assert data == board.model_dump(mode="json")


def test_table_marks_the_reference_and_shows_failures_with_reasons(store_url: str):
    result = _cli(store_url, "leaderboard", "--device", "cuda")
    assert result.returncode == 0, result.stderr
    text = result.stdout.decode()
    assert "conv2d_v2 leaderboard on NVIDIA H200" in text
    assert "conv2d_v2_reference r1" in text and "(reference)" in text
    assert "conv2d_a100_ultra r2" in text and "faster" in text and "same within noise" in text
    ranked_part, unranked_part = text.split("not ranked")
    cells = [line.split()[:2] for line in ranked_part.splitlines()]
    rows = [
        row for row in cells if len(row) == 2 and row[0].isdigit() and row[1].isdigit()
    ]  # not a wrapped line
    assert rows == [["1", "512024"], ["2", "1"], ["3", "99237"], ["3", str(EXTRA_ID)], ["5", "2"]]
    assert all(line == line.rstrip() for line in text.splitlines())  # piped: no padding
    assert "timeout" in unranked_part and "shape 3: the call ran past 120 s" in unranked_part
    assert "[first at (0, 1, 2, 3)]" in unranked_part  # brackets are text, not rich markup
    assert "\x1b[" not in text  # no colour codes when stdout is not a terminal


def test_markdown_has_the_ranked_table_and_the_unranked(board: Leaderboard, store_url: str, tmp_path: Path):
    out = tmp_path / "board.md"
    result = _cli(store_url, "leaderboard", "--format", "markdown", "--out", out)
    assert result.returncode == 0 and result.stdout == b""
    text = out.read_text(encoding="utf-8")
    assert text == render_markdown(board)
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| Rank | Submission | Lineage | Author | Score (ms) | S1 (ms) | S2 (ms) |")
    assert rows[1].startswith("| 1 | 512024 | conv2d_parallel_oh r2 |")
    assert rows[2].startswith("| 2 | 1 | conv2d_v2_reference r1 (reference) |")
    assert (
        "| 99238 | conv2d_parallel_oh r1 | gpumode-leaderboard | timeout | - | - | shape 3: the call ran past 120 s |"
        in text
    )
    assert "- S1: size=1024 kernelsize=3 channels=16 batch=2" in text


def test_html_is_self_contained_with_chart_and_coloured_diffs(
    board: Leaderboard, store_url: str, tmp_path: Path
):
    out = tmp_path / "board.html"
    result = _cli(store_url, "leaderboard", "--format", "html", "--out", out)
    assert result.returncode == 0, result.stderr
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<link" not in page and "<script" not in page and "src=" not in page
    assert page.count("<svg") == 1
    # A line from each scored parent to its scored child: 2 -> 99237 -> EXTRA_ID; siblings are not joined.
    assert page.count('class="edge"') == 2 and "<polyline" not in page
    assert page.count('<div class="scroll"><table>') == 2  # wide tables scroll inside the page
    assert 'class="reference"' in page and "stroke-dasharray" in page
    assert "× 99238" in page  # an unranked revision marked on the axis
    assert ".diff .added { background: #dafbe1" in page and ".diff .removed { background: #ffebe9" in page
    assert '<span class="removed">-         # === H100/B200 Hopper Architecture ===</span>' in page
    assert '<span class="added">+ def conv2d_kernel_a100_ultra(</span>' in page
    assert '<span class="skipped">  ⋯ 3 unchanged lines</span>' in page
    assert page.count('<details class="diff"') == len(board.entries)


def test_chart_places_points_by_revision_and_score(board: Leaderboard):
    chart = build_chart(board)
    assert chart is not None and not chart.log_scale  # scores span less than a factor of ten
    series = {s.lineage: s for s in chart.series}
    assert set(series) == {
        "conv2d_a100_ultra",
        "conv2d_parallel_oh",
    }  # conv2d_cudnn_wrap: no point, no legend
    a100 = series["conv2d_a100_ultra"].points
    assert [p.label for p in a100] == ["2", "99237", str(EXTRA_ID)]
    assert a100[0].x < a100[1].x < a100[2].x
    assert a100[0].y < a100[1].y  # SVG's y grows downwards: the slower r1 is drawn higher
    assert a100[1].y == pytest.approx(a100[2].y, abs=0.5)
    assert [(parent.label, child.label) for parent, child in series["conv2d_a100_ultra"].edges] == [
        ("2", "99237"),
        ("99237", str(EXTRA_ID)),
    ]
    assert chart.top <= chart.reference_y <= chart.bottom


def test_bad_leaderboard_requests_are_one_line_errors(store_url: str, tmp_path: Path):
    for args in (("--task", "nope"), ("--device", "tpu"), ("--out", tmp_path / "missing" / "board.md")):
        result = _cli(store_url, "leaderboard", *args)
        assert result.returncode == 2
        assert result.stdout == b""
        assert result.stderr.decode().count("\n") == 1 and result.stderr.startswith(b"error: ")


# --- diff and history -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "seed_name, submission_id",
    [
        ("000_f2b8471f63303882.txt", 99237),
        ("001_b4a989dff272506b.txt", 512024),
        ("003_dc5811c4f721ff3c.txt", 779808),
    ],
)
def test_diff_cli_reproduces_the_seed(store_url: str, seed_name: str, submission_id: int):
    result = _cli(store_url, "diff", submission_id)
    assert result.returncode == 0, result.stderr
    assert (
        result.stdout == (SEEDS_DIR / seed_name).read_bytes() + b"\n"
    )  # the seed's text, then a final newline


def test_diff_against_another_revision_equals_render_diff(store_url: str):
    result = _cli(store_url, "diff", EXTRA_ID, "--against", 2)
    with open_store(store_url).session() as session:
        expected = render_diff(
            revision_code(get_revision(session, 2)), revision_code(get_revision(session, EXTRA_ID)), EXTRA_ID
        )
    assert result.returncode == 0
    assert result.stdout == expected.encode("utf-8") + b"\n"
    assert result.stdout.endswith(b"+ # same kernel, new comment\n")


def test_diff_on_a_terminal_is_coloured_and_ends_with_a_newline(store_url: str):
    """The text itself ends without a newline; the CLI adds one, and colours it on a terminal."""
    primary, secondary = pty.openpty()
    tty.setraw(secondary)  # no newline translation: read back the exact bytes
    process = subprocess.Popen(
        [str(HARNESS_SCRIPT), "diff", "99237"],
        stdout=secondary,
        stderr=subprocess.PIPE,
        env={**os.environ, "HARNESS_DB": store_url},
    )
    os.close(secondary)
    output = b""
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        output += chunk
    os.close(primary)
    assert process.wait(timeout=60) == 0
    assert b"\x1b[32m+ " in output and b"\x1b[31m- " in output  # added lines green, removed red
    plain = re.sub(rb"\x1b\[[0-9;]*m", b"", output)
    assert plain == (SEEDS_DIR / "000_f2b8471f63303882.txt").read_bytes() + b"\n"


@pytest.mark.parametrize(
    "args", [("diff", "424242"), ("diff", "99237", "--against", "424242"), ("history", "no_such_lineage")]
)
def test_unknown_ids_and_lineages_are_one_line_errors(store_url: str, args: tuple[str, ...]):
    result = _cli(store_url, *args)
    assert result.returncode == 2
    assert result.stdout == b""
    stderr = result.stderr.decode()
    assert stderr.startswith("error: ") and stderr.count("\n") == 1


def _headers(text: str) -> list[tuple[str, int]]:
    """(header line, submission id of the diff below it) for each history item."""
    lines = text.split("\n")
    return [
        (line, int(lines[i + 1].removeprefix("submission ")))
        for i, line in enumerate(lines)
        if line.startswith("== ")
    ]


def test_history_in_submission_order_and_best_first(store_url: str, board: Leaderboard):
    in_order = _cli(store_url, "history")
    by_rank = _cli(store_url, "history", "--rank")
    assert in_order.returncode == 0 and by_rank.returncode == 0
    submitted = [submission for _, submission in _headers(in_order.stdout.decode())]
    assert submitted == [1, 2, 99237, 99238, 512024, 512025, 779808, EXTRA_ID]
    ranked = [submission for _, submission in _headers(by_rank.stdout.decode())]
    assert ranked == [entry.submission_id for entry in board.entries]

    headers = {submission: line for line, submission in _headers(in_order.stdout.decode())}
    assert headers[99237].startswith("== #3 · pass · 2.828 ms · 0.50x reference · faster than parent 2")
    assert headers[99238] == (
        "== unranked · timeout: shape 3: the call ran past 120 s · first revision · conv2d_parallel_oh r1 · gpumode-leaderboard"
    )
    assert "same as parent 99237 within noise · conv2d_a100_ultra r3 · agent-7" in headers[EXTRA_ID]


def test_history_shows_each_diff_exactly(store_url: str):
    with open_store(store_url).session() as session:
        items = build_history(session, TASK, "conv2d_a100_ultra")
        text = render_history(items)
        diffs = [revision_diff(session, submission) for submission in (2, 99237, EXTRA_ID)]
    assert [item.entry.submission_id for item in items] == [2, 99237, EXTRA_ID]
    assert diffs[1] == (SEEDS_DIR / "000_f2b8471f63303882.txt").read_text(encoding="utf-8")
    for diff in diffs:
        assert f"\n{diff}" in text
    result = _cli(store_url, "history", "conv2d_a100_ultra")
    assert result.stdout == text.encode("utf-8") + b"\n"


def test_chart_turns_logarithmic_when_scores_span_more_than_ten_times(board: Leaderboard):
    entries = [
        entry.model_copy(update={"score_ms": entry.score_ms * 100}) if entry.submission_id == 2 else entry
        for entry in board.entries
    ]
    chart = build_chart(board.model_copy(update={"entries": entries}))
    assert chart is not None and chart.log_scale
    (a100,) = [series for series in chart.series if series.lineage == "conv2d_a100_ultra"]
    y_values = [point.y for point in a100.points]
    assert all(chart.top <= y <= chart.bottom for y in [*y_values, chart.reference_y])
    tick_labels = [tick.label for tick in chart.y_ticks]
    assert {"1", "10", "100"} <= set(tick_labels)
