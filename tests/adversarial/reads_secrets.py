"""Hunts for the store, its location and the secret: HARNESS_* and *DB* variables in its own
environment and in every /proc/<pid>/environ it can read, SQLite files in the project's db/ and
under the usual directories. Always raises, listing what it found (or "nothing")."""
import glob
import os
import sys

from task import input_t, output_t

project_dir = os.path.dirname(os.path.dirname(os.path.abspath(sys.modules["harness"].__file__)))


def _found() -> list[str]:
    found = [f"env {key}={value}" for key, value in os.environ.items() if key.startswith("HARNESS") or "DB" in key]
    for path in glob.glob("/proc/[0-9]*/environ"):
        try:
            with open(path, "rb") as environ:
                text = environ.read().decode(errors="replace")
        except OSError:
            continue
        found += [f"{path}: {entry}" for entry in text.split("\0") if entry.startswith("HARNESS")]
    patterns = [os.path.join(project_dir, "db", "*"), "/tmp/**/*.sqlite", "/dev/shm/**/*.sqlite"]
    patterns += [os.path.expanduser("~/**/*.sqlite"), os.path.join(os.getcwd(), "..", "**", "*.sqlite")]
    for pattern in patterns:
        try:
            found += [f"file {path}" for path in glob.glob(pattern, recursive=True)]
        except OSError:
            pass
    return found


def custom_kernel(data: input_t) -> output_t:
    found = _found()
    print("reads_secrets found:", found, flush=True)
    raise RuntimeError(f"secrets found: {'; '.join(found)[:300] if found else 'nothing'}")
