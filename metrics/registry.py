"""One registry of metric definitions and one grammar for metric names (``ndcg@10``, ``map``)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from metrics.reduce import BatchView, Mean, Part, Reduction

if TYPE_CHECKING:
    from metrics.options import Options

__all__ = ["MetricDef", "MetricSpec", "get", "list_metrics", "parse", "register", "unregister"]


@dataclass(frozen=True)
class MetricDef:
    """What a metric is, apart from how an engine computes it.

    ``kind``: ``ranking`` (judged top-k lists), ``score`` (all scored candidates), ``rating``
    (predicted vs true ratings) or ``run`` (whole-run, beyond accuracy).
    ``cutoff``: ``optional`` (no ``@k`` = whole list), ``required`` or ``none``.
    ``aggregation``: ``mean`` over users, ``sum`` over users, or ``pooled`` (computed once over
    every pair or the whole run), as documentation; ``reduction`` is what the engines run.
    ``needs_relevant``: undefined for a user with no relevant item, so the ``empty_users``
    policy applies (and its pooled pieces count only the users the policy keeps).

    How the engines compute it, from this definition alone (no engine names a metric):
    ``compute(view, spec)`` gives one batch's :class:`metrics.reduce.Part` (per-user values,
    additive pieces, a count table) from a :class:`metrics.reduce.BatchView`; by default
    ``kernel(view.judged, k=spec.k, **kernel_options(opts))`` on the judged top-k lists
    (``options``: ``(kernel keyword, Options field)`` pairs). ``reduction`` (a
    :class:`metrics.reduce.Reduction`) turns the values and pieces into a mergeable state and
    finishes it. ``depth``: how deep the ranked lists must be judged (``cutoff``: to ``k``, the
    whole list without one; ``relevant``: to ``|T_u|`` as well; ``none``: no list). ``inputs``:
    what else a batch needs (``candidates``: every scored candidate with its label;
    ``popularity``: training item counts; ``side``: the beyond-accuracy side inputs).
    ``counts``: ``(key, piece)`` pairs reported in ``Evaluation.counts``: the piece summed over
    the users in scope (``{name}`` in the key is the requested name; the piece ``undefined`` is
    the users whose final value is NaN).
    """

    name: str
    kind: str
    kernel: Callable[..., Any]
    description: str
    cutoff: str = "optional"
    higher_is_better: bool = True
    bounded: bool = True
    aggregation: str = "mean"
    needs_relevant: bool = True
    aliases: tuple[str, ...] = ()
    options: tuple[tuple[str, str], ...] = ()
    compute: Callable[[BatchView, MetricSpec], Part] | None = None
    reduction: Reduction = field(default_factory=Mean)
    depth: str = "cutoff"
    inputs: frozenset[str] = frozenset()
    counts: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.depth not in _DEPTHS:
            raise ValueError(f"metric {self.name!r}: depth must be one of {_DEPTHS}")
        unknown = set(self.inputs) - set(_INPUTS)
        if unknown:
            raise ValueError(f"metric {self.name!r}: unknown inputs {sorted(unknown)}")

    def kernel_options(self, opts: Any) -> dict[str, Any]:
        """The keyword arguments ``kernel`` takes from the conventions ``opts``."""
        return {arg: getattr(opts, option) for arg, option in self.options}

    def part(self, view: BatchView, spec: MetricSpec) -> Part:
        """One batch's values (and pieces) of ``spec``: ``compute``, or the kernel on the judged
        lists."""
        if self.compute is not None:
            return self.compute(view, spec)
        values = self.kernel(view.judged, k=spec.k, **self.kernel_options(view.opts))
        return Part(np.asarray(values, dtype=np.float64))


_DEPTHS = ("cutoff", "relevant", "none")
_INPUTS = ("candidates", "popularity", "side")


@dataclass(frozen=True, order=True)
class MetricSpec:
    """A parsed metric name: canonical metric, cutoff and item group (``exposure_tail@10``);
    ``str(spec)`` parses back to it."""

    metric: str
    k: int | None = None
    group: str = ""

    def __repr__(self) -> str:
        group = f", group={self.group!r}" if self.group else ""
        return f"MetricSpec(metric={self.metric!r}, k={self.k!r}{group})"

    def __str__(self) -> str:
        base = f"{self.metric}_{self.group}" if self.group else self.metric
        return base if self.k is None else f"{base}@{self.k}"

    @property
    def definition(self) -> MetricDef:
        """The registered definition."""
        return _REGISTRY[self.metric]

    def per_user_mean(self, opts: Options) -> bool:
        """Whether this metric's summary under ``opts`` is the mean (a sum: a multiple) of its
        per-user values, so a paired comparison of those values compares the summaries; False
        for pooled ones (RMSE/MAE over pairs, weighted gauc, micro averages, exposure shares,
        coverage-like counts), compared on their whole-run values."""
        return self.definition.reduction.per_user_mean(opts)


_REGISTRY: dict[str, MetricDef] = {}
_ALIASES: dict[str, str] = {}

# trec_eval measure names, accepted as input and mapped to ours (P_5 -> precision@5).
_TREC_NAMES = {
    "P": "precision",
    "recall": "recall",
    "ndcg_cut": "ndcg",
    "map_cut": "ap",
    "success": "hit_rate",
}
_TREC_PLAIN = {"recip_rank": "mrr", "Rprec": "r_precision"}
#: The one metric named per item group: ``exposure_<group>@k`` (group: letters, digits, ``_``).
_GROUPED = "exposure"
_GRAMMAR = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_]*?)\s*(?:@\s*(\S+))?\s*$")


def register(definition: MetricDef) -> MetricDef:
    """Add a metric; registering a name or alias twice raises ``ValueError``."""
    for name in (definition.name, *definition.aliases):
        if name in _REGISTRY or name in _ALIASES:
            raise ValueError(f"metric name {name!r} is already registered")
    _REGISTRY[definition.name] = definition
    _ALIASES.update(dict.fromkeys(definition.aliases, definition.name))
    return definition


def unregister(name: str) -> MetricDef:
    """Remove a metric (and its aliases) added by :func:`register`; returns its definition."""
    definition = _REGISTRY.pop(name)
    for alias in definition.aliases:
        _ALIASES.pop(alias, None)
    return definition


def get(name: str) -> MetricDef:
    """The definition of a canonical name or alias."""
    return _REGISTRY[_ALIASES.get(name, name)]


def list_metrics() -> list[str]:
    """Registered metric names (canonical names first, then aliases), generated from the registry.

    >>> "ndcg" in list_metrics() and "map" in list_metrics()
    True
    """
    return sorted(_REGISTRY) + sorted(_ALIASES)


def _unknown(name: str) -> ValueError:
    return ValueError(
        f"unknown metric {name!r}; known metrics: {', '.join(list_metrics())} "
        "(append @k for a cutoff, e.g. ndcg@10; trec_eval names such as P_5 also work)"
    )


def parse(name: str | MetricSpec) -> MetricSpec:
    """Parse ``ndcg@10``, ``map``, ``recall@20``, ``hr@5`` or a trec_eval name (``P_5``).

    >>> parse("ndcg@10")
    MetricSpec(metric='ndcg', k=10)
    >>> str(parse("map@5")), str(parse("P_10")), str(parse("recip_rank"))
    ('ap@5', 'precision@10', 'mrr')
    >>> parse("exposure_tail@10")
    MetricSpec(metric='exposure', k=10, group='tail')
    """
    if isinstance(name, MetricSpec):
        return name
    if not isinstance(name, str):
        raise ValueError(f"metric name must be a string (got {name!r})")
    if name in _TREC_PLAIN:
        return MetricSpec(_TREC_PLAIN[name])
    trec = re.fullmatch(r"(P|recall|ndcg_cut|map_cut|success)_(\d+)", name.strip())
    if trec:
        base, k_text = _TREC_NAMES[trec.group(1)], trec.group(2)
    else:
        m = _GRAMMAR.match(name)
        if not m:
            raise _unknown(name)
        base, k_text = m.group(1), m.group(2)
    canonical = _ALIASES.get(base, base)
    group = ""
    prefix = _GROUPED + "_"
    if canonical not in _REGISTRY and base.startswith(prefix) and len(base) > len(prefix):
        canonical, group = _GROUPED, base[len(prefix) :]
    if canonical not in _REGISTRY:
        raise _unknown(name)
    definition = _REGISTRY[canonical]
    k: int | None = None
    if k_text is not None:
        if not re.fullmatch(r"\d+", k_text) or int(k_text) <= 0:
            raise ValueError(f"'k' in {name!r} must be a positive int (got {k_text!r})")
        k = int(k_text)
        if definition.cutoff == "none":
            raise ValueError(f"metric {canonical!r} takes no cutoff (got {name!r})")
    elif definition.cutoff == "required":
        raise ValueError(f"metric {canonical!r} needs a cutoff, e.g. {canonical}@10 (got {name!r})")
    return MetricSpec(canonical, k, group)
