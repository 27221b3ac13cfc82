"""The built-in mutator: new values for the tunable parameters of a Triton candidate.

What it changes (found through the syntax tree, never by text search):
- in every `triton.Config(...)` call (the lists given to `@triton.autotune`): the integer values
  of the meta-parameter dict whose keys are UPPER_CASE (block sizes such as `BLOCK_H`), and
  `num_warps` / `num_stages`, as keywords or positional arguments;
- module-level UPPER_CASE integer constants: powers of two (block sizes such as
  `BLOCK_SIZE = 128`), and `*WARPS*` / `*STAGES*` names as warp and stage counts;
- tile constants in a function body: `BLOCK*` / `TILE*` names assigned a power of two
  (`BLOCK_M = 32` before a launch);
- keyword arguments at kernel launch sites (`kernel[grid](..., BLOCK_M=64, num_warps=4)`):
  `BLOCK*` powers of two, `num_warps`, `num_stages`.

How values move: a block size is doubled or halved (now and then by four), a warp count moves
to a neighbour in {1, 2, 4, 8, 16}, a stage count to a neighbour in 1..7; values stay powers of
two within [MIN_BLOCK, MAX_BLOCK], warps within WARPS, stages within STAGES. One to three sites
change per call.

The autotuner's config lists (`@triton.autotune(configs=[triton.Config(...), ...])`, or any list
of `triton.Config` calls) are edited as lists too: with probability LIST_EDIT_PROBABILITY a
mutation instead drops one config (when the list keeps at least one) or adds one, a copy of an
existing config with one value moved, placed after it (never a copy of a config the list
already has).

Never the same bytes twice: `mutate_candidate(..., avoid=...)` takes the sha256 of every file the
lineage already has and draws again (seeds `seed`, `seed/1`, `seed/2`, ...) while the result is
one of them, at most MAX_DRAWS times.

Reproducible: the sites are ordered by their place in the file and every choice comes from
`random.Random(seed)`, so a seed gives the same file every time. Only the bytes of the changed
literals change: the edit replaces each literal's byte span (from the node's `lineno`,
`col_offset`, `end_col_offset`, which count UTF-8 bytes) in the original bytes, so comments,
spacing and a missing final newline all stay as they were.
"""

from __future__ import annotations

import ast
import hashlib
import random
from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from harness.evolve.outcomes import ProposerFailed

MIN_BLOCK = 1
MAX_BLOCK = 1024
WARPS = (1, 2, 4, 8, 16)
STAGES = tuple(range(1, 8))
MAX_CHANGES = 3
MAX_DRAWS = 32
LIST_EDIT_PROBABILITY = 0.3
TILE_PREFIXES = ("BLOCK", "TILE")

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

    @property
    def line(self) -> int:
        return self.site.line

    @property
    def edit(self) -> tuple[int, int, bytes]:
        return self.site.start, self.site.end, str(self.new_value).encode()

    def describe(self) -> str:
        return f"{self.site.label} {self.site.value}->{self.new_value}"


@dataclass(frozen=True)
class ConfigList:
    """A list display whose elements are all `triton.Config(...)` calls: the byte span of each
    element and of the comma after it (None when there is none)."""

    line: int
    elements: list[tuple[int, int]]
    commas: list[int | None]
    first_config: int  # the number of its first config in file order (labels "config N")


@dataclass(frozen=True)
class ConfigListEdit:
    """One config dropped from an autotune list, or one added (a copy of config `number` with
    one value moved), as a byte edit of the file."""

    line: int
    start: int
    end: int
    replacement: bytes
    text: str  # e.g. "config 3 dropped", "config added after config 2 (BLOCK_W 64->128)"

    @property
    def edit(self) -> tuple[int, int, bytes]:
        return self.start, self.end, self.replacement

    def describe(self) -> str:
        return self.text


Change = ParameterChange | ConfigListEdit


@dataclass(frozen=True)
class Mutation:
    content: bytes
    changes: list[Change]
    draws: int = 1  # how many draws it took to find bytes the lineage does not have

    @property
    def summary(self) -> str:
        """One line: what changed, in file order."""
        return "mutate: " + "; ".join(dict.fromkeys(change.describe() for change in self.changes))


def mutate_candidate(
    source: bytes,
    seed: int | str,
    *,
    max_changes: int = MAX_CHANGES,
    avoid: Collection[str] = (),
    list_edits: float = LIST_EDIT_PROBABILITY,
) -> Mutation:
    """New parameter values for 1..max_changes sites of `source` (or, with probability
    `list_edits`, one config added to or dropped from an autotune list), chosen by `seed`, and
    never bytes whose sha256 is in `avoid` (nor `source` itself): draws again with seeds
    `seed/1`, `seed/2`, ... up to MAX_DRAWS draws.

    Raises `ProposerFailed` when the file does not parse, has nothing to mutate, or every draw
    gave bytes the lineage already has.
    """
    sites = [site for site in find_tunable_sites(source) if _alternatives(site)]
    lists = find_config_lists(source)
    if not sites:
        raise ProposerFailed(
            "nothing to mutate: no triton.Config values, no power-of-two UPPER_CASE module constants "
            "and no BLOCK*/num_warps/num_stages literals at kernel launches"
        )
    avoid = {*avoid, hashlib.sha256(source).hexdigest()}
    for draw in range(MAX_DRAWS):
        rng = random.Random(seed if draw == 0 else f"{seed}/{draw}")
        changes: list[Change] = []
        if lists and rng.random() < list_edits:
            changes = _list_edit(source, lists, sites, rng)
        if not changes:
            count = min(len(sites), rng.randint(1, max_changes))
            chosen = sorted(rng.sample(sites, count), key=lambda site: site.start)
            changes = [ParameterChange(site, _new_value(site, rng)) for site in chosen]
        content = _apply_changes(source, changes)
        if hashlib.sha256(content).hexdigest() not in avoid:
            return Mutation(content, changes, draws=draw + 1)
    raise ProposerFailed(
        f"no new file in {MAX_DRAWS} draws: every mutation drawn gives bytes the lineage already has"
    )


def find_config_lists(source: bytes) -> list[ConfigList]:
    """Every list display of `triton.Config(...)` calls in `source`, in file order."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    line_starts = _line_starts(source)
    calls = sorted(
        (node for node in ast.walk(tree) if isinstance(node, ast.Call) and _is_triton_config(node.func)),
        key=lambda node: (node.lineno, node.col_offset),
    )
    number_of = {id(node): number for number, node in enumerate(calls, start=1)}
    lists = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.List) or not node.elts:
            continue
        if not all(isinstance(element, ast.Call) and id(element) in number_of for element in node.elts):
            continue
        spans = [
            (
                line_starts[element.lineno - 1] + element.col_offset,
                line_starts[element.end_lineno - 1] + element.end_col_offset,
            )
            for element in node.elts
        ]
        commas = [_comma_after(source, end) for _, end in spans]
        lists.append(ConfigList(node.lineno, spans, commas, number_of[id(node.elts[0])]))
    return sorted(lists, key=lambda found: found.elements[0][0])


def _line_starts(source: bytes) -> list[int]:
    starts = [0]
    starts += [index + 1 for index, byte in enumerate(source) if byte == ord("\n")]
    return starts


def _comma_after(source: bytes, end: int) -> int | None:
    position = end
    while position < len(source) and source[position : position + 1] in (b" ", b"\t"):
        position += 1
    return position if source[position : position + 1] == b"," else None


def _whole_lines(source: bytes, start: int, end: int) -> tuple[int, int] | None:
    """(start of the first line, end of the last line with its newline) when the span
    [start, end) stands alone on its lines (blanks or a comment around it), else None."""
    line_start = source.rfind(b"\n", 0, start) + 1
    if source[line_start:start].strip():
        return None
    newline = source.find(b"\n", end)
    line_end = len(source) if newline < 0 else newline + 1
    rest = source[end:line_end].strip()
    if rest and not rest.startswith(b"#"):
        return None
    return line_start, line_end


def _list_edit(
    source: bytes, lists: list[ConfigList], sites: list[TunableSite], rng: random.Random
) -> list[Change]:
    """One config dropped or added (see the module docstring); [] when the drawn edit cannot be
    made (an added copy equal to a config the list has, say): the caller changes values instead."""
    found = rng.choice(lists)
    index = rng.randrange(len(found.elements))
    start, end = found.elements[index]
    number = found.first_config + index
    line = source.count(b"\n", 0, start) + 1
    if rng.random() < 0.5 and len(found.elements) > 1:
        comma = found.commas[index]
        cut_end = comma + 1 if comma is not None else end
        lines = _whole_lines(source, start, cut_end)
        if lines is not None:
            cut_start, cut_end = lines
        elif comma is None:  # the last element, inline, no trailing comma: take the comma before it
            previous_end = found.elements[index - 1][1]
            previous_comma = found.commas[index - 1]
            cut_start = previous_comma if previous_comma is not None else previous_end
        else:
            cut_start = start
            while source[cut_end : cut_end + 1] in (b" ", b"\t"):
                cut_end += 1
        return [ConfigListEdit(line, cut_start, cut_end, b"", f"config {number} dropped")]
    inside = [site for site in sites if start <= site.start and site.end <= end]
    if not inside:
        return []
    site = rng.choice(inside)
    value = _new_value(site, rng)
    element = source[start:end]
    copy = element[: site.start - start] + str(value).encode() + element[site.end - start :]
    existing = {_normalized(source[a:b]) for a, b in found.elements}
    if _normalized(copy) in existing:
        return []
    what = site.label.split(" ", 2)[-1]
    text = f"config added after config {number} ({what} {site.value}->{value})"
    comma = found.commas[index]
    lines = _whole_lines(source, start, comma + 1 if comma is not None else end)
    if lines is None:
        return [ConfigListEdit(line, end, end, b", " + copy, text)]
    indent = source[lines[0] : start]
    at = lines[1]
    added = indent + copy + b","
    added = added + b"\n" if source[at - 1 : at] == b"\n" else b"\n" + added
    edits = [ConfigListEdit(line, at, at, added, text)]
    if comma is None:  # the last element had no trailing comma: it gets one
        edits.insert(0, ConfigListEdit(line, end, end, b",", text))
    return edits


def _normalized(element: bytes) -> str:
    try:
        return ast.dump(ast.parse(element, mode="eval"))
    except SyntaxError:
        return element.decode("utf-8", "replace")


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
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for statement in ast.walk(function):
                finder.tile_constant(statement)
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
        self.line_starts = _line_starts(source)
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
        if any(site.start == start for site in self.sites):
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

    def tile_constant(self, statement: ast.AST) -> None:
        if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
            return
        target, literal = statement.targets[0], _int_literal(statement.value)
        if not isinstance(target, ast.Name) or not _is_upper_name(target.id) or literal is None:
            return
        if target.id.startswith(TILE_PREFIXES) and _is_power_of_two(literal) and literal >= 2:
            self.add("block", f"tile constant {target.id} (line {statement.lineno})", statement.value)


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


def _apply_changes(source: bytes, changes: list[Change]) -> bytes:
    """Replace each change's byte span, last first so earlier offsets stay valid."""
    content = source
    for start, end, replacement in sorted((change.edit for change in changes), reverse=True):
        content = content[:start] + replacement + content[end:]
    return content
