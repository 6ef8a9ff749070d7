"""Entry point of ``python -m metrics``."""

from metrics.cli import main

raise SystemExit(main())
