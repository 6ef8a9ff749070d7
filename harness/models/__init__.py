"""Recommender models: the protocol, a shared base class and the built-in models."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
from harness.models.implicit_models import (
    ImplicitALS,
    ImplicitBM25,
    ImplicitBPR,
    ImplicitItemCosine,
    ImplicitItemTFIDF,
    ImplicitLMF,
)
from harness.models.mlflow_model import MLflowModel
from harness.models.precomputed import PrecomputedScores

__all__ = [
    "PAD_ITEM_INT",
    "PAD_ITEM_OBJECT",
    "BaseRecommender",
    "BiasRating",
    "ImplicitALS",
    "ImplicitBM25",
    "ImplicitBPR",
    "ImplicitItemCosine",
    "ImplicitItemTFIDF",
    "ImplicitLMF",
    "MLflowModel",
    "PopularityModel",
    "PrecomputedScores",
    "RandomModel",
    "Recommender",
    "padding_mask",
    "topk_rows",
    "without_search_space",
]

#: The key of a model config that holds its tuning ranges (read by ``harness.tune``).
SEARCH_SPACE_KEY = "search_space"


def without_search_space(node: Mapping[str, Any]) -> Mapping[str, Any]:
    """A model config without its ``search_space``: tuning ranges are not constructor arguments."""
    if SEARCH_SPACE_KEY not in node:
        return node
    return {k: v for k, v in node.items() if k != SEARCH_SPACE_KEY}
