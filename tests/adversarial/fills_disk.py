"""Writes 512 MiB into /dev/shm and then into its working directory (issue 15: 512 MiB in
/dev/shm), each until the file system refuses, and fails with what it managed."""
import errno
import os

from task import input_t, output_t

CHUNK = b"\x01" * 1024**2


def _fill(path: str) -> str:
    written = 0
    try:
        with open(path, "wb") as target:
            for _ in range(512):
                target.write(CHUNK)
                target.flush()
                written += 1
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        return f"{written} MiB then ENOSPC"
    finally:
        if os.path.exists(path):
            os.unlink(path)
    return f"{written} MiB"


def custom_kernel(data: input_t) -> output_t:
    shm = _fill("/dev/shm/fill.bin")
    workdir = _fill(os.path.join(os.getcwd(), "fill.bin"))
    raise RuntimeError(f"filled /dev/shm: {shm}; working directory: {workdir}")
