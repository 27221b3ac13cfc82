"""The honest corpus (issue 28): candidates in tests/honest/ written the ways users write
kernels that run on the CPU (torch.compile in its two modes, a fresh tensor instead of the
buffer, an odd but correct layout, a lazily negated view, Triton autotune through the
interpreter, threads joined before return, a C++ extension built at import with load_inline; a
CUDA graph and two CUDA streams joined before return, which take a plain path on the CPU), each checked and timed in the real sandbox on the
conv2d task's smoke shapes. A judge that fails or flags any of them is wrong: each must `pass`
on every shape with no timing flag, in benchmark mode (the default) and in leaderboard mode.

The torch.compile candidates are the slow ones (each compiles with the C compiler in its child,
about 20 s a shape on a loaded 2-core machine); they stay in, since they are the style issue 28
found failed; so does the extension (about a minute of g++ at import)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.sandbox.evaluation import Evaluation, Evaluator, evaluate_interleaved
from harness.sandbox.limits import SandboxLimits
from harness.tasks import load_task
from harness.timing import StoppingRule

TASK = load_task("conv2d_v2")
HONEST = Path(__file__).parent / "honest"
NAMES = sorted(path.name for path in HONEST.glob("*.py"))
LIMITS = {"call_timeout_s": 180.0, "import_timeout_s": 300.0}  # the extension's build: a minute or more
RULE = StoppingRule(min_runs=3, max_runs=5, budget_s=0.5)
SECRET = 424242
# the cheap ones again in leaderboard mode (a fresh seed per timed call)
LEADERBOARD = ["fresh_tensor.py", "negative_view.py", "odd_strides.py", "joined_threads.py"]
CASES = [(name, "test") for name in NAMES] + [(name, "leaderboard") for name in LEADERBOARD]


def evaluate_corpus(
    device: str, cases: list[tuple[str, str]], shape_set: str | None = None
) -> dict[tuple[str, str], Evaluation]:
    evaluators = [
        Evaluator(
            (HONEST / name).read_bytes(),
            name,
            TASK,
            device=device,
            shape_set=shape_set,
            mode=mode,
            timed=True,
            secret_seed=SECRET if mode == "leaderboard" else None,
            limits=SandboxLimits.from_settings(**LIMITS),
            rule=RULE,
        )
        for name, mode in cases
    ]
    return dict(zip(cases, evaluate_interleaved(evaluators, group_size=4)))


@pytest.fixture(scope="module")
def honest() -> dict[tuple[str, str], Evaluation]:
    return evaluate_corpus("cpu", CASES)


def test_the_corpus_holds_every_style():
    assert set(NAMES) >= {
        "compiled.py",
        "compiled_reduce_overhead.py",
        "fresh_tensor.py",
        "odd_strides.py",
        "negative_view.py",
        "triton_autotune.py",
        "joined_threads.py",
        "cuda_graph.py",
        "two_streams.py",
        "inline_extension.py",
    }


@pytest.mark.parametrize(("name", "mode"), CASES)
def test_an_honest_candidate_passes_unflagged(honest, name, mode):
    evaluation = honest[name, mode]
    assert evaluation.status == "pass", (evaluation.reason, evaluation.log_tail[-2000:])
    assert evaluation.score_ms is not None
    for shape in evaluation.shapes:
        assert shape.status == "pass" and shape.timing_flags == [], (shape.index, shape.check.timing)


def test_every_honest_candidate_passes_unflagged_on_cuda():
    """The whole corpus on the GPU, both modes (the CUDA graph and the two streams take their CUDA
    paths there), on the test shapes."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    cases = [(name, mode) for name in NAMES for mode in ("test", "leaderboard")]
    results = evaluate_corpus("cuda", cases, shape_set="tests")
    problems = []
    for (name, mode), evaluation in results.items():
        flags = [(shape.index, shape.timing_flags) for shape in evaluation.shapes if shape.timing_flags]
        print(f"honest on cuda: {name} {mode}: {evaluation.status} {evaluation.score_ms} ms flags={flags}")
        if evaluation.status != "pass" or flags:
            problems.append((name, mode, evaluation.status, evaluation.reason, flags))
    assert not problems, problems
