"""The first hour, round 3 (issue 30, items 4, 6, 7 and 8), through the real CLI on tiny stores
on the CPU: `bench` on a fresh store times the task's reference too; lineages, parents, `--task`
and `#!POPCORN` directives stay within one task; the proposer prompt reads well and says where
its times come from; the experiment page colours only real differences and shows the
experiment's own scores; the HTML leaderboard keeps speedup and verdicts in view at 1280 px and
its chart labels apart.

Runs on a GPU-like device are recorded through the store's own functions (claim_run,
record_run), as the runner records them, since this machine has no GPU."""

from __future__ import annotations

import html
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HARNESS_SCRIPT, record_timed_run, rows

from harness.candidates import read_seeds
from harness.config import CANDIDATES_DIR
from harness.environment import Environment
from harness.report.experiment import COMPARISON_COLOURS, ROOT_COLOUR
from harness.report.html import LABEL_CHAR_PX, LABEL_HEIGHT_PX
from harness.report.leaderboard import format_ms
from harness.store.revisions import register_revision, register_seeds
from harness.store.session import open_store
from harness.tasks import load_task

PROBLEMS = Path(__file__).parent / "data" / "gpumode_problems"
REPLY_SCRIPT = Path(__file__).parent / "proposers" / "reply.py"
TASK = "conv2d_v2"

# torch's conv2d after a sleep: far slower than the reference, so that a loaded CPU still
# times it steadily (as test_first_hour's slow candidate)
MY_CONV = b"""import time

import torch.nn.functional as F


def custom_kernel(data):
    input_tensor, kernel, output = data
    time.sleep(0.06)
    output.copy_(F.conv2d(input_tensor, kernel, stride=1, padding=0))
    return output
"""


def harness(*args: object, db: str, env: dict[str, str] | None = None, timeout: float = 600):
    environment = {**os.environ, "HARNESS_DB": db, **(env or {})}
    return subprocess.run(
        [str(HARNESS_SCRIPT), *map(str, args)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=timeout,
        check=False,
    )


def registered_id(done: subprocess.CompletedProcess[str]) -> int:
    assert done.returncode == 0, done.stderr
    return int(re.search(r"submission (\d+)", done.stdout).group(1))


def refused(done: subprocess.CompletedProcess[str]) -> str:
    """The one line of a refusal (exit 2, nothing on stdout)."""
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    return done.stderr


def dump(url: str) -> list[str]:
    import sqlite3

    connection = sqlite3.connect(url.removeprefix("sqlite:///"))
    try:
        return list(connection.iterdump())
    finally:
        connection.close()


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A store as a wheel user has it after `harness init`: no seeds, so no reference. One
    candidate registered and benched on the CPU; then a short experiment from it whose children
    only add a comment (so every step is most likely `same within noise`)."""
    folder = tmp_path_factory.mktemp("fresh")
    store = folder / "store"
    store.mkdir()
    db = f"sqlite:///{store / 'store.sqlite'}"
    assert harness("init", db=db).returncode == 0
    (folder / "my_conv.py").write_bytes(MY_CONV)
    candidate = registered_id(harness("register", folder / "my_conv.py", db=db))
    bench = harness("bench", candidate, "--device", "cpu", "--budget", "0.05", "--format", "json", db=db)
    proposer = shlex.join([sys.executable, str(REPLY_SCRIPT), "search-replace"])
    evolve = harness(
        "evolve",
        "--from",
        candidate,
        "--generations",
        2,
        "--proposer",
        proposer,
        "--device",
        "cpu",
        "--budget",
        "0.05",
        db=db,
    )
    return {"db": db, "folder": folder, "candidate": candidate, "bench": bench, "evolve": evolve}


# --- 4. a fresh store has no reference until `harness seed` --------------------------------------


def test_bench_on_a_fresh_store_registers_and_times_the_reference_beside_the_candidate(fresh):
    bench = fresh["bench"]
    assert bench.returncode == 0, bench.stderr
    notice = [line for line in bench.stderr.splitlines() if "had no reference in the store" in line]
    assert len(notice) == 1, bench.stderr
    reference = int(re.search(r"as submission (\d+) \(conv2d_v2_reference r1\)", notice[0]).group(1))
    reports = {report["submission_id"]: report for report in json.loads(bench.stdout)}
    assert set(reports) == {fresh["candidate"], reference}
    mine = reports[fresh["candidate"]]
    assert mine["status"] == "pass" and mine["speedup_vs_reference"] is not None, mine
    assert 0 < mine["speedup_vs_reference"] < 1  # 60 ms of sleep per call against torch's conv2d
    # registered as `harness seed` registers it: seed finds it there and adds it nothing
    seed = harness("seed", db=fresh["db"])
    assert seed.returncode == 0, seed.stderr
    assert (
        f"unchanged: these bytes are already submission {reference} (conv2d_v2_reference r1)" in seed.stdout
    )
    board = json.loads(harness("leaderboard", "--format", "json", db=fresh["db"]).stdout)
    entry = next(e for e in board["entries"] if e["submission_id"] == fresh["candidate"])
    assert entry["speedup_vs_reference"] is not None and entry["speedup_note"] is None


# --- 6. lineages, parents, --task and #!POPCORN stay within one task ------------------------------


def test_lineages_and_parents_stay_within_their_task_and_conflicts_are_refused(tmp_path):
    db = f"sqlite:///{tmp_path / 'store.sqlite'}"
    env = {"HARNESS_CACHE_DIR": str(tmp_path / "cache")}
    problems = tmp_path / "problems"
    problems.mkdir()
    shutil.copy(PROBLEMS / "utils.py", problems / "utils.py")
    for name in ("vectoradd_py", "matmul_py"):
        shutil.copytree(PROBLEMS / name, problems / name)
        assert harness("task", "add", problems / name, db=db, env=env).returncode == 0

    def register(path: Path, *options: object) -> subprocess.CompletedProcess[str]:
        return harness("register", path, *options, db=db, env=env)

    vector = problems / "vectoradd_py" / "solutions" / "correct.py"
    matrix = problems / "matmul_py" / "solutions" / "correct.py"
    first = register(vector, "--task", "vectoradd")
    assert "correct r1 (no parent)" in first.stdout, first.stderr
    vector_id = registered_id(first)
    # GPU MODE names every task's solution alike: another task's correct.py starts its own lineage
    other = register(matrix, "--task", "matmul")
    assert "correct-matmul r1 (no parent)" in other.stdout, other.stderr
    matrix_id = registered_id(other)
    # a new version of the first file continues its lineage and its task, without --task
    edited = tmp_path / "edit" / "correct.py"
    edited.parent.mkdir()
    edited.write_bytes(vector.read_bytes() + b"\n# faster, maybe\n")
    again = register(edited)
    assert f"correct r2 (parent {vector_id})" in again.stdout, again.stderr
    again_id = registered_id(again)
    assert rows(db, "select task from revisions where id = ?", again_id) == [("vectoradd",)]
    assert rows(db, "select task from revisions where id = ?", matrix_id) == [("matmul",)]

    directive = tmp_path / "directive" / "submission.py"
    directive.parent.mkdir()
    directive.write_bytes(b"#!POPCORN leaderboard vectoradd\n" + vector.read_bytes())
    # a child keeps its parent's task; a new lineage may branch from the parent
    branch = register(directive, "--parent", vector_id, "--lineage", "vector_branch")
    assert f"vector_branch r1 (parent {vector_id})" in branch.stdout, branch.stderr
    before = dump(db)
    cases = [
        (
            register(directive, "--task", "matmul"),
            "error: --task matmul conflicts with the file's `#!POPCORN leaderboard vectoradd` directive",
        ),
        (
            register(edited, "--parent", matrix_id, "--task", "vectoradd"),
            f"error: parent {matrix_id} is a revision of task matmul, not vectoradd",
        ),
        (
            register(directive, "--parent", matrix_id),
            f"error: parent {matrix_id} is a revision of task matmul, not vectoradd",
        ),
        (
            register(edited, "--lineage", "correct", "--task", "matmul"),
            "error: lineage 'correct' holds revisions of task vectoradd, not matmul",
        ),
        (
            register(edited, "--lineage", "correct-matmul", "--parent", again_id),
            "error: lineage 'correct-matmul' holds revisions of task matmul, not vectoradd",
        ),
    ]
    for done, start in cases:
        assert refused(done).startswith(start), done.stderr
    assert dump(db) == before  # nothing written


# --- 7. the proposer prompt ----------------------------------------------------------------------


def _verdict_lines_whole(prompt: str) -> None:
    assert "pass- " not in prompt and "passError" not in prompt, prompt
    lines = prompt.splitlines()
    assert "- GPU MODE: pass" in lines and "- accurate (ranks): pass" in lines, prompt
    for line in lines:
        if line.startswith("Error against the exact answer"):
            assert line.endswith(".") and "- " not in line


def _listed_shapes(prompt: str, heading: str) -> list[str]:
    lines = prompt.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    shapes = []
    for line in lines[start + 1 :]:
        if not line.startswith("- size="):
            break
        shapes.append(line[2:])
    return shapes


def test_the_prompt_of_a_cpu_run_says_its_times_are_the_cpu_s_on_the_smoke_shapes(fresh):
    spec = load_task(TASK)
    candidate, db = fresh["candidate"], fresh["db"]
    improve = harness("prompt", "render", "improve", "--from", candidate, db=db)
    assert improve.returncode == 0, improve.stderr
    text = improve.stdout
    _verdict_lines_whole(text)
    timed = _listed_shapes(text, "The times below were taken on cpu")
    assert timed == [shape.label() for shape in spec.smoke]
    assert "no GPU" in text.split("The times below were taken on cpu")[1].splitlines()[0]
    # the GPU's shapes are named as such, never in the list of what was timed here
    gpu_line = next(line for line in text.splitlines() if line.startswith("On a GPU the score"))
    assert all(shape.label() in gpu_line for shape in spec.benchmarks)
    table = [line for line in text.splitlines() if line.startswith("| size=")]
    assert [line.split(" | ")[0][2:] for line in table] == timed
    system = harness("prompt", "render", "system", "--from", candidate, db=db).stdout
    assert "CUDA events" not in system and "L2" not in system
    assert "timed on the CPU with the host clock" in system
    fix = harness("prompt", "render", "fix", "--from", candidate, db=db)
    assert fix.returncode == 0, fix.stderr
    _verdict_lines_whole(fix.stdout)


H200 = Environment(
    device="cuda",
    device_name="NVIDIA H200",
    driver_version="570.1",
    cuda_runtime="12.8",
    torch="2.13.0",
    triton="3.9.0",
    python="3.11.7",
    harness="0.1.0",
    env_key="h200-test-env",
)
CPU = H200.model_copy(
    update={
        "device": "cpu",
        "device_name": "AMD EPYC",
        "driver_version": "",
        "cuda_runtime": "",
        "env_key": "cpu-test-env",
    }
)


def _register_reference(session) -> int:
    seed = read_seeds(CANDIDATES_DIR / "manifest.yml")[0]
    assert seed.lineage == "conv2d_v2_reference"
    return register_seeds(session, [seed])[0].revision.id


@pytest.fixture(scope="module")
def gpu_like(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The reference and two revisions with long names, timed on an H200-like device in one run
    on the task's benchmark shapes."""
    folder = tmp_path_factory.mktemp("gpu_like")
    db = f"sqlite:///{folder / 'store.sqlite'}"
    spec = load_task(TASK)
    shapes = [shape.model_dump() for shape in spec.benchmarks]
    with open_store(db) as store, store.session() as session:
        reference = _register_reference(session)
        ids = []
        for number in range(2):
            outcome = register_revision(
                session,
                MY_CONV + f"# version {number}\n".encode(),
                "a_rather_long_lineage_name_for_an_evolved_kernel.py",
                author="/usr/bin/python3 /home/someone/agents/proposer.py --model a-long-model-name",
            )
            ids.append(outcome.revision.id)
        for revision_id, factor in ((reference, 1.0), (ids[0], 0.8), (ids[1], 0.5)):
            means = [factor * (i + 1) for i in range(len(shapes))]
            record_timed_run(
                session, revision_id, TASK, H200, shapes, means, batch="h200-batch", set_name="benchmarks"
            )
    return {"db": db, "ids": ids, "folder": folder}


def test_the_prompt_of_a_gpu_run_says_its_times_are_the_gpu_s_on_the_benchmark_shapes(gpu_like):
    spec = load_task(TASK)
    improve = harness("prompt", "render", "improve", "--from", gpu_like["ids"][1], db=gpu_like["db"])
    assert improve.returncode == 0, improve.stderr
    text = improve.stdout
    _verdict_lines_whole(text)
    timed = _listed_shapes(text, "The times below were taken on NVIDIA H200")
    assert timed == [shape.label() for shape in spec.benchmarks]
    assert "On a GPU the score" not in text and "smoke" not in text
    system = harness("prompt", "render", "system", "--from", gpu_like["ids"][1], db=gpu_like["db"]).stdout
    assert "timed with CUDA events after a warm-up, with the L2 cache flushed before every call" in system
    assert "host clock" not in system
    # asked for a device with nothing timed yet: it says so, and lists what that device times
    cpu = harness(
        "prompt", "render", "improve", "--from", gpu_like["ids"][1], "--device", "cpu", db=gpu_like["db"]
    )
    assert cpu.returncode == 0, cpu.stderr
    assert _listed_shapes(cpu.stdout, "Nothing is timed on cpu yet") == [s.label() for s in spec.smoke]


# --- 8. the experiment page and the HTML leaderboard ---------------------------------------------


def test_the_experiment_page_colours_only_noise_aware_differences_with_its_own_scores(fresh):
    assert fresh["evolve"].returncode == 0, fresh["evolve"].stderr
    db, root = fresh["db"], fresh["candidate"]
    page_path = fresh["folder"] / "experiment.html"
    shown = harness("experiments", "show", 1, "--format", "html", "--out", page_path, db=db)
    assert shown.returncode == 0, shown.stderr
    page = page_path.read_text()
    steps = rows(
        db,
        "select generation, parent_id, child_id, status, score_ms, vs_parent, parent_score_ms "
        "from experiment_steps where experiment_id = 1 order by generation",
    )
    children = {child: (status, score_ms, vs) for _, _, child, status, score_ms, vs, _ in steps if child}
    assert children, steps
    fills = dict(
        re.findall(r'<g id="node-r(\d+)"[^>]*>\s*<title>[^<]*</title>\s*<circle [^>]*fill="(#\w+)"', page)
    )
    assert fills[str(root)] == ROOT_COLOUR
    for child, (status, _, vs) in children.items():
        if status == "pass" and vs is not None:
            assert fills[str(child)] == COMPARISON_COLOURS[vs], (child, vs)
    # the root's score is the one the experiment timed it at, beside its first child
    first_parent_score = next((ms for _, parent, *_, ms in steps if parent == root and ms), None)
    panel = page.split(f'id="panel-r{root}"')[1].split("</details>")[0]
    if first_parent_score is None:  # never timed beside a child: no score, not the leaderboard's
        assert "where the experiment started</td>" in panel
    else:
        assert f"where the experiment started: {format_ms(first_parent_score)} ms" in panel
    # a best path only through steps each faster or the same within noise, one of them faster
    classes = re.findall(r'class="((?:node|edge)[^"]*)"', page)
    if not any(vs == "faster" for *_, vs, _ in steps):
        assert "no child was faster than its parent beyond noise: no best path" in page
        assert not any("best" in name for name in classes), classes
    else:
        best = int(page.split('best path: to <a href="#panel-r')[1].split('"')[0])
        parent_of = {child: parent for _, parent, child, *_ in steps if child}
        walk, seen = best, []
        while walk in parent_of:
            seen.append(children[walk][2])
            walk = parent_of[walk]
        assert walk == root and "faster" in seen and set(seen) <= {"faster", "same within noise"}


def _table_headers(page: str) -> list[str]:
    """The ranking table's column headers (a shape column: its first parameter's name)."""
    thead = page.split("<h2>Ranking</h2>")[1].split("</thead>")[0]
    headers = []
    for attrs, cell in re.findall(r"<th([^>]*)>(.*?)</th>", thead, re.DOTALL):
        text = re.sub(r"<[^>]+>", " ", cell).strip()
        headers.append(text.split()[0] if "shape" in attrs else text)
    return headers


def test_the_html_leaderboard_shows_speedup_and_verdicts_before_the_shape_columns(gpu_like):
    out = gpu_like["folder"] / "board.html"
    done = harness("leaderboard", "--format", "html", "--out", out, db=gpu_like["db"])
    assert done.returncode == 0, done.stderr
    page = out.read_text()
    headers = _table_headers(page)
    first_shape = next(i for i, header in enumerate(headers) if header.startswith("size"))
    for needed in ("score ms", "speedup", "vs parent", "GPU MODE", "accurate"):
        assert headers.index(needed) < first_shape, headers
    assert len([h for h in headers if h.startswith("size")]) == len(load_task(TASK).benchmarks)
    # long names wrap instead of widening the table
    assert re.search(r"td\.name \{[^}]*white-space: normal[^}]*max-width", page)
    assert page.count('<td class="name">a_rather_long_lineage_name_for_an_evolved_kernel r') == 2


MEASURE = """<script>
var found = {};
document.querySelectorAll("table thead th").forEach(function (th) { found[th.textContent.trim()] = th.getBoundingClientRect().right; });
document.body.setAttribute("data-rights", JSON.stringify(found));
</script>
</body>"""


@pytest.mark.parametrize("width", [1280, 1920])
def test_in_chromium_the_speedup_and_verdict_columns_fit_the_window(gpu_like, tmp_path, width):
    """Headless Chromium lays the page out (skipped where it is not installed)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no chromium here")
    out = tmp_path / "board.html"
    assert harness("leaderboard", "--format", "html", "--out", out, db=gpu_like["db"]).returncode == 0
    out.write_text(out.read_text().replace("</body>", MEASURE))
    command = [chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--window-size={width},900"]
    dumped = subprocess.run(
        [*command, "--dump-dom", out.as_uri()], capture_output=True, text=True, timeout=120, check=False
    )
    assert dumped.returncode == 0, dumped.stderr
    rights = json.loads(html.unescape(re.search(r'data-rights="([^"]*)"', dumped.stdout).group(1)))
    for column in ("speedup", "vs parent", "GPU MODE", "accurate"):
        assert 0 < rights[column] <= width, (column, rights)


def _text_boxes(svg: str) -> list[tuple[str, tuple[float, float, float, float]]]:
    """Every text of the chart but the axis titles and the legend, as the box it takes at its
    font's size (12 px, LABEL_CHAR_PX per character)."""
    boxes = []
    plot = svg.split('<g class="legend"')[0]  # the legend is laid out apart, right of the plot
    found = re.findall(r'<text x="([\d.-]+)" y="([\d.-]+)"([^>]*)>(.*?)</text>', plot, re.DOTALL)
    for x, y, attrs, body in found:
        if "axis-title" in attrs or "legend-label" in attrs:
            continue
        body = html.unescape(re.sub(r"<title>.*?</title>", "", body).strip())
        anchor = re.search(r'text-anchor="(\w+)"', attrs)
        anchor = anchor.group(1) if anchor else "start"
        width = LABEL_CHAR_PX * len(body)
        left = float(x) - (width if anchor == "end" else width / 2 if anchor == "middle" else 0)
        boxes.append((body, (left, float(y) - LABEL_HEIGHT_PX + 3, left + width, float(y) + 3)))
    return boxes


def test_the_chart_of_a_long_lineage_with_failures_has_no_overlapping_labels(tmp_path):
    db = f"sqlite:///{tmp_path / 'store.sqlite'}"
    shapes = [shape.model_dump() for shape in load_task(TASK).smoke]
    with open_store(db) as store, store.session() as session:
        reference = _register_reference(session)
        record_timed_run(
            session, reference, TASK, CPU, shapes, [3.0] * len(shapes), batch="cpu-batch", set_name="smoke"
        )
        for number in range(40):
            revision = register_revision(
                session, MY_CONV + f"# step {number}\n".encode(), "evolved.py"
            ).revision
            means = [3.05 + 0.001 * number] * len(shapes)  # close to each other and to the reference
            record_timed_run(
                session, revision.id, TASK, CPU, shapes, means, batch="cpu-batch", set_name="smoke"
            )
    for number in range(3):  # not ranked: registered, never run
        (tmp_path / f"late_{number}.py").write_bytes(MY_CONV + f"# late {number}\n".encode())
        assert harness("register", tmp_path / f"late_{number}.py", db=db).returncode == 0
    out = tmp_path / "board.html"
    assert harness("leaderboard", "--format", "html", "--out", out, db=db).returncode == 0
    svg = out.read_text().split("<svg", 1)[1].split("</svg>")[0]
    boxes = _text_boxes(svg)
    assert any(body.startswith("reference ") for body, _ in boxes)
    assert sum(body.startswith("×") for body, _ in boxes) == 3
    for i, (first, a) in enumerate(boxes):
        for second, b in boxes[i + 1 :]:
            assert not (a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]), (first, second)
