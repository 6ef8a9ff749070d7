"""Speed and memory of `metrics.evaluate` with integer and string ids, against ranx and
pytrec_eval on the same DataFrames.

Every (tool, ids, size) cell runs in a fresh subprocess that builds the same seeded DataFrames,
resets the kernel's peak-RSS counter, then times the tool: peak memory is the growth over the
data alone. Ids: `int` (int64, dense from 0), `int64` (the same ids spread over 64 bits, as
hashed ids are), `str` (pandas 3's Arrow-backed `str`: `u<n>` / `i<n>`, which sort unlike the
numbers), `uuid` (36-character random UUIDs as `str`, the common production id), `category`,
`dictionary` (Arrow dictionaries, as `pd.read_parquet(..., dtype_backend="pyarrow")` gives a
column written from a categorical) and `object` (Python strings). Scores are random floats, so
no tie decides a number and every id type must give the same values (the `max |diff|` column).

    python benchmarks/bench_metrics.py                 # 10k, 100k, 1M users x 100 candidates
    python benchmarks/bench_metrics.py --sizes 10000   # quick look
    python benchmarks/bench_metrics.py --peers-max 1000000   # also try the peers at 1M (slow, OOM)
    python benchmarks/bench_metrics.py --paired str uuid category   # int alternated with each

Needs the `bench` extra for the peers: pip install -e ".[bench]".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).parent))

from _measure import print_table

METRICS = ["ndcg@10", "map@10", "precision@10", "recall@10", "mrr@10"]
CANDIDATES = 100
N_ITEMS = 50_000
IDS = ("int", "int64", "str", "uuid", "category", "dictionary", "object")


def make_data(n_users: int, seed: int = 0, ids: str = "int") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Seeded run (n_users x 100 scored candidates) and qrels (1-10 relevant items per user,
    about half of them among the candidates), with ``ids`` of type int, int64, str, uuid,
    category, dictionary or object (the same users and items in every type)."""
    qrels, run = _int_data(n_users, seed)
    if ids == "int":
        return qrels, run
    if ids == "int64":  # spread over 64 bits, as hashed ids are: ranked, not their own keys
        rng = np.random.default_rng(seed + 1)
        for col, n in (("user", n_users), ("item", N_ITEMS)):
            numbers = rng.integers(1, 2**62, n)
            assert np.unique(numbers).size == n
            for df in (qrels, run):
                df[col] = numbers[df[col].to_numpy()]
        return qrels, run
    if ids == "uuid":  # seeded random UUIDs: 36 characters each
        rng = np.random.default_rng(seed + 2)
        users, items = _uuids(n_users, rng), _uuids(N_ITEMS, rng)
    else:
        users = pa.array([f"u{u}" for u in range(n_users)], pa.large_string())
        items = pa.array([f"i{i}" for i in range(N_ITEMS)], pa.large_string())

    def convert(codes: pd.Series, names: pa.Array) -> pd.Series | pd.Categorical:
        if ids == "category":
            return pd.Categorical.from_codes(codes.to_numpy(), pd.Index(pd.array(names, "str")))
        if ids == "dictionary":
            indices = pa.array(codes.to_numpy().astype(np.int32))
            array = pa.DictionaryArray.from_arrays(indices, names.cast(pa.string()))
            return pd.Series(pd.arrays.ArrowExtensionArray(array))
        text = pd.array(names.take(pa.array(codes.to_numpy())), dtype="str")  # no Python objects
        # an object column stays object only as a Series of that dtype (pandas 3 infers `str`
        # from an object array of strings)
        if ids != "object":
            return text
        return pd.Series(np.asarray(text, dtype=object), dtype=object)

    for df in (qrels, run):
        df["user"] = convert(df["user"], users)
        df["item"] = convert(df["item"], items)
    return qrels, run


def _uuids(n: int, rng: np.random.Generator) -> pa.Array:
    """``n`` distinct random UUIDs as Arrow strings."""
    raw = rng.bytes(16 * n)
    text = [str(uuid.UUID(bytes=raw[i : i + 16])) for i in range(0, 16 * n, 16)]
    assert len(set(text)) == n
    return pa.array(text, pa.large_string())


def _int_data(n_users: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The int-id tables of :func:`make_data`."""
    rng = np.random.default_rng(seed)
    n_items = N_ITEMS
    # 100 distinct candidates per user: a random start and stride through the item space
    start = rng.integers(0, n_items, n_users)[:, None]
    items = (start + np.arange(CANDIDATES)[None, :] * 397) % n_items
    scores = rng.random((n_users, CANDIDATES))
    run = pd.DataFrame(
        {
            "user": np.repeat(np.arange(n_users), CANDIDATES),
            "item": items.ravel(),
            "score": scores.ravel(),
        }
    )
    n_rel = rng.integers(1, 11, n_users)
    owner = np.repeat(np.arange(n_users), n_rel)
    slot = rng.integers(0, 2 * CANDIDATES, n_rel.sum())  # slot >= 100: not a candidate
    rel_items = (start[owner, 0] + slot * 397) % n_items
    qrels = pd.DataFrame({"user": owner, "item": rel_items, "relevance": 1})
    qrels = qrels.drop_duplicates(["user", "item"]).reset_index(drop=True)
    return qrels, run


def _reset_peak() -> int:
    """Reset the peak-RSS counter (Linux clear_refs) and return the current RSS in bytes."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status("VmRSS")


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(field)


def run_ours(qrels: pd.DataFrame, run: pd.DataFrame) -> dict[str, float]:
    import metrics

    return metrics.evaluate(qrels, run, METRICS).summary


def run_kernel(qrels: pd.DataFrame, run: pd.DataFrame) -> dict[str, float]:
    """The kernel alone: ids already encoded and lists already padded (no DataFrame work)."""
    from metrics import ranking
    from metrics.judged import Judged
    from metrics.topk import top_k

    n = run["user"].nunique()
    scores = run["score"].to_numpy().reshape(n, CANDIDATES)
    items = run["item"].to_numpy().reshape(n, CANDIDATES)
    span = 1 + int(max(run["item"].max(), qrels["item"].max()))
    truth = qrels["user"].to_numpy() * span + qrels["item"].to_numpy()
    relevant = np.isin(run["user"].to_numpy() * span + run["item"].to_numpy(), truth)
    relevant = relevant.reshape(n, CANDIDATES)
    n_rel = np.bincount(qrels["user"].to_numpy(), minlength=n)
    t0 = time.perf_counter()
    rows = max(1, (1 << 23) // CANDIDATES)  # the engine's batch size: bounded memory
    hits = np.concatenate(
        [
            np.take_along_axis(
                relevant[i : i + rows], top_k(scores[i : i + rows], items[i : i + rows], 10), axis=1
            )
            for i in range(0, n, rows)
        ]
    )
    j = Judged(
        hits=hits,
        gains=hits.astype(float),
        n_ret=np.full(n, 10),
        n_rel=n_rel,
        ideal_user=np.repeat(np.arange(n), n_rel),
        ideal_rank=np.arange(n_rel.sum()) - np.repeat(np.cumsum(n_rel) - n_rel, n_rel),
        ideal_gain=np.ones(n_rel.sum()),
    )
    out = {
        "ndcg@10": ranking.ndcg(j, k=10).mean(),
        "map@10": ranking.average_precision(j, k=10).mean(),
        "precision@10": ranking.precision(j, k=10).mean(),
        "recall@10": ranking.recall(j, k=10).mean(),
        "mrr@10": ranking.reciprocal_rank(j, k=10).mean(),
    }
    out["_kernel_seconds"] = time.perf_counter() - t0
    return out


def run_ranx(qrels: pd.DataFrame, run: pd.DataFrame, warm_only: bool) -> dict[str, float]:
    from ranx import Qrels, Run, evaluate

    # ranx rejects pandas 3's `str` dtype: give it object columns of Python strings.
    t0 = time.perf_counter()
    q = qrels.assign(
        user=qrels["user"].astype(str).astype(object),
        item=qrels["item"].astype(str).astype(object),
        relevance=qrels["relevance"].astype(int),
    )
    r = run.assign(
        user=run["user"].astype(str).astype(object), item=run["item"].astype(str).astype(object)
    )
    rq = Qrels.from_df(q, q_id_col="user", doc_id_col="item", score_col="relevance")
    rr = Run.from_df(r, q_id_col="user", doc_id_col="item", score_col="score")
    built = time.perf_counter()
    out = evaluate(rq, rr, METRICS)
    out = {k: float(v) for k, v in out.items()}
    out["_build_seconds"] = built - t0
    out["_evaluate_seconds"] = time.perf_counter() - built
    return out


def run_pytrec(qrels: pd.DataFrame, run: pd.DataFrame) -> dict[str, float]:
    import pytrec_eval

    q: dict[str, dict[str, int]] = {}
    for u, i, rel in zip(
        qrels["user"].astype(str),
        qrels["item"].astype(str),
        qrels["relevance"].astype(int),
        strict=True,
    ):
        q.setdefault(u, {})[i] = int(rel)
    r: dict[str, dict[str, float]] = {}
    for u, i, s in zip(run["user"].astype(str), run["item"].astype(str), run["score"], strict=True):
        r.setdefault(u, {})[i] = float(s)
    measures = {"ndcg_cut_10", "map_cut_10", "P_10", "recall_10", "recip_rank"}
    res = pytrec_eval.RelevanceEvaluator(q, measures).evaluate(r)
    names = {
        "ndcg_cut_10": "ndcg@10",
        "map_cut_10": "map@10",
        "P_10": "precision@10",
        "recall_10": "recall@10",
        "recip_rank": "mrr (uncut)",
    }
    return {names[m]: float(np.mean([v[m] for v in res.values()])) for m in measures}


def cell(tool: str, ids: str, n_users: int, repeat: int) -> dict[str, object]:
    """Run one measurement in this process (called in a subprocess); imports happen before the
    clock starts, so every tool is timed warm on the same DataFrames. ``ours`` runs ``repeat``
    times and keeps the fastest (the machine may be shared); the peers run once."""
    import metrics  # noqa: F401

    if tool == "ranx":
        import ranx  # noqa: F401
    if tool == "pytrec_eval":
        import pytrec_eval  # noqa: F401
    qrels, run = make_data(n_users, ids=ids)
    if tool == "ranx":  # compile its numba kernels first, outside the timing
        t0 = time.perf_counter()
        run_ranx(*make_data(50, ids=ids), warm_only=True)
        jit = time.perf_counter() - t0
    base = _reset_peak()
    times, cpu = [], []
    for _ in range(repeat if tool == "ours" else 1):
        t0, c0 = time.perf_counter(), time.process_time()
        if tool == "ours":
            values = run_ours(qrels, run)
        elif tool == "kernel":
            values = run_kernel(qrels, run)
        elif tool == "ranx":
            values = run_ranx(qrels, run, warm_only=False)
        else:
            values = run_pytrec(qrels, run)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    seconds = min(times)
    if tool == "kernel":
        seconds = float(values.pop("_kernel_seconds"))
    out: dict[str, object] = {
        "tool": tool,
        "ids": ids,
        "users": n_users,
        "seconds": seconds,
        "cpu_seconds": min(cpu),  # all threads; less sensitive than wall time to a busy machine
        "runs": len(times),
        "peak_mb": (_status("VmHWM") - base) / 2**20,
        "values": values,
    }
    if tool == "ranx":
        out["jit_seconds"] = jit
    return out


def paired_cell(ids: str, n_users: int, rounds: int) -> dict[str, object]:
    """``ours`` on int and on ``ids`` tables of the same data, alternated ``rounds`` times in this
    one process: each round's ratio compares runs seconds apart in the same memory, which
    separate processes (each with its own page placement) do not."""
    tables = {kind: make_data(n_users, ids=kind) for kind in ("int", ids)}
    run_ours(*make_data(1000, ids=ids))  # imports and first-call costs outside the timing
    cpu: dict[str, list[float]] = {"int": [], ids: []}
    wall: dict[str, list[float]] = {"int": [], ids: []}
    for _ in range(rounds):
        for kind in ("int", ids):
            t0, c0 = time.perf_counter(), time.process_time()
            run_ours(*tables[kind])
            wall[kind].append(time.perf_counter() - t0)
            cpu[kind].append(time.process_time() - c0)
    return {"ids": ids, "users": n_users, "cpu": cpu, "wall": wall}


def _paired_rows(sizes: list[int], kinds: list[str], rounds: int, timeout: float) -> None:
    """Print the paired ratios (median over rounds; the range of the rounds' own ratios)."""
    print(f"paired: int and each id type alternated {rounds} times in one process (CPU s)")
    head = ("users", "ids", "int CPU s", "ids CPU s", "CPU ratio", "rounds' ratios", "wall ratio")
    rows: list[tuple[object, ...]] = []
    for n in sizes:
        for kind in kinds:
            cmd = [sys.executable, __file__, "--paired-cell", kind, str(n), str(rounds)]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            if proc.returncode != 0:
                rows.append((n, kind, "error", proc.stderr.strip()[-80:], "", "", ""))
                continue
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            c_int, c_ids = np.array(r["cpu"]["int"]), np.array(r["cpu"][kind])
            w_int, w_ids = np.array(r["wall"]["int"]), np.array(r["wall"][kind])
            each = c_ids / c_int
            rows.append(
                (
                    n,
                    kind,
                    f"{np.median(c_int):.2f}",
                    f"{np.median(c_ids):.2f}",
                    f"{np.median(c_ids) / np.median(c_int):.2f}x",
                    f"{each.min():.2f}-{each.max():.2f}x",
                    f"{np.median(w_ids) / np.median(w_int):.2f}x",
                )
            )
    print_table(head, rows)


def measure(tool: str, ids: str, n_users: int, timeout: float, repeat: int) -> dict[str, object]:
    cmd = [sys.executable, __file__, "--cell", tool, ids, str(n_users), str(repeat)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {
            "tool": tool,
            "ids": ids,
            "users": n_users,
            "error": f"timeout after {timeout:.0f} s",
        }
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["killed (out of memory?)"])[-1]
        return {
            "tool": tool,
            "ids": ids,
            "users": n_users,
            "error": f"exit {proc.returncode}: {tail[:80]}",
        }
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cli_cold_start() -> float:
    """Seconds for `python -m metrics` on trec_eval's small test files, in a new interpreter."""
    ref = Path(__file__).resolve().parents[2] / "shared/reference/trec_eval"
    t0 = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "metrics",
            str(ref / "qrels.test"),
            str(ref / "results.test"),
            "-m",
            "ndcg@10",
            "map",
        ],
        capture_output=True,
        check=True,
    )
    return time.perf_counter() - t0


def _plan(n: int, args: argparse.Namespace) -> list[tuple[str, str]]:
    """(tool, ids) cells at ``n`` users."""
    cells = [("ours", ids) for ids in IDS if ids != "object" or n <= args.object_max]
    cells.append(("kernel", "int"))
    if n <= args.peers_max:
        cells += [("ranx", "str"), ("pytrec_eval", "str")]
    return cells


def _row(r: dict, ref: dict) -> tuple[object, ...]:
    """One table row; times and values relative to ours with int ids."""
    n, t, ids = r["users"], r["tool"], r["ids"]
    if "error" in r:
        return (n, t, ids, r["error"], "", "", "", "", "")
    vals = r["values"]
    note = ""
    if t == "ranx":
        note = (
            f"build {vals['_build_seconds']:.2f} s + evaluate {vals['_evaluate_seconds']:.2f} s "
            f"(JIT warm-up {r['jit_seconds']:.0f} s, not counted)"
        )
    if t == "kernel":
        note = "ids encoded, candidates judged, lists padded: top-k + metrics only"
    if t == "ours" and r["runs"] > 1:
        note = f"fastest of {r['runs']} runs"
    ratio = r["seconds"] / ref["seconds"] if "seconds" in ref else float("nan")
    cpu_ratio = ""
    if t != "kernel" and "cpu_seconds" in ref:
        cpu_ratio = f"{r['cpu_seconds'] / ref['cpu_seconds']:.2f}x"
    if "values" in ref:
        diff = max(abs(vals[m] - ref["values"][m]) for m in METRICS if m in vals)
        note = f"max |diff| {diff:.1e}; {note}".strip("; ")
    cpu = f"{r['cpu_seconds']:.2f}" if t != "kernel" else ""
    wall = f"{ratio:.2f}x"
    return (n, t, ids, f"{r['seconds']:.2f}", cpu, f"{r['peak_mb']:.0f}", wall, cpu_ratio, note)


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    p.add_argument(
        "--peers-max",
        type=int,
        default=100_000,
        help="largest size at which ranx and pytrec_eval run (both need > 20 GB at 1M)",
    )
    p.add_argument(
        "--object-max",
        type=int,
        default=100_000,
        help="largest size with object-dtype ids (100M Python strings need ~10 GB at 1M)",
    )
    p.add_argument("--repeat", type=int, default=3, help="runs of ours per cell (fastest kept)")
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument(
        "--paired",
        nargs="+",
        metavar="IDS",
        help="instead of the table: int and each of these id types alternated in one process",
    )
    p.add_argument("--rounds", type=int, default=5, help="alternations per --paired cell")
    p.add_argument("--cell", nargs=4, help=argparse.SUPPRESS)
    p.add_argument("--paired-cell", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.paired_cell:
        ids, n, rounds = args.paired_cell
        print(json.dumps(paired_cell(ids, int(n), int(rounds))))
        return
    if args.paired:
        _paired_rows(args.sizes, args.paired, args.rounds, args.timeout)
        return
    if args.cell:
        tool, ids, n, repeat = args.cell
        print(json.dumps(cell(tool, ids, int(n), int(repeat)), default=float))
        return
    rows = []
    ratios = []
    load_start = os.getloadavg()
    for n in args.sizes:
        res = {c: measure(*c, n, args.timeout, args.repeat) for c in _plan(n, args)}
        ref = res[("ours", "int")]
        rows += [_row(r, ref) for r in res.values()]
        if n > args.peers_max:
            rows += [
                (
                    n,
                    t,
                    "str",
                    "not run",
                    "",
                    "",
                    "",
                    "",
                    "above --peers-max (both run out of memory at 1M: > 20 GB)",
                )
                for t in ("ranx", "pytrec_eval")
            ]
        for ids in IDS[1:]:
            other = res.get(("ours", ids), {})
            if "seconds" in other and "seconds" in ref:
                wall = other["seconds"] / ref["seconds"]
                cpu = other["cpu_seconds"] / ref["cpu_seconds"]
                ratios.append(f"{n} users, {ids}/int: {wall:.2f} (CPU {cpu:.2f})")
    header = (
        "users",
        "tool",
        "ids",
        "seconds",
        "CPU s",
        "peak MB",
        "wall / ours int",
        "CPU / ours int",
        "notes",
    )
    print_table(header, rows)
    print(
        "\nours, time with string-like ids / time with int ids (target: CPU <= 1.30): "
        + "; ".join(ratios)
    )
    load = ", ".join(f"{a:.1f}" for a in load_start)
    load_end = ", ".join(f"{a:.1f}" for a in os.getloadavg())
    print(
        f"load average (1, 5, 15 min) on {os.cpu_count()} cores: {load} at the start, "
        f"{load_end} at the end (wall times grow with it; CPU seconds much less)"
    )
    print(f"CLI cold start (python -m metrics on trec_eval's test files): {cli_cold_start():.2f} s")
    print(
        "ranx/pytrec_eval get the str tables and their times include building their inputs "
        "from them. pytrec_eval's recip_rank is uncut, so its mrr is not compared."
    )


if __name__ == "__main__":
    main()
