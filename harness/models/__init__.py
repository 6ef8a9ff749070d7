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
from harness.models.knn import ItemKNN

__all__ = [
    "PAD_ITEM_INT",
    "PAD_ITEM_OBJECT",
    "BaseRecommender",
    "ItemKNN",
    "PopularityModel",
    "RandomModel",
    "Recommender",
    "padding_mask",
    "topk_rows",
]
