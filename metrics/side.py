"""Side inputs of the beyond-accuracy metrics: item features, embeddings, groups, training history.

Everything here is built once per evaluation, validated with one-line errors, and indexed by item
id: :class:`ItemSpace` turns item ids into rows of an L2-normalised matrix whose dot products are
the item similarities that ``diversity``, ``unexpectedness`` and ``serendipity`` use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import scipy.sparse as sp

from metrics.checks import require_columns, require_frame
from metrics.sets import distinct

__all__ = [
    "ItemSpace",
    "category_matrix",
    "check_side_frame",
    "cooccurrence_space",
    "embedding_space",
    "feature_matrix",
    "feature_space",
    "history_matrix",
    "item_group_codes",
    "popularity_groups",
]

#: Separator of several values in one text cell of ``item_features`` (MovieLens ``genres``).
VALUE_SEP = "|"
#: Popularity groups (Abdollahpouri et al. 2019): head = the most popular items that together
#: hold the first 20 % of training interactions, tail = the least popular items holding the last
#: 20 % (and every item never seen in training), mid = the rest.
HEAD_SHARE = 0.2
TAIL_SHARE = 0.2
POPULARITY_GROUPS = ("head", "mid", "tail")


def _ids_kind_matches(ids: pd.Series, items_int: bool, what: str, column: str = "item") -> None:
    is_int = pd.api.types.is_integer_dtype(ids.dtype)
    if is_int != items_int:
        have, want = ("integers", "strings") if is_int else ("strings", "integers")
        raise ValueError(
            f"{what} column {column!r} holds {have} but the run's {column} ids are {want}; "
            "convert both to the same type"
        )


def check_train_ids(train: Any, run: pd.DataFrame) -> None:
    """``train``'s user and item ids (those it has) of the run's kind, integers or strings: 1
    and "1" never match, so popularity, the default catalog, co-occurrence and histories
    would all miss without a word."""
    for column in ("user", "item"):
        if column in getattr(train, "columns", ()):
            _ids_kind_matches(
                train[column], pd.api.types.is_integer_dtype(run[column].dtype), "train", column
            )


def check_side_frame(frame: Any, what: str, items_int: bool, min_columns: int = 2) -> pd.DataFrame:
    """Validate an item side table: a DataFrame with an ``item`` column of unique, present ids."""
    require_frame(frame, what)
    require_columns(frame.columns, ("item",), what)
    if len(frame.columns) < min_columns:
        raise ValueError(f"{what} needs at least one column besides 'item'")
    if len(frame) == 0:
        raise ValueError(f"{what} is empty: it needs at least one row")
    ids = frame["item"]
    missing = ids.isna().to_numpy()
    if missing.any():
        raise ValueError(f"{what} column 'item' has a missing id at row {int(np.argmax(missing))}")
    if pd.api.types.is_float_dtype(ids.dtype) or pd.api.types.is_bool_dtype(ids.dtype):
        raise ValueError(f"{what} column 'item' must hold integers or strings (got {ids.dtype})")
    _ids_kind_matches(ids, items_int, what)
    dup = ids.duplicated().to_numpy()
    if dup.any():
        raise ValueError(f"{what} has item {_plain(ids.iloc[int(np.argmax(dup))])!r} twice")
    # rows are read by position: a repeated index label means nothing here (it broke scipy)
    return frame if frame.index.is_unique else frame.reset_index(drop=True)


def _plain(value: object) -> object:
    return value.item() if isinstance(value, np.generic) else value


@dataclass(frozen=True)
class ItemSpace:
    """Item ids → rows of ``vectors`` (L2-normalised, so a dot product is a cosine similarity).

    The last row of ``vectors`` is all zeros: items missing from ``index`` map to it when
    ``strict`` is False (similarity 0 to everything); with ``strict`` they are an error naming
    ``source``.
    """

    index: pd.Index
    vectors: np.ndarray | sp.csr_matrix
    source: str
    strict: bool

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """Row of each item id (``ids`` any shape)."""
        flat = np.asarray(ids).ravel()
        rows = self.index.get_indexer(flat)
        absent = rows < 0
        if absent.any():
            if self.strict:
                raise ValueError(
                    f"{self.source} has no row for item {_plain(flat[int(np.argmax(absent))])!r} "
                    f"({int(absent.sum())} item occurrence(s) missing); give every item a row"
                )
            rows = np.where(absent, len(self.index), rows)
        return rows.reshape(np.shape(ids))


def _normalise(matrix: np.ndarray | sp.csr_matrix) -> np.ndarray | sp.csr_matrix:
    """Rows scaled to unit L2 norm (zero rows stay zero), plus one trailing zero row."""
    if not isinstance(matrix, np.ndarray):
        norms = np.sqrt(np.asarray(matrix.multiply(matrix).sum(axis=1)).ravel())
        scale = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)
        out = sp.diags(scale) @ matrix
        return sp.vstack([out, sp.csr_matrix((1, matrix.shape[1]))], format="csr")
    norms = np.linalg.norm(matrix, axis=1)
    scale = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)
    return np.vstack([matrix * scale[:, None], np.zeros((1, matrix.shape[1]))])


def _cell_values(column: pd.Series) -> pd.Series:
    """One row per (item position, value): list-likes and ``a|b`` text cells give several."""
    values = column.explode()
    text = values.map(lambda v: isinstance(v, str))
    if text.any() and values[text].str.contains(VALUE_SEP, regex=False).any():
        values = pd.concat(
            [values[~text], values[text].str.split(VALUE_SEP, regex=False).explode()]
        )
        values = values.map(lambda v: v.strip() if isinstance(v, str) else v)
    keep = values.notna().to_numpy() & (values.astype(str) != "").to_numpy()
    return values[keep]


def feature_matrix(frame: pd.DataFrame) -> tuple[pd.Index, sp.csr_matrix, list[str]]:
    """Multi-hot matrix of the categorical columns: (item ids, items × values 0/1, value labels).

    Every column other than ``item`` is categorical; a value is ``column=value``. A cell may hold
    several values (a list, or text ``a|b|c``); a missing cell holds none.
    """
    index = pd.Index(frame["item"].to_numpy())
    positions = pd.Series(np.arange(len(frame)), index=frame.index)
    rows_parts, label_parts = [], []
    for column in frame.columns:
        if column == "item":
            continue
        values = _cell_values(frame[column])
        rows_parts.append(positions.loc[values.index].to_numpy())
        label_parts.append(str(column) + "=" + values.astype(str).to_numpy().astype(object))
    rows = np.concatenate(rows_parts) if rows_parts else np.zeros(0, np.int64)
    labels = np.concatenate(label_parts) if label_parts else np.zeros(0, object)
    codes, uniques = pd.factorize(labels)
    matrix = sp.csr_matrix(
        (np.ones(len(rows)), (rows, codes)), shape=(len(frame), max(len(uniques), 1))
    )
    matrix.sum_duplicates()
    matrix.data[:] = 1.0  # a value listed twice in one cell counts once
    return index, matrix, [str(u) for u in uniques]


def feature_space(frame: pd.DataFrame) -> ItemSpace:
    """Cosine space of one-hot / multi-hot item features."""
    index, matrix, _ = feature_matrix(frame)
    return ItemSpace(index, _normalise(matrix), "item_features", strict=True)


def category_matrix(frame: pd.DataFrame) -> tuple[pd.Index, sp.csr_matrix]:
    """p(category | item): each item's weight split equally over its categories (rows sum to 1;
    an item without any category has a zero row)."""
    index, matrix, _ = feature_matrix(frame)
    per_item = np.asarray(matrix.sum(axis=1)).ravel()
    scale = np.divide(1.0, per_item, out=np.zeros_like(per_item), where=per_item > 0)
    return index, sp.csr_matrix(sp.diags(scale) @ matrix)


def embedding_space(frame: pd.DataFrame) -> ItemSpace:
    """Cosine space of item embeddings: numeric columns, or one column of equal-length vectors."""
    others = [c for c in frame.columns if c != "item"]
    if len(others) == 1 and frame[others[0]].dtype == object:
        cells = frame[others[0]].to_numpy()
        sizes = np.array([np.size(c) for c in cells])
        if (sizes != sizes[0]).any():
            row = int(np.argmax(sizes != sizes[0]))
            raise ValueError(
                f"item_embeddings column {others[0]!r} holds vectors of different lengths "
                f"({sizes[0]} and {sizes[row]} at row {row})"
            )
        try:
            matrix = np.stack([np.asarray(c, dtype=np.float64) for c in cells])
        except (TypeError, ValueError) as err:
            raise ValueError(
                f"item_embeddings column {others[0]!r} must hold numbers ({err})"
            ) from None
    else:
        for column in others:
            if not pd.api.types.is_numeric_dtype(frame[column].dtype) or pd.api.types.is_bool_dtype(
                frame[column].dtype
            ):
                raise ValueError(
                    f"item_embeddings column {column!r} must be numeric (got {frame[column].dtype})"
                )
        matrix = frame[others].to_numpy(dtype=np.float64)
    bad = ~np.isfinite(matrix)
    if bad.any():
        row = int(np.argwhere(bad)[0][0])
        raise ValueError(
            f"item_embeddings must be finite numbers: item {_plain(frame['item'].iloc[row])!r} "
            f"(row {row}) has {matrix[row][bad[row]][0]!r}"
        )
    return ItemSpace(
        pd.Index(frame["item"].to_numpy()), _normalise(matrix), "item_embeddings", strict=True
    )


def _train_pairs(train: pd.DataFrame) -> tuple[pd.Index, pd.Index, np.ndarray, np.ndarray]:
    """Distinct (user, item) pairs of ``train`` as codes: (users, items, user codes, item codes)."""
    u_codes, users = pd.factorize(train["user"])
    i_codes, items = pd.factorize(train["item"])
    key = distinct(u_codes.astype(np.int64) * len(items) + i_codes)
    return pd.Index(users), pd.Index(items), key // len(items), key % len(items)


def cooccurrence_space(train: pd.DataFrame) -> ItemSpace:
    """Cosine space of items as binary vectors over training users (co-occurrence similarity
    |U_i ∩ U_j| / sqrt(|U_i| |U_j|), as Microsoft Recommenders' ``item_cooccurrence_count``)."""
    users, items, u, i = _train_pairs(train)
    matrix = sp.csr_matrix((np.ones(len(u)), (i, u)), shape=(len(items), max(len(users), 1)))
    return ItemSpace(items, _normalise(matrix), "train", strict=False)


def history_matrix(train: pd.DataFrame) -> tuple[pd.Index, np.ndarray, np.ndarray]:
    """Each training user's distinct items: (user ids, CSR offsets per user, item ids)."""
    users, items, u, i = _train_pairs(train)
    offsets = np.concatenate(([0], np.cumsum(np.bincount(u, minlength=len(users)))))
    return users, offsets, np.asarray(items)[i]


def item_counts(items: pd.Series) -> pd.Series:
    """Interactions of each item id that occurs in ``items``, indexed by the ids themselves in
    ascending order: a categorical or Arrow-dictionary column is counted on its values, so
    neither its category order nor its unused categories (count 0) change a number."""
    dtype = items.dtype
    if isinstance(dtype, pd.CategoricalDtype):  # counted on the codes (no copy of the ids)
        codes = items.cat.codes.to_numpy()
        n = np.bincount(codes[codes >= 0], minlength=len(dtype.categories))
        counts = pd.Series(n, index=pd.Index(dtype.categories), name="count")
    else:
        if isinstance(dtype, pd.ArrowDtype) and pa.types.is_dictionary(dtype.pyarrow_dtype):
            items = items.astype(pd.ArrowDtype(dtype.pyarrow_dtype.value_type))
        counts = items.value_counts()
    return counts[counts.to_numpy() > 0].sort_index()


def popularity_groups(train: pd.DataFrame) -> pd.Series:
    """``head`` / ``mid`` / ``tail`` of every training item by its interaction count, items of
    equal count in ascending id order (as the comparison's item buckets), never in the order
    the training rows arrived in."""
    counts = item_counts(train["item"])
    counts = counts.iloc[np.argsort(-counts.to_numpy(), kind="stable")]
    values = counts.to_numpy(dtype=np.float64)
    total = values.sum()
    before = np.cumsum(values) - values
    from_end = total - before  # share of this item and every less popular one
    group = np.where(
        before < HEAD_SHARE * total, "head", np.where(from_end <= TAIL_SHARE * total, "tail", "mid")
    )
    return pd.Series(group, index=counts.index, name="group")


def item_group_codes(
    groups: pd.Series, names: list[str], ids: np.ndarray, default: str | None
) -> np.ndarray:
    """Index into ``names`` of each item's group (-1: none of them); items absent from ``groups``
    get ``default`` or are an error when it is None."""
    rows = groups.index.get_indexer(np.asarray(ids).ravel())
    absent = rows < 0
    if absent.any() and default is None:
        item = _plain(np.asarray(ids).ravel()[int(np.argmax(absent))])
        raise ValueError(f"item_groups has no group for recommended item {item!r}")
    labels = np.where(absent, default if default is not None else "", groups.to_numpy()[rows])
    codes = pd.Index(names).get_indexer(labels.astype(str))
    return codes.reshape(np.shape(ids))


#: The metrics that read side inputs.
SIDE_METRICS = ("diversity", "unexpectedness", "serendipity", "miscalibration", "exposure")


class BeyondInputs:
    """The side inputs of one evaluation, validated up front and turned into matrices lazily.

    ``per_user`` computes one of :data:`SIDE_METRICS` for a batch of users from their valid
    recommended item ids (``exposure`` returns the pair group / list exposure instead).
    """

    def __init__(
        self,
        named: list[tuple[str, Any]],
        options: Any,
        train: pd.DataFrame | None,
        item_features: pd.DataFrame | None,
        item_embeddings: pd.DataFrame | None,
        item_groups: pd.DataFrame | str | None,
        items_int: bool,
    ):
        self.opts = options
        self.features = (
            None
            if item_features is None
            else check_side_frame(item_features, "item_features", items_int)
        )
        self.embeddings = (
            None
            if item_embeddings is None
            else check_side_frame(item_embeddings, "item_embeddings", items_int)
        )
        self.train = train
        self.groups = self._groups(item_groups, items_int)
        self._cache: dict[str, Any] = {}
        for name, spec in named:
            if spec.metric in SIDE_METRICS:
                self._check(name, spec)

    # ----------------------------------------------------------------------------- validation
    def _groups(self, item_groups: pd.DataFrame | str | None, items_int: bool) -> pd.Series | None:
        if item_groups is None:
            return None
        if isinstance(item_groups, str):
            if self.features is None or item_groups not in self.features.columns:
                raise ValueError(
                    f"item_groups={item_groups!r} names no column of item_features"
                    + (
                        ""
                        if self.features is None
                        else f" ({list(map(str, self.features.columns))})"
                    )
                )
            frame = self.features[["item", item_groups]].rename(columns={item_groups: "group"})
        else:
            frame = check_side_frame(item_groups, "item_groups", items_int)
            require_columns(frame.columns, ("item", "group"), "item_groups")
        missing = frame["group"].isna().to_numpy()
        if missing.any():
            item = _plain(frame["item"].iloc[int(np.argmax(missing))])
            raise ValueError(f"item_groups has no group for item {item!r}")
        return pd.Series(frame["group"].astype(str).to_numpy(), index=pd.Index(frame["item"]))

    def _train(self) -> pd.DataFrame:
        """The training table (checked by ``_check`` for every metric that reads it)."""
        if self.train is None:
            raise ValueError("train= is needed (a DataFrame with columns ['user', 'item'])")
        return self.train

    def _need_train(self, name: str, why: str, user: bool = False) -> pd.DataFrame:
        cols = ("user", "item") if user else ("item",)
        train = self.train
        if train is None or any(c not in getattr(train, "columns", []) for c in cols):
            raise ValueError(
                f"metric {name!r} needs train= (a DataFrame with columns {list(cols)}) for {why}"
            )
        return train

    def _check(self, name: str, spec: Any) -> None:
        method = self.opts.serendipity_method
        if spec.metric == "diversity":
            if self.opts.diversity_similarity == "jaccard" and self.features is None:
                raise ValueError(
                    f"metric {name!r} with diversity_similarity='jaccard' needs item_features="
                )
            if self.features is None and self.embeddings is None:
                self._need_train(name, "co-occurrence similarity (or pass item_features=)", True)
        elif spec.metric in ("unexpectedness", "serendipity"):
            if method == "popularity":
                if spec.k is None:  # the primitive list's length must not depend on batching
                    raise ValueError(
                        f"metric {name!r} with serendipity_method='popularity' needs a cutoff "
                        f"(the popularity list it is compared with has k items), e.g. "
                        f"{spec.metric}@10"
                    )
                self._need_train(name, "the popularity top-k of serendipity_method='popularity'")
            else:
                self._need_train(name, "the user's history (serendipity_method='history')", True)
        elif spec.metric == "miscalibration":
            if self.features is None:
                raise ValueError(f"metric {name!r} needs item_features= (item categories)")
            self._need_train(name, "the category distribution of each user's history", True)
        elif spec.metric == "exposure":
            if self.groups is None:
                self._need_train(name, "popularity groups head/mid/tail (or pass item_groups=)")
                known = list(POPULARITY_GROUPS)
            else:
                known = sorted(pd.unique(self.groups.to_numpy()))
            if not spec.group:
                raise ValueError(
                    f"metric {name!r} needs an item group: exposure_<group>@k, e.g. "
                    f"exposure_tail@10 (groups: {', '.join(known[:20])})"
                )
            if spec.group not in known:
                shown = ", ".join(known[:20]) + (" …" if len(known) > 20 else "")
                raise ValueError(f"metric {name!r}: no item group {spec.group!r}; groups: {shown}")

    # ------------------------------------------------------------------------------ matrices
    def _cached(self, key: str, build: Any) -> Any:
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    def space(self) -> ItemSpace:
        """Item similarity space: embeddings, else features, else training co-occurrence."""
        if self.embeddings is not None:
            return self._cached("space", lambda: embedding_space(self.embeddings))
        if self.features is not None:
            return self._cached("space", lambda: feature_space(self.features))
        return self._cached("space", lambda: cooccurrence_space(self._train()))

    def _binary(self) -> tuple[pd.Index, sp.csr_matrix]:
        return self._cached("binary", lambda: feature_matrix(self.features)[:2])

    def _categories(self) -> tuple[pd.Index, sp.csr_matrix]:
        return self._cached("categories", lambda: category_matrix(self.features))

    def _history(self) -> tuple[pd.Index, np.ndarray, np.ndarray]:
        return self._cached("history", lambda: history_matrix(self._train()))

    def _history_rows(self, key: str, index: pd.Index, source: str) -> np.ndarray:
        """Rows in ``index`` of every training history item (an item missing is an error)."""

        def build() -> np.ndarray:
            items = self._history()[2]
            rows = index.get_indexer(items)
            absent = rows < 0
            if absent.any():
                raise ValueError(
                    f"{source} has no row for item {_plain(items[int(np.argmax(absent))])!r} "
                    "of the training data; give every item a row"
                )
            return rows

        return self._cached(key, build)

    def _history_selector(self, user_ids: np.ndarray, rows: np.ndarray, n: int) -> sp.csr_matrix:
        """``users × n`` 0/1 matrix of each user's distinct training items (as ``rows``)."""
        users, offsets, _ = self._history()
        at = users.get_indexer(user_ids)
        start = np.where(at >= 0, offsets[np.maximum(at, 0)], 0)
        size = np.where(at >= 0, offsets[np.maximum(at, 0) + 1] - start, 0)
        indptr = np.concatenate(([0], np.cumsum(size)))
        flat = np.arange(indptr[-1]) - np.repeat(indptr[:-1] - start, size)
        return sp.csr_matrix((np.ones(len(flat)), rows[flat], indptr), shape=(len(user_ids), n))

    def _primitive(self, n: int) -> pd.Index:
        """The ``n`` most popular training items (count descending, then item id)."""

        def build() -> pd.Index:
            counts = item_counts(self._train()["item"])  # ascending ids: ties stay so
            order = np.argsort(-counts.to_numpy(), kind="stable")
            return pd.Index(counts.index.to_numpy()[order[:n]])

        return self._cached(f"primitive{n}", build)

    # ------------------------------------------------------------------------------- metrics
    def per_user(
        self,
        spec: Any,
        ids: np.ndarray,
        valid: np.ndarray,
        hits: np.ndarray,
        user_ids: np.ndarray,
    ) -> Any:
        """Per-user values of ``spec`` for one batch; ``ids`` are the item ids at ``valid``."""
        from metrics import beyond

        metric = spec.metric
        if metric == "exposure":
            return beyond.exposure(self._in_group(spec.group, ids, valid), valid)
        if metric == "miscalibration":
            index, cats = self._categories()
            rows = self._rows_in(index, "item_features", ids, valid)
            q = beyond.selector(rows, valid, cats.shape[0]) @ cats
            hist = self._history_rows("hist_categories", index, "item_features")
            p = self._history_selector(user_ids, hist, cats.shape[0]) @ cats
            kl = beyond.miscalibration(
                _row_normalised(p), _row_normalised(q), self.opts.calibration_alpha
            )
            return np.where(valid.any(axis=1), kl, np.nan)
        if metric == "diversity":
            if self.opts.diversity_similarity == "jaccard" and self.embeddings is None:
                index, binary = self._binary()
                return 1.0 - beyond.intra_list_jaccard(
                    binary, self._rows_in(index, "item_features", ids, valid), valid
                )
            space = self.space()
            rows = np.zeros(valid.shape, np.int64)
            rows[valid] = space.rows(ids)
            return 1.0 - beyond.intra_list_similarity(space.vectors, rows, valid)
        # unexpectedness / serendipity
        if self.opts.serendipity_method == "popularity":
            unexpected = np.zeros(valid.shape)
            primitive = self._primitive(spec.k)
            unexpected[valid] = ~pd.Index(ids).isin(primitive)
        else:
            space = self.space()
            rows = np.zeros(valid.shape, np.int64)
            rows[valid] = space.rows(ids)
            hist = self._history_rows("hist_space", space.index, space.source)
            if not space.strict:  # co-occurrence: every training item has a row
                hist = np.where(hist < 0, len(space.index), hist)
            history = self._history_selector(user_ids, hist, space.vectors.shape[0])
            unexpected = 1.0 - beyond.history_similarity(space.vectors, rows, valid, history)
        if metric == "unexpectedness":
            return beyond.unexpectedness(unexpected, valid)
        return beyond.serendipity(unexpected, hits, valid)

    def _rows_in(
        self, index: pd.Index, source: str, ids: np.ndarray, valid: np.ndarray
    ) -> np.ndarray:
        rows = np.zeros(valid.shape, np.int64)
        found = index.get_indexer(ids)
        absent = found < 0
        if absent.any():
            raise ValueError(
                f"{source} has no row for recommended item {_plain(ids[int(np.argmax(absent))])!r}"
            )
        rows[valid] = found
        return rows

    def _in_group(self, group: str, ids: np.ndarray, valid: np.ndarray) -> np.ndarray:
        if self.groups is None:
            groups = self._cached("popularity_groups", lambda: popularity_groups(self._train()))
            codes = item_group_codes(groups, [group], ids, default="tail")
        else:
            codes = item_group_codes(self.groups, [group], ids, default=None)
        out = np.zeros(valid.shape, bool)
        out[valid] = codes == 0
        return out


def _row_normalised(matrix: sp.spmatrix) -> sp.csr_matrix:
    """Rows scaled to sum 1 (zero rows stay zero)."""
    matrix = sp.csr_matrix(matrix)
    total = np.asarray(matrix.sum(axis=1)).ravel()
    scale = np.divide(1.0, total, out=np.zeros_like(total), where=total > 0)
    return sp.csr_matrix(sp.diags(scale) @ matrix)
