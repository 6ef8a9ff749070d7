"""Leaving a command without the interpreter's teardown (harness/shutdown.py): the exit status,
exit handlers, buffered output and unfinished threads are kept; a signal while exiting says so in
one line. Each case runs in its own Python process (``leave`` ends the process it runs in)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest


def _script(tmp_path: Path, body: str) -> subprocess.Popen[str]:
    code = textwrap.dedent(body).format(out=str(tmp_path))
    return subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.parametrize(("returned", "status"), [("3", 3), ("None", 0), ("'no way'", 1)])
def test_status_handlers_and_buffered_output_are_kept(
    tmp_path: Path, returned: str, status: int
) -> None:
    proc = _script(
        tmp_path,
        f"""
        import atexit, pathlib, sys
        from harness.shutdown import run_and_leave
        atexit.register(lambda: pathlib.Path("{{out}}", "atexit").write_text("ran"))
        def main():
            sys.stdout.write("partial line, not flushed")  # no newline: still in the buffer
            raise SystemExit({returned})
        run_and_leave(main)
        """,
    )
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == status, err
    assert out == "partial line, not flushed"
    assert (tmp_path / "atexit").read_text() == "ran"
    assert err.strip() == ("no way" if status == 1 else "")


def test_a_returned_code_is_the_status(tmp_path: Path) -> None:
    proc = _script(tmp_path, "from harness.shutdown import run_and_leave\nrun_and_leave(lambda: 4)")
    proc.communicate(timeout=60)
    assert proc.returncode == 4


def test_a_thread_still_at_work_is_waited_for(tmp_path: Path) -> None:
    proc = _script(
        tmp_path,
        """
        import pathlib, threading, time
        from harness.shutdown import run_and_leave
        def work():
            time.sleep(0.5)
            pathlib.Path("{out}", "thread").write_text("done")
        def main():
            threading.Thread(target=work).start()  # not a daemon: its work must not be cut
            return 0
        run_and_leave(main)
        """,
    )
    proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert (tmp_path / "thread").read_text() == "done"


def test_a_signal_while_exiting_is_one_line(tmp_path: Path) -> None:
    """Ctrl-C while exit handlers run (a slow flush to a tracking server, say): one line and
    130, not a silent death."""
    proc = _script(
        tmp_path,
        """
        import atexit, sys, time
        from harness.shutdown import run_and_leave
        def slow():
            print("exiting", flush=True)
            time.sleep(30)
        atexit.register(slow)
        run_and_leave(lambda: 0)
        """,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "exiting"
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    lines = [x for x in err.splitlines() if x.strip()]
    assert lines == [
        "error: interrupted by SIGINT while exiting (the command had finished its work)"
    ]
