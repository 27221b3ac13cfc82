"""The built-in mutator: new values for the tunable parameters of a Triton candidate.

What it changes (found through the syntax tree, never by text search):
- in every `triton.Config(...)` call (the lists given to `@triton.autotune`): the integer values
  of the meta-parameter dict whose keys are UPPER_CASE (block sizes such as `BLOCK_H`), and
  `num_warps` / `num_stages`, as keywords or positional arguments;
- module-level UPPER_CASE integer constants: powers of two (block sizes such as
  `BLOCK_SIZE = 128`), and `*WARPS*` / `*STAGES*` names as warp and stage counts;
- keyword arguments at kernel launch sites (`kernel[grid](..., BLOCK_M=64, num_warps=4)`):
  `BLOCK*` powers of two, `num_warps`, `num_stages`.

How values move: a block size is doubled or halved (now and then by four), a warp count moves
to a neighbour in {1, 2, 4, 8, 16}, a stage count to a neighbour in 1..7; values stay powers of
two within [MIN_BLOCK, MAX_BLOCK], warps within WARPS, stages within STAGES. One to three sites
change per call.

Reproducible: the sites are ordered by their place in the file and every choice comes from
`random.Random(seed)`, so a seed gives the same file every time. Only the bytes of the changed
literals change: the edit replaces each literal's byte span (from the node's `lineno`,
`col_offset`, `end_col_offset`, which count UTF-8 bytes) in the original bytes, so comments,
spacing and a missing final newline all stay as they were.
"""

from __future__ import annotations

import ast
import random
from dataclasses import dataclass
from typing import Literal

from harness.evolve.outcomes import ProposerFailed

MIN_BLOCK = 1
MAX_BLOCK = 1024
WARPS = (1, 2, 4, 8, 16)
STAGES = tuple(range(1, 8))
MAX_CHANGES = 3

SiteKind = Literal["block", "num_warps", "num_stages"]


@dataclass(frozen=True)
class TunableSite:
    """One integer literal that the mutator may change, with where it stands in the file."""

    kind: SiteKind
    label: str  # e.g. "config 2 BLOCK_W", "module constant BLOCK_SIZE", "launch line 80 num_warps"
    value: int
    line: int
    start: int  # byte offsets of the literal in the file
    end: int


@dataclass(frozen=True)
class ParameterChange:
    site: TunableSite
    new_value: int

    def describe(self) -> str:
        return f"{self.site.label} {self.site.value}->{self.new_value}"


@dataclass(frozen=True)
class Mutation:
    content: bytes
    changes: list[ParameterChange]

    @property
    def summary(self) -> str:
        """One line: what changed, in file order."""
        return "mutate: " + "; ".join(change.describe() for change in self.changes)


def mutate_candidate(source: bytes, seed: int | str, *, max_changes: int = MAX_CHANGES) -> Mutation:
    """New parameter values for 1..max_changes sites of `source`, chosen by `seed`.

    Raises `ProposerFailed` when the file does not parse or has nothing to mutate.
    """
    sites = [site for site in find_tunable_sites(source) if _alternatives(site)]
    if not sites:
        raise ProposerFailed(
            "nothing to mutate: no triton.Config values, no power-of-two UPPER_CASE module constants "
            "and no BLOCK*/num_warps/num_stages literals at kernel launches"
        )
    rng = random.Random(seed)
    count = min(len(sites), rng.randint(1, max_changes))
    chosen = sorted(rng.sample(sites, count), key=lambda site: site.start)
    changes = [ParameterChange(site, _new_value(site, rng)) for site in chosen]
    return Mutation(_apply_changes(source, changes), changes)


def find_tunable_sites(source: bytes) -> list[TunableSite]:
    """Every tunable literal of `source`, in file order. Raises `ProposerFailed` on a syntax error."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError) as exc:
        raise ProposerFailed(f"nothing to mutate: the parent does not parse ({exc})") from exc
    finder = _SiteFinder(source)
    finder.visit(tree)
    for statement in tree.body:
        finder.module_constant(statement)
    return sorted(finder.sites, key=lambda site: site.start)


def _is_power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def _int_literal(node: ast.AST | None) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def _is_upper_name(name: str) -> bool:
    return name.isupper() and name.replace("_", "").isalnum()


class _SiteFinder(ast.NodeVisitor):
    def __init__(self, source: bytes) -> None:
        self.source = source
        self.line_starts = [0]
        for index, byte in enumerate(source):
            if byte == ord("\n"):
                self.line_starts.append(index + 1)
        self.sites: list[TunableSite] = []
        self.configs = 0

    def add(self, kind: SiteKind, label: str, node: ast.AST) -> None:
        value = _int_literal(node)
        if value is None or node.end_lineno != node.lineno:
            return
        start = self.line_starts[node.lineno - 1] + node.col_offset
        end = self.line_starts[node.lineno - 1] + node.end_col_offset
        try:
            if ast.literal_eval(self.source[start:end].decode("utf-8")) != value:
                return  # offsets do not land on the literal (unusual line endings): leave it alone
        except (ValueError, SyntaxError, UnicodeDecodeError):
            return
        self.sites.append(TunableSite(kind, label, value, node.lineno, start, end))

    def visit_Call(self, node: ast.Call) -> None:
        if _is_triton_config(node.func):
            self.configs += 1
            self.config_call(node, f"config {self.configs}")
        elif isinstance(node.func, ast.Subscript):  # kernel[grid](...)
            self.launch_call(node)
        self.generic_visit(node)

    def config_call(self, node: ast.Call, label: str) -> None:
        meta = node.args[0] if node.args else None
        for keyword in node.keywords:
            if keyword.arg == "kwargs":
                meta = keyword.value
            elif keyword.arg in ("num_warps", "num_stages"):
                self.add(keyword.arg, f"{label} {keyword.arg}", keyword.value)
        for position, kind in ((1, "num_warps"), (2, "num_stages")):
            if len(node.args) > position:
                self.add(kind, f"{label} {kind}", node.args[position])
        for key, value in _dict_items(meta):
            literal = _int_literal(value)
            if _is_upper_name(key) and literal is not None and _is_power_of_two(literal):
                self.add("block", f"{label} {key}", value)

    def launch_call(self, node: ast.Call) -> None:
        for keyword in node.keywords:
            name = keyword.arg or ""
            literal = _int_literal(keyword.value)
            if name in ("num_warps", "num_stages"):
                self.add(name, f"launch line {node.lineno} {name}", keyword.value)
            elif name.startswith("BLOCK") and literal is not None and _is_power_of_two(literal):
                self.add("block", f"launch line {node.lineno} {name}", keyword.value)

    def module_constant(self, statement: ast.stmt) -> None:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target, value = statement.targets[0], statement.value
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            target, value = statement.target, statement.value
        else:
            return
        literal = _int_literal(value)
        if not isinstance(target, ast.Name) or not _is_upper_name(target.id) or literal is None:
            return
        label = f"module constant {target.id}"
        if "WARPS" in target.id:
            self.add("num_warps", label, value)
        elif "STAGES" in target.id:
            self.add("num_stages", label, value)
        elif _is_power_of_two(literal) and literal >= 2:
            self.add("block", label, value)


def _is_triton_config(func: ast.expr) -> bool:
    if isinstance(func, ast.Attribute):
        return func.attr == "Config" and isinstance(func.value, ast.Name) and func.value.id == "triton"
    return isinstance(func, ast.Name) and func.id == "Config"


def _dict_items(node: ast.AST | None) -> list[tuple[str, ast.expr]]:
    """(key, value node) of a dict display `{'A': 1}` or a call `dict(A=1)`."""
    if isinstance(node, ast.Dict):
        return [
            (key.value, value)
            for key, value in zip(node.keys, node.values)
            if isinstance(key, ast.Constant) and isinstance(key.value, str)
        ]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
        return [(keyword.arg, keyword.value) for keyword in node.keywords if keyword.arg]
    return []


def _alternatives(site: TunableSite) -> list[tuple[int, int]]:
    """(value, weight) pairs the site may move to: near values weigh more than far ones."""
    value = site.value
    if site.kind == "block":
        options = [(value // 4, 1), (value // 2, 3), (value * 2, 3), (value * 4, 1)]
        return [
            (option, weight)
            for option, weight in options
            if MIN_BLOCK <= option <= MAX_BLOCK and option not in (0, value) and _is_power_of_two(option)
        ]
    allowed = WARPS if site.kind == "num_warps" else STAGES
    if value not in allowed:
        return []
    position = allowed.index(value)
    return [
        (option, 3 if abs(allowed.index(option) - position) == 1 else 1)
        for option in allowed
        if option != value
    ]


def _new_value(site: TunableSite, rng: random.Random) -> int:
    options = _alternatives(site)
    return rng.choices([value for value, _ in options], weights=[weight for _, weight in options])[0]


def _apply_changes(source: bytes, changes: list[ParameterChange]) -> bytes:
    """Replace each changed literal's byte span, last first so earlier offsets stay valid."""
    content = source
    for change in sorted(changes, key=lambda change: change.site.start, reverse=True):
        content = content[: change.site.start] + str(change.new_value).encode() + content[change.site.end :]
    return content
