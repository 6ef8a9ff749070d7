"""Each library preset against numbers that library computed (issue 11, item 2).

ranx and pytrec_eval run live (bench extra); rectools, torchmetrics and Microsoft Recommenders
need their own environments (numpy/pandas/torch pins), so their numbers were computed once by the
scripts in ``reference/`` (see its README) and are read from JSON here; RecBole's are its
own published test values (``tests/metrics/test_topk_metrics.py`` and ``test_rank_metrics.py`` of
RUCAIBox/RecBole). Data: ``reference/preset_data.py`` (ties, graded relevance, users
without relevant items, truth users without a list, run users outside the truth, short lists).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import metrics
from metrics.options import CHOICES, PRESETS

REF = Path(__file__).resolve().parent / "reference"
sys.path.insert(0, str(REF))
from preset_data import CUTOFFS, datasets  # noqa: E402

DATA = datasets()
CONVENTIONS = set(CHOICES) - {"diversity_similarity", "serendipity_method"}


def _frames(name: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    data = DATA[name]
    qrels = pd.DataFrame(data["qrels"], columns=["user", "item", "relevance"])
    run = pd.DataFrame(data["run"], columns=["user", "item", "score"])
    return qrels, run


def _split(key: str) -> tuple[str, dict[str, str]]:
    """``"ap@3|ap_denominator=k"`` → ``("ap@3", {"ap_denominator": "k"})``."""
    metric, *opts = key.split("|")
    return metric, dict(o.split("=", 1) for o in opts)


def _reference(library: str) -> list[tuple[str, str, dict]]:
    ref = json.loads((REF / f"{library}.json").read_text())
    return [(data, key, value) for data, table in ref.items() for key, value in table.items()]


def _check(preset: str, data: str, key: str, value: object, tol: float, **extra: str) -> None:
    metric, opts = _split(key)
    qrels, run = _frames(data)
    ev = metrics.evaluate(qrels, run, [metric], preset=preset, **{**opts, **extra})
    mean = value["mean"] if isinstance(value, dict) else value
    assert ev.summary[metric] == pytest.approx(mean, abs=tol), (data, key)
    if isinstance(value, dict) and "per_user" in value:
        per = ev.per_user[metric]
        for user, expected in value["per_user"].items():
            assert per.loc[int(user)] == pytest.approx(expected, abs=tol), (data, key, user)
        # every user the library scored is a user of ours, and no other one counts
        assert per.dropna().index.map(str).isin(value["per_user"]).all(), (data, key)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_names_every_convention(name: str) -> None:
    # every ranking convention; beyond-accuracy options (serendipity_method …) where they differ
    assert CONVENTIONS <= set(PRESETS[name]) <= set(CHOICES), set(PRESETS[name]) ^ CONVENTIONS
    opts = metrics.resolve_options(name)
    for option, value in PRESETS[name].items():
        assert getattr(opts, option) == value


def test_default_preset_is_the_defaults() -> None:
    assert metrics.resolve_options("default") == metrics.Options()


@pytest.mark.parametrize("data,key,value", _reference("rectools"), ids=lambda v: str(v)[:40])
def test_rectools(data: str, key: str, value: dict) -> None:
    _check("rectools", data, key, value, 1e-12)


@pytest.mark.parametrize("data,key,value", _reference("torchmetrics"), ids=lambda v: str(v)[:40])
def test_torchmetrics(data: str, key: str, value: dict) -> None:
    _check("torchmetrics", data, key, value, 1e-6)  # torch computes in float32


@pytest.mark.parametrize("data,key,value", _reference("ms_recommenders"), ids=lambda v: str(v)[:40])
def test_ms_recommenders(data: str, key: str, value: float) -> None:
    # ndcg_at_k merges with every rating_true row (outer join), so it averages over every truth
    # user, a user without predictions scoring 0; its other metrics use the common users
    extra = {"user_set": "truth"} if key.startswith("ndcg") else {}
    _check("ms_recommenders", data, key, value, 1e-12, **extra)


def test_ms_recommenders_reference_differs_without_the_preset() -> None:
    """The references discriminate: the project's defaults miss MS Recommenders' numbers."""
    ref = json.loads((REF / "ms_recommenders.json").read_text())["ties"]
    qrels, run = _frames("ties")
    ev = metrics.evaluate(qrels, run, ["precision@5", "ap@5"])
    assert ev.summary["precision@5"] != pytest.approx(ref["precision@5"], abs=1e-6)


def test_torchmetrics_tied_ndcg_needs_tie_averaging() -> None:
    """On tied scores torchmetrics' NDCG is reproduced by averaging, not by any tie order."""
    ref = json.loads((REF / "torchmetrics.json").read_text())["tied_candidates"]
    qrels, run = _frames("tied_candidates")
    for order in CHOICES["tie_break"]:
        ev = metrics.evaluate(
            qrels, run, ["ndcg@3"], preset="torchmetrics", ndcg_ties="ordered", tie_break=order
        )
        assert ev.summary["ndcg@3"] != pytest.approx(ref["ndcg@3"]["mean"], abs=1e-6), order


@pytest.mark.parametrize("data", sorted(DATA))
def test_ranx(data: str) -> None:
    ranx = pytest.importorskip("ranx")
    qrels, run = _frames(data)

    def ids(df: pd.DataFrame) -> pd.DataFrame:  # ranx wants object-dtype string ids
        out = df.copy()
        for col in ("user", "item"):
            out[col] = pd.Series([str(v) for v in df[col]], dtype=object, index=df.index)
        return out

    rq, rr = ids(qrels.astype({"relevance": np.int64})), ids(run)
    q = ranx.Qrels.from_df(rq, q_id_col="user", doc_id_col="item", score_col="relevance")
    r = ranx.Run.from_df(rr, q_id_col="user", doc_id_col="item", score_col="score")
    names = {
        f"{m}@{k}": f"{theirs}@{k}"
        for k in CUTOFFS
        for m, theirs in [
            ("precision", "precision"),
            ("recall", "recall"),
            ("ndcg", "ndcg"),
            ("ap", "map"),
            ("mrr", "mrr"),
            ("hit_rate", "hit_rate"),
        ]
    }
    ours = metrics.evaluate(qrels, run, list(names), preset="ranx")
    theirs = ranx.evaluate(q, r, list(names.values()), make_comparable=True, return_mean=False)
    users = sorted(q.keys())
    for mine, their in names.items():
        per = ours.per_user[mine].reindex([int(u) for u in users]).to_numpy()
        np.testing.assert_allclose(per, np.asarray(theirs[their]), atol=1e-12, err_msg=mine)
        assert ours.summary[mine] == pytest.approx(float(np.mean(theirs[their])), abs=1e-12)


@pytest.mark.parametrize("data", sorted(DATA))
def test_trec_eval(data: str) -> None:
    pytrec_eval = pytest.importorskip("pytrec_eval")
    qrels, run = _frames(data)
    q: dict[str, dict[str, int]] = {}
    for u, i, rel in qrels.itertuples(index=False):
        q.setdefault(str(u), {})[str(i)] = int(rel)
    r: dict[str, dict[str, float]] = {}
    for u, i, s in run.itertuples(index=False):
        r.setdefault(str(u), {})[str(i)] = float(s)
    ks = ",".join(map(str, CUTOFFS))
    measures = {f"P.{ks}", f"recall.{ks}", f"ndcg_cut.{ks}", f"map_cut.{ks}", "recip_rank"}
    result = pytrec_eval.RelevanceEvaluator(q, measures).evaluate(r)
    names = {f"precision@{k}": f"P_{k}" for k in CUTOFFS}
    names |= {f"recall@{k}": f"recall_{k}" for k in CUTOFFS}
    names |= {f"ndcg@{k}": f"ndcg_cut_{k}" for k in CUTOFFS}
    names |= {f"ap@{k}": f"map_cut_{k}" for k in CUTOFFS}
    names["mrr"] = "recip_rank"
    ours = metrics.evaluate(qrels, run, list(names), preset="trec_eval")
    users = sorted(result)
    assert sorted(ours.per_user.index.map(str)) == users
    for mine, their in names.items():
        expected = [result[u][their] for u in users]
        per = ours.per_user[mine].reindex([int(u) for u in users]).to_numpy()
        np.testing.assert_allclose(per, expected, atol=1e-12, err_msg=mine)


# RecBole's published values: tests/metrics_tests/test_topk_metrics.py builds pos_idx (hit or not at
# ranks 1-3 of four users) and pos_len (|R(u)|); each user here gets that list, scores 3, 2, 1,
# and its |R(u)| - hits relevant items outside the list.
_POS_IDX = [[0, 0, 0], [1, 1, 1], [1, 0, 1], [0, 0, 1]]
_POS_LEN = [1, 3, 4, 2]
_L2, _L3, _L4 = 1 / math.log2(2), 1 / math.log2(3), 1 / math.log2(4)
_RECBOLE = {  # metric: per-user values at k = 1, 2, 3, as published
    "hit_rate": [[0, 0, 0], [1, 1, 1], [1, 1, 1], [0, 0, 1]],
    "ndcg": [
        [0, 0, 0],
        [1, 1, 1],
        [1, _L2 / (_L2 + _L3), (_L2 + _L4) / (_L2 + _L3 + _L4)],
        [0, 0, _L4 / (_L2 + _L3)],
    ],
    "mrr": [[0, 0, 0], [1, 1, 1], [1, 1, 1], [0, 0, 1 / 3]],
    "ap": [[0, 0, 0], [1, 1, 1], [1, 1 / 2, (1 / 3) * (1 + 2 / 3)], [0, 0, (1 / 3) * (1 / 2)]],
    "recall": [[0, 0, 0], [1 / 3, 2 / 3, 1], [1 / 4, 1 / 4, 2 / 4], [0, 0, 1 / 2]],
    "precision": [[0, 0, 0], [1, 1, 1], [1, 1 / 2, 2 / 3], [0, 0, 1 / 3]],
}


def _recbole_topk_case() -> tuple[pd.DataFrame, pd.DataFrame]:
    qrels, run = [], []
    for user, (hits, n_rel) in enumerate(zip(_POS_IDX, _POS_LEN, strict=True)):
        for rank, hit in enumerate(hits):
            item = 10 * user + rank
            run.append((user, item, 3.0 - rank))
            if hit:
                qrels.append((user, item, 1.0))
        for extra in range(n_rel - sum(hits)):
            qrels.append((user, 10 * user + 5 + extra, 1.0))
    return (
        pd.DataFrame(qrels, columns=["user", "item", "relevance"]),
        pd.DataFrame(run, columns=["user", "item", "score"]),
    )


@pytest.mark.parametrize("metric", sorted(_RECBOLE))
def test_recbole_published_topk_values(metric: str) -> None:
    qrels, run = _recbole_topk_case()
    names = [f"{metric}@{k}" for k in (1, 2, 3)]
    ev = metrics.evaluate(qrels, run, names, preset="recbole")
    got = ev.per_user[names].to_numpy()
    np.testing.assert_allclose(got, np.array(_RECBOLE[metric], float), atol=1e-12)


def _gauc_case(cases: list[tuple[int, list[int]]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Users with ``n`` candidates scored n..1 and positives at the given descending ranks."""
    qrels, run = [], []
    for user, (n, ranks) in enumerate(cases):
        for rank in range(1, n + 1):
            run.append((user, rank, float(n - rank + 1)))
            qrels.append((user, rank, 1.0 if rank in ranks else 0.0))
    return (
        pd.DataFrame(qrels, columns=["user", "item", "relevance"]),
        pd.DataFrame(run, columns=["user", "item", "score"]),
    )


def test_recbole_published_gauc_values() -> None:
    # test_rank_metrics.py case 0: user_len [2, 3, 5], pos_len [1, 2, 3], pos_rank_sum [1, 4, 9]
    qrels, run = _gauc_case([(2, [1]), (3, [1, 3]), (5, [2, 3, 4])])
    published = (
        1 * ((2 - (1 - 1) / 2 - 1 / 1) / (2 - 1))
        + 2 * ((3 - (2 - 1) / 2 - 4 / 2) / (3 - 2))
        + 3 * ((5 - (3 - 1) / 2 - 9 / 3) / (5 - 3))
    ) / (1 + 2 + 3)
    ev = metrics.evaluate(qrels, run, ["gauc"], preset="recbole")
    assert ev.summary["gauc"] == pytest.approx(published, abs=1e-12)
    # the project weights by candidates: (2·1 + 3·0.5 + 5·0.5) / 10
    assert metrics.evaluate(qrels, run, ["gauc"]).summary["gauc"] == pytest.approx(0.6)
    # case 1: a user without positives and one without negatives are left out
    qrels, run = _gauc_case([(3, [3]), (6, []), (4, [1, 2, 3, 4])])
    ev = metrics.evaluate(qrels, run, ["gauc"], preset="recbole")
    assert ev.summary["gauc"] == pytest.approx((3 - 0 - 3 / 1) / (3 - 1), abs=1e-12)


def test_recbole_tied_scores_count_half_in_gauc() -> None:
    """RecBole's collector averages the ranks of tied scores (``_average_rank``)."""
    qrels = pd.DataFrame(
        {"user": [1, 1, 1, 2, 2], "item": [1, 2, 3, 1, 2], "relevance": [1, 0, 0, 1, 0]}
    )
    run = pd.DataFrame(
        {"user": [1, 1, 1, 2, 2], "item": [1, 2, 3, 1, 2], "score": [0.5, 0.5, 0.1, 0.9, 0.2]}
    )
    ev = metrics.evaluate(qrels, run, ["gauc"], preset="recbole")
    assert ev.summary["gauc"] == pytest.approx((1 * 0.75 + 1 * 1.0) / 2)


def test_spark_engine_honours_gauc_weight(spark: object) -> None:
    """The Spark engine weights GAUC as the numpy engine does, for both weightings."""
    from harness.spark import evaluate_spark

    qrels, run = _gauc_case([(2, [1]), (3, [1, 3]), (5, [2, 3, 4]), (4, [])])
    for preset in ("default", "recbole"):
        a = metrics.evaluate(qrels, run, ["gauc", "auc"], preset=preset)
        b = evaluate_spark(qrels, run, ["gauc", "auc"], spark=spark, buckets=3, preset=preset)
        assert b.summary["gauc"] == pytest.approx(a.summary["gauc"], abs=1e-12), preset
    assert a.summary["gauc"] == pytest.approx(3.5 / 6)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_harness_config_preset_is_not_overridden_by_its_defaults(name: str) -> None:
    """``metrics.options.preset=X`` in the harness gives X's conventions: the config's own
    option keys are null (take the preset's value) unless set."""
    from hydra import compose, initialize_config_module

    from harness.experiment import MetricSuite

    with initialize_config_module(config_module="harness.configs", version_base=None):
        cfg = compose(config_name="config", overrides=[f"metrics.options.preset={name}"])
    suite = MetricSuite(
        k=cfg.metrics.k, names=tuple(cfg.metrics.names), options=dict(cfg.metrics.options)
    )
    assert metrics.resolve_options(**suite.evaluate_options()) == metrics.resolve_options(name)


@pytest.mark.parametrize("k", CUTOFFS)
def test_ndcg_ties_average_matches_scikit_learn(k: int) -> None:
    """``ndcg_ties="average"`` with linear gains is scikit-learn's ``ndcg_score`` (ties averaged)
    on each user's scored candidates, graded relevance and tied scores."""
    metrics_sk = pytest.importorskip("sklearn.metrics")
    qrels, run = _frames("tied_candidates")
    ev = metrics.evaluate(
        qrels, run, [f"ndcg@{k}"], gain="linear", ndcg_ties="average", empty_users="zero"
    )
    rel = qrels.set_index(["user", "item"])["relevance"]
    for user, rows in run.groupby("user"):
        truth = rel.reindex(list(zip(rows["user"], rows["item"], strict=True)), fill_value=0.0)
        expected = (
            metrics_sk.ndcg_score([truth.to_numpy()], [rows["score"].to_numpy()], k=k)
            if len(rows) > 1
            else float(truth.iloc[0] > 0)
        )
        assert ev.per_user.loc[user, f"ndcg@{k}"] == pytest.approx(expected, abs=1e-12), user
