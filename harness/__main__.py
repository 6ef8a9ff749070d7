"""Entry point of ``python -m harness`` and of the ``recsys-harness`` command.

On a terminal the first status line comes before the libraries load and Hydra composes the
config (a few seconds), so the run never looks stuck; logs (not a terminal) and
``progress=false`` get nothing extra.
"""

import sys


def main() -> None:
    """Say that the run is starting, then hand over to :func:`harness.cli.entry`."""
    args = sys.argv[1:]
    if sys.stderr.isatty() and "progress=false" not in args and not {"-h", "--help"} & set(args):
        print("… starting (loading libraries, composing the config)", file=sys.stderr, flush=True)
    from harness.cli import entry

    entry()


if __name__ == "__main__":
    main()
