"""The import structure matches the data flow (docs/architecture.md): imports point one way,
`cli -> evolve -> plan -> executors -> sandbox -> judge (checking, timing, scoring) -> tasks`, the
store used by plan, evolve, standing and report only; standing computed in harness.standing only. Every import of every module under harness/ counts,
those inside functions and under TYPE_CHECKING too: a type import is still a dependency.
harness.devices, which resolves `--device` for the CLI and the plan, is a leaf that imports no
torch when it is imported, and the CLI, the plan, the store and the reports import none."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "harness"

# importer prefix -> prefixes it must not import
FORBIDDEN = {
    "harness.sandbox": (
        "harness.store",
        "harness.executors",
        "harness.report",
        "harness.tournament",
        "harness.plan",
    ),
    "harness.checking": ("harness.store", "harness.sandbox"),
    "harness.timing": ("harness.store", "harness.sandbox"),
    "harness.scoring": ("harness.store", "harness.sandbox"),
    "harness.executors": ("harness.store", "harness.report", "harness.plan"),
    "harness.store": ("harness.sandbox", "harness.executors", "harness.plan"),
    "harness.wire": ("harness.store", "harness.sandbox", "torch"),
    # evolution reaches the executors and the sandbox only through the plan (one planner)
    "harness.evolve": ("harness.sandbox", "harness.executors"),
    # standing is computed from stored results only, and rendered elsewhere (one judge)
    "harness.standing": (
        "harness.report",
        "harness.sandbox",
        "harness.executors",
        "harness.plan",
        "harness.evolve",
        "harness.cli",
    ),
    # evolution reads an experiment back and computes what is shown; the reports render it
    "harness.report": ("harness.evolve",),
}

# What standing is made of: harness.scoring's comparisons and ranking, the timings of one run, and
# the standing names themselves. Only harness.standing calls the first two, and defines the names;
# every other module (report renders, evolve and bench read) imports the names from it.
STANDING_COMPUTATION = tuple(
    f"harness.scoring.{name}"
    for name in ("compare", "rank_by_score", "speedup", "block_spread", "blocks_joined")
) + ("harness.standing.batch.batch_timings",)
STANDING_NAMES = frozenset(
    {
        "build_leaderboard",
        "Leaderboard",
        "LeaderboardEntry",
        "ShapeTiming",
        "VerdictSummary",
        "shape_verdicts",
        "Batches",
        "batches_in",
        "compare_in_run",
        "speedup_in_run",
        "reference_in_run",
        "score_in_batch",
        "timing_flags",
    }
)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports, anywhere in it; `from harness import x` counts as
    harness.x (a module of the package, or a name of harness/__init__.py)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module_name(path).split(".")
                if path.name != "__init__.py":
                    base = base[:-1]
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def module_level_imports(path: Path) -> set[str]:
    """The modules `path` imports when it is imported: its imports outside functions."""
    found: set[str] = set()
    pending: list[ast.AST] = [ast.parse(path.read_text(encoding="utf-8"), filename=str(path))]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.add(node.module or "")
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            pending.extend(ast.iter_child_nodes(node))
    return found


def package_imports() -> dict[str, set[str]]:
    return {module_name(path): imported_modules(path) for path in sorted(PACKAGE_DIR.rglob("*.py"))}


def within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def unit(module: str) -> str:
    """The package-level unit a module belongs to: harness.sandbox.child -> harness.sandbox."""
    return ".".join(module.split(".")[:2])


def test_the_package_is_found():
    imports = package_imports()
    assert "harness.sandbox.supervisor" in imports
    assert "harness.sandbox.protocol" in imports["harness.sandbox.supervisor"]


@pytest.mark.parametrize("importer", sorted(FORBIDDEN))
def test_no_forbidden_import(importer: str):
    imports = package_imports()
    members = [module for module in imports if within(module, importer)]
    assert members, f"no module {importer}"
    wrong = sorted(
        f"{module} imports {name}"
        for module in members
        for name in imports[module]
        if any(within(name, forbidden) for forbidden in FORBIDDEN[importer])
    )
    assert not wrong, "\n".join(wrong)


def standing_outside(path: Path) -> list[str]:
    """What of standing a module outside harness.standing computes, defines or imports from
    elsewhere (see STANDING_COMPUTATION)."""
    module = module_name(path)
    wrong = []
    for name in sorted(imported_modules(path)):
        source, _, last = name.rpartition(".")
        if any(within(name, computation) for computation in STANDING_COMPUTATION):
            wrong.append(f"{module} imports {name}")
        elif last in STANDING_NAMES and within(source, "harness") and not within(source, "harness.standing"):
            wrong.append(f"{module} imports {last} from {source}, not from harness.standing")
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    wrong += [
        f"{module} defines {node.name}"
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in STANDING_NAMES
    ]
    return wrong


def test_standing_is_computed_in_harness_standing_only():
    """One judge of standing: nothing outside harness.standing ranks or compares results, defines
    a standing name, or imports one from anywhere else (evolve from the leaderboard's renderer,
    say); report/ keeps only rendering."""
    wrong = [
        line
        for path in sorted(PACKAGE_DIR.rglob("*.py"))
        if not within(module_name(path), "harness.standing")
        for line in standing_outside(path)
    ]
    assert not wrong, "\n".join(wrong)


def test_the_unit_import_graph_has_no_cycle():
    """Units: harness's sub-packages and top-level modules. A cycle among them means two concerns
    that cannot be read (or changed) one without the other."""
    imports = package_imports()
    units = {unit(module) for module in imports if module != "harness"}
    graph: dict[str, set[str]] = {name: set() for name in units}
    for module, names in imports.items():
        if module == "harness":
            continue
        for name in names:
            target = unit(name)
            if target in units and target != unit(module):
                graph[unit(module)].add(target)
    cycles = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                cycles.append(" -> ".join([*stack[stack.index(target) :], target]))
            elif target not in state:
                visit(target)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert not cycles, "\n".join(cycles)


def test_the_checker_sees_a_forbidden_import(tmp_path: Path):
    """The parser finds an import inside a function and a relative one."""
    package = tmp_path / "harness" / "sandbox"
    package.mkdir(parents=True)
    source = package / "thing.py"
    source.write_text(
        "def f():\n    from harness.store.session import open_store\nfrom ..report import leaderboard\n"
    )
    global PACKAGE_DIR
    saved, PACKAGE_DIR = PACKAGE_DIR, tmp_path / "harness"
    try:
        found = imported_modules(source)
    finally:
        PACKAGE_DIR = saved
    assert "harness.store.session" in found
    assert "harness.report.leaderboard" in found


def test_the_checker_sees_standing_computed_outside_harness_standing(tmp_path: Path):
    """A renderer that compares, defines a standing name, or hands one on from elsewhere."""
    package = tmp_path / "harness" / "report"
    package.mkdir(parents=True)
    source = package / "thing.py"
    source.write_text(
        "from harness.scoring import compare\n"
        "from .leaderboard import LeaderboardEntry\n"
        "from harness.standing.board import Leaderboard\n"
        "def build_leaderboard():\n    pass\n"
    )
    global PACKAGE_DIR
    saved, PACKAGE_DIR = PACKAGE_DIR, tmp_path / "harness"
    try:
        found = standing_outside(source)
    finally:
        PACKAGE_DIR = saved
    assert found == [
        "harness.report.thing imports LeaderboardEntry from harness.report.leaderboard, not from harness.standing",
        "harness.report.thing imports harness.scoring.compare",
        "harness.report.thing defines build_leaderboard",
    ]


def test_the_device_module_is_a_leaf_without_torch_at_import():
    """harness.devices imports torch only inside the function that must ask it, and of the
    harness only the shared leaves."""
    path = PACKAGE_DIR / "devices.py"
    assert not [name for name in module_level_imports(path) if within(name, "torch")]
    harness_units = {unit(name) for name in imported_modules(path) if within(name, "harness")}
    assert harness_units <= {"harness.errors", "harness.environment"}, harness_units


def test_the_module_level_checker_sees_torch_at_import_only(tmp_path: Path):
    source = tmp_path / "thing.py"
    source.write_text("import json\nif True:\n    import torch\ndef f():\n    import numpy\n")
    assert module_level_imports(source) == {"json", "torch"}


def test_the_cli_plan_store_and_reports_import_no_torch():
    """The CLI, the plan, the store, the reports and evolution's read-back import no torch, nor
    does resolving the CPU: torch comes with the sandbox's evaluation (and a task's modules)."""
    script = (
        "import sys\n"
        "import harness.cli, harness.plan.tournament, harness.plan.checks, harness.store.session\n"
        "import harness.report.html, harness.report.evaluations, harness.evolve.story, harness.evolve.tree\n"
        "from harness.devices import resolve_device\n"
        "print(resolve_device('cpu'), 'torch' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split() == ["cpu", "False"]
