"""Recommender models: the protocol, a shared base class and the built-in models."""

from __future__ import annotations

import difflib
import importlib
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
    "model_class",
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


def model_class(name: str, target: object) -> type:
    """The class a model config's ``_target_`` names (``pkg.module.Class``, or a nested class).

    A wrong path is one ``ValueError`` line naming ``model.<name>._target_``, the module that is
    missing or the attribute it lacks, and close names: Hydra's own lookup logs three lines and
    says only that the module failed to load.
    """
    key = f"model.{name}._target_={target}"
    parts = str(target).split(".") if isinstance(target, str) else []
    if len(parts) < 2 or not all(p.isidentifier() for p in parts):
        raise ValueError(f"{key}: not a dotted path to a class such as mypkg.MyRecommender")
    for cut in range(len(parts) - 1, 0, -1):  # the longest importable prefix is the module
        module_name = ".".join(parts[:cut])
        try:
            found: Any = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name is not None and (module_name + ".").startswith(err.name + "."):
                continue  # this prefix is not a module: try a shorter one
            raise ValueError(f"{key}: importing {module_name} failed: {err}") from err
        except Exception as err:  # the user's module raised while importing
            raise ValueError(
                f"{key}: importing {module_name} failed: {type(err).__name__}: {err}"
            ) from err
        for i, attr in enumerate(parts[cut:], start=cut):
            if not hasattr(found, attr):
                close = difflib.get_close_matches(attr, [a for a in dir(found) if a[0] != "_"])
                hint = f" (close: {', '.join(close)})" if close else ""
                raise ValueError(f"{key}: {'.'.join(parts[:i])} has no {attr!r}{hint}")
            found = getattr(found, attr)
        if not isinstance(found, type):
            raise ValueError(f"{key}: {target} is a {type(found).__name__}, not a class")
        return found
    raise ValueError(
        f"{key}: no module named {parts[0]!r} (is the package installed, or on PYTHONPATH?)"
    )
