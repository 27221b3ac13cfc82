"""The environment a run's results hold for: device, its name and driver, library versions.

Results are comparable only within one environment, so every run is keyed by `env_key`, the
sha256 of these facts: a new driver, torch, triton, Python or harness version is a new key and
the revisions are checked and timed again there.
"""

from __future__ import annotations

import hashlib
import json
import platform
import shutil
import subprocess
from pathlib import Path

from pydantic import BaseModel, model_validator

from harness import __version__

NVIDIA_DRIVER_VERSION_FILE = Path("/proc/driver/nvidia/version")


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


def probe_environment(device: str) -> Environment:
    """The facts for `device` ("cpu" or "cuda"), and their key."""
    import torch
    import triton

    if device == "cuda":
        device_name = torch.cuda.get_device_name()
        driver = nvidia_driver_version()
        cuda_runtime = torch.version.cuda or ""
    else:
        device_name = cpu_model()
        driver = ""
        cuda_runtime = ""
    return Environment(
        device=device,
        device_name=device_name,
        driver_version=driver,
        cuda_runtime=cuda_runtime,
        torch=torch.__version__,
        triton=triton.__version__,
        python=platform.python_version(),
        harness=__version__,
    )
