"""Recommender models: the protocol, a shared base class and the built-in models."""

from __future__ import annotations

from harness.models.base import (
    PAD_ITEM_INT,
    PAD_ITEM_OBJECT,
    BaseRecommender,
    Recommender,
    padding_mask,
    topk_rows,
)
from harness.models.baselines import PopularityModel, RandomModel
from harness.models.bias import BiasRating
from harness.models.knn import ItemKNN
from harness.models.mf import ALS
from harness.models.mlflow_model import MLflowModel
from harness.models.precomputed import PrecomputedScores

__all__ = [
    "ALS",
    "PAD_ITEM_INT",
    "PAD_ITEM_OBJECT",
    "BaseRecommender",
    "BiasRating",
    "ItemKNN",
    "MLflowModel",
    "PopularityModel",
    "PrecomputedScores",
    "RandomModel",
    "Recommender",
    "padding_mask",
    "topk_rows",
]
