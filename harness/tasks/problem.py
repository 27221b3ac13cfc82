"""GPU MODE problem directories as tasks (`harness task add DIR`), read without importing them.

A problem directory (reference-kernels: `problems/<set>/<name>_py/`) holds
- `task.yml`: `lang: py`, `description`, `tests` and `benchmarks` (lists of shapes: the keyword
  arguments of generate_input, the seed among them, each a number, a string or a list of them,
  nested), optionally `ranking_by` (geom, mean or last) and the run limits; `files`, `config`
  and `templates` name GPU MODE's own runner and are not used;
- `reference.py`: `generate_input(**shape)`, `ref_kernel(data)` and `check_implementation(data,
  output)` (returning `(ok, message)`, a message that is empty when ok, or a bool);
- `task.py`: the types a submission imports (`from task import input_t, output_t`);
- `utils.py` beside it or one folder up, when the reference imports it.

The harness's own additions go under one key, `harness:` in task.yml (README, "Tasks"):
`smoke` (shapes for the CPU; default: the tests), `tolerance: {rtol, atol}` (the problem's
check_implementation is GPU MODE's elementwise match at these tolerances, so the harness computes
the `gpumode` verdict itself, with counts and positions), `exact_answer` (with a tolerance: the
reference function computed on the inputs cast to float64, usually `ref_kernel`; it brings the
`accurate` verdict), `exact_answer_at` (the exact answer at given output elements only: what a timed
call's check asks for where GPU MODE's rule fails at a few elements), `verdict`, `data` and `output_buffer` (names of generate_input's tuple and
the one that is the output buffer, or a list of those that are; when left out, the parent learns
which items are buffers by calling generate_input and the reference the first time it needs to:
harness.tasks.layout),
`entry_point`, `unpacked_entry_points`, `reference_candidate`, `ranking_by`, `gpumode_ranking_by`.

Validation is static (ast): adding a task needs neither torch nor a GPU, and runs nothing of it.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from harness.errors import HarnessError
from harness.tasks.spec import TaskSpec

TASK_YML, REFERENCE, TASK_TYPES, UTILS = "task.yml", "reference.py", "task.py", "utils.py"
REQUIRED_FUNCTIONS = ("generate_input", "ref_kernel", "check_implementation")
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
MAX_FILE_BYTES = 1_000_000
KERNELBOT_RANKING_BY = "last"  # how GPU MODE's KernelBot scores a problem whose task.yml names no ranking_by


class HarnessExtension(BaseModel):
    """task.yml's `harness:` mapping (module docstring)."""

    model_config = ConfigDict(extra="forbid")

    smoke: list[dict[str, Any]] | None = None
    tolerance: dict[str, float] | None = None
    exact_answer: str | None = None
    exact_answer_at: str | None = None
    verdict: str | None = None
    data: list[str] | None = None
    output_buffer: str | list[str] | None = None
    entry_point: str = "custom_kernel"
    unpacked_entry_points: list[str] = []
    reference_candidate: str | None = None
    ranking_by: str | None = None
    gpumode_ranking_by: str | None = None
    dtype: str = "float32"


@dataclass(frozen=True)
class ProblemFiles:
    """A problem's files as the store keeps them: flat names (task.yml, reference.py, task.py and
    utils.py when there is one) to exact bytes."""

    files: dict[str, bytes]

    @property
    def sha256(self) -> str:
        """The version's identity: a hash over each file's name and content hash."""
        manifest = {name: hashlib.sha256(content).hexdigest() for name, content in sorted(self.files.items())}
        return hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()

    def write_to(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        for name, content in self.files.items():
            path = directory / name
            if not path.is_file() or path.read_bytes() != content:
                temporary = directory / f".{name}.tmp"
                temporary.write_bytes(content)
                temporary.replace(path)


def default_task_name(directory: Path) -> str:
    """GPU MODE's folder name without its `_py` ending (conv2d_py -> conv2d)."""
    name = directory.resolve().name
    return name[: -len("_py")] if name.endswith("_py") and len(name) > 3 else name


def check_task_name(name: str) -> str:
    if not NAME_PATTERN.match(name):
        raise HarnessError(f"bad task name {name!r}: letters, digits, '_', '.', '-', at most 100")
    return name


def read_problem(directory: Path) -> ProblemFiles:
    """The problem's files, validated (module docstring); HarnessError with one line otherwise."""
    directory = Path(directory)
    if not directory.is_dir():
        raise HarnessError(f"{directory}: not a directory")
    files = {TASK_YML: _read(directory / TASK_YML, "no task.yml: not a GPU MODE problem directory")}
    files[REFERENCE] = _read(directory / REFERENCE, "no reference.py")
    raw = _parse_yml(files[TASK_YML], directory / TASK_YML)
    reference = _parse_python(files[REFERENCE], directory / REFERENCE)
    missing = [name for name in REQUIRED_FUNCTIONS if name not in _top_level_names(reference)]
    if missing:
        own = (
            ": the problem's own eval.py runs another protocol than custom_kernel(data), which the "
            "harness does not run"
            if (directory / "eval.py").is_file() and len(missing) == len(REQUIRED_FUNCTIONS)
            else ""
        )
        raise HarnessError(f"{directory / REFERENCE}: defines no {', '.join(missing)}{own}")
    files[TASK_TYPES] = _read(directory / TASK_TYPES, "no task.py (the types a submission imports)")
    _parse_python(files[TASK_TYPES], directory / TASK_TYPES)
    if _imports(reference, "utils"):
        utils = next((p for p in (directory / UTILS, directory.parent / UTILS) if p.is_file()), None)
        if utils is None:
            raise HarnessError(
                f"{directory / REFERENCE} imports utils, but there is no utils.py beside it or above it"
            )
        files[UTILS] = _read(utils, "cannot read utils.py")
        _parse_python(files[UTILS], utils)
    problem = ProblemFiles(files)
    problem_spec(problem, raw, reference, "check", directory)  # everything a TaskSpec checks
    return problem


def load_problem(
    directory: Path, name: str, *, version: int = 1, files_sha256: str | None = None
) -> TaskSpec:
    """The task from a problem directory that `read_problem` accepted (or the store wrote)."""
    directory = Path(directory).resolve()
    problem = read_problem(directory)
    raw = _parse_yml(problem.files[TASK_YML], directory / TASK_YML)
    reference = _parse_python(problem.files[REFERENCE], directory / REFERENCE)
    spec = problem_spec(problem, raw, reference, name, directory)
    return spec.model_copy(update={"version": version, "files_sha256": files_sha256 or problem.sha256})


def problem_spec(
    problem: ProblemFiles, raw: dict, reference: ast.Module, name: str, directory: Path
) -> TaskSpec:
    where = directory / TASK_YML
    if str(raw.get("lang", "py")) != "py":
        raise HarnessError(f"{where}: lang {raw.get('lang')!r}: only Python problems (lang: py) are tasks")
    try:
        extension = HarnessExtension.model_validate(raw.get("harness") or {})
    except ValidationError as exc:
        raise HarnessError(f"{where}: harness: {_first_error(exc)}") from None
    for set_name in ("tests", "benchmarks"):
        if not isinstance(raw.get(set_name), list) or not raw[set_name]:
            raise HarnessError(f"{where}: no {set_name} shapes")
    if raw.get("multi_gpu"):
        raise HarnessError(
            f"{where}: multi_gpu: the problem runs one process per GPU under torch.distributed "
            "(GPU MODE's eval.py hands each its rank and world_size), which the harness does not run: "
            "it judges a candidate in one process on one device"
        )
    parameters, takes_any, required = _generator_parameters(reference)
    required -= {"seed", "device"}
    shapes = {
        "tests": raw["tests"],
        "benchmarks": raw["benchmarks"],
        "smoke": extension.smoke or raw["tests"],
    }
    for set_name, listed in shapes.items():
        for index, shape in enumerate(listed):
            if not isinstance(shape, dict) or not isinstance(shape.get("seed"), int):
                raise HarnessError(f"{where}: {set_name}[{index}] is not a mapping with an integer seed")
            unknown = [key for key in shape if key not in parameters and not takes_any]
            if unknown:
                raise HarnessError(
                    f"{where}: {set_name}[{index}] has {', '.join(unknown)}, which generate_input does not take"
                )
            lacking = sorted(required - set(shape))
            if lacking:
                raise HarnessError(
                    f"{where}: {set_name}[{index}] lacks {', '.join(lacking)}, which generate_input needs "
                    "and neither the shape nor the harness gives (it gives seed, and device where taken)"
                )
    tolerance = extension.tolerance or {}
    if extension.tolerance is not None and set(tolerance) != {"rtol", "atol"}:
        raise HarnessError(f"{where}: harness: tolerance needs exactly rtol and atol")
    ranking_by = extension.ranking_by or raw.get("ranking_by") or "geom"
    verdict = extension.verdict or ("accurate" if extension.exact_answer else "gpumode")
    try:
        return TaskSpec(
            name=name,
            directory=directory,
            description=str(raw.get("description", "")),
            reference=Path(REFERENCE).stem,
            task_shim=TASK_TYPES,
            reference_candidate=extension.reference_candidate,
            entry_point=extension.entry_point,
            unpacked_entry_points=extension.unpacked_entry_points,
            data=extension.data or [],  # without them, learned when first run (harness.tasks.layout)
            output_buffer=extension.output_buffer,
            dtype=extension.dtype,
            rtol=tolerance.get("rtol"),
            atol=tolerance.get("atol"),
            exact_answer=extension.exact_answer,
            exact_answer_at=extension.exact_answer_at,
            verdict=verdict,
            ranking_by=ranking_by,
            # without ranking_by in task.yml GPU MODE ranks by KernelBot's default, the last shape
            gpumode_ranking_by=extension.gpumode_ranking_by or raw.get("ranking_by") or KERNELBOT_RANKING_BY,
            tests=shapes["tests"],
            benchmarks=shapes["benchmarks"],
            smoke=shapes["smoke"],
            test_timeout=raw.get("test_timeout"),
            benchmark_timeout=raw.get("benchmark_timeout"),
            ranked_timeout=raw.get("ranked_timeout"),
        )
    except ValidationError as exc:
        raise HarnessError(f"{where}: {_first_error(exc)}") from None


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    location = ".".join(str(part) for part in error["loc"])
    return f"{location}: {error['msg']}" if location else error["msg"]


def _read(path: Path, missing: str) -> bytes:
    if not path.is_file():
        raise HarnessError(f"{path.parent}: {missing}")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise HarnessError(f"{path}: larger than {MAX_FILE_BYTES} bytes")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise HarnessError(f"cannot read {path}: {exc.strerror}") from None


def _parse_yml(content: bytes, path: Path) -> dict:
    try:
        raw = yaml.safe_load(content.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise HarnessError(f"{path}: not YAML ({' '.join(str(exc).split())[:200]})") from None
    if not isinstance(raw, dict):
        raise HarnessError(f"{path}: not a mapping")
    return raw


def _parse_python(content: bytes, path: Path) -> ast.Module:
    try:
        return ast.parse(content.decode("utf-8"), filename=str(path))
    except UnicodeDecodeError:
        raise HarnessError(f"{path}: not UTF-8 text") from None
    except SyntaxError as exc:
        raise HarnessError(f"{path}: syntax error on line {exc.lineno}: {exc.msg}") from None


def _top_level_names(module: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in module.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names


def _imports(module: ast.Module, name: str) -> bool:
    for node in ast.walk(module):
        if isinstance(node, ast.ImportFrom) and node.module == name:
            return True
        if isinstance(node, ast.Import) and any(alias.name == name for alias in node.names):
            return True
    return False


def _generator(module: ast.Module) -> ast.FunctionDef | None:
    return next(
        (n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "generate_input"), None
    )


def _generator_parameters(module: ast.Module) -> tuple[set[str], bool, set[str]]:
    """generate_input's parameter names, whether it takes **kwargs, and the names without a
    default. A generate_input that is not a plain def (assigned, imported, or wrapped by a
    decorator) is taken to accept any shape and to need none.
    Whether it makes data on a device is not read here: the harness finds it by calling it
    (harness.tasks.spec.generate_inputs)."""
    function = _generator(module)
    if function is None or function.decorator_list:
        return set(), True, set()
    arguments = function.args
    positional = [*arguments.posonlyargs, *arguments.args]
    names = {a.arg for a in [*positional, *arguments.kwonlyargs]}
    required = {a.arg for a in positional[: len(positional) - len(arguments.defaults)]}
    required |= {a.arg for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d is None}
    return names, arguments.kwarg is not None, required
