"""A model version whose scores come from a file: CSV/TSV, Parquet or a TREC run.

The file holds one row per (user, item) with a score (higher = better). ``fit(train)`` loads and
validates it; ``recommend`` returns each user's top-k of the file's rows, ``score_items`` the
file's scores. Nothing is learned: the file *is* the model (e.g. lists exported from another
system, or a past run of this harness).

Ids: the file's ids are normalized like training data (``harness.data``: a column whose values are
all canonical integers becomes ``int64``, anything else text). When the training ids and the
file's ids are both integers they are compared as ``int64``; otherwise both sides are compared as
strings, and the returned item ids are then ``str`` (``object`` array). TREC run files always
hold text; they become integers under the same rule.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

import numpy as np
import pandas as pd

from harness.data import (
    ITEM,
    USER,
    IdCodes,
    file_columns,
    normalize_ids,
    normalize_ids_coded_all,
    read_parquet_columns,
)
from harness.models.base import (
    BaseRecommender,
    _ids_at,
    _indptr,
    _rank_order,
    _take_lists,
    candidate_arrays,
)
from metrics.checks import require_choice
from metrics.io import read_csv_ids

__all__ = ["FORMATS", "TIES", "MissingUsersWarning", "PrecomputedScores"]

SCORE = "score"
FORMATS: tuple[str, ...] = ("csv", "tsv", "parquet", "trec")
#: How tied scores are ordered: by ascending item id, or in the file's row order.
TIES: tuple[str, ...] = ("item", "file")
_FIELDS: tuple[str, ...] = (USER, ITEM, SCORE)


class MissingUsersWarning(UserWarning):
    """Requested users with no list in the score file (they get all-padding rows): a warning
    for library callers; the harness catches it and turns it into the model's run note."""

    def __init__(self, message: str, missing: int, requested: int, example: str) -> None:
        super().__init__(message)
        self.missing, self.requested, self.example = missing, requested, example


class PrecomputedScores(BaseRecommender):
    """Recommend from a file of (user, item, score) rows; see the module doc.

    ``format``: one of ``FORMATS`` or ``None`` to tell it from the extension (``.csv``,
    ``.tsv``, ``.parquet``/``.pq``; anything else is read as a TREC run). ``columns`` maps our
    names (``user``, ``item``, ``score``) to the file's column names (CSV/Parquet only).

    Conventions (those of ``recommend`` in ``harness.models.base``): ties by ascending item id,
    or with ``ties="file"`` in the file's row order (what ``tie_break="input_order"`` means for a
    run file: ranx, Microsoft Recommenders and ``metrics.evaluate`` keep it); padding with score
    ``-inf``. A requested user with no row in the file gets an all-padding
    row, counted in ``stats_["users_without_list"]`` (of the last ``recommend`` call, with a
    warning). Items absent from the training catalog are kept in the lists (the file decides;
    counted in ``stats_["items_unknown"]``). ``exclude_seen`` (default ``False``) drops the
    user's training items from the file's lists. ``score_items`` gives the file's score, ``NaN``
    for pairs not in the file. ``rank_positions`` gives ``recommend``'s lists as positions in
    ``position_ids_`` (the file's sorted distinct items), which is how the lists are stored.

    ``stats_`` after ``fit``: ``rows``, ``users_in_file``, ``items_in_file``,
    ``users_not_in_train`` (file users absent from training), ``items_unknown`` (file items absent
    from training), ``rows_seen`` (rows that are training pairs), ``users_without_list`` (0 until
    ``recommend``); ``recommend`` adds ``users_requested``.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        format: str | None = None,
        columns: Mapping[str, str] | None = None,
        exclude_seen: bool = False,
        ties: str = "item",
        *,
        batch_size: int | None = None,
        progress: bool = False,
    ) -> None:
        super().__init__(exclude_seen=exclude_seen, batch_size=batch_size, progress=progress)
        require_choice("ties", ties, TIES)
        if format is not None and format not in FORMATS:
            raise ValueError(f"'format' must be one of {list(FORMATS)} or null (got {format!r})")
        mapping = dict(columns or {})
        unknown = sorted(set(mapping) - set(_FIELDS))
        if unknown:
            raise ValueError(
                f"'columns' maps our names {list(_FIELDS)} to file columns "
                f"(got unknown name {unknown[0]!r})"
            )
        self.path = str(path)
        self.format = format
        self.columns = mapping
        self.ties = ties

    # -------------------------------------------------------------------------- fitting

    def fit(self, train: pd.DataFrame) -> Self:
        """Encode the training ids, then load, validate and index the file."""
        super().fit(train)
        table = self._read()
        source = self.path
        users, items = normalize_ids_coded_all(
            [(table[USER], self._label(USER)), (table[ITEM], self._label(ITEM))],
            source,
            decode=False,  # only the codes are read
        )
        user_codes, file_users, train_users = _coded_ids(*users, self.user_ids_)
        item_codes, file_items, train_items = _coded_ids(*items, self.item_ids_)
        scores = self._scores(table[SCORE])
        del table, users, items  # the file's columns as read: only their codes are used now
        n_rows = scores.size

        n_file_items = file_items.size
        keys = user_codes.astype(np.int64) * n_file_items + item_codes
        by_key = np.argsort(keys, kind="stable")
        sorted_keys = keys[by_key]
        del keys
        dup = np.flatnonzero(sorted_keys[1:] == sorted_keys[:-1])
        if dup.size:
            rows = np.sort(by_key[dup[0] : dup[0] + 2])
            raise ValueError(
                f"{source}: columns {self._label(USER)} and {self._label(ITEM)} have "
                f"{dup.size} duplicate (user, item) row(s), "
                f"e.g. user={_show(file_users[user_codes[rows[0]]])} "
                f"item={_show(file_items[item_codes[rows[0]]])} at rows {rows.tolist()} "
                f"(0-based data rows)"
            )

        # Which file rows are training pairs (for exclude_seen and stats).
        tr_user = pd.Index(train_users).get_indexer(file_users)
        tr_item = pd.Index(train_items).get_indexer(file_items)
        # rows of a training user and item, looked up through the small per-id tables
        known = np.flatnonzero((tr_user >= 0)[user_codes] & (tr_item >= 0)[item_codes])
        seen = np.zeros(n_rows, dtype=bool)
        if known.size:
            ru, ri = tr_user[user_codes[known]], tr_item[item_codes[known]]
            seen[known] = np.asarray(self.interactions_[ru, ri]).ravel() > 0

        # Lists hold positions in the file's sorted items (their codes: ranking by code is ranking
        # by id), not one id object per row; ids are taken only in ``recommend``.
        self._file_users = pd.Index(file_users)
        file_items.flags.writeable = False
        self._file_items = file_items
        # Each array goes as soon as it is used (20M rows: 160 MB each).
        self._keys, self._key_scores = sorted_keys, scores[by_key]
        del sorted_keys, by_key
        by_file = np.arange(n_rows) if self.ties == "file" else item_codes  # tied rows' order
        order = _rank_order(user_codes, by_file, scores)
        del by_file
        ranked_at, ranked_scores = item_codes[order], scores[order]
        del item_codes, scores
        owner = user_codes[order]
        del user_codes
        keep = ~seen[order]
        del order
        self._lists = (_indptr(owner, file_users.size), ranked_at, ranked_scores)
        owner = owner[keep]
        self._unseen_lists = (
            _indptr(owner, file_users.size),
            ranked_at[keep],
            ranked_scores[keep],
        )
        self._file_item_index = pd.Index(file_items)
        self._n_file_items = n_file_items
        self.stats_: dict[str, Any] = {
            "rows": int(n_rows),
            "users_in_file": int(file_users.size),
            "items_in_file": int(n_file_items),
            "users_not_in_train": int((tr_user < 0).sum()),
            "items_unknown": int((tr_item < 0).sum()),
            "rows_seen": int(seen.sum()),
            "users_without_list": 0,
        }
        return self

    def _label(self, name: str) -> str:
        col = self.columns.get(name, name)
        return f"'{name}'" if col == name else f"'{name}' (file column '{col}')"

    def _kind(self) -> str:
        if self.format is not None:
            return self.format
        suffix = Path(self.path).suffix.lower()
        return {".csv": "csv", ".tsv": "tsv", ".parquet": "parquet", ".pq": "parquet"}.get(
            suffix, "trec"
        )

    def _read(self) -> pd.DataFrame:
        """The file's user, item and score columns under our names (ids as read, scores raw)."""
        kind = self._kind()
        if not Path(self.path).exists():
            raise FileNotFoundError(f"{self.path}: no such file (PrecomputedScores path)")
        if kind == "trec":
            if self.columns:
                raise ValueError(
                    f"{self.path}: 'columns' does not apply to a TREC run file "
                    f"(fields are query Q0 doc rank score tag)"
                )
            from metrics.io import read_trec_run

            return read_trec_run(self.path)
        wanted = {name: self.columns.get(name, name) for name in _FIELDS}
        # the loader's header rules: a column named twice is ambiguous, an error
        found = file_columns(self.path, kind, str(self.path))
        sep = "\t" if kind == "tsv" else ","
        missing = [name for name in _FIELDS if wanted[name] not in found]
        if missing:
            raise ValueError(
                f"{self.path}: missing column {self._label(missing[0])}; columns found: {found}"
            )
        cols = [wanted[name] for name in _FIELDS]
        if kind == "parquet":
            # text ids stored as dictionary indices come as categoricals: not hashed per row
            raw = read_parquet_columns(self.path, cols, {wanted[USER], wanted[ITEM]})
        else:
            raw = read_csv_ids(
                self.path,
                sep,
                [wanted[USER], wanted[ITEM]],
                usecols=cols,
                ids_na=("",),
                keep_default_na=False,
                na_values={
                    wanted[USER]: [""],
                    wanted[ITEM]: [""],
                    wanted[SCORE]: ["", "nan", "NaN", "NA", "null"],
                },
            )
        if len(raw) == 0:
            raise ValueError(f"{self.path}: no rows (0 data rows)")
        # copy=False: two int64 columns would otherwise be copied into one block
        return pd.DataFrame(
            {name: raw[wanted[name]].reset_index(drop=True) for name in _FIELDS}, copy=False
        )

    def _scores(self, column: pd.Series) -> np.ndarray:
        """Scores as finite float64, or ``ValueError`` naming the file, column and a value."""
        values = pd.to_numeric(column, errors="coerce").to_numpy(dtype=np.float64)
        bad = ~np.isfinite(values)
        if bad.any():
            first = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"{self.path}: column {self._label(SCORE)} has {int(bad.sum())} missing, "
                f"non-numeric or non-finite score(s), e.g. {_show(column.iloc[first])} "
                f"at row {first} (0-based data row)"
            )
        return values

    # --------------------------------------------------------------------------- output

    def recommend(
        self, users: np.ndarray, k: int, *, exclude_seen: bool | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` of each user's file rows (module doc); no list: an all-padding row."""
        positions, scores = self._positions(users, k, exclude_seen)
        return self._ids_at(positions), scores

    @property
    def position_ids_(self) -> np.ndarray:
        """The file's distinct item ids, sorted (``recommend``'s id dtype): what
        ``rank_positions``' positions index."""
        return self._file_items

    def rank_positions(
        self, users: np.ndarray, k: int, *, exclude_seen: bool | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``recommend``'s lists as positions in ``position_ids_`` (``-1`` where padded) and
        scores, with the same checks, warning and ``stats_``: text ids are then taken once."""
        return self._positions(users, k, exclude_seen)

    def _ids_at(self, positions: np.ndarray) -> np.ndarray:
        """Item ids at ``positions`` of ``position_ids_``; the padding id where ``-1``."""
        return _ids_at(self._file_items, positions)

    def _positions(
        self, users: np.ndarray, k: int, exclude_seen: bool | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Checked arguments, ``stats_`` and the missing-users warning (at the public caller's
        caller), then the lists as ``(positions, scores)``."""
        if not hasattr(self, "stats_"):
            raise RuntimeError(f"{type(self).__name__} is not fitted; call fit(train) first")
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
            raise ValueError(f"'k' must be a positive int (got {k!r})")
        users = np.asarray(users)
        if users.ndim != 1:
            raise ValueError(f"'users' must be a 1-D array of user ids (got shape {users.shape})")
        exclude = self.exclude_seen if exclude_seen is None else exclude_seen
        codes = _lookup(self._file_users, users)
        missing = codes < 0
        n_missing = int(pd.unique(users[missing]).size) if missing.any() else 0
        self.stats_["users_requested"] = int(pd.unique(users).size)
        self.stats_["users_without_list"] = n_missing
        if n_missing:
            example = _show(users[missing][0])
            requested = self.stats_["users_requested"]
            message = (
                f"PrecomputedScores({self.path}): {n_missing} of {requested} "
                f"requested user(s) have no list in the file, e.g. {example}; they get "
                f"all-padding rows"
            )
            warnings.warn(
                MissingUsersWarning(message, n_missing, requested, str(example)), stacklevel=3
            )
        lists = self._unseen_lists if exclude else self._lists
        positions, scores = _take_lists(*lists, codes, int(k))
        positions[np.isneginf(scores)] = -1  # real scores are finite: -inf is padding
        return positions, scores

    def score_items(self, users: np.ndarray, items: np.ndarray) -> np.ndarray:
        """The file's score of each (user, candidate item); ``NaN`` where the file has none."""
        if not hasattr(self, "stats_"):
            raise RuntimeError(f"{type(self).__name__} is not fitted; call fit(train) first")
        users, items = candidate_arrays(users, items)
        n, m = items.shape
        out = np.full((n, m), np.nan)
        if out.size == 0 or self._keys.size == 0:
            return out
        u = np.repeat(_lookup(self._file_users, users), m)
        i = _lookup(self._file_item_index, items.ravel())
        ok = (u >= 0) & (i >= 0)
        keys = u[ok].astype(np.int64) * self._n_file_items + i[ok]
        pos = np.minimum(np.searchsorted(self._keys, keys), self._keys.size - 1)
        found = self._keys[pos] == keys
        flat = out.ravel()
        idx = np.flatnonzero(ok)[found]
        flat[idx] = self._key_scores[pos[found]]
        return flat.reshape(n, m)


# ------------------------------------------------------------------------------- ids


def _show(value: object) -> str:
    """A value for an error message: plain Python repr (``nan``, ``'x'``, ``7``)."""
    return repr(value.item() if isinstance(value, np.generic) else value)


def _common_ids(file_ids: pd.Series, train_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """File and training ids in one comparable dtype: ``int64`` when both are integer, else
    ``str`` values in ``object`` arrays."""
    if pd.api.types.is_integer_dtype(file_ids.dtype) and train_ids.dtype != object:
        return file_ids.to_numpy(dtype=np.int64), train_ids
    return _as_str(file_ids.to_numpy()), _as_str(train_ids)


def _coded_ids(
    file_ids: pd.Series, known: IdCodes | None, train_ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Codes of the file's ids in their sorted distinct values, those values and the training
    ids, compared as ``_common_ids`` says. The column is encoded as it is (text: from the codes
    its validation made, ``known``) and only its distinct values are converted and sorted:
    text never becomes one Python string per row, nor is hashed twice (20M rows: seconds)."""
    if known is None:
        codes, uniques = pd.factorize(file_ids, sort=True)
    else:
        rank, uniques = pd.factorize(known.uniques, sort=True)  # distinct already: a sort
        codes = rank[known.codes]
    distinct, train = _common_ids(pd.Series(uniques, copy=False), train_ids)
    if distinct.dtype == object and pd.api.types.is_integer_dtype(file_ids.dtype):
        recode, distinct = pd.factorize(distinct, sort=True)  # integers as text: text order
        codes = recode[codes]
        distinct = np.asarray(distinct, dtype=object)
    return codes.astype(np.int64, copy=False), distinct, train


def _as_str(values: np.ndarray) -> np.ndarray:
    """``str`` of every value, in an ``object`` array (never pandas' ``str`` dtype)."""
    if values.dtype == object and pd.api.types.infer_dtype(values, skipna=False) == "string":
        return values  # text ids already: no round trip through pandas' str (1M ids: 0.15 s)
    return pd.Series(values).astype(str).to_numpy(dtype=object)


def _lookup(index: pd.Index, values: np.ndarray) -> np.ndarray:
    """Codes of ``values`` in ``index`` (-1 when absent), comparing as strings when the index
    holds text and ``values`` do not, or the reverse."""
    values = np.asarray(values)
    if values.size == 0:
        return np.zeros(0, dtype=np.int64)
    index_text = index.dtype == object or pd.api.types.is_string_dtype(index.dtype)
    values_text = values.dtype == object or values.dtype.kind in "US"
    if index_text and not values_text:
        values = _as_str(values)
    elif values_text and not index_text:
        normalized = normalize_ids(pd.Series(values), "requested ids", "'id'")
        if not pd.api.types.is_integer_dtype(normalized.dtype):
            return np.full(values.size, -1, dtype=np.int64)
        values = normalized.to_numpy(dtype=np.int64)
    return index.get_indexer(values).astype(np.int64)
