"""Entry point of ``python -m harness``."""

from harness.cli import entry

entry()
