"""Both verdicts end to end: real sandboxed children on the CPU, a task whose fp32 reference is off
the exact answer at known elements (as cuDNN's summation order is on the big conv2d_v2 shapes),
the verdicts stored as columns, and the leaderboard ranked under each verdict.

The task is conv2d_v2 with one change: its `ref_kernel` adds 0.01 to every 7th element when it
computes in fp32 (the exact answer, computed in float64, is untouched). So:
- a candidate that computes the exact answer and rounds it once fails GPU MODE's rule exactly
  where the reference is off, and passes `accurate`;
- the honest fp32 candidate (cuDNN's, here torch's CPU convolution) does the same;
- a candidate that rounds its inputs to bf16 first (reduced precision) fails both.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from harness.config import CANDIDATES_DIR
from harness.environment import Environment
from harness.report.history import build_history, render_history
from harness.report.html import render_leaderboard
from harness.sandbox.evaluation import evaluate
from harness.standing.board import build_leaderboard
from harness.store.revisions import register_revision
from harness.store.runs import claim_run, record_run
from harness.store.session import open_store
from harness.tasks.problem import load_problem
from harness.tasks.spec import PROBLEMS_DIR
from harness.timing import StoppingRule

OFF_REFERENCE = '''

_fp32_ref_kernel = ref_kernel


def ref_kernel(data):
    """The real reference, off by 0.01 at every 7th element when it computes in fp32."""
    out = _fp32_ref_kernel(data)
    if out.dtype == torch.float32:
        out = out.clone()
        out.view(-1)[::7] += 0.01
    return out
'''

SHAPES = [
    {"size": 12, "kernelsize": 4, "channels": 8, "batch": 1, "seed": 101},
    {"size": 10, "kernelsize": 2, "channels": 8, "batch": 2, "seed": 202},
]

EXACT = b"""from task import input_t, output_t
import torch
import torch.nn.functional as F


def custom_kernel(data: input_t) -> output_t:
    x, w, out = data
    out.copy_(F.conv2d(x.double(), w.double()).float())
    return out
"""

BF16 = EXACT.replace(b"x.double(), w.double()", b"x.bfloat16().double(), w.bfloat16().double()")


@pytest.fixture(scope="module")
def off_task(tmp_path_factory: pytest.TempPathFactory):
    folder = Path(
        shutil.copytree(PROBLEMS_DIR / "conv2d_v2_py", tmp_path_factory.mktemp("off_task") / "conv2d_v2_py")
    )
    shutil.copy(PROBLEMS_DIR / "utils.py", folder.parent)
    spec = yaml.safe_load((folder / "task.yml").read_text())
    spec["harness"]["smoke"] = SHAPES
    (folder / "task.yml").write_text(yaml.safe_dump(spec, sort_keys=False))
    (folder / "reference.py").write_text((folder / "reference.py").read_text() + OFF_REFERENCE)
    return load_problem(folder, "conv2d_v2")


@pytest.fixture(scope="module")
def evaluations(off_task):
    candidates = {
        "exact.py": EXACT,
        "bf16.py": BF16,
        "conv2d_v2_reference.py": (CANDIDATES_DIR / "conv2d_v2_reference.py").read_bytes(),
    }
    rule = StoppingRule(min_runs=3, max_runs=3, budget_s=0.2)
    return {
        name: (code, evaluate(code, name, off_task, device="cpu", shape_set="smoke", timed=True, rule=rule))
        for name, code in candidates.items()
    }


@pytest.mark.parametrize("name", ["exact.py", "conv2d_v2_reference.py"])
def test_an_accurate_output_fails_gpumode_where_the_reference_is_off_and_is_timed(evaluations, name):
    evaluation = evaluations[name][1]
    assert evaluation.status == "pass", evaluation.reason
    assert evaluation.score_ms is not None, "passing one verdict is enough to be timed"
    for shape in evaluation.shapes:
        verdicts = shape.verdicts
        assert verdicts.accurate.status == "pass" and verdicts.gpumode.status == "fail"
        p = shape.shape
        numel = p["batch"] * p["channels"] * (p["size"] - p["kernelsize"] + 1) ** 2
        assert 0 < verdicts.gpumode.failures <= -(-numel // 7), "only where the reference is off"
        assert "of them where the exact answer fails too" in verdicts.gpumode.reason
        assert shape.accuracy.rel_l2 is not None and shape.accuracy.rel_l2 < 1e-6
        assert shape.accuracy.max_err_over_scale is not None and shape.accuracy.max_err_over_scale < 1e-5


def test_reduced_precision_fails_both_verdicts_and_is_not_timed(evaluations):
    evaluation = evaluations["bf16.py"][1]
    assert evaluation.status == "wrong_answer" and evaluation.score_ms is None
    verdicts = evaluation.shapes[0].verdicts
    assert verdicts.gpumode.status == verdicts.accurate.status == "fail"
    assert "GPU MODE check: fails" in evaluation.reason and "accurate check:" in evaluation.reason


CPU = Environment(
    device="cpu",
    device_name="test cpu",
    driver_version="",
    cuda_runtime="",
    torch="2.13.0",
    triton="3.9.0",
    python="3.11",
    harness="0.1.0",
    env_key="verdict-test-cpu",
)


def _unflagged(evaluation):
    """The evaluation without timing flags: tiny CPU calls on a loaded machine can draw the
    parent's clock flag (tests/test_adversarial.py covers the flags); these tests are about the
    verdicts."""
    evaluation = evaluation.model_copy(deep=True)
    for shape in evaluation.shapes:
        shape.timing_flags = []
        if shape.check.timing is not None:
            shape.check.timing.flags = []
    return evaluation


@pytest.fixture(scope="module")
def store_url(tmp_path_factory, evaluations) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('verdict_store') / 'store.sqlite'}"
    store = open_store(url)
    with store.session() as session:
        for name, (code, timed) in evaluations.items():
            evaluation = _unflagged(timed)
            revision = register_revision(session, code, name, task="conv2d_v2").revision
            run = claim_run(session, revision.id, "conv2d_v2", "benchmark", CPU, worker="w", ttl_s=60)
            assert record_run(session, run.id, "w", evaluation, score_ms=evaluation.score_ms) is not None
    store.close()
    return url


def _ids(board) -> dict[str, int]:
    return {entry.lineage: entry.submission_id for entry in board.entries}


def test_the_leaderboard_ranks_under_the_tasks_verdict_and_shows_gpumodes_reason(store_url):
    store = open_store(store_url)
    with store.session() as session:
        board = build_leaderboard(session, "conv2d_v2")
        assert board.verdict == "accurate" and board.mode == "benchmark"
        assert {entry.lineage for entry in board.ranked()} == {"exact", "conv2d_v2_reference"}
        exact = next(entry for entry in board.entries if entry.lineage == "exact")
        assert exact.verdicts["accurate"].status == "pass" and exact.verdicts["gpumode"].status == "fail"
        assert (
            "smoke[0]" in exact.verdicts["gpumode"].reason
            and "exact answer fails too" in exact.verdicts["gpumode"].reason
        )
        assert exact.accuracy.rel_l2 < 1e-6 and all(
            t.verdicts["gpumode"].status == "fail" for t in exact.benchmarks
        )
        bf16 = next(entry for entry in board.entries if entry.lineage == "bf16")
        assert bf16.rank is None and bf16.status == "wrong_answer"
        assert bf16.verdicts["accurate"].status == bf16.verdicts["gpumode"].status == "fail"
        for fmt in ("table", "markdown", "html", "json"):
            text = render_leaderboard(session, board, fmt)
            assert "exact answer fails too" in text, fmt
            assert ("FAIL" in text) or fmt == "json", fmt
        history = render_history(build_history(session, "conv2d_v2"))
        assert "fails GPU MODE" in history
    store.close()


def test_verdict_gpumode_ranks_exactly_what_gpu_mode_accepts(store_url):
    store = open_store(store_url)
    with store.session() as session:
        board = build_leaderboard(session, "conv2d_v2", verdict="gpumode")
        assert board.verdict == "gpumode" and board.ranked() == []
        for entry in board.entries:
            assert entry.status == "wrong_answer"
            if entry.lineage != "bf16":  # timed (it passes accurate), not ranked under gpumode
                assert entry.score_ms is not None and entry.reason.startswith(
                    "fails the gpumode verdict: benchmark smoke[0]"
                )
        gpumode_passes = {e.lineage for e in board.entries if e.verdicts["gpumode"].status == "pass"}
        assert {e.lineage for e in board.ranked()} == gpumode_passes
    store.close()


def test_the_verdict_option_is_on_the_commands_and_an_unknown_one_is_refused(run_cli):
    for command in ("leaderboard", "history", "tournament"):
        result = run_cli(command, "--verdict", "nope")
        assert result.returncode == 2 and "'nope' is not one of" in result.stderr
    result = run_cli("leaderboard", "--verdict", "gpumode", "--format", "json")
    assert result.returncode == 0, result.stderr
    assert '"verdict": "gpumode"' in result.stdout


def test_the_prompts_say_which_verdict_ranks_and_show_the_parents_verdicts(store_url):
    from harness.evolve.prompts import prompt_context, render_step_prompt
    from harness.store.revisions import get_revision

    store = open_store(store_url)
    with store.session() as session:
        board = build_leaderboard(session, "conv2d_v2")
        exact = get_revision(session, _ids(board)["exact"])
        context = prompt_context(session, exact)
        improve = render_step_prompt("improve", context)
        system = render_step_prompt("system", context)
        bf16 = get_revision(session, _ids(board)["bf16"])
        fix = render_step_prompt("fix", prompt_context(session, bf16))
    store.close()
    assert "That verdict (`accurate`) ranks" in system and "exact answer" in system
    assert "- accurate (ranks): pass" in improve
    assert "- GPU MODE: fail: benchmark smoke[0]" in improve and "exact answer fails too" in improve
    assert "Error against the exact answer: relative L2" in improve
    assert "- accurate (ranks): fail" in fix and "- GPU MODE: fail" in fix


def test_a_board_never_compares_scores_of_different_modes(tmp_path, evaluations):
    """The reference timed in benchmark mode, a candidate in leaderboard mode: the board ranks the
    leaderboard-mode score alone, and no speedup mixes the two modes."""
    store = open_store(f"sqlite:///{tmp_path / 'modes.sqlite'}")
    with store.session() as session:
        ids = {}
        for name, mode in (("conv2d_v2_reference.py", "benchmark"), ("exact.py", "leaderboard")):
            code, evaluation = evaluations[name][0], _unflagged(evaluations[name][1])
            ids[name] = register_revision(session, code, name, task="conv2d_v2").revision.id
            run = claim_run(session, ids[name], "conv2d_v2", mode, CPU, worker="w", ttl_s=60)
            assert record_run(session, run.id, "w", evaluation, score_ms=evaluation.score_ms) is not None
        board = build_leaderboard(session, "conv2d_v2")
    store.close()
    assert board.mode == "leaderboard" and board.reference_ms is None
    assert [entry.submission_id for entry in board.ranked()] == [ids["exact.py"]]
    reference = next(entry for entry in board.entries if entry.submission_id == ids["conv2d_v2_reference.py"])
    assert reference.rank is None and "timed in benchmark mode only" in reference.reason
    assert all(entry.speedup_vs_reference is None for entry in board.entries)
