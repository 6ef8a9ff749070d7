"""Exact, vectorized recommender-system metrics usable on their own (no Hydra, no MLflow).

>>> import metrics
>>> "ndcg" in metrics.list_metrics()
True
"""

from __future__ import annotations

from metrics import definitions as _definitions  # noqa: F401  (registers every metric)
from metrics.evaluate import Evaluation, State, evaluate, finish_state, merge_states
from metrics.gsb import GSB, gsb, gsb_from_labels
from metrics.io import align_ids, read_qrels, read_run, read_trec_qrels, read_trec_run
from metrics.judged import Judged
from metrics.options import PRESETS, Options, resolve_options
from metrics.registry import MetricDef, MetricSpec, list_metrics, parse


def __getattr__(name: str) -> object:
    """``metrics.stats`` is imported on first use (it imports scipy.stats only when a test runs)."""
    if name == "stats":
        import importlib

        return importlib.import_module("metrics.stats")
    raise AttributeError(f"module 'metrics' has no attribute {name!r}")


__all__ = [
    "GSB",
    "PRESETS",
    "Evaluation",
    "Judged",
    "MetricDef",
    "MetricSpec",
    "Options",
    "State",
    "align_ids",
    "evaluate",
    "finish_state",
    "gsb",
    "gsb_from_labels",
    "list_metrics",
    "merge_states",
    "parse",
    "read_qrels",
    "read_run",
    "read_trec_qrels",
    "read_trec_run",
    "resolve_options",
    "stats",
]
