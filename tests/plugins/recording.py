"""A plug-in model for the tuning tests: it records every event it is fitted on and every user it
is asked about, and can kill its own process (as a crash or ``kill -9`` would) on a given fit."""

from __future__ import annotations

import os
from typing import ClassVar

import numpy as np
import pandas as pd

from harness.models import BaseRecommender


class Recording(BaseRecommender):
    """Popularity scores; ``weight`` is a tunable parameter that does not change the ranking.

    Class-level ``fitted`` (frames passed to ``fit``) and ``asked`` (user arrays passed to
    ``recommend``/``score_items``) record what the model saw in this process. With the
    environment variable ``RECORDING_LOG`` set, each fit appends ``fit <weight>`` to that file;
    with ``RECORDING_DIE_AT=n`` the n-th fit of the process exits at once with code 9.
    """

    fitted: ClassVar[list[pd.DataFrame]] = []
    asked: ClassVar[list[np.ndarray]] = []
    fits_in_process: ClassVar[int] = 0

    def __init__(self, weight: float = 1.0, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.weight = float(weight)

    def fit(self, train: pd.DataFrame) -> Recording:
        Recording.fitted.append(train.copy())
        Recording.fits_in_process += 1
        log = os.environ.get("RECORDING_LOG")
        if log:
            with open(log, "a") as handle:
                handle.write(f"fit {self.weight!r}\n")
        if os.environ.get("RECORDING_DIE_AT") == str(Recording.fits_in_process):
            os._exit(9)
        return super().fit(train)

    def recommend(
        self, users: np.ndarray, k: int, **kwargs: object
    ) -> tuple[np.ndarray, np.ndarray]:
        Recording.asked.append(np.asarray(users).copy())
        return super().recommend(users, k, **kwargs)  # type: ignore[arg-type]

    def score_items(self, users: np.ndarray, items: np.ndarray) -> np.ndarray:
        Recording.asked.append(np.asarray(users).copy())
        return super().score_items(users, items)

    def _score(self, user_codes: np.ndarray) -> np.ndarray:
        return np.tile(self.item_popularity_ * self.weight, (len(user_codes), 1))
