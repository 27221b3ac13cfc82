"""Task specs: a YAML file per task in harness/tasks/, in the style of GPU MODE's task.yml.

A task is its YAML file plus two Python files next to it, both named in the file:
- `reference`: a module with `generate_input(**shape, seed, device) -> data` (the one place inputs
  come from) and `ref_kernel(data) -> output` (what candidates are checked against). The parent
  loads it from its file; the sandbox copies it beside the candidate as reference.py (as GPU MODE
  does), where the child uses only its generate_input;
- `task_shim`: the file copied as task.py beside the candidate (`from task import input_t, output_t`).
A second task is a new YAML file and those two files; the runner does not change. The tasks in
harness/tasks/ are known by name (`load_task`); a task elsewhere loads with `load_task_file`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from harness.errors import HarnessError

TASKS_DIR = Path(__file__).resolve().parent
SHAPE_SETS = ("tests", "benchmarks", "smoke")


class Shape(BaseModel):
    """One test case: the task's parameters (for conv2d_v2: size, kernelsize, channels, batch)
    and its public seed, written flat as GPU MODE writes them."""

    model_config = ConfigDict(extra="allow", frozen=True)
    __pydantic_extra__: dict[str, int | float | str | bool]

    seed: int

    @property
    def parameters(self) -> dict[str, int | float | str | bool]:
        """The shape without its seed, in file order."""
        return dict(self.__pydantic_extra__ or {})

    def label(self) -> str:
        return " ".join(f"{key}={value}" for key, value in self.parameters.items())


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
    output_buffer: str | None = None
    dtype: str = "float32"
    rtol: float
    atol: float
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
        if self.output_buffer is not None and self.output_buffer not in self.data:
            raise ValueError(f"output_buffer {self.output_buffer!r} is not one of data {self.data}")
        if not self.shim_file.is_file():
            raise ValueError(f"task_shim {self.task_shim!r} is not a file in {self.directory}")
        if not self.reference_file.is_file():
            raise ValueError(f"reference module {self.reference!r} is not a file in {self.directory}")
        return self

    @property
    def reference_file(self) -> Path:
        return self.directory / f"{self.reference}.py"

    @property
    def shim_file(self) -> Path:
        return self.directory / self.task_shim

    @property
    def output_index(self) -> int | None:
        """Position of the preallocated output buffer in the data tuple, or None."""
        return None if self.output_buffer is None else self.data.index(self.output_buffer)

    @property
    def input_indices(self) -> list[int]:
        """Positions of the data that are inputs: everything but the output buffer."""
        return [index for index, name in enumerate(self.data) if name != self.output_buffer]

    def shapes(self, set_name: str) -> list[Shape]:
        if set_name not in SHAPE_SETS:
            raise HarnessError(f"unknown shape set {set_name!r}; known: {', '.join(SHAPE_SETS)}")
        return list(getattr(self, set_name))


def known_tasks() -> list[str]:
    return sorted(path.stem for path in TASKS_DIR.glob("*.yml"))


@cache
def load_task(name: str) -> TaskSpec:
    """The task named `name` (harness/tasks/<name>.yml); unknown or malformed -> HarnessError."""
    path = TASKS_DIR / f"{name}.yml"
    if "/" in name or not path.is_file():
        raise HarnessError(f"unknown task {name!r}; known: {', '.join(known_tasks()) or 'none'}")
    return load_task_file(path)


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


def load_reference(task: TaskSpec) -> ModuleType:
    """The task's reference module (generate_input, ref_kernel), loaded from its file; imports torch."""
    return _load_module_file(task.reference_file)


@cache
def _load_module_file(path: Path) -> ModuleType:
    name = f"harness_task_reference_{hashlib.sha256(str(path).encode()).hexdigest()[:12]}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


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
