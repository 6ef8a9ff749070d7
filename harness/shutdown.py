"""Leave the process as soon as a command's work is done.

At a normal exit CPython garbage-collects every imported module (MLflow, SQLAlchemy, pandas,
scipy, matplotlib…): about 4 s after each ``python -m harness`` run on this machine, during which
the run looked finished but the shell waited, and a Ctrl-C killed the process with no line and
exit 130 although its results were complete. :func:`leave` runs the exit handlers the libraries
registered (MLflow, Spark, logging, temporary files), flushes the output and ends the process
without that teardown.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from collections.abc import Callable
from contextlib import suppress
from typing import Any, NoReturn

__all__ = ["leave", "run_and_leave"]


def _code(value: object) -> int:
    """The exit status ``sys.exit(value)`` gives: None 0, an int itself, else 1 (a message,
    which is printed to stderr as ``sys.exit`` would)."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    print(value, file=sys.stderr)
    return 1


def _late_signal(signum: int, frame: Any) -> None:
    print(
        f"error: interrupted by {signal.Signals(signum).name} while exiting "
        "(the command had finished its work)",
        file=sys.stderr,
        flush=True,
    )
    os._exit(128 + signum)


def leave(code: int) -> NoReturn:
    """Exit with ``code``: exit handlers run and output is flushed, the interpreter's teardown is
    skipped. A non-daemon thread still at work gets the normal exit, which waits for it."""
    others = [t for t in threading.enumerate() if t is not threading.main_thread()]
    if any(t.is_alive() and not t.daemon for t in others):
        sys.exit(code)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _late_signal)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with suppress(Exception):  # a closed or broken pipe: nothing more can be said
            stream.flush()
    os._exit(code)


def run_and_leave(command: Callable[[], object]) -> NoReturn:
    """Run ``command`` (a CLI's main: returns an exit code or None, or raises SystemExit), then
    :func:`leave` with its status. Other exceptions take the normal way out (a traceback)."""
    try:
        status = command()
    except SystemExit as done:
        status = done.code
    leave(_code(status))
