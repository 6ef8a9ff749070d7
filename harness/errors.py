"""Exceptions raised by the harness."""

from __future__ import annotations

__all__ = ["DataError"]


class DataError(ValueError):
    """Input data breaks a rule of the interaction format, or leaves nothing to fit or evaluate
    (an empty training or test set, an empty candidates file): exit code 2 on the command line.

    The message is one line naming the source (file), the column, the rule and an example
    offending value, e.g. ``data.csv: column 'rating' has 2 value(s) outside [1.0, 5.0], e.g. 7.0
    at row 3``.
    """
