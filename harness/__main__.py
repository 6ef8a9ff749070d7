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

    try:
        entry()
    except BrokenPipeError:  # the reader stopped early (`--help | head`): no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit either
        sys.exit(1)


if __name__ == "__main__":
    main()
