"""Settings: where the store lives, where caches go, default time limits.

Every setting can be given in the environment with the `HARNESS_` prefix (for example
`HARNESS_DB=postgresql://...`); command-line options override the environment.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal
from urllib.parse import unquote

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

PACKAGE_DIR = Path(__file__).resolve().parent
PROJECT_ROOT = PACKAGE_DIR.parent  # the checkout, when the harness runs from one
# A wheel carries the checkout's top-level data folders here (setup.py: BuildPyWithData).
SHIPPED_DATA_DIR = PACKAGE_DIR / "_data"
IN_CHECKOUT = not SHIPPED_DATA_DIR.is_dir()
_DATA_ROOT = PROJECT_ROOT if IN_CHECKOUT else SHIPPED_DATA_DIR
CANDIDATES_DIR = _DATA_ROOT / "candidates"
PROMPTS_DIR = _DATA_ROOT / "prompts"
MIGRATIONS_DIR = PROJECT_ROOT / "db" / "migrations" if IN_CHECKOUT else SHIPPED_DATA_DIR / "migrations"


def user_data_dir() -> Path:
    """$XDG_DATA_HOME/harness (default ~/.local/share/harness)."""
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "harness"


def user_cache_dir() -> Path:
    """$XDG_CACHE_HOME/harness (default ~/.cache/harness)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "harness"


def default_store_dir() -> Path:
    """Where the default SQLite store lives: db/ of the checkout the harness runs from (an
    editable install), else the user's data folder (an installed wheel), never site-packages."""
    return PROJECT_ROOT / "db" if IN_CHECKOUT else user_data_dir()


def default_store_url() -> str:
    return f"sqlite:///{default_store_dir() / 'harness.sqlite'}"


# Kept for the sandbox, which hides it from the child: the default store's folder.
DB_DIR = default_store_dir()


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HARNESS_", extra="ignore")

    db: str = Field(default_factory=default_store_url)
    cache_dir: Path = Field(default_factory=user_cache_dir)
    startup_timeout_s: float = 120.0  # a child's spawn until it has imported torch (its own time)
    import_timeout_s: float = 300.0
    call_timeout_s: float = 120.0
    shape_budget_s: float = 10.0  # timing: host seconds of timed calls per shape (GPU MODE: 10 s)
    # On the CPU the Triton interpreter stands in for the GPU: its times rank nothing across
    # devices, so a short budget keeps a CPU tournament to minutes.
    cpu_shape_budget_s: float = 1.0
    max_file_bytes: int = 1_000_000
    # Issue 31: a revision's per-code caches start as a copy of its parent's, and an evolution's
    # child stops checking at its first failing shape and timing a shape where it is clearly
    # slower than its parent. Off: every revision is judged in full, from empty caches (to
    # measure what these save: benchmarks/evolve_throughput.py).
    child_shortcuts: bool = True
    # One evaluation's deadline: the parent's time waiting on its child (spawn to ready, then each
    # request to its reply, summed), so that a long list of calls cannot run for days.
    evaluation_timeout_s: float = 1200.0
    # On the CPU each autotune config is checked: at most this many per shape (config 0, which
    # timing uses, and a sample of the rest chosen by the shape's seed).
    max_checked_autotune_configs: int = 16
    # Untimed evaluations (the test phase, every check outside a timed phase) run this many at
    # once, each in its own child; 0 picks it from the cores and, on CUDA, the free GPU memory
    # (harness.sandbox.devices.check_parallelism); 1 checks one revision after another.
    check_parallelism: int = 0
    # Resources of a sandboxed child (docs/threat-model.md says what happens when one is hit):
    # memory (address space per process on the CPU; resident memory of all its processes),
    # processes, bytes in each writable place (private tmpfs, working and exchange directories),
    # and bytes its code may leave in the per-code caches.
    memory_bytes: int = 16 * 1024**3
    # The harness's own process on the CPU device: its private memory (RLIMIT_DATA), so that a
    # task's reference or check too large for the machine fails an allocation, recorded as the
    # shape's result, where the kernel's OOM killer would end the run; 0: three quarters of the
    # host's memory (harness.sandbox.limits.bound_parent_memory).
    parent_memory_bytes: int = 0
    max_processes: int = 256
    # processes and threads of a child, where a pids cgroup enforces it (harness.sandbox.cgroups)
    max_tasks: int = 4096
    # "auto": a cgroup per child where this process can make one (memory with tmpfs and memfd
    # pages, tasks, equal CPU weight, the freezer); "none": the parent's watch and signals only
    cgroups: Literal["auto", "none"] = "auto"
    # "auto": on a GPU that can, the calls' inputs and outputs go between parent and child in
    # device memory the parent shares by a descriptor (harness.sandbox.device_memory); "none"
    # (the default, until the failure below is understood): through host memory (memfds), as on
    # the CPU. On the H200 "auto" cut the seed tournament's harness overhead from 20.2 % to
    # 15.0 %, but one board with the GPU memory hog ended with the parent's CUDA context broken
    # ("CUDA error: unknown error"), which the memfd road has never done.
    device_windows: Literal["auto", "none"] = "none"
    disk_bytes: int = 1024**3
    code_cache_bytes: int = 1024**3
    # timing: the peak memory bandwidth (GB/s) of each device, by a case-insensitive part of its
    # name ("cpu" on the CPU); a call faster than reading its inputs once at that rate is flagged
    # `below_physical_floor` (harness.timing). Unknown devices get the default, set high so that
    # an honest time is never flagged.
    peak_bandwidth_gbs: dict[str, float] = {"H200": 4800.0, "H100": 3350.0, "A100": 2039.0, "B200": 8000.0}
    default_peak_bandwidth_gbs: float = 20000.0

    def shape_budget(self, device: str) -> float:
        return self.cpu_shape_budget_s if device == "cpu" else self.shape_budget_s


def get_settings() -> Settings:
    return Settings()


def sqlite_directory(url: str | None) -> str | None:
    """The directory of a SQLite store URL (the sandbox hides it from the child); None for other URLs."""
    if not url or not url.startswith("sqlite:///"):
        return None
    path = unquote(url.removeprefix("sqlite:///").split("?", 1)[0])
    return str(Path(path).resolve().parent) if path and path != ":memory:" else None
