"""The report of ``python -m harness.tune``'s final run shows the tuning: trials per model, the
validation curve (best so far), the chosen parameters, and that only the chosen configuration was
tested. Expected values are read back from the Optuna sqlite study, not from the harness.
"""

from __future__ import annotations

import html
import itertools
import json
import re

import pytest
from hydra import compose, initialize_config_module

from harness.report.plots import best_so_far
from harness.tune import tune

optuna = pytest.importorskip("optuna")


def params_of(trial: object) -> dict:
    """A trial's parameters by item_knn's own names (the sweeper's: ``model.item_knn.<p>``)."""
    params = trial.params  # type: ignore[attr-defined]
    assert all(k.startswith("model.item_knn.") for k in params), params
    return {k.removeprefix("model.item_knn."): v for k, v in params.items()}


def param_text(value: object) -> str:
    """A parameter as the report writes it: floats to 4 significant digits."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("tune-report")
    with initialize_config_module(config_module="harness.configs", version_base=None):
        cfg = compose(
            config_name="config",
            overrides=[
                "tune=default",
                "experiment=quick",
                "progress=false",
                "tracking=none",
                f"runs_dir={tmp}/runs",
                "model=[popularity,item_knn]",
                "split.valid_cut=0.6",
                "tune.trials=3",
            ],
        )
    assert tune(cfg) == 0
    (folder,) = [p.parent for p in (tmp / "runs" / "results").rglob("report.html")]
    (db,) = (tmp / "runs" / "tuning").glob("item_knn-*.db")
    study = optuna.load_study(study_name=db.stem, storage=f"sqlite:///{db}")
    return {
        "folder": folder,
        "study": study,
        "html": (folder / "report.html").read_text(encoding="utf-8"),
        "md": (folder / "report.md").read_text(encoding="utf-8"),
    }


def test_markdown_has_the_tuning_section(tuned: dict) -> None:
    study, md = tuned["study"], tuned["md"]
    assert "## Tuning" in md and "[Tuning](#tuning)" in md
    section = md.split("## Tuning", 1)[1].split("\n## ", 1)[0]
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    failed = [t for t in study.trials if t.state.name == "FAIL"]
    chosen = ", ".join(f"{k}={param_text(v)}" for k, v in params_of(study.best_trial).items())
    row = (
        f"| item_knn | {len(study.trials)} | {len(complete)} | {len(failed)} | 0 | "
        f"{study.best_value:.4f} (trial {study.best_trial.number}) | {chosen} |"
    )
    assert row in section, section
    assert len(study.trials) == 3
    assert "no other trial has a test result" in section
    assert "validation part only" in section
    assert "](report_files/tuning.png)" in section
    png = tuned["folder"] / "report_files" / "tuning.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_html_has_the_tuning_section(tuned: dict) -> None:
    study, page = tuned["study"], tuned["html"]
    assert '<h2 id="tuning">Tuning</h2>' in page
    section = page.split('<h2 id="tuning">', 1)[1].split("<h2 ", 1)[0]
    cells = [html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", section, re.S)]
    cells = [re.sub(r"<[^>]+>", "", c).strip() for c in cells]
    chosen = ", ".join(f"{k}={param_text(v)}" for k, v in params_of(study.best_trial).items())
    best = f"{study.best_value:.4f} (trial {study.best_trial.number})"
    assert cells == ["item_knn", "3", "3", "0", "0", best, chosen]
    assert "no other trial has a test result" in section
    assert re.search(r'<img[^>]+src="data:image/png;base64,', section)


def test_tuning_json_matches_the_study(tuned: dict) -> None:
    study = tuned["study"]
    data = json.loads((tuned["folder"] / "tuning.json").read_text())
    model = data["models"]["item_knn"]
    assert data["objective"] == "ndcg@10" and data["direction"] == "maximize"
    assert [(t["number"], t["state"], t["value"], t["params"]) for t in model["trials"]] == [
        (t.number, t.state.name, t.value, params_of(t)) for t in study.trials
    ]
    assert model["best_params"] == params_of(study.best_trial)
    assert model["best_trial"] == study.best_trial.number
    assert "popularity" not in data["models"]  # no search space: not tuned


def test_the_curve_is_the_running_best(tuned: dict) -> None:
    values = [t.value for t in tuned["study"].trials]
    expected = list(itertools.accumulate(values, max))
    assert best_so_far(values, maximize=True) == expected
    assert best_so_far([3.0, None, 1.0, 2.0], maximize=False) == [3.0, 3.0, 1.0, 1.0]
    nan_first = best_so_far([None, 0.5], maximize=True)
    assert nan_first[0] != nan_first[0] and nan_first[1] == 0.5


def test_the_test_run_uses_the_chosen_parameters(tuned: dict) -> None:
    config = (tuned["folder"] / "config.yaml").read_text()
    for key, value in params_of(tuned["study"].best_trial).items():
        assert re.search(rf"^\s+{key}: {re.escape(str(value))}$", config, re.M), key
