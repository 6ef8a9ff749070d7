"""Entry point of ``python -m harness`` and of the ``recsys-harness`` command.

On a terminal the first status line comes before the libraries load and Hydra composes the
config (a few seconds), so the run never looks stuck; logs (not a terminal) and
``progress=false`` get nothing extra.

Hydra's informational flags (``--help``, ``--hydra-help``, ``--cfg``, ``--info``,
``--shell-completion``) print and exit without running a job, so they compose the
same config through the same Hydra entry without importing what a job needs (pandas, the metric
library, the models: ~2 s of every such command).
"""

import sys

INFORMATIONAL = ("help", "hydra_help", "cfg", "info", "shell_completion")


def informational(args: list[str]) -> bool:
    """Whether Hydra only prints for these arguments (parsed by Hydra's own parser)."""
    from hydra._internal.utils import get_args_parser

    if "--version" in args:  # argparse would print it here already: left to the full entry
        return False
    try:
        parsed, _ = get_args_parser().parse_known_args(args)
    except SystemExit:  # a bad flag: the full entry reports it
        return False
    return any(getattr(parsed, name) for name in INFORMATIONAL)


def show(args: list[str]) -> None:
    """Run Hydra's entry for an informational flag as :func:`harness.cli.main` would: the same
    schemas, config path, task name (``hydra.job.name``), one-line errors and signal exits."""
    import signal

    import hydra
    from omegaconf import DictConfig

    from harness.schema import one_line_config_errors, register, share_config_store

    def interrupted(signum: int, frame: object) -> None:
        print(f"interrupted by {signal.Signals(signum).name} during starting", file=sys.stderr)
        sys.exit(128 + signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, interrupted)
    register()
    share_config_store()

    def task(cfg: DictConfig) -> None:
        raise RuntimeError(f"python -m harness {' '.join(args)}: expected Hydra to only print")

    task.__module__ = "harness.cli"  # where Hydra reads the config path and the task name from
    entry = hydra.main(version_base=None, config_path="configs", config_name="config")(task)
    with one_line_config_errors(2):
        entry()
    sys.exit(0)


def main() -> None:
    """Say that the run is starting, then hand over to :func:`harness.cli.entry`."""
    args = sys.argv[1:]
    if informational(args):
        show(args)
    if sys.stderr.isatty() and "progress=false" not in args:
        print("… starting (loading libraries, composing the config)", file=sys.stderr, flush=True)
    from harness.cli import entry

    entry()


if __name__ == "__main__":
    main()
