"""Shared pytest settings: the reference-number scripts are run by hand in their own venvs."""

# tests/reference/make_*.py import rectools, torchmetrics and recommenders, which live in scratch
# environments (see tests/reference/README.md), not in the test environment.
collect_ignore_glob = ["reference/make_*.py"]
