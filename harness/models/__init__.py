"""Recommender models: the protocol, a shared base class and the built-in models."""

from __future__ import annotations

import difflib
import importlib
import inspect
import pkgutil
from collections.abc import Mapping
from typing import Any

from harness.models.base import (
    PAD_ITEM_INT,
    PAD_ITEM_OBJECT,
    BaseRecommender,
    Recommender,
    checked_lists,
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
    "check_options",
    "checked_lists",
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


def _names(where: Any = None) -> list[str]:
    """Public names of a module or package, its submodules not imported yet included (``None``:
    the top-level modules on ``sys.path``), for close-name hints."""
    path = getattr(where, "__path__", None) if where is not None else None
    subs = [m.name for m in pkgutil.iter_modules(path)] if where is None or path else []
    own = [a for a in dir(where) if not a.startswith("_")] if where is not None else []
    return sorted(set(own + subs))


def _close(name: str, where: Any = None) -> str:
    close = difflib.get_close_matches(name, _names(where))
    return f" (close: {', '.join(close)})" if close else ""


def _import(key: str, module_name: str) -> Any:
    """The module ``module_name``, None when no such module exists; a ValueError naming
    ``key`` when it exists but raises while importing (the user's code failing)."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name is not None and (module_name + ".").startswith(err.name + "."):
            return None  # this path is not a module
        raise ValueError(f"{key}: importing {module_name} failed: {err}") from err
    except Exception as err:  # the user's module raised while importing
        raise ValueError(
            f"{key}: importing {module_name} failed: {type(err).__name__}: {err}"
        ) from err


def model_class(name: str, target: object) -> type:
    """The class a model config's ``_target_`` names (``pkg.module.Class``, or a nested class).

    A wrong path is one ``ValueError`` line naming ``model.<name>._target_``, the module that is
    missing or the attribute it lacks, and close names (submodules not imported yet included):
    Hydra's own lookup logs three lines and says only that the module failed to load.
    """
    key = f"model.{name}._target_={target}"
    parts = str(target).split(".") if isinstance(target, str) else []
    if len(parts) < 2 or not all(p.isidentifier() for p in parts):
        raise ValueError(f"{key}: not a dotted path to a class such as mypkg.MyRecommender")
    found = _import(key, parts[0])
    if found is None:
        raise ValueError(
            f"{key}: no module named {parts[0]!r}{_close(parts[0])} (is the package installed, "
            f"or on PYTHONPATH?)"
        )
    for i, attr in enumerate(parts[1:], start=1):
        if hasattr(found, attr):
            found = getattr(found, attr)
            continue
        sub = _import(key, ".".join(parts[: i + 1])) if inspect.ismodule(found) else None
        if sub is None:  # neither an attribute nor a submodule
            raise ValueError(f"{key}: {'.'.join(parts[:i])} has no {attr!r}{_close(attr, found)}")
        found = sub
    if not isinstance(found, type):
        what = "module" if inspect.ismodule(found) else type(found).__name__
        raise ValueError(f"{key}: {target} is a {what}, not a class")
    return found


def check_options(name: str, cls: type, node: Mapping[str, Any]) -> None:
    """One ``ValueError`` line for a model option ``cls`` does not take (a misspelled
    ``model.<name>.alpah``), with close names and what it takes: Hydra's own message is three
    lines. Classes taking ``**kwargs`` accept any option."""
    params = inspect.signature(cls).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    takes = [p for p, v in params.items() if v.kind is not inspect.Parameter.VAR_POSITIONAL]
    for key in node:
        if str(key).startswith("_") or key == SEARCH_SPACE_KEY or key in params:
            continue
        close = difflib.get_close_matches(str(key), takes)
        hint = f"close: {', '.join(close)}; " if close else ""
        raise ValueError(
            f"model.{name}.{key}: {node.get('_target_', cls.__qualname__)} takes no option {key!r} "
            f"({hint}it takes: {', '.join(takes) or 'none'})"
        )
