"""An interrupted run keeps every model it finished, and ``resume=`` finishes it without
running them again; the results equal those of a run never interrupted.

Real components: the CLI in subprocesses interrupted by a real SIGINT, a real sqlite MLflow
store, real Hydra composition for the in-process cases.
"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf
from support import HarnessCli

from harness import cli
from harness.folders import COMPLETE, INCOMPLETE, run_info
from harness.resume import check_folder, resume

pytestmark = pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy is deprecated")

CLI = HarnessCli()
RUN = ["experiment=quick", "progress=false", "model=[popularity,item_knn]"]


def _timeless(metrics: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in metrics.items() if not k.startswith("time.")}


@pytest.mark.slow
def test_interrupted_run_resumes_to_the_uninterrupted_results(tmp_path: Path) -> None:
    # the reference: the same command, never interrupted, in its own folder
    plain = CLI.run(tmp_path / "plain", *RUN, "tracking=none")
    assert plain.returncode == 0, plain.stderr
    (reference,) = (tmp_path / "plain" / "runs" / "results" / "offline-eval").iterdir()

    cwd = tmp_path / "cut"
    stopped = CLI.stopped_at(cwd, "model item_knn", signal.SIGINT, *RUN, "tracking=local")
    err = stopped.stderr
    assert stopped.returncode == 130, err
    (folder,) = (cwd / "runs" / "results" / "offline-eval").iterdir()
    line = next(x for x in err.splitlines() if x.startswith("error:"))
    assert "during model item_knn" in line
    assert "1 finished model(s) kept (popularity); finish it with the same command and " in line
    assert line.endswith(f"resume={folder.relative_to(cwd)}")
    assert (folder / INCOMPLETE).read_text() == (
        "stage: model item_knn\nreason: interrupted by SIGINT\n"
    )
    kept = pd.read_parquet(folder / "popularity" / "per_user.parquet")
    assert len(kept) > 0 and not (folder / "item_knn").exists()

    done = CLI.run(cwd, *RUN, "tracking=local", "resume=last")
    assert done.returncode == 0, done.stderr
    started = run_info(folder)["stamp"]
    assert re.search(
        rf"note \(popularity\): results reused from the run started "
        rf"{started[:4]}-{started[4:6]}-{started[6:8]} {started[9:11]}:",
        done.stdout,
    ), done.stdout
    assert "note (item_knn)" not in done.stdout
    # the stage table has a row for the reused model (it was missing: found by a walkthrough)
    table = done.stdout + done.stderr
    assert re.search(r"^popularity reused +0\.0 ", table, re.M), table[-2000:]
    assert re.search(r"^item_knn fit +\d", table, re.M)
    assert (folder / COMPLETE).exists() and not (folder / INCOMPLETE).exists()
    assert [p.name for p in (cwd / "runs" / "results" / "offline-eval").iterdir()] == [folder.name]
    pd.testing.assert_frame_equal(pd.read_parquet(folder / "popularity" / "per_user.parquet"), kept)
    assert run_info(folder)["resumed"][0]["reused"] == ["popularity"]
    assert run_info(folder)["resumed"][0]["rerun"] == ["item_knn"]

    got, want = (json.loads((f / "record.json").read_text()) for f in (folder, reference))
    pd.testing.assert_frame_equal(
        pd.read_csv(folder / "summary.csv", index_col="model"),
        pd.read_csv(reference / "summary.csv", index_col="model"),
        check_exact=True,
    )
    for a, b in zip(got["children"], want["children"], strict=True):
        assert a["name"] == b["name"]
        assert _timeless(a["metrics"]) == _timeless(b["metrics"])
        assert a.get("comparison") == b.get("comparison")
    assert _timeless(got["parent"]["metrics"]) == _timeless(want["parent"]["metrics"])
    for model in ("popularity", "item_knn"):
        for table in ("per_user.parquet", "topk.parquet"):
            pd.testing.assert_frame_equal(
                pd.read_parquet(folder / model / table), pd.read_parquet(reference / model / table)
            )

    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{cwd}/runs/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("offline-eval").experiment_id])
    assert sorted(r.data.tags.get("model", "parent") for r in runs) == [
        "item_knn",
        "parent",
        "popularity",
    ]
    assert {r.info.status for r in runs} == {"FINISHED"}


# ------------------------------------------------------------------------------ in process


def _cfg(runs: Path, *extra: str) -> Any:
    overrides = ["experiment=quick", "progress=false", "tracking=none", f"runs_dir={runs}"]
    with initialize_config_module(config_module="harness.configs", version_base=None):
        return compose(config_name="config", overrides=[*overrides, *extra])


@pytest.fixture
def cut_short(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A run of item_knn then popularity left as an interruption during popularity leaves it:
    ``INCOMPLETE``, popularity's files partly written (no ``result.json``, written last)."""
    monkeypatch.setattr(cli, "sweep_jobs", [])
    monkeypatch.chdir(tmp_path)
    assert cli.run(_cfg(tmp_path / "runs", "model=[item_knn,popularity]")) == 0
    (folder,) = (tmp_path / "runs" / "results" / "offline-eval").iterdir()
    (folder / COMPLETE).unlink()
    (folder / INCOMPLETE).write_text("stage: model popularity\nreason: interrupted by SIGINT\n")
    (folder / "popularity" / "result.json").unlink()
    return folder


def _plain(cfg: Any) -> dict[str, Any]:
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def _key(folder: Path) -> str:
    return str(run_info(folder)["split_key"])


def test_resume_reuses_finished_models_and_reruns_the_rest(cut_short: Path) -> None:
    runs = cut_short.parents[2]
    cfg = _cfg(runs, "model=[item_knn,popularity,random]")
    taken = resume(str(cut_short), runs, "offline-eval", _key(cut_short), _plain(cfg))
    assert taken.folder == cut_short
    assert list(taken.reused) == ["item_knn"]  # popularity was cut off, random is new
    assert not (cut_short / "popularity").exists()  # its partial files are cleared
    knn = taken.reused["item_knn"]
    assert knn.ok and knn.saved
    saved = json.loads((cut_short / "item_knn" / "result.json").read_text())
    assert knn.evaluation is not None and knn.recommendations is not None
    assert knn.evaluation.summary == saved["summary"]
    pd.testing.assert_frame_equal(
        knn.evaluation.per_user, pd.read_parquet(cut_short / "item_knn" / "per_user.parquet")
    )
    assert len(knn.recommendations) == len(pd.read_parquet(cut_short / "item_knn" / "topk.parquet"))


def test_a_model_whose_config_changed_runs_again(cut_short: Path) -> None:
    runs = cut_short.parents[2]
    cfg = _cfg(runs, "model=[item_knn,popularity]", "model.item_knn.k_neighbors=50")
    taken = resume(str(cut_short), runs, "offline-eval", _key(cut_short), _plain(cfg))
    assert taken.reused == {}
    assert not (cut_short / "item_knn").exists()


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("metrics.k=5", "metrics.k=10"),
        ("seed=1", "seed=0"),
        ("compare.confidence=0.9", "compare.confidence=0.95"),
    ],
)
def test_a_different_setting_is_refused_naming_it(
    cut_short: Path, override: str, named: str
) -> None:
    runs = cut_short.parents[2]
    cfg = _cfg(runs, "model=[item_knn,popularity]", override)
    with pytest.raises(ValueError, match=rf"was run with {re.escape(named)}, this run has"):
        resume(str(cut_short), runs, "offline-eval", _key(cut_short), _plain(cfg))
    assert (cut_short / "item_knn" / "result.json").exists()  # nothing touched


def test_other_data_or_split_is_refused(cut_short: Path) -> None:
    runs = cut_short.parents[2]
    cfg = _cfg(runs, "model=[item_knn,popularity]")
    with pytest.raises(ValueError, match="split from other data or split settings"):
        resume(str(cut_short), runs, "offline-eval", "0" * 64, _plain(cfg))


def test_last_finds_the_run_whatever_its_models_and_names_what_differs(cut_short: Path) -> None:
    """Found by a walkthrough: ``resume=last`` found only a folder run with the very same
    model config, so a fixed model config (what the README tells a user to do after a failed
    model) could not be resumed with it, and the error named no key."""
    runs = cut_short.parents[2]
    same = _cfg(runs, "model=[item_knn,popularity]", "progress=true", "debug=true")
    assert resume("last", runs, "offline-eval", _key(cut_short), _plain(same)).folder == cut_short
    fixed = _cfg(runs, "model=[item_knn,popularity]", "model.item_knn.k_neighbors=50")
    taken = resume("last", runs, "offline-eval", _key(cut_short), _plain(fixed))
    assert taken.folder == cut_short and taken.reused == {}  # item_knn changed: runs again
    other = _cfg(runs, "model=[item_knn,popularity]", "metrics.k=5")
    with pytest.raises(ValueError) as info:
        resume("last", runs, "offline-eval", _key(cut_short), _plain(other))
    assert str(info.value).startswith("resume=last: no interrupted run (or run with a failed")
    assert f"(1 such folder(s) checked; the newest, {cut_short} was run with metrics.k=10, " in (
        str(info.value)
    )


def test_folders_that_cannot_be_resumed_are_refused_before_the_data_is_read(
    cut_short: Path, tmp_path: Path
) -> None:
    (cut_short / COMPLETE).write_text("completed\n")
    (cut_short / INCOMPLETE).unlink()
    with pytest.raises(
        ValueError, match=r"is COMPLETE with every model ok, nothing to resume .*harness\.log"
    ):
        check_folder(str(cut_short))
    with pytest.raises(ValueError, match="is not a results folder"):
        check_folder(str(tmp_path / "nowhere"))
    (cut_short / COMPLETE).unlink()
    with pytest.raises(ValueError, match="not marked INCOMPLETE"):
        check_folder(str(cut_short))


def test_a_bad_resume_folder_is_one_line_and_exit_2(tmp_path: Path) -> None:
    proc = CLI.run(tmp_path, *RUN, "tracking=none", f"resume={tmp_path / 'missing'}")
    assert proc.returncode == 2
    errors = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert errors == [
        f"error: resume: {tmp_path / 'missing'} is not a results folder (no run.json)"
    ]
    assert "Traceback" not in proc.stderr


def test_run_json_records_what_was_reused_once_the_models_ran(cut_short: Path) -> None:
    """A model resume() offered but that ran again (engine=spark: its saved tables could not be
    read) is recorded as run again, and the folder gets a new MLflow id since ``record.json``
    was written by the interrupted run."""
    from harness.experiment import ModelOutcome
    from harness.resume import record_resumption

    runs = cut_short.parents[2]
    cfg = _cfg(runs, "model=[item_knn,popularity]")
    before = run_info(cut_short)["id"]
    taken = resume(str(cut_short), runs, "offline-eval", _key(cut_short), _plain(cfg))
    assert list(taken.reused) == ["item_knn"]
    assert run_info(cut_short).get("resumed") is None  # nothing recorded before the models ran
    record_resumption(
        cut_short, {"item_knn": ModelOutcome("item_knn"), "popularity": ModelOutcome("popularity")}
    )
    (entry,) = run_info(cut_short)["resumed"]
    assert entry["reused"] == [] and entry["rerun"] == ["item_knn", "popularity"]
    assert run_info(cut_short)["id"] != before  # record.json exists: MLflow may hold old runs
    record_resumption(cut_short, {"item_knn": taken.reused["item_knn"]})
    assert run_info(cut_short)["resumed"][1]["reused"] == ["item_knn"]


def test_a_finished_run_with_a_failed_model_reruns_only_that_model(tmp_path: Path) -> None:
    """Exit 1 with a failed model, the line saying how to rerun it; resumed with the model
    fixed (here: another class), only it runs, and the folder is COMPLETE again."""
    broken = "+model.mine._target_=plugins.models.FailsToFit"
    first = CLI.run(tmp_path, *RUN[:2], "model=[popularity]", broken, "tracking=none")
    assert first.returncode == 1, first.stderr
    (folder,) = (tmp_path / "runs" / "results" / "offline-eval").iterdir()
    assert (folder / COMPLETE).exists()
    hint = "note: 1 model(s) failed (mine); once fixed, run only them with the same command and "
    assert f"{hint}resume={folder.relative_to(tmp_path)}" in first.stderr.splitlines()
    fixed = "+model.mine._target_=plugins.models.MostRecent"
    again = CLI.run(
        tmp_path, *RUN[:2], "model=[popularity]", fixed, "tracking=none", f"resume={folder}"
    )
    assert again.returncode == 0, again.stderr
    assert "note (popularity): results reused from the run started" in again.stdout
    assert (folder / COMPLETE).exists() and not (folder / INCOMPLETE).exists()
    assert run_info(folder)["resumed"][0] | {"at": ""} == {
        "at": "",
        "reused": ["popularity"],
        "rerun": ["mine"],
    }
    summary = pd.read_csv(folder / "summary.csv", index_col="model")
    assert list(summary.index) == ["popularity", "mine"] and summary.notna().all().all()
    assert json.loads((folder / "mine" / "result.json").read_text())["ok"]
    assert not (folder / "mine" / "error.txt").exists()
    refused = CLI.run(
        tmp_path, *RUN[:2], "model=[popularity]", fixed, "tracking=none", f"resume={folder}"
    )
    assert refused.returncode == 2
    assert "is COMPLETE with every model ok, nothing to resume" in refused.stderr


def test_a_resume_that_leaves_the_failed_model_out_logs_a_new_parent(tmp_path: Path) -> None:
    """Found by an audit: resumed without its failed model, nothing ran again, so the folder kept
    its id and MLflow kept the first parent (FAILED, with the failed model) as this run's record;
    the failed model's folder also kept the finished folder resumable."""
    broken = "+model.mine._target_=plugins.models.FailsToFit"
    first = CLI.run(tmp_path, *RUN[:2], "model=[popularity]", broken)
    assert first.returncode == 1, first.stderr
    (folder,) = (tmp_path / "runs" / "results" / "offline-eval").iterdir()
    first_id = run_info(folder)["id"]
    again = CLI.run(tmp_path, *RUN[:2], "model=[popularity]", f"resume={folder}")
    assert again.returncode == 0, again.stderr
    assert run_info(folder)["id"] != first_id and not (folder / "mine").exists()
    parents = [re.search(r"parent run ([0-9a-f]{32})", p.stdout) for p in (first, again)]
    assert all(parents) and parents[0].group(1) != parents[1].group(1)
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path}/runs/mlflow.db")
    latest = client.get_run(parents[1].group(1))
    assert latest.info.status == "FINISHED"
    refused = CLI.run(tmp_path, *RUN[:2], "model=[popularity]", f"resume={folder}")
    assert refused.returncode == 2  # complete, every model ok: nothing to resume


def test_a_side_file_rewritten_since_the_run_refuses_the_resume(tmp_path: Path) -> None:
    """Found by an audit: a resume reused results computed from the item features as they were
    (diversity 0.78) after the file was rewritten at the same path (a fresh run: 0.45)."""
    items = tmp_path / "items.csv"
    items.write_text("item,genre\n" + "".join(f"{i},{'ab'[i % 2]}\n" for i in range(300)))
    args = (
        *RUN[:2],
        "model=[popularity]",
        f"dataset.item_features={items}",
        "metrics.names=[ndcg@10,recall@10,coverage@10,diversity@10]",
        "tracking=none",
    )
    broken = "+model.mine._target_=plugins.models.FailsToFit"
    first = CLI.run(tmp_path, *args, broken)
    assert first.returncode == 1, first.stderr
    (folder,) = (tmp_path / "runs" / "results" / "offline-eval").iterdir()
    items.write_text("item,genre\n" + "".join(f"{i},{'abc'[i % 3]}\n" for i in range(300)))
    again = CLI.run(tmp_path, *args, f"resume={folder}")
    assert again.returncode == 2
    assert again.stderr.strip() == (
        f"error: resume: {folder} read dataset.item_features={str(items)!r} before that file "
        "changed"
    )


def test_a_registry_alias_that_moved_since_the_run_reruns_its_model(tmp_path: Path) -> None:
    """``models:/reco@champion`` is the same text in the config after the alias moved: its
    reused results are another version's, so the model runs again (its files go); a model named
    by version, or by an alias still on the same version, is reused (a real sqlite registry)."""
    from types import SimpleNamespace

    from mlflow import MlflowClient

    from harness.models import MLflowModel
    from harness.resume import drop_moved_aliases

    uri = f"sqlite:///{tmp_path / 'r.db'}"
    client = MlflowClient(uri)
    client.create_registered_model("reco")
    for _ in range(2):
        client.create_model_version("reco", source=str(tmp_path))
    client.set_registered_model_alias("reco", "champion", "1")
    client.set_registered_model_alias("reco", "challenger", "2")
    models = {
        "champion": MLflowModel("models:/reco@champion", uri),
        "challenger": MLflowModel("models:/reco@challenger", uri),
        "pinned": MLflowModel("models:/reco/1", uri),
        "popularity": object(),
    }
    versions = {"champion": 1, "challenger": 2, "pinned": 1, "popularity": None}
    for name in models:
        (tmp_path / name).mkdir()

    def reused() -> dict[str, Any]:
        return {n: SimpleNamespace(info={"info.version": v}) for n, v in versions.items()}

    kept = reused()
    assert drop_moved_aliases(tmp_path, kept, models) == [] and set(kept) == set(models)

    client.set_registered_model_alias("reco", "champion", "2")  # promoted since the run
    kept = reused()
    notes = drop_moved_aliases(tmp_path, kept, models)
    assert notes == [
        "resume: models:/reco@champion is version 2 now, not 1 as in the reused results: "
        "champion runs again"
    ]
    assert set(kept) == {"challenger", "pinned", "popularity"}
    assert not (tmp_path / "champion").exists() and (tmp_path / "pinned").is_dir()
