"""Tasks: what the rest of the harness knows of one (`TaskSpec`), and where tasks come from.

Every task is a GPU MODE problem directory (harness.tasks.problem reads one): the built-in ones in
harness/tasks/problems/ (conv2d_v2), and those added to the store with `harness task add`, which
the store makes known when it is opened (`use_task`). `load_task(name)` is the one lookup.

A task's reference module (reference.py) has `generate_input(**shape, seed[, device])` (the one
place inputs come from), `ref_kernel(data)` and `check_implementation(data, output)`. The parent
loads it from its file (`load_reference`) and alone calls it: it makes every input, computes the
reference and the verdicts, and hands the inputs to the sandboxed child as raw bytes
(harness.sandbox.transfer). The sandbox copies task.py (the types a submission imports),
reference.py and utils.py beside the candidate, as GPU MODE does, since a submission may import
them; the harness's own code in the child never imports or calls the reference module.
`load_task_file` reads a task written in the harness's older single-YAML form (a spec naming its
reference module and shim), kept for tests.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import json
import os
import sys
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from harness.errors import HarnessError, TaskUnsupported
from harness.wire import ShapeValue

TASKS_DIR = Path(__file__).resolve().parent
PROBLEMS_DIR = TASKS_DIR / "problems"  # the built-in tasks, GPU MODE problem directories
SHAPE_SETS = ("tests", "benchmarks", "smoke")


def shape_label(shape: dict[str, object]) -> str:
    """`size=256 kernelsize=3 m=[64,128]`: a shape's parameters without its seed (it picks the
    data, not the size of the problem); a list written compactly, so that a label has spaces only
    between its parameters."""
    return " ".join(f"{key}={parameter_text(value)}" for key, value in shape.items() if key != "seed")


def parameter_text(value: object) -> str:
    """A shape's parameter as labels and tables write it (`shape_label`)."""
    return json.dumps(value, separators=(",", ":")) if isinstance(value, list) else str(value)


class Shape(BaseModel):
    """One test case: the task's parameters (for conv2d_v2: size, kernelsize, channels, batch)
    and its public seed, written flat as GPU MODE writes them. A parameter may hold a list (of
    numbers, nested), which generate_input takes as it is."""

    model_config = ConfigDict(extra="allow", frozen=True)
    __pydantic_extra__: dict[str, ShapeValue]

    seed: int

    @property
    def parameters(self) -> dict[str, ShapeValue]:
        """The shape without its seed, in file order."""
        return dict(self.__pydantic_extra__ or {})

    def label(self) -> str:
        return shape_label(self.parameters)

    def key(self) -> str:
        """The parameters as one stable string (JSON with sorted keys): what identifies the shape
        where the seed does not count."""
        return json.dumps(self.parameters, sort_keys=True)


class TaskSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    directory: Path = TASKS_DIR  # where the reference and the shim are; set by the loader
    lang: str = "py"
    description: str
    reference: str
    task_shim: str
    reference_candidate: str | None = None
    entry_point: str = "custom_kernel"
    unpacked_entry_points: list[str] = []  # tried in order when entry_point is missing; called f(*data)
    data: list[str]
    output_buffer: str | list[str] | None = None  # one of data's names, or several
    dtype: str = "float32"
    # GPU MODE's elementwise rule at these tolerances (harness.checking.compare_output); None: the
    # problem's own check_implementation(data, output) decides the `gpumode` verdict.
    rtol: float | None = None
    atol: float | None = None
    # The exact answer (the float64 computation behind the `accurate` verdict): the name of the
    # reference module's function computed on the inputs cast to float64 (`ref_kernel`), or None:
    # the task has only the `gpumode` verdict.
    exact_answer: str | None = "ref_kernel"
    # Optional: the reference module's function f(data, positions) giving the exact answer at the
    # output elements `positions` (an [n, ndim] index tensor) as n float64 values, computed from the
    # fp32 inputs as `exact_answer` computes them everywhere; a timed call's check, where GPU MODE's
    # rule fails at a few elements, then needs only those (harness.checking.compare_output).
    exact_answer_at: str | None = None
    # The stored version of the task's files (harness task add); results are tied to it. A built-in
    # task's files ship with the harness (its version is in every run's environment): version 1.
    version: int = 1
    files_sha256: str | None = None
    ranking_by: Literal["geom", "mean", "last"] = "geom"
    # Which verdict ranks (harness.checking): `gpumode`, GPU MODE's rule against the reference, or
    # `accurate`, the exact answer's tolerance or GPU MODE's rule; `--verdict` overrides it.
    verdict: Literal["gpumode", "accurate"] = "gpumode"
    gpumode_ranking_by: str | None = None
    tests: list[Shape]
    benchmarks: list[Shape]
    smoke: list[Shape]
    test_timeout: float | None = None
    benchmark_timeout: float | None = None
    ranked_timeout: float | None = None

    @model_validator(mode="after")
    def _consistent(self) -> TaskSpec:
        for name in self.output_buffers:
            if name not in self.data:
                raise ValueError(f"output_buffer {name!r} is not one of data {self.data}")
        if len(set(self.output_buffers)) != len(self.output_buffers):
            raise ValueError(f"output_buffer names an item twice: {self.output_buffer}")
        if not self.shim_file.is_file():
            raise ValueError(f"task_shim {self.task_shim!r} is not a file in {self.directory}")
        if not self.reference_file.is_file():
            raise ValueError(f"reference module {self.reference!r} is not a file in {self.directory}")
        if (self.rtol is None) != (self.atol is None):
            raise ValueError("give both rtol and atol, or neither")
        if self.exact_answer is not None and self.rtol is None:
            raise ValueError(
                "an exact answer needs the tolerances (rtol, atol) that the accurate verdict uses"
            )
        if self.exact_answer_at is not None and self.exact_answer is None:
            raise ValueError("exact_answer_at needs an exact answer (exact_answer)")
        if self.verdict == "accurate" and self.exact_answer is None:
            raise ValueError("verdict accurate needs an exact answer")
        return self

    @property
    def verdicts(self) -> tuple[str, ...]:
        """The verdicts this task has: `accurate` only with an exact answer."""
        return ("gpumode", "accurate") if self.exact_answer is not None else ("gpumode",)

    @property
    def utils_file(self) -> Path | None:
        """The utils.py beside the reference or one folder above it (GPU MODE keeps one per set)."""
        for folder in (self.directory, self.directory.parent):
            if (folder / "utils.py").is_file():
                return folder / "utils.py"
        return None

    def devices_known(self) -> str:
        """Where the task's inputs can be made, as far as generate_input's signature says (read
        from the loaded function, so a wrapper that takes `device` counts); a generator without
        `device` may still make CPU data (linalg's do without a GPU): found by calling it, when
        an evaluation runs (`generate_inputs`)."""
        try:
            reference = load_reference(self)
        except TaskUnsupported as exc:
            return str(exc)
        if generator_takes_device(reference):
            return "CPU and CUDA"
        return "CUDA only, unless its generate_input makes CPU data without a GPU (found when run)"

    @property
    def reference_file(self) -> Path:
        return self.directory / f"{self.reference}.py"

    @property
    def output_buffers(self) -> tuple[str, ...]:
        """task.yml's `output_buffer` as names: none, one, or several."""
        if self.output_buffer is None:
            return ()
        return (self.output_buffer,) if isinstance(self.output_buffer, str) else tuple(self.output_buffer)

    @property
    def shim_file(self) -> Path:
        return self.directory / self.task_shim

    def shapes(self, set_name: str) -> list[Shape]:
        if set_name not in SHAPE_SETS:
            raise HarnessError(f"unknown shape set {set_name!r}; known: {', '.join(SHAPE_SETS)}")
        return list(getattr(self, set_name))


# Tasks added to the store (harness task add), made known to this process by the store when it
# is opened (harness.store.tasks.use_stored_tasks); the environment variable carries them to the
# processes this one starts (the tournament's GPU workers).
_stored_tasks: dict[str, TaskSpec] = {}
_unusable_tasks: dict[str, str] = {}  # stored tasks whose files this harness cannot use: why
STORED_TASKS_ENV = "HARNESS_STORED_TASKS"


def builtin_tasks() -> list[str]:
    """The problem directories shipped in harness/tasks/problems/ (`<name>_py`)."""
    return sorted(path.name.removesuffix("_py") for path in PROBLEMS_DIR.glob("*_py") if path.is_dir())


def known_tasks() -> list[str]:
    return sorted({*builtin_tasks(), *_stored_tasks, *_tasks_from_environment()})


def use_task(spec: TaskSpec) -> None:
    """Make a task from the store known to `load_task` here and in the processes started from here."""
    _stored_tasks[spec.name] = spec
    carried = _tasks_from_environment()
    carried[spec.name] = {
        "directory": str(spec.directory),
        "version": spec.version,
        "files_sha256": spec.files_sha256,
    }
    os.environ[STORED_TASKS_ENV] = json.dumps(carried)


def use_task_error(name: str, reason: str) -> None:
    """A stored task that cannot be used: `load_task(name)` raises HarnessError(reason)."""
    _unusable_tasks[name] = reason


def _tasks_from_environment() -> dict[str, dict]:
    try:
        carried = json.loads(os.environ.get(STORED_TASKS_ENV, "{}"))
    except ValueError:
        return {}
    return carried if isinstance(carried, dict) else {}


def load_task(name: str) -> TaskSpec:
    """The task named `name`: a built-in one (harness/tasks/) or one added to the store; unknown
    or malformed -> HarnessError."""
    if name in _stored_tasks:
        return _stored_tasks[name]
    if name in _unusable_tasks:
        raise HarnessError(_unusable_tasks[name])
    carried = _tasks_from_environment().get(name)
    if carried is not None:
        from harness.tasks.problem import load_problem

        spec = load_problem(
            Path(carried["directory"]), name, version=carried["version"], files_sha256=carried["files_sha256"]
        )
        _stored_tasks[name] = spec
        return spec
    return _load_builtin(name)


@cache
def _load_builtin(name: str) -> TaskSpec:
    if name not in builtin_tasks():
        raise HarnessError(f"unknown task {name!r}; known: {', '.join(known_tasks()) or 'none'}")
    from harness.tasks.problem import load_problem

    return load_problem(PROBLEMS_DIR / f"{name}_py", name)


def load_task_file(path: Path) -> TaskSpec:
    """A task spec from its YAML file; its reference and shim are looked up beside it."""
    path = Path(path).resolve()
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        if not isinstance(raw, dict):
            raise HarnessError(f"task file {path.name} is malformed: not a mapping")
        return TaskSpec.model_validate({**raw, "directory": path.parent})
    except OSError as exc:
        raise HarnessError(f"cannot read task file {path}: {exc.strerror}") from exc
    except (yaml.YAMLError, ValidationError) as exc:
        first = str(exc).splitlines()
        raise HarnessError(f"task file {path.name} is malformed: {' '.join(first[:3])}") from exc


# GPU MODE's references compute under torch.use_deterministic_algorithms(True) (their utils'
# DeterministicContext), which refuses cuBLAS matrix products unless this is set.
DETERMINISTIC_CUBLAS = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}


def deterministic_environment(task: TaskSpec) -> dict[str, str]:
    """What a process that runs this task's reference needs in its environment: for a problem
    judged by its own check_implementation, cuBLAS's deterministic workspace (unless set)."""
    if task.rtol is not None:
        return {}
    return {key: os.environ.get(key, value) for key, value in DETERMINISTIC_CUBLAS.items()}


def load_reference(task: TaskSpec) -> ModuleType:
    """The task's reference module (generate_input, ref_kernel), loaded from its file; imports
    torch. A module it imports that this machine lacks makes the task unsupported here
    (`TaskUnsupported`), as GPU MODE's problems for other machines (amd_202602's) are."""
    os.environ.update(deterministic_environment(task))
    try:
        return _load_module_file(task.reference_file)
    except ImportError as exc:
        missing = exc.name or " ".join(str(exc).split())[:200]
        raise TaskUnsupported(
            f"task {task.name}'s reference imports {missing!r}, which this machine lacks: unsupported here"
        ) from None


# The modules a GPU MODE reference imports from its own folder: each task's are its own.
TASK_LOCAL_MODULES = ("task", "utils")
# the parent's name of a task's reference.py (its hash of the path after it); the child's is `reference`
REFERENCE_MODULE_PREFIX = "harness_task_reference_"


@cache
def _load_module_file(path: Path) -> ModuleType:
    """Load a reference module with its folder first on the path, so that its `from task import`
    and `from utils import` find the task's own files (and the utils.py one folder up, as GPU
    MODE's sets keep it); those modules are then taken out of sys.modules again, so that the next
    task's reference imports its own."""
    name = f"{REFERENCE_MODULE_PREFIX}{hashlib.sha256(str(path).encode()).hexdigest()[:12]}"
    folders = [str(path.parent), str(path.parent.parent)]
    saved = {module: sys.modules.pop(module) for module in TASK_LOCAL_MODULES if module in sys.modules}
    sys.path[:0] = folders
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    finally:
        del sys.path[: len(folders)]
        for local in TASK_LOCAL_MODULES:
            sys.modules.pop(local, None)
        sys.modules.update(saved)
    return module


def generator_takes_device(reference: ModuleType) -> bool:
    parameters = inspect.signature(reference.generate_input).parameters.values()
    return any(p.name == "device" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def generate_inputs(reference: ModuleType, parameters: dict, seed: int, device: str):
    """The task's inputs for one shape and seed, on `device`: the one call of generate_input, in
    the parent only (the child gets the inputs as bytes). A GPU MODE generator without a `device`
    parameter is called without it: most make CUDA tensors, some (linalg's) CPU tensors where
    there is no GPU; whether it serves `device` is found by calling it and looking at its tensors
    (`TaskUnsupported` when it fails off CUDA, or makes them on another device)."""
    if generator_takes_device(reference):
        return reference.generate_input(**parameters, seed=seed, device=device)
    cuda_only = "makes its inputs on CUDA only (its generate_input takes no `device`)"
    try:
        data = reference.generate_input(**parameters, seed=seed)
    except Exception as exc:
        if device == "cuda":
            raise
        raise TaskUnsupported(f"{cuda_only}: unsupported on {device}") from exc
    devices = {t.device.type for t in tensors_in(data)}
    # on CUDA, CPU tensors beside CUDA ones are GPU MODE's data as made (nvfp4_group_gemm's scale
    # factors): each is handed over on its own device
    allowed = {"cuda", "cpu"} if device == "cuda" and "cuda" in devices else {device}
    if devices - allowed:
        raise TaskUnsupported(
            f"makes its inputs on {', '.join(sorted(devices))} (its generate_input takes no `device`): "
            f"unsupported on {device}"
        )
    return data


def tensors_in(value: object, *, objects: bool = True, seen: set[int] | None = None) -> list:
    """The tensors in the data: in its tuples, lists and dicts and, with `objects`, in the
    attributes of its objects (a Config dataclass, an nn.Module's parameters and buffers), each
    object once. Without (an operator's arguments, under a dispatch mode): containers only."""
    import torch

    seen = set() if seen is None else seen
    if isinstance(value, torch.Tensor):
        return [value]
    if id(value) in seen:
        return []
    seen.add(id(value))
    if isinstance(value, tuple | list):
        items = list(value)
    elif isinstance(value, dict):
        items = list(value.values())
    elif objects and hasattr(value, "__dict__") and not isinstance(value, type):
        items = list(vars(value).values())
    else:
        return []
    return [t for item in items for t in tensors_in(item, objects=objects, seen=seen)]


def combine_seeds(seed: int, secret: int) -> int:
    """GPU MODE's `_combine` (eval.py): a Cantor construction, so that a large secret seed gives a
    large combined seed however small the public test seed is."""
    return int(seed + (seed + secret) * (seed + secret + 1) // 2)


def revision_secret(store_secret: str, code_sha256: str) -> int:
    """The secret seed for one revision's leaderboard checks, in [2**31, 2**32).

    The Cantor pairing is invertible, so a child that is handed combined seeds can recover the
    secret it was combined with. Deriving the secret per revision from the store's secret means a
    revision that recovers (and leaks) its own learns nothing about any other revision's inputs.
    Below 2**32, the combined seed stays under 2**64 as torch's generators require.
    """
    digest = hashlib.sha256(f"{store_secret}:{code_sha256}".encode()).digest()
    return 2**31 + int.from_bytes(digest[:8], "big") % 2**31
