"""How per-user metric values become a summary, declared by each metric definition.

A metric's definition (:class:`metrics.registry.MetricDef`) says how one batch of users gives its
per-user values (``compute``: a :class:`Part`) and how those values reduce (``reduction``). The
reductions here are mergeable: an evaluation over a set of users leaves a :class:`State`
(additive sums, counts and count tables); the states of disjoint sets of users merge by addition
(:func:`merge_states`), and the reduction finishes the merged state to the value. Every engine
runs these declarations and names no metric: ``metrics.evaluate`` in process, Spark per bucket of
users.

The reductions (the way LensKit's accumulators and torchmetrics' reductions work):

- :class:`Mean`: mean of the defined per-user values (sum and count).
- :class:`Sum`: sum of the per-user values.
- :class:`Weighted`: mean weighted by a per-user piece (``gauc``).
- :class:`Pooled`: a function of per-user pieces summed over users: ratio of sums for micro
  averages and exposure shares, pooled squared / absolute errors for RMSE / MAE.
- :class:`Micro`: :class:`Mean` by default, :class:`Pooled` under ``average="micro"``.
- :class:`Counted`: a count table (recommended items, distinct scores) added key by key and
  finished as a whole (coverage, Gini, entropy, global AUC).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from metrics import rating, scores

if TYPE_CHECKING:
    from metrics.engine import Batch, Prepared
    from metrics.options import Options
    from metrics.registry import MetricSpec
    from metrics.side import BeyondInputs

__all__ = [
    "BatchView",
    "Counted",
    "Finish",
    "Mean",
    "Micro",
    "Part",
    "Pooled",
    "Reduction",
    "State",
    "Sum",
    "Weighted",
    "merge_states",
]


@dataclass
class State:
    """The mergeable aggregates of an evaluation over a set of users: what its summary and
    counts are finished from (:func:`metrics.finish_state`), so any engine that splits the users
    into disjoint parts can merge the parts' states (:func:`merge_states`) and finish them once.

    ``sums``: additive floats (keys ``<name>:<piece>``, as each metric's reduction writes them);
    ``counts``: additive ints (``Evaluation.counts``); ``tables``: additive count tables, one row
    per key (index ``item``: how often each item is in a top-k; index ``score``: relevant /
    irrelevant candidates per distinct score, for pooled AUC).
    """

    sums: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)


def add_tables(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """Count tables added key by key (one row per distinct key)."""
    if len(parts) == 1:
        return parts[0]
    return pd.concat(parts).groupby(level=0).sum()


def merge_states(states: Iterable[State]) -> State:
    """One state from the states of disjoint sets of users: sums and counts added, tables added
    key by key."""
    out = State()
    tables: dict[str, list[pd.DataFrame]] = {}
    for st in states:
        for key, value in st.sums.items():
            out.sums[key] = out.sums.get(key, 0.0) + value
        for key, n in st.counts.items():
            out.counts[key] = out.counts.get(key, 0) + int(n)
        for key, table in st.tables.items():
            tables.setdefault(key, []).append(table)
    out.tables = {key: add_tables(parts) for key, parts in tables.items()}
    return out


@dataclass(frozen=True)
class Part:
    """What one metric gives for one batch of users.

    ``values``: per-user values (NaN where undefined); ``pieces``: additive per-user amounts a
    reduction pools (hits, list lengths, errors, weights…); ``table``: this batch's count table
    for a :class:`Counted` reduction (index: the key, columns: counts).
    """

    values: np.ndarray
    pieces: Mapping[str, np.ndarray] = field(default_factory=dict)
    table: pd.DataFrame | None = None


@dataclass
class BatchView:
    """One batch of users as the metric definitions see it: the judged lists, the candidates,
    and what is shared by several metrics of the batch (computed once, on first use)."""

    batch: Batch
    prep: Prepared
    opts: Options
    popularity: pd.Series | None = None
    side: BeyondInputs | None = None

    @property
    def users(self) -> np.ndarray:
        """Indices of the batch's users into ``prep.users``."""
        return self.batch.users

    @property
    def judged(self) -> Any:
        """The judged top-k lists (:class:`metrics.Judged`)."""
        return self.batch.judged

    def top(self, k: int | None) -> tuple[np.ndarray, np.ndarray]:
        """(valid mask, item keys) of the lists cut at ``k``."""
        c = self.judged.cut(k)
        valid = np.arange(c)[None, :] < self.judged.n_ret[:, None]
        return valid, self.batch.top_items[:, :c]

    @cached_property
    def candidates(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every scored candidate: (local user row, score, relevant?)."""
        s, labels = self.batch.scores, self.batch.labels
        if s is None or labels is None:
            raise ValueError("the batch has no candidates (the metric must declare them)")
        cand = np.isfinite(s)
        thr = self.opts.relevance_threshold
        return np.nonzero(cand)[0], s[cand], np.nan_to_num(labels[cand], nan=0.0) >= thr

    @cached_property
    def auc(self) -> scores.AucCounts:
        """Per-user AUC counts of the batch's candidates."""
        local, score, relevant = self.candidates
        return scores.auc_counts(local, score, relevant, len(self.users))

    @cached_property
    def errors(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per-user (squared errors, absolute errors, pairs) over the judged candidates."""
        s, labels = self.batch.scores, self.batch.labels
        if s is None or labels is None:
            raise ValueError("the batch has no candidates (the metric must declare them)")
        judged = np.isfinite(s) & np.isfinite(labels)
        rows = np.nonzero(judged)[0]
        return rating.user_errors(rows, labels[judged], s[judged], len(self.users))


@dataclass(frozen=True)
class Finish:
    """What a reduction may need to finish besides the state: the options and the catalog size
    (``catalog_size()`` raises for a metric that needs it when none was given)."""

    opts: Options
    catalog: int | Callable[[], int] | None = None

    def catalog_size(self, name: str) -> int:
        """The catalog size, asked for by ``name``."""
        size = self.catalog() if callable(self.catalog) else self.catalog
        if size is None:
            raise ValueError(f"metric {name!r} needs the catalog size")
        return int(size)


class Reduction:
    """How per-user values become a summary, through a mergeable :class:`State`.

    ``state`` writes one evaluation's aggregates of metric ``name`` (its per-user ``values`` and
    the ``pieces`` of its :class:`Part` over every user, ``scope`` = the users that count);
    ``finish`` turns a (merged) state into the value. Keys are ``<name>:<what>`` unless
    ``table_key`` names a table shared by several metrics.
    """

    def pieces(self, opts: Options) -> tuple[str, ...]:
        """The per-user pieces this reduction pools under ``opts``."""
        return ()

    def table_key(self, name: str, spec: MetricSpec) -> str | None:
        """The state table this reduction adds to (None: none)."""
        return None

    def state(
        self,
        st: State,
        name: str,
        values: np.ndarray,
        pieces: Mapping[str, np.ndarray],
        scope: np.ndarray,
        opts: Options,
    ) -> None:
        """Write the aggregates of ``name`` into ``st``."""
        raise NotImplementedError

    def finish(self, st: State, name: str, spec: MetricSpec, env: Finish) -> float:
        """The value of ``name`` from a (merged) state."""
        raise NotImplementedError

    def per_user_mean(self, opts: Options) -> bool:
        """Whether the summary under ``opts`` is the mean of the per-user values (or, for a sum,
        that many times it), so paired per-user statistics compare it; False for pooled
        summaries (ratios of sums, weighted means, count tables)."""
        return False


def _ratio(num: float, den: float) -> float:
    return float(num / den) if den > 0 else float("nan")


class Mean(Reduction):
    """Mean of the defined (non-NaN) per-user values."""

    def state(
        self,
        st: State,
        name: str,
        values: np.ndarray,
        pieces: Mapping[str, np.ndarray],
        scope: np.ndarray,
        opts: Options,
    ) -> None:
        ok = ~np.isnan(values)
        st.sums[f"{name}:sum"], st.sums[f"{name}:n"] = float(values[ok].sum()), float(ok.sum())

    def finish(self, st: State, name: str, spec: MetricSpec, env: Finish) -> float:
        return _ratio(st.sums.get(f"{name}:sum", 0.0), st.sums.get(f"{name}:n", 0.0))

    def per_user_mean(self, opts: Options) -> bool:
        return True


class Sum(Reduction):
    """Sum of the per-user values (NaN counted as 0)."""

    def state(
        self,
        st: State,
        name: str,
        values: np.ndarray,
        pieces: Mapping[str, np.ndarray],
        scope: np.ndarray,
        opts: Options,
    ) -> None:
        st.sums[f"{name}:sum"] = float(np.nansum(values))

    def finish(self, st: State, name: str, spec: MetricSpec, env: Finish) -> float:
        return float(st.sums.get(f"{name}:sum", 0.0))

    def per_user_mean(self, opts: Options) -> bool:
        return True


@dataclass(frozen=True)
class Weighted(Reduction):
    """Mean of the defined per-user values weighted by the per-user piece ``weight``."""

    weight: str = "weight"

    def pieces(self, opts: Options) -> tuple[str, ...]:
        return (self.weight,)

    def state(
        self,
        st: State,
        name: str,
        values: np.ndarray,
        pieces: Mapping[str, np.ndarray],
        scope: np.ndarray,
        opts: Options,
    ) -> None:
        ok = ~np.isnan(values)
        w = pieces.get(self.weight, np.zeros(len(values)))
        st.sums[f"{name}:sum"] = float(np.sum(values[ok] * w[ok]))
        st.sums[f"{name}:n"] = float(w[ok].sum())

    finish = Mean.finish

    def per_user_mean(self, opts: Options) -> bool:
        return False  # weighted: not the plain mean the paired statistics estimate


@dataclass(frozen=True)
class Pooled(Reduction):
    """``finish(sums)`` of per-user pieces summed over the users in scope (ratio of sums, pooled
    errors); ``sums`` maps each of ``over`` to its total."""

    over: tuple[str, ...]
    value: Callable[[Mapping[str, float]], float]

    def pieces(self, opts: Options) -> tuple[str, ...]:
        return self.over

    def state(
        self,
        st: State,
        name: str,
        values: np.ndarray,
        pieces: Mapping[str, np.ndarray],
        scope: np.ndarray,
        opts: Options,
    ) -> None:
        for key in self.over:  # a piece no batch gave (no user) sums to 0
            st.sums[f"{name}:{key}"] = float(pieces[key][scope].sum()) if key in pieces else 0.0

    def finish(self, st: State, name: str, spec: MetricSpec, env: Finish) -> float:
        return float(self.value({key: st.sums.get(f"{name}:{key}", 0.0) for key in self.over}))


@dataclass(frozen=True)
class Micro(Reduction):
    """:class:`Mean` over users, or ``micro`` (a :class:`Pooled`) under ``average="micro"``."""

    micro: Pooled

    def _pick(self, opts: Options) -> Reduction:
        return self.micro if opts.average == "micro" else Mean()

    def pieces(self, opts: Options) -> tuple[str, ...]:
        return self._pick(opts).pieces(opts)

    def state(
        self,
        st: State,
        name: str,
        values: np.ndarray,
        pieces: Mapping[str, np.ndarray],
        scope: np.ndarray,
        opts: Options,
    ) -> None:
        self._pick(opts).state(st, name, values, pieces, scope, opts)

    def finish(self, st: State, name: str, spec: MetricSpec, env: Finish) -> float:
        return self._pick(env.opts).finish(st, name, spec, env)

    def per_user_mean(self, opts: Options) -> bool:
        return self._pick(opts).per_user_mean(opts)


@dataclass(frozen=True)
class Counted(Reduction):
    """A count table added key by key over batches and states, finished as a whole:
    ``value(table, name, env)``. ``key(spec)`` names the table, so metrics that count the same
    thing (coverage and Gini of the same top-k) share it. A table's index is named ``item``
    (item ids) or ``score`` (floats) and it has at most two integer count columns: what the
    Spark engine ships and adds by key."""

    key: Callable[[MetricSpec], str]
    value: Callable[[pd.DataFrame | None, str, Finish], float]

    def table_key(self, name: str, spec: MetricSpec) -> str | None:
        return self.key(spec)

    def state(
        self,
        st: State,
        name: str,
        values: np.ndarray,
        pieces: Mapping[str, np.ndarray],
        scope: np.ndarray,
        opts: Options,
    ) -> None:
        pass  # the engine adds the batches' tables under table_key

    def finish(self, st: State, name: str, spec: MetricSpec, env: Finish) -> float:
        return float(self.value(st.tables.get(self.key(spec)), name, env))
