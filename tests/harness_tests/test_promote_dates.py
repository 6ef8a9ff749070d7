"""A promotion applied late is dated by its run and does not replace a newer evaluation's summary.

A real sqlite registry: ``reco`` v1 (@champion) and v2. An older run's NO_GO on v2 is applied
after a newer run's GO (its logging failed and ``python -m harness.log`` logged it later): its
record joins v2's history at its own date, and v2's ``harness.latest.*`` tags and description
stay on the newer GO.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest
from support import QUICK, HarnessCli

from harness.gate import GateDecision, RuleResult

CLI = HarnessCli()

pytestmark = pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy is deprecated")


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Local time is UTC here, so a folder's stamp reads as the same UTC date."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def _decision(decision: str) -> GateDecision:
    nan = float("nan")
    status = "pass" if decision == "GO" else "fail"
    rule = RuleResult("primary", "ndcg@10", "all", status, 0.1, (nan, nan), 0.0, "lift +10%")
    return GateDecision("cand", "base", decision, [rule])


def _registry(tmp_path: Path) -> tuple[str, Any]:
    """``reco`` v1 (@champion) and v2 in a new sqlite store."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'r.db'}"
    client = MlflowClient(uri)
    client.create_registered_model("reco")
    for _ in range(2):
        client.create_model_version("reco", source=str(tmp_path))
    client.set_registered_model_alias("reco", "champion", "1")
    return uri, client


def _requests(decision: str, folder: Path | None = None, **kw: Any) -> dict[str, Any]:
    """What ``gate.promote=champion`` saves for v2 (``cand``) against v1 (``base``)."""
    from harness.compare import CompareSpec, compare_pair
    from harness.promote import promotion_requests

    rng = np.random.default_rng(0)
    base = pd.DataFrame({"ndcg@10": rng.uniform(0, 0.5, 200)}, index=pd.Index(range(200)))
    pair = compare_pair(
        "base", "cand", (base, base + 0.1), ["ndcg@10"], CompareSpec(n_resamples=200)
    )
    outcomes = {
        "base": SimpleNamespace(info={"info.name": "reco", "info.version": 1}),
        "cand": SimpleNamespace(info={"info.name": "reco", "info.version": 2}),
    }
    result = SimpleNamespace(outcomes=outcomes, **({"folder": folder} if folder else {}))
    spec = promotion_requests(
        "champion", result, [pair], {"cand": _decision(decision)}, experiment="e", **kw
    )
    assert spec is not None
    return spec


def _folder(tmp_path: Path, name: str, stamp: str) -> Path:
    """A results folder's ``run.json`` as :func:`harness.folders.allocate` writes it."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "run.json").write_text(json.dumps({"id": name, "name": "e", "stamp": stamp}))
    return folder


def test_a_late_promotion_of_an_older_run_keeps_the_newer_latest(
    tmp_path: Path, utc: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """The newer run (GO, 2 Jan) is applied first, the older one (NO_GO, 1 Jan) after it: both
    records are on v2 with their runs' dates, the latest tags and the description are the GO's,
    the alias stays where the GO put it, and the history lists the NO_GO first."""
    from harness.history import main as history
    from harness.promote import apply_promotion

    uri, client = _registry(tmp_path)
    exp = client.create_experiment("e")
    older, newer = (client.create_run(exp).info.run_id for _ in range(2))
    old_spec = _requests("NO_GO", _folder(tmp_path, "old", "20260101-090000"))
    new_spec = _requests("GO", _folder(tmp_path, "new", "20260102-090000"))

    assert apply_promotion(new_spec, uri, newer) == 0
    assert apply_promotion(old_spec, uri, older) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-2].startswith("promotion REFUSED: models:/reco@champion stays on version 2")
    assert out[-1] == (
        "note: this evaluation (2026-01-01 09:00:00 UTC) is older than the latest one of "
        f"models:/reco/2 (2026-01-02 09:00:00 UTC, run {newer}): it is added to the history; "
        "the version's harness.latest.* tags and description stay on the newer one"
    )

    mv = client.get_model_version("reco", "2")
    assert client.get_model_version_by_alias("reco", "champion").version == 2
    assert json.loads(mv.tags[f"harness.eval.{older}"])["date"] == "2026-01-01 09:00:00 UTC"
    assert json.loads(mv.tags[f"harness.eval.{older}"])["decision"] == "NO_GO"
    assert json.loads(mv.tags[f"harness.eval.{newer}"])["date"] == "2026-01-02 09:00:00 UTC"
    assert mv.tags["harness.latest.run"] == newer
    assert mv.tags["harness.latest.decision"] == "GO"
    assert mv.tags["harness.latest.date"] == "2026-01-02 09:00:00 UTC"
    assert mv.tags["harness.latest.promotion"] == "@champion: moved here (was version 1)"
    assert mv.description.startswith("**Offline evaluation 2026-01-02 09:00:00 UTC: GO**")
    assert newer in mv.description and older not in mv.description
    assert client.get_run(older).data.tags["registry.promotion"] == (
        "models:/reco/2 @champion: refused (NO_GO)"
    )

    assert history(["reco", "--tracking-uri", uri]) == 0
    rows = [x for x in capsys.readouterr().out.splitlines() if x.startswith("2 ")]
    assert [r.rstrip().rsplit(" ", 1)[1] for r in rows] == [older, newer]
    assert "2026-01-01 09:00:00 UTC  NO_GO" in rows[0] and "2026-01-02 09:00:00 UTC  GO" in rows[1]

    # applying the newer one again (a retry) keeps it the latest
    assert apply_promotion(new_spec, uri, newer) == 0
    assert client.get_model_version("reco", "2").tags["harness.latest.run"] == newer


def test_the_saved_request_carries_the_run_start_and_a_newer_one_replaces_the_latest(
    tmp_path: Path, utc: None
) -> None:
    """``promotion.json`` keeps the run's start (its folder's stamp, else the given date); in
    order, each newer evaluation becomes the latest."""
    from harness.promote import apply_promotion

    spec = _requests("NO_GO", _folder(tmp_path, "old", "20260101-090000"))
    assert spec["date"] == "2026-01-01 09:00:00 UTC"
    assert {r["record"]["date"] for r in spec["requests"]} == {"2026-01-01 09:00:00 UTC"}
    given = _requests("GO", date="2026-01-03 00:00:00 UTC")
    assert given["requests"][0]["record"]["date"] == "2026-01-03 00:00:00 UTC"

    uri, client = _registry(tmp_path)
    exp = client.create_experiment("e")
    first, second = (client.create_run(exp).info.run_id for _ in range(2))
    assert apply_promotion(spec, uri, first) == 0
    assert client.get_model_version("reco", "2").tags["harness.latest.run"] == first
    assert apply_promotion(given, uri, second) == 0
    mv = client.get_model_version("reco", "2")
    assert mv.tags["harness.latest.run"] == second
    assert mv.tags["harness.latest.date"] == "2026-01-03 00:00:00 UTC"
    assert ": GO**" in mv.description


def test_harness_log_dates_a_delayed_promotion_by_its_run(tmp_path: Path, utc: None) -> None:
    """A run whose logging failed (a real run, tracking off) and whose ``promotion.json`` has no
    date (written before dates were kept): ``python -m harness.log`` dates its record by the
    folder's stamp, so a GO applied meanwhile stays the latest."""
    from mlflow import MlflowClient

    from harness.promote import PROMOTION_FILE, apply_promotion

    work = tmp_path / "work"
    done = CLI.run(work, *QUICK, "compare=none", "tracking=none", env={"TZ": "UTC"})
    assert done.returncode == 0, done.stderr[-3000:]
    folder = work / re.search(r"^results: (.+)$", done.stdout, re.M).group(1).strip()
    stamp = json.loads((folder / "run.json").read_text())["stamp"]
    started = (
        f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:8]} {stamp[9:11]}:{stamp[11:13]}:{stamp[13:15]} UTC"
    )
    old_format = _requests("NO_GO")
    old_format.pop("date", None)
    for request in old_format["requests"]:
        request["record"]["date"] = ""
    (folder / PROMOTION_FILE).write_text(json.dumps(old_format))

    uri, client = _registry(tmp_path)
    newer = client.create_run(client.create_experiment("quick")).info.run_id
    clock = time.gmtime()  # a newer run, started after that one
    now = time.strftime("%Y-%m-%d %H:%M:%S UTC", clock)
    assert now > started
    newer_folder = _folder(tmp_path, "new", time.strftime("%Y%m%d-%H%M%S", clock))
    assert apply_promotion(_requests("GO", newer_folder), uri, newer) == 0

    logged = CLI.run(work, str(folder), "--uri", uri, module="harness.log", env={"TZ": "UTC"})
    assert logged.returncode == 0, logged.stderr[-3000:]
    parent = re.search(r"parent run ([0-9a-f]{32})", logged.stdout).group(1)
    assert f"note: this evaluation ({started}) is older than the latest one" in logged.stdout
    mv = MlflowClient(uri).get_model_version("reco", "2")
    assert json.loads(mv.tags[f"harness.eval.{parent}"])["date"] == started
    assert mv.tags["harness.latest.run"] == newer and mv.tags["harness.latest.date"] == now
    assert mv.tags["harness.latest.decision"] == "GO"
