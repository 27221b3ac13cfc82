"""Ctrl-C never lands inside code that native code may have called (harness/interrupts.py).

A KeyboardInterrupt raised inside Python code that torch's or Triton's pybind11 modules called back
aborted `harness evolve` once (SIGABRT, "terminate called after throwing an instance of
'pybind11::error_already_set'") and is dropped at other moments of `import torch`. Here the
native library is stood in for by what the handler must recognise: an import under way (a module
of a temporary folder whose code sleeps) and the code of a package that is not the harness's."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = """
{prelude}
import importlib, sys, time
sys.path.insert(0, {folder!r})
from harness import interrupts
interrupts.PATIENCE_S = {patience}
interrupts.install()
try:
    importlib.import_module("slow_to_import")
    print("imported", flush=True)
    {after}
    print("not interrupted", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
"""


def run(
    tmp_path: Path, signals: int, patience: float = 60.0, after: str = "time.sleep(20)", prelude: str = ""
):
    (tmp_path / "slow_to_import.py").write_text(
        "import time\nprint('importing', flush=True)\ntime.sleep(1.5)\n"
    )
    script = SCRIPT.format(folder=str(tmp_path), patience=patience, after=after, prelude=prelude)
    process = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    assert process.stdout.readline() == "importing\n"
    sent = time.monotonic()
    for _ in range(signals):
        process.send_signal(signal.SIGINT)
        time.sleep(0.2)
    out, err = process.communicate(timeout=60)
    return process.returncode, out.split(), time.monotonic() - sent, err


def test_an_interrupt_during_an_import_waits_for_the_import_to_end(tmp_path: Path):
    # The waiting code is no harness code either, so the interrupt lands when its patience is over
    code, lines, _, err = run(tmp_path, signals=1, patience=3.0)
    assert (code, lines) == (130, ["imported", "interrupted"]), err


def test_an_interrupt_lands_where_the_harness_runs_again(tmp_path: Path):
    # After the import, harness code waits (as the parent waits on its children): a function
    # whose code is the harness package's, by its file's name
    wait = "exec(compile('def wait():\\n    time.sleep(20)', interrupts.__file__, 'exec')); wait()"
    code, lines, waited, err = run(tmp_path, signals=1, after=wait)
    assert (code, lines) == (130, ["imported", "interrupted"]), err
    assert waited < 10  # not the patience of 60 s: it landed once harness code ran


def test_a_second_interrupt_is_not_held_back(tmp_path: Path):
    code, lines, waited, err = run(tmp_path, signals=2)
    assert (code, lines) == (130, ["interrupted"]), err
    assert waited < 1.4  # inside the import's 1.5 s


def test_a_signal_ignored_at_start_stays_ignored(tmp_path: Path):
    # a shell's background job starts with SIGINT ignored, and Python keeps it so
    ignored = "import signal; signal.signal(signal.SIGINT, signal.SIG_IGN)"
    code, lines, _, err = run(tmp_path, signals=1, patience=1.0, after="time.sleep(3)", prelude=ignored)
    assert (code, lines) == (0, ["imported", "not", "interrupted"]), err
