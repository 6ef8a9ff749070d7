"""Deterministic top-k selection over a padded score matrix, with an explicit tie rule."""

from __future__ import annotations

import numpy as np

__all__ = ["PAD_KEY", "top_k"]

#: Tie keys at and above this value mark padding; real keys must stay below it.
PAD_KEY = np.int64(1) << np.int64(62)


def top_k(scores: np.ndarray, ties: np.ndarray, k: int) -> np.ndarray:
    """Column indices of each row's ``k`` best entries, best first.

    Order: score descending, then tie key ascending. ``scores`` is ``float[b, w]`` padded with
    ``-inf``; ``ties`` is ``int[b, w]``, distinct within a row (padding too). Selection uses
    ``np.partition`` for the k-th largest score, so only rows with ties at that boundary pay for
    a sort of their tie keys; the chosen ``k`` are then ordered with one small lexsort.

    >>> s = np.array([[0.1, 0.9, 0.5, 0.9]])
    >>> top_k(s, np.array([[3, 2, 1, 0]]), 2).tolist()   # tie at 0.9 → smaller key first
    [[3, 1]]
    """
    b, w = scores.shape
    if k >= w:
        return np.lexsort((ties, -scores), axis=1)
    kth = np.partition(scores, w - k, axis=1)[:, w - k][:, None]
    chosen = scores >= kth
    crowded = np.flatnonzero(chosen.sum(axis=1) > k)  # ties at the k-th score exceed the slots
    if crowded.size:
        # int64: the fill below must exceed every key (int32 keys would wrap it to -1)
        sub, cut, keys = scores[crowded], kth[crowded], ties[crowded].astype(np.int64)
        greater, equal = sub > cut, sub == cut
        slots = k - greater.sum(axis=1)
        tied = np.where(equal, keys, np.iinfo(np.int64).max)
        tied.sort(axis=1)
        last = np.take_along_axis(tied, (slots - 1)[:, None], axis=1)
        chosen[crowded] = greater | (equal & (keys <= last))
    cols = (np.flatnonzero(chosen) % w).reshape(b, k)
    neg = -np.take_along_axis(scores, cols, axis=1)
    order = np.argsort(neg, axis=1)
    cols = np.take_along_axis(cols, order, axis=1)
    neg = np.take_along_axis(neg, order, axis=1)
    tied = np.flatnonzero((neg[:, 1:] == neg[:, :-1]).any(axis=1))
    if tied.size:
        sub = cols[tied]
        redo = np.lexsort((np.take_along_axis(ties[tied], sub, axis=1), neg[tied]), axis=1)
        cols[tied] = np.take_along_axis(sub, redo, axis=1)
    return cols
