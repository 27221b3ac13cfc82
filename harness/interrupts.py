"""Ctrl-C and SIGTERM end a command with KeyboardInterrupt, but never from inside native code's callbacks.

Python runs a signal's handler between two bytecodes of whatever Python code runs at the moment,
code that a native library called back included (torch's and Triton's pybind11 modules run Python
code while they import and initialise). A KeyboardInterrupt raised there has to pass back through
C++ frames: pybind11 throws it on as a C++ exception, and where the C++ code cannot take one the
process aborts ("terminate called after throwing an instance of 'pybind11::error_already_set' ...
KeyboardInterrupt": `harness evolve` interrupted beside a second test suite, 2026-12-07; once in
about 190 SIGINTs sent while torch and Triton were imported on a loaded 2-core machine), or the
exception is cleared and the Ctrl-C lost (4 of 80 and 6 of 70 sent then; none of 70 with this
handler).

So the handler raises only where the interrupted Python code is the harness's own, or the
standard library's called from the harness's (a wait on a child's pipe, a sleep): walking out from
the interrupted frame, a harness frame comes before any frame of an import under way or of another
package. Anywhere else it sends the signal to the main thread again a moment later, and raises the
next time it lands on safe ground; a second signal while one waits, or a wait of more than
`PATIENCE_S`, raises at once (a user's second Ctrl-C is never held back).
"""

from __future__ import annotations

import signal
import sysconfig
import threading
import time
from pathlib import Path
from types import FrameType

RETRY_S = 0.05
PATIENCE_S = 30.0

_HARNESS = tuple({str(Path(__file__).parent), str(Path(__file__).resolve().parent)})
_STDLIB = tuple(  # as the paths are named and as they resolve (a link in a venv's base)
    {
        spelling
        for key in ("stdlib", "platstdlib")
        if sysconfig.get_paths().get(key)
        for spelling in (sysconfig.get_paths()[key], str(Path(sysconfig.get_paths()[key]).resolve()))
    }
)
_IMPORTING = ("<frozen importlib.", str(Path(sysconfig.get_paths()["stdlib"]) / "importlib"))

_waiting: dict[int, float] = {}  # signal -> when it first came, while it waits for safe ground
_resent: set[int] = set()  # signals this module sent again and has not seen back yet


def _is_stdlib(filename: str) -> bool:
    if filename.startswith("<frozen "):
        return True
    return filename.startswith(_STDLIB) and "-packages" not in filename


def safe_to_raise(frame: FrameType | None) -> bool:
    """Whether a KeyboardInterrupt raised at `frame` unwinds through Python frames only: the
    harness's own code is reached, walking outwards, through standard-library frames of no import."""
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(_IMPORTING) or frame.f_code.co_name == "<module>":
            return False  # an import under way (its module's code, or importlib's machinery)
        if filename.startswith(_HARNESS):
            return True
        if not _is_stdlib(filename):
            return False  # another package's code, which native code may have called
        frame = frame.f_back
    return False


def _send_again(signum: int) -> None:
    time.sleep(RETRY_S)
    if signum in _waiting:  # not raised meanwhile (by the user's second signal)
        _resent.add(signum)
        signal.pthread_kill(threading.main_thread().ident, signum)


def _handler(signum: int, frame: FrameType | None) -> None:
    own = signum in _resent
    _resent.discard(signum)
    first = _waiting.get(signum)
    if own and first is None:
        return  # sent again for an interrupt that has been raised since: it happened once
    again = first is not None and not own  # a second signal from outside while the first waits
    waited_long = first is not None and time.monotonic() - first > PATIENCE_S
    if again or waited_long or safe_to_raise(frame):
        _waiting.clear()
        raise KeyboardInterrupt
    _waiting.setdefault(signum, time.monotonic())
    threading.Thread(target=_send_again, args=(signum,), name="harness-interrupt", daemon=True).start()


def install() -> None:
    """Ctrl-C (SIGINT) and SIGTERM (`timeout`, a batch scheduler, `kill`) both end the command as
    Ctrl-C does: its sandboxed children stopped and their files and cgroups removed on the way out,
    the store left as it was, exit 130. (Python's default for SIGTERM ends the process at once: a
    tournament cut by `timeout` on the H200 left its children's files and cgroups behind,
    2026-12-03.) A signal the process was started ignoring (a shell's background job) stays so."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _handler)
