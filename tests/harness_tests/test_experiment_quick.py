"""``experiment=quick`` with every dataset: it shrinks the synthetic data and leaves a file or
MovieLens whole (it used to set synthetic-only keys, so ``dataset=file`` failed at composition).
Real Hydra composition of the shipped configs and a real run on a tiny CSV file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from hydra import compose, initialize_config_module

from harness.configdoc import CONFIG_DIR

QUICK_SIZES = {"n_users": 300, "n_items": 200, "n_events": 6000}  # README: "a small, fast run"


def cfg_of(*overrides: str):
    with initialize_config_module(config_module="harness.configs", version_base=None):
        return compose(config_name="config", overrides=list(overrides))


def tiny_csv(path: Path) -> pd.DataFrame:
    """12 users × 5 of 8 items, shuffled timestamps, one rating column."""
    rng = np.random.default_rng(0)
    pairs = [(u, int(i)) for u in range(12) for i in rng.choice(8, 5, replace=False)]
    frame = pd.DataFrame(pairs, columns=["user", "item"])
    frame["timestamp"] = rng.permutation(len(frame))
    frame["rating"] = 4.0
    frame.to_csv(path, index=False)
    return frame


def test_quick_shrinks_only_the_synthetic_data() -> None:
    quick = cfg_of("experiment=quick").dataset
    assert {k: quick[k] for k in QUICK_SIZES} == QUICK_SIZES
    shipped = yaml.safe_load((CONFIG_DIR / "dataset" / "synthetic.yaml").read_text())
    for overrides in ((), ("experiment=loo_full",)):  # no experiment, or one without sizes
        plain = cfg_of(*overrides).dataset
        assert {k: plain[k] for k in QUICK_SIZES} == {k: shipped[k] for k in QUICK_SIZES}
    assert cfg_of("experiment=quick", "dataset.n_users=50").dataset.n_users == 50  # CLI wins


def test_quick_composes_with_a_file_and_movielens(tmp_path: Path) -> None:
    path = tmp_path / "events.csv"
    cfg = cfg_of("experiment=quick", "dataset=file", f"dataset.path={path}")
    assert cfg.dataset.kind == "file" and cfg.dataset.path == str(path)
    assert not set(QUICK_SIZES) & set(cfg.dataset)  # no synthetic-only key slipped in
    movielens = cfg_of("experiment=quick", "dataset=movielens").dataset
    assert movielens.kind == "movielens" and not set(QUICK_SIZES) & set(movielens)


def test_quick_runs_end_to_end_on_a_tiny_csv(harness_cli, tmp_path: Path) -> None:
    frame = tiny_csv(tmp_path / "events.csv")
    done = harness_cli.run(
        tmp_path,
        "experiment=quick",
        "dataset=file",
        "dataset.path=events.csv",
        "tracking=none",
        "progress=false",
        "model=[popularity,item_knn]",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert not [x for x in done.stderr.splitlines() if x.startswith("error")], done.stderr[-2000:]
    (folder,) = (tmp_path / "runs" / "results" / "offline-eval").iterdir()
    stats = json.loads((folder / "split_stats.json").read_text())
    assert stats["n_input_events"] == len(frame)  # the whole file, not shrunk
    assert stats["n_input_users"] == frame["user"].nunique()
    assert {p.name for p in folder.iterdir()} >= {"popularity", "item_knn", "COMPLETE"}
