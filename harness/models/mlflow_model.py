"""A registered MLflow model (pyfunc) used as a harness model: evaluate what is shipped.

The pyfunc contract (``examples/register_model.py`` logs a model that follows it):

- input: a ``pandas.DataFrame`` with columns ``user`` (the ids, as the harness has them) and
  ``k`` (int: how many items that user needs), one row per user;
- output: a ``pandas.DataFrame`` with columns ``user``, ``item``, ``score`` (float, finite,
  higher = better): at most ``k`` rows per user, in any order, no repeated (user, item). A user
  with no rows gets an all-padding row.

``MLflowModel.recommend`` calls ``predict`` once per ``batch_size`` users and pivots the rows into
the ``(n, k)`` arrays of the ``recommend`` convention (``harness.models.base``): best first, ties by
ascending item id, padding with score ``-inf``. Item ids are normalized like training data (all
canonical integers: ``int64``, else ``str``).

``fit(train)`` does not retrain (the model is already trained): it resolves the version through
the registry (``info_``) and loads the model. Seen items are *not* excluded by default
(``exclude_seen=False``): a shipped model decides its own lists. With ``exclude_seen=True`` the
training pairs are remembered at ``fit``; each user is then asked for ``k`` plus the number of
their training items, and those items are dropped from the answer.
"""

from __future__ import annotations

import re
import tempfile
from typing import Any, Self
from urllib.parse import urlparse
from urllib.request import url2pathname

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from harness.data import ITEM, USER, id_codes, normalize_ids
from harness.models.base import _id_array, _ranked_lists, _take_lists
from harness.models.precomputed import _as_str, _common_ids, _lookup, _show
from metrics.sets import distinct

__all__ = ["MLflowModel"]

_URI = re.compile(r"models:/(?P<name>[^@]+?)(?:/(?P<version>\d+)|@(?P<alias>[\w\-.]+))")
_OUTPUT = ("user", "item", "score")


def registry_error(err: Any) -> str:
    """An MLflow registry error's first line without the error code a REST store puts first
    (``Registered model alias x not found``, the same from sqlite and from a server)."""
    first = str(getattr(err, "message", err)).splitlines()[0]
    return re.sub(r"^[A-Z_]+: ", "", first).rstrip(".")


def aliases_text(aliases: Any) -> str:
    """A registered model's aliases for an error line: ``@a (version 1), @b (version 2)``."""
    return ", ".join(f"@{a} (version {v})" for a, v in sorted(dict(aliases).items())) or "none"


class MLflowModel:
    """Recommend with the registered pyfunc at ``uri`` (``models:/NAME/VERSION`` or
    ``models:/NAME@ALIAS``) of the registry at ``tracking_uri`` (``None``: MLflow's default).

    ``info_`` after ``fit``: ``model_uri``, ``name``, ``version`` (int), ``run_id``, ``source``
    (an alias is resolved once, at ``fit``; the loaded artifacts are those of that version).
    ``stats_`` after ``recommend``: ``users_requested``, ``users_without_list`` (users the model
    returned no row for), ``users_over_k`` (users with more rows than asked; cut to the best),
    ``rows_returned``.
    """

    def __init__(
        self,
        uri: str,
        tracking_uri: str | None = None,
        *,
        registry_uri: str | None = None,
        exclude_seen: bool = False,
        batch_size: int = 10_000,
        progress: bool = False,
    ) -> None:
        match = _URI.fullmatch(str(uri))
        if match is None:
            raise ValueError(
                f"'uri' must be models:/NAME/VERSION or models:/NAME@ALIAS (got {uri!r})"
            )
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"'batch_size' must be a positive int (got {batch_size!r})")
        self.uri = str(uri)
        self.tracking_uri = tracking_uri
        self.registry_uri = registry_uri
        self.exclude_seen = exclude_seen
        self.batch_size = batch_size
        self.progress = progress
        self._name = match["name"]
        self._version = match["version"]
        self._alias = match["alias"]

    @property
    def registered_name(self) -> str:
        """The registered model's name, from the URI (no registry call)."""
        return str(self._name)

    def model_version(self, client: Any) -> Any:
        """The registry's ``ModelVersion`` this URI names now (an alias: where it points); a
        model, version or alias the registry lacks is a one-line ValueError naming it."""
        import mlflow
        from mlflow.exceptions import MlflowException

        try:
            if self._alias is not None:
                return client.get_model_version_by_alias(self._name, self._alias)
            return client.get_model_version(self._name, str(self._version))
        except MlflowException as err:
            if err.error_code not in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
                raise
            registry = self.registry_uri or self.tracking_uri
            where = registry or f"{mlflow.get_registry_uri()} (MLflow's default: no tracking_uri)"
            message = registry_error(err)
            raise ValueError(f"{self.uri}: {message} in the registry at {where}") from None

    def fit(self, train: pd.DataFrame) -> Self:
        """Resolve the version, load the pyfunc; with ``exclude_seen`` remember training pairs."""
        import mlflow
        from mlflow import MlflowClient

        registry = self.registry_uri or self.tracking_uri
        client = MlflowClient(tracking_uri=self.tracking_uri, registry_uri=registry)
        mv = self.model_version(client)
        self.info_: dict[str, Any] = {
            "model_uri": self.uri,
            "name": mv.name,
            "version": int(mv.version),
            "run_id": mv.run_id,
            "source": mv.source,
        }
        # Load the resolved version from its storage location, fetched with this tracking URI
        # (MLflow's models:/ resolution would use the process-wide registry instead).
        location = client.get_model_version_download_uri(mv.name, str(mv.version))
        parsed = urlparse(location)
        if parsed.scheme == "file":
            local = url2pathname(parsed.path)
        elif parsed.scheme == "":
            local = location
        else:
            self._download = tempfile.TemporaryDirectory(prefix="harness-mlflow-model-")
            local = mlflow.artifacts.download_artifacts(
                artifact_uri=location,
                dst_path=self._download.name,
                tracking_uri=self.tracking_uri,
                registry_uri=registry,
            )
        self.model_ = mlflow.pyfunc.load_model(local)
        for name in ("_train_users", "_train_items", "_seen_keys", "_n_seen"):
            self.__dict__.pop(name, None)  # nothing from an earlier fit
        if self.exclude_seen:
            self._remember_seen(train)
        return self

    def _remember_seen(self, train: pd.DataFrame) -> None:
        """Sorted (user code, item code) keys of the training pairs and per-user counts."""
        missing = [c for c in (USER, ITEM) if c not in train.columns]
        if missing:
            raise ValueError(
                f"training frame is missing column {missing[0]!r} "
                f"(got {[str(c) for c in train.columns]})"
            )
        ucodes, users = id_codes(train[USER])
        icodes, items = id_codes(train[ITEM])
        self._train_users = pd.Index(_id_array(users))
        self._train_items = _id_array(items)
        n_items = len(items)
        self._seen_keys = distinct(ucodes.astype(np.int64) * n_items + icodes)
        self._n_seen = np.bincount(self._seen_keys // n_items, minlength=len(users))

    def recommend(
        self, users: np.ndarray, k: int, *, exclude_seen: bool | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` item ids and scores per user from the pyfunc (see the module doc)."""
        if not hasattr(self, "model_"):
            raise RuntimeError(f"{type(self).__name__} is not fitted; call fit(train) first")
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
            raise ValueError(f"'k' must be a positive int (got {k!r})")
        k = int(k)
        exclude = self.exclude_seen if exclude_seen is None else exclude_seen
        if exclude and not hasattr(self, "_seen_keys"):
            raise ValueError(
                "exclude_seen=True needs the training pairs: construct MLflowModel with "
                "exclude_seen=True before fit"
            )
        users = np.asarray(users)
        if users.ndim != 1:
            raise ValueError(f"'users' must be a 1-D array of user ids (got shape {users.shape})")
        inverse, uniq = pd.factorize(users)
        uniq = np.asarray(uniq, dtype=users.dtype)
        wanted = np.full(uniq.size, k, dtype=np.int64)
        train_codes = np.full(uniq.size, -1, dtype=np.int64)
        if exclude:
            train_codes = _lookup(self._train_users, uniq)
            wanted += np.where(train_codes >= 0, self._n_seen[np.maximum(train_codes, 0)], 0)

        owners, items, scores = [], [], []
        starts = range(0, uniq.size, self.batch_size)
        for start in tqdm(starts, disable=not self.progress, desc="MLflowModel", unit="batch"):
            stop = min(start + self.batch_size, uniq.size)
            frame = pd.DataFrame({"user": uniq[start:stop], "k": wanted[start:stop]})
            owner, item, score = self._predict(frame)
            owners.append(owner + start)
            items.append(item)
            scores.append(score)
        owner = np.concatenate(owners) if owners else np.zeros(0, dtype=np.int64)
        raw_items = pd.concat(items, ignore_index=True) if items else pd.Series([], dtype=object)
        score = np.concatenate(scores) if scores else np.zeros(0)
        item_ids = self._item_ids(raw_items, owner, exclude)
        per_user = np.bincount(owner, minlength=uniq.size)
        self.stats_ = {
            "users_requested": int(uniq.size),
            "users_without_list": int((per_user == 0).sum()),
            "users_over_k": int((per_user > wanted).sum()),
            "rows_returned": int(owner.size),
        }
        if exclude and owner.size:
            seen = self._seen_rows(item_ids, owner, train_codes)
            owner, item_ids, score = owner[~seen], item_ids[~seen], score[~seen]
        lists = _ranked_lists(owner, uniq.size, item_ids, score)
        ids, out = _take_lists(*lists, np.arange(uniq.size), k)
        return ids[inverse], out[inverse]

    def _predict(self, frame: pd.DataFrame) -> tuple[np.ndarray, pd.Series, np.ndarray]:
        """One ``predict`` call, checked against the contract: row owners (positions in
        ``frame``), raw item ids and finite scores."""
        result = self.model_.predict(frame)
        if not isinstance(result, pd.DataFrame):
            result = pd.DataFrame(result)
        missing = [c for c in _OUTPUT if c not in result.columns]
        if missing:
            raise ValueError(
                f"{self.uri}: predict output is missing column {missing[0]!r}; the contract is "
                f"columns {list(_OUTPUT)} (got {[str(c) for c in result.columns]})"
            )
        result = result.reset_index(drop=True)
        owner = _lookup(pd.Index(frame["user"].to_numpy()), result["user"].to_numpy())
        if (owner < 0).any():
            bad = result["user"].iloc[int(np.flatnonzero(owner < 0)[0])]
            raise ValueError(
                f"{self.uri}: predict returned rows for a user that was not requested, "
                f"e.g. {_show(bad)}"
            )
        score = pd.to_numeric(result["score"], errors="coerce").to_numpy(dtype=np.float64)
        bad_score = ~np.isfinite(score)
        if bad_score.any():
            first = int(np.flatnonzero(bad_score)[0])
            raise ValueError(
                f"{self.uri}: predict returned {int(bad_score.sum())} missing or non-finite "
                f"score(s) in column 'score', e.g. {_show(result['score'].iloc[first])}"
            )
        return owner, result["item"], score

    def _item_ids(self, raw: pd.Series, owner: np.ndarray, exclude: bool) -> np.ndarray:
        """Normalized item ids (``int64`` or ``str`` in ``object``); repeated (user, item)
        rows are a contract violation."""
        if raw.size == 0:
            return np.zeros(0, dtype=self._train_items.dtype if exclude else np.int64)
        normalized = normalize_ids(raw, f"{self.uri} predict output", "'item'")
        if exclude:
            ids, _ = _common_ids(normalized, self._train_items)
        elif pd.api.types.is_integer_dtype(normalized.dtype):
            ids = normalized.to_numpy(dtype=np.int64)
        else:
            ids = normalized.astype(str).to_numpy(dtype=object)
        codes, _ = pd.factorize(ids)
        keys = owner.astype(np.int64) * (int(codes.max()) + 1) + codes
        if distinct(keys).size != keys.size:
            first = int(np.flatnonzero(pd.Series(keys).duplicated().to_numpy())[0])
            raise ValueError(
                f"{self.uri}: predict returned a repeated (user, item) row, e.g. item "
                f"{_show(ids[first])}; the contract is at most one row per (user, item)"
            )
        return ids

    def _seen_rows(
        self, item_ids: np.ndarray, owner: np.ndarray, train_codes: np.ndarray
    ) -> np.ndarray:
        """Which rows are training pairs of their user (``train_codes``: per requested user)."""
        train_items = self._train_items if item_ids.dtype != object else _as_str(self._train_items)
        icode = pd.Index(train_items).get_indexer(item_ids)
        ucode = train_codes[owner]
        known = (icode >= 0) & (ucode >= 0)
        keys = ucode[known] * self._train_items.size + icode[known]
        pos = np.minimum(np.searchsorted(self._seen_keys, keys), self._seen_keys.size - 1)
        seen = np.zeros(owner.size, dtype=bool)
        seen[known] = self._seen_keys[pos] == keys
        return seen
