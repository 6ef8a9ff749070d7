"""What a run computes reaches its record, not only the console (audit findings D1, D2, D3, D10).

The user-group fairness gap and the online A/B sizing are read from the console lines with
regexes and checked against record.json and the MLflow store; the sizing is also recomputed by
hand from the per-user tables (two-sample normal formula). A score file without lists for some
test users gives a model note, not a raw ``UserWarning``.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm
from support import HarnessCli

pytestmark = pytest.mark.slow

#: "popularity 0.0725 [0.0035, 0.2294] (cold 0.3521, warm 0.2797)" inside the gap note
GAP = re.compile(
    r"(\w+) (\d\.\d{4}) \[(-?\d\.\d{4}), (-?\d\.\d{4})\] "  # the CI may reach below 0
    r"\(cold (\d\.\d{4}), warm (\d\.\d{4})\)"
)
#: "item_knn vs popularity (INCONCLUSIVE): ndcg@10 lift +19.31%: 374 users per arm, 8 days; CI
#: low end +4.88%: 5,840 users per arm, 117 days"
SIZING = re.compile(
    r"(\w+) vs (\w+) \(\w+\): (\S+) lift \+([\d.]+)%: ([\d,]+) users per arm, ([\d,]+) days?; "
    r"CI low end \+([\d.]+)%: ([\d,]+) users per arm, ([\d,]+) days?"
)
DAILY = 100


def _int(text: str) -> int:
    return int(text.replace(",", ""))


@pytest.fixture(scope="module")
def fair_run(harness_cli: HarnessCli, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """A quick run of two models with the activity fairness gap and A/B sizing, logged to a
    sqlite MLflow store in its folder."""
    cwd = tmp_path_factory.mktemp("fair")
    proc = harness_cli.run(
        cwd,
        "model=[popularity,item_knn]",
        "compare.user_groups=activity",
        f"compare.daily_users={DAILY}",
        quick=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = next((cwd / "runs" / "results").rglob("record.json")).parent
    return proc, cwd, folder


def _children(folder: Path) -> dict[str, dict]:
    record = json.loads((folder / "record.json").read_text())
    return {c["name"]: c for c in record["children"]}


def _mlflow_runs(cwd: Path) -> dict[str, object]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{cwd / 'runs' / 'mlflow.db'}")
    runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
    return {r.data.tags.get("model", "parent"): r for r in runs}


def test_fairness_gap_is_in_record_and_mlflow_as_printed(fair_run: tuple) -> None:
    proc, cwd, folder = fair_run
    note = next(line for line in proc.stdout.splitlines() if "user-group gap" in line)
    printed = {m[0]: tuple(map(float, m[1:])) for m in GAP.findall(note)}
    assert set(printed) == {"popularity", "item_knn"}
    children, runs = _children(folder), _mlflow_runs(cwd)
    for model, (gap, low, high, cold, warm) in printed.items():
        want = {
            "fairness.gap": gap,
            "fairness.gap_ci_low": low,
            "fairness.gap_ci_high": high,
            "fairness.group.cold": cold,
            "fairness.group.warm": warm,
        }
        for source in (children[model]["metrics"], runs[model].data.metrics):
            for key, value in want.items():
                assert source[key] == pytest.approx(value, abs=5e-5), (model, key)
        recorded = children[model]["metrics"]
        # two groups: the gap is |cold − warm| of the recorded means, inside its CI
        cold_warm = abs(recorded["fairness.group.cold"] - recorded["fairness.group.warm"])
        assert recorded["fairness.gap"] == pytest.approx(cold_warm, abs=1e-12)
        assert recorded["fairness.gap_ci_low"] <= recorded["fairness.gap"]
        assert recorded["fairness.gap"] <= recorded["fairness.gap_ci_high"]
        assert runs[model].data.params["fairness.metric"] == "ndcg@10"


def test_ab_sizing_is_in_record_and_mlflow_as_printed_and_by_hand(fair_run: tuple) -> None:
    proc, cwd, folder = fair_run
    lines = [m for line in proc.stdout.splitlines() if (m := SIZING.search(line))]
    assert len(lines) == 1, proc.stdout[-2000:]
    cand, base, metric, lift, users, days, low, users_low, days_low = lines[0].groups()
    assert (cand, base, metric) == ("item_knn", "popularity", "ndcg@10")
    recorded = _children(folder)[cand]["metrics"]
    logged = _mlflow_runs(cwd)[cand].data.metrics
    want = {
        "ab.users_per_arm": _int(users),
        "ab.days": _int(days),
        "ab.users_per_arm_ci_low": _int(users_low),
        "ab.days_ci_low": _int(days_low),
    }
    for source in (recorded, logged):
        for key, value in want.items():
            assert source[key] == value, key
        assert source["ab.lift"] == pytest.approx(float(lift) / 100, abs=5e-5)
        assert source["ab.lift_ci_low"] == pytest.approx(float(low) / 100, abs=5e-5)
    assert "ab.users_per_arm" not in _children(folder)[base]["metrics"]
    # by hand: n = (z_{1-α/2} + z_power)² (σ²_a + σ²_b) / (lift · mean_a)², users compared on both
    a = pd.read_parquet(folder / base / "per_user.parquet")[metric]
    b = pd.read_parquet(folder / cand / "per_user.parquet")[metric]
    both = a.notna() & b.reindex(a.index).notna()
    va, vb = a[both].to_numpy(), b.reindex(a.index)[both].to_numpy()
    z = norm.ppf(1 - 0.05 / 2) + norm.ppf(0.8)
    n = z**2 * (np.var(va, ddof=1) + np.var(vb, ddof=1)) / (recorded["ab.lift"] * va.mean()) ** 2
    assert recorded["ab.users_per_arm"] == math.ceil(n)
    assert recorded["ab.days"] == math.ceil(2 * math.ceil(n) / DAILY)


def test_n_resamples_param_is_the_same_on_parent_and_child(fair_run: tuple) -> None:
    _, cwd, folder = fair_run
    runs = _mlflow_runs(cwd)
    assert runs["parent"].data.params["compare.n_resamples"] == "1000"
    assert runs["item_knn"].data.params["compare.n_resamples"] == "1000"
    assert _children(folder)["item_knn"]["params"]["compare.n_resamples"] == "1000"
    assert runs["item_knn"].data.params["compare.confidence"] == "0.95"


def test_score_file_missing_users_is_a_note_not_a_warning(
    harness_cli: HarnessCli, tmp_path: Path
) -> None:
    rng = np.random.default_rng(3)
    users = [f"u{u:03d}" for u in range(60)]
    items = [f"it{i:03d}" for i in range(40)]
    rows = [
        (u, items[j], 1_700_000_000 + 86_400 * d + ui, 1.0)
        for ui, u in enumerate(users)
        for d, j in enumerate(rng.choice(len(items), 12, replace=False))
    ]
    pd.DataFrame(rows, columns=["user", "item", "timestamp", "rating"]).to_csv(
        tmp_path / "events.csv", index=False
    )
    omitted = set(users[:7])
    scores = [(u, it, float(rng.normal())) for u in users if u not in omitted for it in items[:25]]
    scores += [(ghost, items[0], 1.0) for ghost in ("ghost1", "ghost2")]  # not in the data
    pd.DataFrame(scores, columns=["user", "item", "score"]).to_csv(
        tmp_path / "scores.csv", index=False
    )
    proc = harness_cli.run(
        tmp_path,
        "dataset=file",
        "dataset.path=events.csv",
        "model=[popularity,precomputed]",
        "model.precomputed.path=scores.csv",
        "tracking=none",
        "progress=false",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Warning" not in proc.stderr, proc.stderr
    folder = next((tmp_path / "runs" / "results").rglob("summary.csv")).parent
    test_users = set(pd.read_parquet(folder / "popularity" / "per_user.parquet").index)
    missing = len(omitted & test_users)
    assert missing > 0
    result = json.loads((folder / "precomputed" / "result.json").read_text())
    assert result["counts"]["users_missing_from_run"] == missing
    notes = [n for n in result["notes"] if "no list in the score file" in n]
    assert len(notes) == 1, result["notes"]
    assert notes[0].startswith(f"{missing} of {len(test_users)} test user(s)")
    assert notes[0] in (folder / "report.md").read_text()
    assert f"note (precomputed): {notes[0]}" in proc.stdout
    # the file's users that are not test users are said too (found by a walkthrough)
    in_file = {u for u in users if u not in omitted} | {"ghost1", "ghost2"}
    other = in_file - test_users
    assert {"ghost1", "ghost2"} <= other
    assert (
        f"{len(other)} of the score file's {len(in_file)} users are not test users of this "
        "split: their lists are not evaluated"
    ) in result["notes"]


def test_missing_users_note_follows_the_user_set() -> None:
    """Found by a walkthrough: under the trec_eval preset (user_set=intersection) the note said
    users without a list were scored on an empty list, while they were left out."""
    from harness.experiment import missing_users_note

    head = "3 of 10 test user(s) have no list in the score file, e.g. 'u1': they are "
    assert missing_users_note(3, 10, "'u1'", {"preset": "default"}) == (
        head + "evaluated on an empty list (every relevant item a miss)"
    )
    for options in ({"preset": "trec_eval"}, {"user_set": "intersection"}):
        assert missing_users_note(3, 10, "'u1'", options) == (
            head + "left out of this model's metrics (user_set=intersection)"
        )
    assert missing_users_note(3, 10, "'u1'", {"preset": "trec_eval", "user_set": "truth"}) == (
        head + "evaluated on an empty list (every relevant item a miss)"
    )


def test_users_without_a_relevant_item_and_unseen_test_data_are_said(
    tmp_path: Path, harness_cli: HarnessCli
) -> None:
    """Found by a walkthrough: with metrics.relevance=rating the users without a relevant test
    item left every ranking mean silently, and test data dropped as unseen below the warning's
    share was said only in the report. Reference: counted from the split's saved test part."""
    proc = harness_cli.run(
        tmp_path,
        "model=[popularity]",
        "metrics.relevance=rating",
        "metrics.relevance_threshold=4",
        "tracking=none",
        "progress=false",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    test = pd.read_parquet(next((tmp_path / "runs" / "splits").rglob("test.parquet")))
    best = test.groupby("user")["rating"].max()
    without = int((best < 4).sum())
    assert 0 < without < len(best)
    note = (
        f"{without:,} of {len(best):,} test users have no relevant test item (none of their "
        "test ratings reaches metrics.relevance_threshold=4): the ranking metrics average over "
        f"the other {len(best) - without:,} (metrics.options.empty_users=skip)"
    )
    assert f"note: {note}" in proc.stdout
    folder = next((tmp_path / "runs" / "results").rglob("summary.csv")).parent
    assert note in (folder / "report.md").read_text()
    saved = json.loads(next((tmp_path / "runs" / "splits").rglob("split.json")).read_text())
    dropped = saved["stats"]["test_dropped_events"]
    assert dropped > 0, saved["stats"]
    assert f"note: the split dropped {dropped:,} of " in proc.stdout + proc.stderr
