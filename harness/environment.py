"""The environment a run's results hold for: device, its name and driver, library versions.

Results are comparable only within one environment, so every run is keyed by `env_key`, the
sha256 of these facts: a new driver, torch, triton, Python or harness version is a new key and
the revisions are checked and timed again there.

The GPU's name is what torch reports (`torch.cuda.get_device_name()`), which costs torch's CUDA
initialization. A tournament with nothing new to do needs only the key, so the name torch
reported is kept on disk (`cuda_device_name`) under a fingerprint of everything that decides
which GPU torch's device 0 is, read from files without touching CUDA: the driver's list of GPUs
with their models, bus locations and UUIDs (/proc/driver/nvidia/gpus), MIG instances, the
/dev/nvidia* nodes, the variables that select and order devices, the driver, torch's version, the
host and its boot. Where any of it cannot be read, torch is asked every time, as before. A
process that later initializes CUDA anyway (to evaluate) checks the kept name against torch's
(`confirm_device_name`) before anything is written under the key.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pydantic import BaseModel, model_validator

from harness import __version__
from harness.errors import HarnessError

NVIDIA_DRIVER_VERSION_FILE = Path("/proc/driver/nvidia/version")
NVIDIA_GPUS_DIR = Path("/proc/driver/nvidia/gpus")
NVIDIA_CAPABILITIES_DIR = Path("/proc/driver/nvidia/capabilities")
BOOT_ID_FILE = Path("/proc/sys/kernel/random/boot_id")
DEVICE_NAME_CACHE = "cuda-device-names.json"
# Variables that choose which GPUs CUDA sees and in which order.
DEVICE_SELECTION_VARIABLES = (
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "CUDA_MPS_PIPE_DIRECTORY",
    "PYTORCH_NVML_BASED_CUDA_CHECK",
)
_names_from_cache: dict[str, str] = {}  # fingerprint -> name, served in this process without torch


class Environment(BaseModel):
    device: str
    device_name: str
    driver_version: str
    cuda_runtime: str
    torch: str
    triton: str
    python: str
    harness: str
    env_key: str = ""  # always the sha256 of the other fields (recomputed on validation)

    @model_validator(mode="after")
    def _key(self) -> Environment:
        facts = json.dumps(self.model_dump(exclude={"env_key"}), sort_keys=True)
        self.env_key = hashlib.sha256(facts.encode()).hexdigest()
        return self


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def nvidia_driver_version() -> str:
    """From the kernel module's version file, else from nvidia-smi; "" when neither is there."""
    try:
        text = NVIDIA_DRIVER_VERSION_FILE.read_text()
        for word in text.split():
            if word.count(".") >= 1 and word.replace(".", "").isdigit():
                return word
    except OSError:
        pass
    if shutil.which("nvidia-smi"):
        try:
            done = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            if done.returncode == 0 and done.stdout.strip():
                return done.stdout.strip().splitlines()[0]
        except (OSError, subprocess.TimeoutExpired):
            pass
    return ""


def process_is_gone(pid: int) -> bool:
    """Whether no process with this pid runs on this host (a pid reused since counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def likely_device() -> str:
    """cuda when the NVIDIA driver lists a GPU that CUDA_VISIBLE_DEVICES does not hide, else cpu:
    read from /proc without torch, a guess for starting slow probes early (torch decides the
    device later; a wrong guess costs a probe that is stopped at exit)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", "unset").strip() == "":
        return "cpu"
    try:
        return "cuda" if any(NVIDIA_GPUS_DIR.iterdir()) else "cpu"
    except OSError:
        return "cpu"


def gpu_fingerprint(torch_version: str) -> str | None:
    """A digest of what decides which GPU torch's device 0 is and what it is called, read from
    files and variables without initializing CUDA; None when some of it cannot be read."""
    try:
        entries = sorted(NVIDIA_GPUS_DIR.iterdir())
        gpus = [(entry.name, (entry / "information").read_text()) for entry in entries]
        driver = NVIDIA_DRIVER_VERSION_FILE.read_text()
        boot_id = BOOT_ID_FILE.read_text().strip()
    except OSError:
        return None
    if not gpus or not boot_id or not all("Model:" in text for _, text in gpus):
        return None
    try:
        # MIG instances (gpuN/mig/giX/ciY) change what CUDA enumerates without touching the above
        capabilities = sorted(
            str(Path(root).relative_to(NVIDIA_CAPABILITIES_DIR))
            for root, _, _ in os.walk(NVIDIA_CAPABILITIES_DIR)
        )
        nodes = sorted(name for name in os.listdir("/dev") if name.startswith("nvidia"))
    except OSError:
        return None
    facts = {
        "gpus": gpus,
        "capabilities": capabilities,
        "nodes": nodes,
        "driver": driver,
        "variables": {name: os.environ.get(name) for name in DEVICE_SELECTION_VARIABLES},
        "torch": torch_version,
        "host": platform.node(),
        "boot_id": boot_id,
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()


def _kept_path(name: str) -> Path:
    from harness.config import get_settings

    return Path(get_settings().cache_dir, name)


def read_kept(name: str) -> dict[str, str]:
    """Facts kept on disk under fingerprints (the file `name` in the cache directory)."""
    try:
        kept = json.loads(_kept_path(name).read_text())
    except (OSError, ValueError):
        return {}
    return kept if isinstance(kept, dict) else {}


def write_kept(name: str, kept: dict[str, str]) -> None:
    """Atomically (a rename), so that concurrent tournaments never read half a file; best effort."""
    path = _kept_path(name)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=".kept-", dir=path.parent)
        with os.fdopen(handle, "w") as file:
            json.dump(kept, file)
        os.replace(temporary, path)
    except OSError:
        pass


def _kept_name(fingerprint: str | None) -> str | None:
    """The GPU name kept under `fingerprint`, or None."""
    name = read_kept(DEVICE_NAME_CACHE).get(fingerprint) if fingerprint is not None else None
    return name if isinstance(name, str) and name else None


def cuda_device_name(torch_version: str) -> str:
    """torch.cuda.get_device_name() for device 0, from the kept copy when the GPU fingerprint is
    the one torch answered for before (no CUDA initialization), else from torch (and kept)."""
    fingerprint = gpu_fingerprint(torch_version)
    name = _kept_name(fingerprint)
    if name is not None:
        _names_from_cache[fingerprint] = name
        return name
    import torch

    name = torch.cuda.get_device_name()
    if fingerprint is not None:
        write_kept(DEVICE_NAME_CACHE, {**read_kept(DEVICE_NAME_CACHE), fingerprint: name})
    return name


def confirm_device_name() -> None:
    """In a process that has initialized CUDA: raise HarnessError (and forget the kept name) when a
    name served from the kept copy is not what torch reports now (or CUDA is not usable now), before
    any result is written under a key made with it (the claims made under it are released by
    the caller's error handling). Free when no name came from the kept copy."""
    if not _names_from_cache:
        return
    import torch

    try:
        actual = torch.cuda.get_device_name()
    except (RuntimeError, AssertionError) as exc:  # CUDA unusable now: the kept name said otherwise
        actual = f"unusable ({str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__})"
    for fingerprint, name in list(_names_from_cache.items()):
        if name != actual:
            names = read_kept(DEVICE_NAME_CACHE)
            names.pop(fingerprint, None)
            write_kept(DEVICE_NAME_CACHE, names)
            _names_from_cache.clear()
            raise HarnessError(
                f"the GPU is {actual!r}, not {name!r} as kept from an earlier probe; "
                "the kept name is dropped: run the command again"
            )
    _names_from_cache.clear()  # confirmed: nothing left to check in this process


def triton_version() -> str:
    """`triton.__version__`, read from the package's __init__.py when it assigns it once as a
    literal (importing Triton loads its compiler library, a few tenths of a second that a
    tournament with nothing to do does not need), else by importing it."""
    module = sys.modules.get("triton")
    if module is not None:
        return module.__version__
    spec = importlib.util.find_spec("triton")
    if spec is not None and spec.origin:
        try:
            source = Path(spec.origin).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            source = ""
        assignments = re.findall(r"^__version__\s*=.*$", source, re.MULTILINE)
        if len(assignments) == 1:
            literal = re.fullmatch(r"__version__\s*=\s*(['\"])([^'\"\\]+)\1\s*(#.*)?", assignments[0])
            if literal:
                return literal.group(2)
    import triton

    return triton.__version__


@functools.cache
def _torch_version_file() -> dict[str, str | None] | None:
    """`__version__`, `cuda` and `hip` from torch/version.py (generated at torch's build with each
    a literal), without importing torch, read once per process (a command asks for them three
    times before its first evaluation); None when torch is imported already or the file does not
    read as expected."""
    if "torch" in sys.modules:
        return None
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        source = Path(next(iter(spec.submodule_search_locations)), "version.py").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    found: dict[str, str | None] = {}
    for name in ("__version__", "cuda", "hip"):
        pattern = rf"^{name}(?:\s*:\s*Optional\[str\])?\s*=\s*(None|'[^'\\]+')\s*$"
        values = re.findall(pattern, source, re.MULTILINE)
        if len(values) != 1:
            return None
        found[name] = None if values[0] == "None" else values[0].strip("'")
    return found if found["__version__"] else None


def torch_versions() -> tuple[str, str]:
    """(torch.__version__, torch.version.cuda or ""), read from torch/version.py when torch is not
    imported yet (the import takes seconds on some machines, and a tournament's parent starts its
    children before it), else from torch itself."""
    literals = _torch_version_file()
    if literals is not None:
        return literals["__version__"], literals["cuda"] or ""
    import torch

    return str(torch.__version__), torch.version.cuda or ""


def torch_build_without_gpu() -> bool:
    """Whether this torch was built for neither CUDA nor ROCm (torch/version.py, no import): then
    torch.cuda.is_available() is False whatever the machine has."""
    literals = _torch_version_file()
    return literals is not None and literals["cuda"] is None and literals["hip"] is None


def kept_cuda_device_name() -> str | None:
    """The GPU name kept for the current fingerprint (a GPU that torch saw on this boot, driver
    and device selection), without importing torch or starting CUDA; None when none is kept."""
    return _kept_name(gpu_fingerprint(torch_versions()[0]))


def probe_environment(device: str) -> Environment:
    """The facts for `device` ("cpu" or "cuda"), and their key; on a GPU seen before, read without
    importing torch (`torch_versions`, the kept GPU name)."""
    torch_version, torch_cuda = torch_versions()
    if device == "cuda":
        device_name = cuda_device_name(torch_version)
        driver = nvidia_driver_version()
        cuda_runtime = torch_cuda
    else:
        device_name = cpu_model()
        driver = ""
        cuda_runtime = ""
    return Environment(
        device=device,
        device_name=device_name,
        driver_version=driver,
        cuda_runtime=cuda_runtime,
        torch=torch_version,
        triton=triton_version(),
        python=platform.python_version(),
        harness=__version__,
    )
