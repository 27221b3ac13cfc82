"""Reading a candidate file: its exact bytes, its POPCORN directives, its entry point and the
static flags that reports show next to it; and reading the seed manifest.

Directives come from the leading comment block only (the lines before the first line that is
neither blank nor a `#` or `//` comment), as `#!POPCORN KEY VALUE` or `//!POPCORN KEY VALUE`;
GPU MODE uses `leaderboard` and `gpu`. A repeated key keeps every value, space-separated.

The entry point is a module-level binding (def, assignment or import, also inside a module-level
`if`/`try`/`with`) named `custom_kernel` (GPU MODE: `custom_kernel(data)` with
`data = (input, weight, output)`) or `kernel_function` (KernelAgent style:
`kernel_function(input, weight, output=None)`); `custom_kernel` wins when both exist.

Static flags, found with `ast` (names are resolved through the file's imports, so
`import torch.nn.functional as F; F.conv2d` counts as `torch.nn.functional.conv2d`). They inform
reports; none is a verdict, and code can always hide from a static look:
- `cuda_streams`: creates or switches CUDA streams (`torch.cuda.Stream`, `torch.cuda.stream(...)`,
  `set_stream`, `ExternalStream`, `wait_stream`; `cudaStreamCreate` or `getStreamFromPool` in
  inline C++). Work queued on a side stream can escape the timer's events.
- `library_delegation`: calls a library convolution instead of computing it: `torch.nn.functional
  .conv*`, `torch.conv*`, `torch.nn.Conv*`, `torch.ops.aten` convolutions, anything under
  `torch.backends.cudnn`; in C++ source strings `at::conv*`, `torch::conv*`, `aten::conv*`, cuDNN.
- `tf32_switch`: touches a TF32 / reduced-precision switch, in either direction: attributes
  `allow_tf32`, `fp32_precision`, `allow_{fp16,bf16}_reduced_precision_reduction`;
  `torch.set_float32_matmul_precision`; keywords `allow_tf32=` / `input_precision=` (Triton's
  `tl.dot`); the `NVIDIA_TF32_OVERRIDE` or `TORCH_ALLOW_TF32_CUBLAS_OVERRIDE` variables.
- `inline_extension`: compiles or loads native code: `torch.utils.cpp_extension` (`load_inline`,
  `load`), `ctypes`, `cffi`, cupy `RawKernel`/`RawModule`/`ElementwiseKernel`/`ReductionKernel`,
  `pycuda.compiler`, NVRTC, `cuda.core`, `torch.cuda.jiterator`, `torch.ops.load_library`.
- `threads`: threads or extra processes: `threading`, `_thread`, `concurrent.futures`,
  `multiprocessing`, `torch.multiprocessing`, `os.fork`.
- `monkeypatching`: replaces something in `torch`, `time`, `triton` or `builtins` (assignment to
  or deletion of an attribute or item, `setattr`/`delattr`, `unittest.mock.patch`, writes to
  `sys.modules`), e.g. `torch.cuda.Event = ...`, `time.perf_counter = ...`. Settings namespaces
  (`torch.backends`, `torch._dynamo.config`, `torch._inductor.config`, `triton.knobs`) are not
  counted: setting them is configuration (see `tf32_switch`).
- `syntax_error`: the file does not parse (it is still registered; `syntax_error` holds the
  message). The static flags above are then not looked for; the entry point is found by a
  line-based search.
- `no_entry_point`: neither entry point exists.
"""

from __future__ import annotations

import ast
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISDIR, S_ISREG

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.config import get_settings
from harness.errors import HarnessError, validation_message

ENTRY_POINTS = ("custom_kernel", "kernel_function")
FLAGS = (
    "cuda_streams",
    "library_delegation",
    "tf32_switch",
    "inline_extension",
    "threads",
    "monkeypatching",
    "syntax_error",
    "no_entry_point",
)


class CandidateFacts(BaseModel):
    """What registration learns from a candidate's bytes (stored with its revision)."""

    model_config = ConfigDict(frozen=True)

    directives: dict[str, str] = Field(default_factory=dict)
    entry_point: str | None = None
    flags: list[str] = Field(default_factory=list)
    syntax_error: str | None = None


def read_candidate_file(path: str | Path) -> bytes:
    """The exact bytes of a candidate file; HarnessError when it is missing, not a regular file,
    over settings.max_file_bytes, empty, or not UTF-8 text."""
    path = Path(path)
    limit = get_settings().max_file_bytes
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise HarnessError(f"no such file: {path}") from None
    except OSError as exc:
        raise HarnessError(f"cannot read {path}: {exc.strerror}") from None
    if S_ISDIR(mode):
        raise HarnessError(f"{path} is a directory, not a candidate file")
    if not S_ISREG(mode):
        raise HarnessError(f"{path} is not a regular file")
    try:
        with path.open("rb") as file:
            content = file.read(limit + 1)
    except OSError as exc:
        raise HarnessError(f"cannot read {path}: {exc.strerror}") from None
    check_candidate_content(content, str(path))
    return content


def check_candidate_content(content: bytes, name: str) -> None:
    """HarnessError unless `content` is non-blank UTF-8 text within settings.max_file_bytes."""
    limit = get_settings().max_file_bytes
    if len(content) > limit:
        raise HarnessError(f"{name} is over the limit of {limit} bytes for a candidate file")
    if not content:
        raise HarnessError(f"{name} is empty")
    if b"\0" in content:
        raise HarnessError(f"{name} is binary (it contains NUL bytes), not text")
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = content[exc.start : exc.start + 1].hex()
        raise HarnessError(f"{name} is not UTF-8 text (byte 0x{bad} at offset {exc.start})") from None
    if not text.strip():
        raise HarnessError(f"{name} holds only whitespace")


def parse_candidate(content: bytes) -> CandidateFacts:
    """Directives, entry point and static flags of a candidate (see the module docstring)."""
    text = content.decode("utf-8", errors="replace")
    directives = read_directives(text)
    try:
        with warnings.catch_warnings():  # e.g. invalid escape sequences: not ours to report
            warnings.simplefilter("ignore")
            tree = ast.parse(content)
    except (SyntaxError, ValueError, RecursionError) as exc:
        entry_point = _entry_point_by_lines(text)
        flags = ["syntax_error"] if entry_point else ["syntax_error", "no_entry_point"]
        return CandidateFacts(
            directives=directives, entry_point=entry_point, flags=flags, syntax_error=_describe(exc)
        )
    entry_point = find_entry_point(tree)
    flags = _StaticScan(tree).flags()
    if entry_point is None:
        flags.add("no_entry_point")
    return CandidateFacts(
        directives=directives, entry_point=entry_point, flags=[f for f in FLAGS if f in flags]
    )


_DIRECTIVE = re.compile(r"(?:#|//)!POPCORN\s+(\S+)\s+(\S.*?)\s*$")


def read_directives(text: str) -> dict[str, str]:
    """`#!POPCORN KEY VALUE` / `//!POPCORN KEY VALUE` lines of the leading comment block."""
    directives: dict[str, str] = {}
    for line in text.removeprefix("\ufeff").splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if not stripped.startswith(("#", "//")):
            break
        match = _DIRECTIVE.match(stripped)
        if match:
            key, value = match.group(1).lower(), match.group(2)
            directives[key] = f"{directives[key]} {value}" if key in directives else value
    return directives


def find_entry_point(tree: ast.Module) -> str | None:
    names = _module_bindings(tree.body)
    return next((name for name in ENTRY_POINTS if name in names), None)


def _module_bindings(body: list[ast.stmt]) -> set[str]:
    """Names bound at module level, looking into if/try/with/for/while blocks, not into defs."""
    names: set[str] = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                names |= _target_names(target)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            names |= _target_names(node.target)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        else:
            for field in ("body", "orelse", "finalbody"):
                block = getattr(node, field, None)
                if isinstance(block, list):
                    names |= _module_bindings(block)
            for handler in getattr(node, "handlers", []):
                names |= _module_bindings(handler.body)
    return names


def _target_names(target: ast.expr) -> set[str]:
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*(_target_names(element) for element in target.elts))
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    return set()


_ENTRY_POINT_LINE = re.compile(
    r"^(?:async\s+def|def|class)\s+(custom_kernel|kernel_function)\b|^(custom_kernel|kernel_function)\s*[:=]",
    re.MULTILINE,
)


def _entry_point_by_lines(text: str) -> str | None:
    found = {match.group(1) or match.group(2) for match in _ENTRY_POINT_LINE.finditer(text)}
    return next((name for name in ENTRY_POINTS if name in found), None)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):
        return f"line {exc.lineno}: {exc.msg}" if exc.lineno else exc.msg
    if isinstance(exc, RecursionError):
        return "too deeply nested to parse"
    return str(exc)


def _matches(name: str, patterns: frozenset[str]) -> bool:
    """True when `name` is one of `patterns` or lies under one (`a.b.c` lies under `a.b`)."""
    parts = name.split(".")
    return any(".".join(parts[:end]) in patterns for end in range(1, len(parts) + 1))


_STREAM_NAMES = frozenset(
    {
        "torch.cuda.Stream",
        "torch.cuda.stream",
        "torch.cuda.set_stream",
        "torch.cuda.ExternalStream",
        "torch.cuda.StreamContext",
        "torch.Stream",
        "torch.cuda.streams",
        "cupy.cuda.Stream",
    }
)
_STREAM_ATTRIBUTES = frozenset({"wait_stream"})
_STREAM_SOURCE = re.compile(r"cudaStreamCreate|cuStreamCreate|getStreamFromPool")

_CONVOLUTIONS = ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d")
_DELEGATION_NAMES = frozenset(
    {f"torch.nn.functional.{name}" for name in _CONVOLUTIONS}
    | {f"torch.{name}" for name in _CONVOLUTIONS}
    | {
        f"torch.ops.aten.{name}"
        for name in (*_CONVOLUTIONS, "convolution", "_convolution", "cudnn_convolution")
    }
    | {f"torch.nn.{name}" for name in ("Conv1d", "Conv2d", "Conv3d", "ConvTranspose2d", "LazyConv2d")}
    | {
        "torch.convolution",
        "torch._convolution",
        "torch.cudnn_convolution",
        "torch.nn.modules.conv",
        "torch.backends.cudnn",
        "F.conv2d",  # the usual alias, even where the file forgot to import it
    }
)
_DELEGATION_SOURCE = re.compile(
    r"\b(?:at|aten)::(?:conv\w*|_?convolution\w*|cudnn\w*)|\btorch::(?:conv\w*|nn::functional::conv\w*|nn::Conv\w*)"
    r"|cudnn",
    re.IGNORECASE,
)

_TF32_ATTRIBUTES = frozenset(
    {
        "allow_tf32",
        "fp32_precision",
        "allow_fp16_reduced_precision_reduction",
        "allow_bf16_reduced_precision_reduction",
    }
)
_TF32_NAMES = frozenset({"torch.set_float32_matmul_precision"})
_TF32_KEYWORDS = frozenset({"allow_tf32", "input_precision"})
_TF32_STRINGS = frozenset({"NVIDIA_TF32_OVERRIDE", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"})

_EXTENSION_NAMES = frozenset(
    {
        "torch.utils.cpp_extension",
        "ctypes",
        "cffi",
        "cupy.RawKernel",
        "cupy.RawModule",
        "cupy.ElementwiseKernel",
        "cupy.ReductionKernel",
        "pycuda.compiler",
        "cuda.nvrtc",
        "cuda.bindings.nvrtc",
        "cuda.core",
        "torch.cuda.jiterator",
        "torch.ops.load_library",
    }
)

_THREAD_NAMES = frozenset(
    {"threading", "_thread", "concurrent.futures", "multiprocessing", "torch.multiprocessing", "os.fork"}
)

_PATCHABLE_ROOTS = frozenset({"torch", "time", "triton", "builtins", "__builtins__"})
_SETTINGS_NAMESPACES = frozenset(
    {"torch.backends", "torch._dynamo.config", "torch._inductor.config", "triton.knobs"}
)
_PATCH_CALLS = frozenset({"unittest.mock.patch", "mock.patch"})

# Strings that look like C or C++ source (load_inline's sources, cupy kernels), where the
# source patterns above are searched; other strings (docstrings, messages) are not.
_NATIVE_SOURCE_MARKERS = ("#include", "__global__", "__device__", "torch::", "at::", "PYBIND11", 'extern "C"')


class _StaticScan:
    """One pass over the tree, collecting resolved names, keywords, strings and patch sites."""

    def __init__(self, tree: ast.Module) -> None:
        self.aliases = _import_aliases(tree)
        self.names: set[str] = set()
        self.attributes: set[str] = set()
        self.keywords: set[str] = set()
        self.strings: list[str] = []
        self.patches = False
        for node in ast.walk(tree):
            self._visit(node)

    def flags(self) -> set[str]:
        native_sources = [s for s in self.strings if any(marker in s for marker in _NATIVE_SOURCE_MARKERS)]
        found = set()
        if (
            any(_matches(name, _STREAM_NAMES) for name in self.names)
            or self.attributes & _STREAM_ATTRIBUTES
            or any(_STREAM_SOURCE.search(source) for source in native_sources)
        ):
            found.add("cuda_streams")
        if any(_matches(name, _DELEGATION_NAMES) for name in self.names) or any(
            _DELEGATION_SOURCE.search(source) for source in native_sources
        ):
            found.add("library_delegation")
        if (
            self.attributes & _TF32_ATTRIBUTES
            or self.keywords & _TF32_KEYWORDS
            or any(_matches(name, _TF32_NAMES) for name in self.names)
            or _TF32_STRINGS & set(self.strings)
        ):
            found.add("tf32_switch")
        if any(_matches(name, _EXTENSION_NAMES) for name in self.names):
            found.add("inline_extension")
        if any(_matches(name, _THREAD_NAMES) for name in self.names):
            found.add("threads")
        if self.patches:
            found.add("monkeypatching")
        return found

    def _visit(self, node: ast.AST) -> None:
        if isinstance(node, (ast.Name, ast.Attribute)):
            name = self._resolve(node)
            if name:
                self.names.add(name)
            if isinstance(node, ast.Attribute):
                self.attributes.add(node.attr)
        elif isinstance(node, ast.Import):
            self.names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            self.names |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.keyword) and node.arg:
            self.keywords.add(node.arg)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            self.strings.append(node.value)
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        else:
            targets = []
        if any(self._patches_target(target) for target in targets):
            self.patches = True
        if isinstance(node, ast.Call) and self._patches_by_call(node):
            self.patches = True

    def _resolve(self, node: ast.expr) -> str | None:
        """`F.conv2d` -> `torch.nn.functional.conv2d` after `import torch.nn.functional as F`."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        parts.append(self.aliases.get(node.id, node.id))
        return ".".join(reversed(parts))

    def _is_patchable(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Call) and self._resolve(node.func) == "vars" and node.args:
            node = node.args[0]
        name = self._resolve(node)
        if name is None:
            return False
        return name.split(".")[0] in _PATCHABLE_ROOTS and not _matches(name, _SETTINGS_NAMESPACES)

    def _patches_target(self, target: ast.expr) -> bool:
        if isinstance(target, (ast.Tuple, ast.List)):
            return any(self._patches_target(element) for element in target.elts)
        if isinstance(target, ast.Starred):
            return self._patches_target(target.value)
        if isinstance(target, ast.Attribute):
            return self._is_patchable(target)
        if isinstance(target, ast.Subscript):
            return self._resolve(target.value) == "sys.modules" or self._is_patchable(target.value)
        return False

    def _patches_by_call(self, call: ast.Call) -> bool:
        function = self._resolve(call.func)
        if function in ("setattr", "delattr", "object.__setattr__", "object.__delattr__") and call.args:
            return self._is_patchable(call.args[0])
        if function and _matches(function, _PATCH_CALLS) and call.args:
            first = call.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                return first.value.split(".")[0] in _PATCHABLE_ROOTS
            return self._is_patchable(first)
        return False


def _import_aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> the dotted name it stands for, from every import in the file."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if alias.name != "*":
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


class ManifestRevision(BaseModel):
    model_config = ConfigDict(extra="forbid")

    file: str
    id: int | None = Field(default=None, gt=0)
    message: str = ""


class ManifestLineage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    author: str = ""
    task: str | None = None
    revisions: list[ManifestRevision] = Field(min_length=1)


class SeedManifest(BaseModel):
    """candidates/manifest.yml: lineages, each with its revisions in order (docs/CONTRACTS.md)."""

    model_config = ConfigDict(extra="forbid")

    lineages: list[ManifestLineage]


def read_manifest(path: str | Path) -> SeedManifest:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise HarnessError(f"no such manifest: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise HarnessError(f"cannot read manifest {path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise HarnessError(f"manifest {path} is not valid YAML: {' '.join(str(exc).split())}") from None
    try:
        return SeedManifest.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "top level"
        raise HarnessError(f"manifest {path}: {where}: {validation_message(error['msg'])}") from None


@dataclass(frozen=True)
class SeedRevision:
    """One revision of a manifest, its file read and checked. `follows_previous`: its parent is
    the revision listed before it (False for a lineage's first, which follows the lineage's
    latest revision in the store, if any)."""

    lineage: str
    author: str
    task: str | None
    filename: str
    content: bytes
    submission_id: int | None
    message: str
    follows_previous: bool


def read_seeds(manifest_path: str | Path) -> list[SeedRevision]:
    """Every revision that a seed manifest lists, in order; file paths are relative to the
    manifest. HarnessError for a bad manifest or any bad file, before anything is registered."""
    manifest_path = Path(manifest_path)
    manifest = read_manifest(manifest_path)
    return [
        SeedRevision(
            lineage=lineage.name,
            author=lineage.author,
            task=lineage.task,
            filename=entry.file,
            content=read_candidate_file(manifest_path.parent / entry.file),
            submission_id=entry.id,
            message=entry.message,
            follows_previous=index > 0,
        )
        for lineage in manifest.lineages
        for index, entry in enumerate(lineage.revisions)
    ]
