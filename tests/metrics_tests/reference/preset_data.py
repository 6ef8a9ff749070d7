"""Test data for the preset cross-checks: deterministic, standard library only.

Imported by ``test_metrics_presets.py`` and by the ``make_*.py`` scripts beside it, which run
in separate environments (peer libraries with their own numpy/pandas/torch pins), so it uses
``random.Random`` rather than numpy.
"""

from __future__ import annotations

import random

CUTOFFS = (1, 3, 5, 10)


def _ties(seed: int = 11) -> dict[str, list[tuple[int, int, float]]]:
    """Scores from nine values (many ties), graded relevance 0-3, users without relevant items,
    truth users without a list, run users not in the truth, lists of 1 to 12 items."""
    rng = random.Random(seed)
    qrels: list[tuple[int, int, float]] = []
    run: list[tuple[int, int, float]] = []
    for user in range(1, 41):
        items = rng.sample(range(100, 130), rng.randint(1, 8))
        no_relevant = user % 9 == 0
        for item in items:
            rel = 0 if no_relevant else rng.choice((0, 1, 1, 2, 3))
            qrels.append((user, item, float(rel)))
        if user % 11 == 0:  # a truth user without a list
            continue
        listed = rng.sample(range(100, 130), rng.randint(1, 12))
        for item in listed:
            run.append((user, item, rng.randint(1, 9) / 10))
    for user in (501, 502):  # run users the truth does not know
        for item in rng.sample(range(100, 130), 4):
            run.append((user, item, rng.randint(1, 9) / 10))
    return {"qrels": qrels, "run": run}


def _candidates(seed: int = 12, tied: bool = False) -> dict[str, list[tuple[int, int, float]]]:
    """Distinct positive scores (or nine values with ``tied``); every listed user's truth items
    are among its candidates (as torchmetrics needs: it only sees the scored candidates); lists
    of 2 to 15 items."""
    rng = random.Random(seed)
    qrels: list[tuple[int, int, float]] = []
    run: list[tuple[int, int, float]] = []
    used: set[float] = set()
    for user in range(1, 31):
        truth = rng.sample(range(200, 240), rng.randint(1, 6))
        no_relevant = user % 7 == 0
        for item in truth:
            rel = 0 if no_relevant else rng.choice((0, 1, 1, 2, 3))
            qrels.append((user, item, float(rel)))
        if user % 10 == 0:
            continue
        others = [i for i in range(200, 240) if i not in truth]
        listed = truth + rng.sample(others, rng.randint(max(0, 2 - len(truth)), 15 - len(truth)))
        rng.shuffle(listed)
        for item in listed:
            if tied:
                score = rng.randint(1, 9) / 10
            else:
                score = rng.randint(1, 10**6) / 10**6
                while score in used:
                    score = rng.randint(1, 10**6) / 10**6
                used.add(score)
            run.append((user, item, score))
    return {"qrels": qrels, "run": run}


def datasets() -> dict[str, dict[str, list[tuple[int, int, float]]]]:
    """``{name: {"qrels": [(user, item, relevance)], "run": [(user, item, score)]}}``."""
    return {
        "ties": _ties(),
        "distinct": _candidates(),
        "tied_candidates": _candidates(seed=13, tied=True),
    }
