"""Entry point of ``python -m harness`` and of the ``recsys-harness`` command.

On a terminal the first status line comes before the libraries load and Hydra composes the
config (a few seconds), so the run never looks stuck; logs (not a terminal) and
``progress=false`` get nothing extra.
"""

import os
import sys


def main() -> None:
    """Say that the run is starting, then hand over to :func:`harness.cli.entry`."""
    args = sys.argv[1:]
    if sys.stderr.isatty() and "progress=false" not in args and not {"-h", "--help"} & set(args):
        print("… starting (loading libraries, composing the config)", file=sys.stderr, flush=True)
    from harness.cli import entry
    from harness.shutdown import run_and_leave

    def command() -> int | None:
        try:
            entry()
        except BrokenPipeError:  # the reader stopped early (`--help | head`): no traceback
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
            return 1
        return None

    run_and_leave(command)  # without the interpreter's teardown (harness/shutdown.py)


if __name__ == "__main__":
    main()
