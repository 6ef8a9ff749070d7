"""Paired comparison statistics of model B (candidate) against model A (baseline) on the same units.

Every comparison takes two aligned per-unit vectors ``a`` and ``b`` (arrays, or ``pd.Series``
aligned on their index), drops the pairs where either side is NaN and reports how many
(``dropped``). Differences are always ``b − a``. Bootstrap and sign-flip resampling are vectorized
in chunks of about 100 MB, and reproducible for a given ``seed``.

Scale: :func:`compare` and :func:`compare_many` (``method="auto"``) switch from resampling to
normal intervals at ``n >= NORMAL_MIN_N`` paired units (20,000), when the data are not too
skewed for the central limit theorem (see :func:`normal_ok`): the difference of means and ΔGSB get
``mean ± z·sd/√n``, the lift (a ratio of means) the delta-method interval
``lift ± z·sd(d − lift·a)/(√n·|mean a|)``, and the randomization p-value the normal approximation
of the same sign-flip distribution (mean 0, variance ``Σd²``). There the normal interval and the
percentile bootstrap agree to within the bootstrap's own Monte-Carlo error, at O(n) cost instead
of O(n·n_resamples). That path is a pure function of a few sums per metric
(:class:`PairMoments`, :func:`compare_from_moments`, :func:`normal_ok_from_moments`), so an engine
that can only aggregate (Spark) gets the same numbers. Below the threshold the numbers are those
of the plain paired bootstrap and sign-flip test, bit for bit; :func:`compare_many` draws those
resamples once for every metric with the same number of units instead of once per metric.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from metrics.checks import require_choice, require_int, require_range
from metrics.gsb import GSB, _aligned, gsb, gsb_margins

__all__ = [
    "ALTERNATIVES",
    "BOOTSTRAP_STATISTICS",
    "COMPARE_METHODS",
    "NORMAL_MIN_N",
    "P_ADJUSTMENTS",
    "BootstrapResult",
    "GSBBootstrapResult",
    "MDEResult",
    "PairMoments",
    "PairedComparison",
    "RandomizationResult",
    "TTestResult",
    "ab_test_size",
    "adjust",
    "benjamini_hochberg",
    "compare",
    "compare_from_moments",
    "compare_many",
    "effect_size",
    "gsb_bootstrap",
    "holm",
    "minimum_detectable_effect",
    "normal_interval",
    "normal_ok",
    "normal_ok_from_moments",
    "pair_moments",
    "paired_bootstrap",
    "paired_t_test",
    "randomization_test",
    "sign_test",
]


def _st() -> Any:
    """scipy.stats, imported on first use: it costs ~0.5-1 s, which every ``python -m harness``
    process (``--help``, ``--cfg job``, a gate check) would otherwise pay at startup."""
    from scipy import stats

    return stats


ALTERNATIVES = ("two-sided", "greater", "less")
BOOTSTRAP_STATISTICS = ("mean", "median")
P_ADJUSTMENTS = ("holm", "bh", "none")
COMPARE_METHODS = ("auto", "bootstrap", "normal")
#: From this many paired units on, ``method="auto"`` uses normal (CLT) intervals, not resampling.
NORMAL_MIN_N = 20_000
_MAX_SKEW_OF_MEAN = 0.05  # |skewness|/√n of a mean above this: its interval stays bootstrapped
_MAX_FLIP_SHARE = 0.01  # one unit's share of Σd² above this: the sign-flip test stays sampled

_MEMORY_BUDGET = 96 * 2**20  # bytes of temporaries per chunk of resamples
_BOOTSTRAP_CELL_BYTES = 48  # indices, counts, float copy (and permuted cumsum for medians)
_FLIP_CELL_BYTES = 16  # sign bits as uint8 plus their float64 copy in the product
_MAX_EXACT = 24  # 2**24 sign patterns: a few seconds
_TIE_RTOL = 1e-9  # flip sums within this share of Σ|d| of the observed one are rounding ties
_BOOTSTRAP_STREAM, _FLIP_STREAM = 0, 1  # independent random streams derived from one seed


# ---------------------------------------------------------------------------------------------
# Result types
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BootstrapResult:
    """Statistic of A and B, difference ``b − a`` and lift ``diff / a`` with percentile CIs."""

    value_a: float
    value_b: float
    diff: float
    diff_ci: tuple[float, float]
    lift: float
    lift_ci: tuple[float, float]
    n: int
    dropped: int
    statistic: str
    confidence: float
    n_resamples: int


@dataclass(frozen=True)
class RandomizationResult:
    """Observed mean difference ``b − a`` and its sign-flip permutation p-value."""

    statistic: float
    pvalue: float
    n: int
    dropped: int
    n_resamples: int
    alternative: str
    exact: bool


@dataclass(frozen=True)
class TTestResult:
    """Paired t-test of ``b − a``: t statistic (positive when B is higher), df, two-sided p."""

    statistic: float
    df: int
    pvalue: float
    n: int
    dropped: int


@dataclass(frozen=True)
class MDEResult:
    """Minimum detectable mean difference, absolute and relative to ``|mean a|``."""

    absolute: float
    relative: float
    sd_diff: float
    n: int
    alpha: float
    power: float


@dataclass(frozen=True)
class GSBBootstrapResult:
    """GSB counts, ΔGSB and its bootstrap percentile CI (units resampled)."""

    gsb: GSB
    delta: float
    ci: tuple[float, float]
    confidence: float
    n_resamples: int


@dataclass(frozen=True)
class PairedComparison:
    """Everything :func:`compare` reports on B against A; :meth:`as_dict` flattens it for logs."""

    n: int
    dropped: int
    mean_a: float
    mean_b: float
    sd_a: float  # per-unit sd (ddof=1) of each side over the n pairs: what sizes an A/B test
    sd_b: float
    diff: float
    diff_ci: tuple[float, float]
    lift: float
    lift_ci: tuple[float, float]
    p_randomization: float
    t: float
    df: int
    p_t: float
    p_sign: float
    effect_size: float
    mde: float
    mde_rel: float
    gsb: GSB
    gsb_ci: tuple[float, float]
    confidence: float
    n_resamples: int
    method: str = "bootstrap"  # how the intervals and p_randomization were computed: or "normal"

    def as_dict(self) -> dict[str, float | int]:
        """Flat ``{name: float | int}``, MLflow-safe keys; CIs as ``*_ci_low`` / ``*_ci_high``
        (``method``, a word, is left out)."""
        out: dict[str, float | int] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, str):
                continue
            if isinstance(value, GSB):
                out.update(gsb_good=value.good, gsb_same=value.same, gsb_bad=value.bad)
                out["gsb_delta"] = float(value.delta)
            elif isinstance(value, tuple):
                out[f"{f.name}_low"], out[f"{f.name}_high"] = float(value[0]), float(value[1])
            elif isinstance(value, int | np.integer):
                out[f.name] = int(value)
            else:
                out[f.name] = float(value)
        return out


# ---------------------------------------------------------------------------------------------
# Validation and shared kernels
# ---------------------------------------------------------------------------------------------
def _paired(a: object, b: object) -> tuple[np.ndarray, np.ndarray, int]:
    """Aligned float vectors without the pairs where a side is NaN, and how many were dropped."""
    va, vb = _aligned(a, b)
    for name, v in (("a", va), ("b", vb)):
        inf = np.isinf(v)
        if inf.any():
            i = int(np.flatnonzero(inf)[0])
            raise ValueError(
                f"'{name}' must hold finite values or NaN (got {v[i]} at position {i})"
            )
    ok = ~(np.isnan(va) | np.isnan(vb))
    n = int(ok.sum())
    if n == 0:
        raise ValueError(
            f"'a' and 'b' have no unit with a value on both sides "
            f"(got {va.size} units, {va.size} with NaN)"
        )
    return va[ok], vb[ok], va.size - n


def _rng(seed: int, stream: int) -> np.random.Generator:
    return np.random.default_rng([require_int("seed", seed, 0), stream])


def _resample_counts(n: int, n_resamples: int, seed: int) -> Iterator[np.ndarray]:
    """Bootstrap resamples of ``n`` units (drawn with replacement) as counts ``int[chunk, n]``."""
    rng = _rng(seed, _BOOTSTRAP_STREAM)
    rows = max(1, _MEMORY_BUDGET // (_BOOTSTRAP_CELL_BYTES * n))
    for start in range(0, n_resamples, rows):
        c = min(rows, n_resamples - start)
        idx = rng.integers(0, n, size=(c, n))
        idx += np.arange(0, c * n, n)[:, None]  # row r counts into cells [r·n, (r+1)·n)
        yield np.bincount(idx.ravel(), minlength=c * n).reshape(c, n)


def _median_from_counts(sorted_values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Median of each resample given as counts (rows) of the ascending ``sorted_values``."""
    n = int(counts[0].sum())
    cum = np.cumsum(counts, axis=1)
    lo = np.argmax(cum > (n - 1) // 2, axis=1)  # first position holding order statistic (n−1)//2
    hi = np.argmax(cum > n // 2, axis=1)
    return (sorted_values[lo] + sorted_values[hi]) / 2


def _resample_stats(
    columns: list[np.ndarray], statistic: str, n_resamples: int, seed: int
) -> np.ndarray:
    """Statistic (mean or median) of each column of length n in each resample: ``float[R, k]``."""
    n = columns[0].size
    out = np.empty((n_resamples, len(columns)))
    if statistic == "median":
        orders = [np.argsort(col, kind="stable") for col in columns]
    pos = 0
    for counts in _resample_counts(n, n_resamples, seed):
        c = counts.shape[0]
        if statistic == "mean":
            weights = counts.astype(np.float64)
            for j, col in enumerate(columns):  # one gemv per column: faster than a (c, n)@(n, k)
                out[pos : pos + c, j] = weights @ col  # and the same bits whatever k is
        else:
            for j, (col, order) in enumerate(zip(columns, orders, strict=True)):
                out[pos : pos + c, j] = _median_from_counts(col[order], counts[:, order])
        pos += c
    return out / n if statistic == "mean" else out


def _percentile_ci(values: np.ndarray, confidence: float) -> tuple[float, float]:
    """Percentile interval (linear interpolation) of the non-NaN resampled values."""
    if np.isnan(values).all():
        return (float("nan"), float("nan"))
    tail = (1 - confidence) / 2
    with np.errstate(invalid="ignore"):  # inf − inf between infinite lifts of a ~0 baseline
        low, high = np.nanquantile(values, [tail, 1 - tail])
    return float(low), float(high)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.where(den != 0, num / den, np.nan)


def _lift(diff: float, base: float) -> float:
    return diff / base if base != 0 else float("nan")


def _gsb_signs(
    a: np.ndarray, b: np.ndarray, tolerance: float, relative: bool, higher_is_better: bool
) -> np.ndarray:
    """Per unit +1 (good), 0 (same), −1 (bad): the rule of :func:`metrics.gsb` (no NaN here)."""
    diff = (b - a) * (1.0 if higher_is_better else -1.0)
    margin = gsb_margins(a, b, tolerance, relative)
    return (diff > margin).astype(np.float64) - (diff < -margin)


def _flip_keeps(n: int, n_resamples: int, seed: int) -> Iterator[np.ndarray]:
    """Chunks of random sign patterns of ``n`` units as ``uint8[chunk, n]`` (1: +1, 0: −1)."""
    rng = _rng(seed, _FLIP_STREAM)
    rows = max(1, _MEMORY_BUDGET // (_FLIP_CELL_BYTES * n))
    nbytes = (n + 7) // 8
    for start in range(0, n_resamples, rows):
        c = min(rows, n_resamples - start)
        raw = np.frombuffer(rng.bytes(c * nbytes), dtype=np.uint8).reshape(c, nbytes)
        yield np.unpackbits(raw, axis=1, count=n)


def _flip_sums(d: np.ndarray, n_resamples: int, seed: int) -> Iterator[np.ndarray]:
    """Chunks of ``Σ s_i·d_i`` over random signs ``s_i = ±1`` (probability 1/2 each)."""
    total = d.sum()
    for keep in _flip_keeps(d.size, n_resamples, seed):
        yield 2.0 * (keep.astype(np.float64) @ d) - total


def _flip_pvalues(ds: list[np.ndarray], n_resamples: int, seed: int) -> list[float]:
    """Two-sided sampled sign-flip p-values of several difference vectors of one length, from
    one shared draw of signs: each equals ``randomization_test`` of that vector alone."""
    totals = [d.sum() for d in ds]
    gammas = [_TIE_RTOL * np.abs(d).sum() for d in ds]
    counts = [0] * len(ds)
    for keep in _flip_keeps(ds[0].size, n_resamples, seed):
        weights = keep.astype(np.float64)
        for j, d in enumerate(ds):
            sums = 2.0 * (weights @ d) - totals[j]
            counts[j] += int((np.abs(sums) >= abs(totals[j]) - gammas[j]).sum())
    return [(c + 1) / (n_resamples + 1) for c in counts]


def _all_flip_sums(d: np.ndarray) -> Iterator[np.ndarray]:
    """Chunks of ``Σ s_i·d_i`` over all ``2**n`` sign patterns."""
    n, total = d.size, d.sum()
    rows = max(1, _MEMORY_BUDGET // (_FLIP_CELL_BYTES * n))
    shifts = np.arange(n, dtype=np.int64)
    for start in range(0, 1 << n, rows):
        k = np.arange(start, min(start + rows, 1 << n), dtype=np.int64)
        keep = ((k[:, None] >> shifts) & 1).astype(np.float64)
        yield 2.0 * (keep @ d) - total


def _sd(x: np.ndarray) -> float:
    """sd (ddof=1): NaN below 2 values, exactly 0 when they are all equal (``std`` of equal
    values may give 1e-17)."""
    if x.size < 2:
        return float("nan")
    return 0.0 if (x == x[0]).all() else float(x.std(ddof=1))


def _mean_sd(d: np.ndarray) -> tuple[float, float]:
    """Mean and :func:`_sd` of at least 2 differences."""
    return float(d.mean()), _sd(d)


def _t_from(n: int, mean: float, sd: float) -> tuple[float, int, float]:
    """Paired t statistic, df and two-sided p of ``n`` differences with this mean and sd."""
    if n < 2:
        return float("nan"), n - 1, float("nan")
    if sd == 0:  # zero variance: a certain difference, or none at all
        return (float(np.copysign(np.inf, mean)), n - 1, 0.0) if mean else (0.0, n - 1, 1.0)
    t = mean / (sd / np.sqrt(n))
    return float(t), n - 1, float(2 * _st().t.sf(abs(t), n - 1))


def _t_test(d: np.ndarray, ms: tuple[float, float] | None = None) -> tuple[float, int, float]:
    if d.size < 2:
        return _t_from(d.size, float("nan"), float("nan"))
    return _t_from(d.size, *(ms or _mean_sd(d)))


def _d_z_from(n: int, mean: float, sd: float) -> float:
    """Cohen's d_z of ``n`` differences with this mean and sd."""
    if n < 2:
        return float("nan")
    if sd == 0:
        return float(np.copysign(np.inf, mean)) if mean else 0.0
    return mean / sd


def _d_z(d: np.ndarray, ms: tuple[float, float] | None = None) -> float:
    if d.size < 2:
        return float("nan")
    return _d_z_from(d.size, *(ms or _mean_sd(d)))


def _mde(
    d: np.ndarray,
    mean_a: float,
    alpha: float,
    power: float,
    ms: tuple[float, float] | None = None,
) -> MDEResult:
    n = d.size
    sd = (ms or _mean_sd(d))[1] if n >= 2 else float("nan")
    z = _st().norm.ppf(1 - alpha / 2) + _st().norm.ppf(power)
    absolute = float(z * sd / np.sqrt(n))
    return MDEResult(absolute, _lift(absolute, abs(mean_a)), sd, n, alpha, power)


# ---------------------------------------------------------------------------------------------
# Public functions
# ---------------------------------------------------------------------------------------------
def paired_bootstrap(
    a: object,
    b: object,
    *,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    statistic: str = "mean",
) -> BootstrapResult:
    """Percentile bootstrap CIs of ``diff = stat(b) − stat(a)`` and ``lift = diff / stat(a)``.

    Units are resampled with replacement, the same draw for A and B. ``statistic`` is ``mean`` or
    ``median``. ``lift`` (and its CI) is NaN when ``stat(a)`` is 0; resamples with ``stat(a) == 0``
    are left out of the lift CI.

    >>> r = paired_bootstrap([0.2, 0.4, 0.6, 0.8], [0.3, 0.5, 0.7, 0.9], n_resamples=100)
    >>> round(r.diff, 12), tuple(round(x, 12) for x in r.diff_ci), round(r.lift, 12)
    (0.1, (0.1, 0.1), 0.2)
    """
    n_resamples = require_int("n_resamples", n_resamples, 1)
    confidence = require_range("confidence", confidence, 0, 1, closed="neither")
    require_int("seed", seed, 0)
    require_choice("statistic", statistic, BOOTSTRAP_STATISTICS)
    va, vb, dropped = _paired(a, b)
    if statistic == "mean":
        value_a, value_b, diff = float(va.mean()), float(vb.mean()), float((vb - va).mean())
        res = _resample_stats([va, vb - va], "mean", n_resamples, seed)
        res_a, res_diff = res[:, 0], res[:, 1]
    else:
        value_a, value_b = float(np.median(va)), float(np.median(vb))
        diff = value_b - value_a
        res = _resample_stats([va, vb], "median", n_resamples, seed)
        res_a, res_diff = res[:, 0], res[:, 1] - res[:, 0]
    lift = _lift(diff, value_a)
    lift_ci = (
        _percentile_ci(_ratio(res_diff, res_a), confidence)
        if not np.isnan(lift)
        else (float("nan"), float("nan"))
    )
    return BootstrapResult(
        value_a, value_b, diff, _percentile_ci(res_diff, confidence), lift, lift_ci,
        va.size, dropped, statistic, confidence, n_resamples,
    )  # fmt: skip


def randomization_test(
    a: object,
    b: object,
    *,
    n_resamples: int = 10000,
    seed: int = 0,
    alternative: str = "two-sided",
    exact: bool = False,
) -> RandomizationResult:
    """Paired sign-flip permutation test of the mean difference ``b − a``.

    Sampled: ``p = (count + 1) / (n_resamples + 1)``, ``count`` = random flips with
    ``|stat| >= |observed|`` (``stat >= observed`` for ``greater``, ``<=`` for ``less``).
    ``exact=True`` enumerates all ``2**n`` flips (n <= 24): ``p = count / 2**n``.

    >>> randomization_test([0, 0, 0, 0, 0], [1, 2, 3, 4, 5], exact=True).pvalue   # 2 of 32 flips
    0.0625
    """
    require_choice("alternative", alternative, ALTERNATIVES)
    require_int("seed", seed, 0)
    va, vb, dropped = _paired(a, b)
    d = vb - va
    if exact:
        if d.size > _MAX_EXACT:
            raise ValueError(f"'exact' needs n <= {_MAX_EXACT} paired units (got n={d.size})")
        chunks, total = _all_flip_sums(d), 1 << d.size
    else:
        total = require_int("n_resamples", n_resamples, 1)
        chunks = _flip_sums(d, total, seed)
    observed = d.sum()
    gamma = _TIE_RTOL * np.abs(d).sum()
    count = 0
    for sums in chunks:
        if alternative == "two-sided":
            count += int((np.abs(sums) >= abs(observed) - gamma).sum())
        elif alternative == "greater":
            count += int((sums >= observed - gamma).sum())
        else:
            count += int((sums <= observed + gamma).sum())
    p = count / total if exact else (count + 1) / (total + 1)
    return RandomizationResult(float(d.mean()), p, d.size, dropped, total, alternative, bool(exact))


def paired_t_test(a: object, b: object) -> TTestResult:
    """Paired t-test of ``b − a``; equals ``scipy.stats.ttest_rel(b, a)`` (note the order).

    Zero variance (all differences equal): ``t = ±inf, p = 0`` when they are non-zero, else
    ``t = 0, p = 1``. Fewer than 2 pairs: NaN.

    >>> r = paired_t_test([1, 2, 3, 4], [2, 2, 4, 5])
    >>> round(r.statistic, 6), r.df, round(r.pvalue, 6)
    (3.0, 3, 0.057669)
    """
    va, vb, dropped = _paired(a, b)
    t, df, p = _t_test(vb - va)
    return TTestResult(t, df, p, va.size, dropped)


def sign_test(good: int, bad: int) -> float:
    """Exact two-sided binomial (p = 1/2) p-value of ``good`` against ``bad``; ties are left out.

    Equals ``scipy.stats.binomtest(good, good + bad).pvalue``; 1.0 when ``good + bad == 0``.

    >>> sign_test(9, 1)    # 2 · (1 + 10) / 2**10
    0.021484375
    """
    good, bad = require_int("good", good, 0), require_int("bad", bad, 0)
    n, k = good + bad, min(good, bad)
    if 2 * k == n:  # includes n == 0
        return 1.0
    return float(min(1.0, 2 * _st().binom.cdf(k, n, 0.5)))


def _pvalues(pvalues: ArrayLike | pd.Series) -> np.ndarray:
    p = np.asarray(pvalues, dtype=np.float64)
    if p.ndim != 1:
        raise ValueError(f"'pvalues' must be 1-D (got shape {p.shape})")
    bad = ~(np.isnan(p) | ((p >= 0) & (p <= 1)))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"'pvalues' must lie in [0, 1] or be NaN (got {p[i]} at position {i})")
    return p


def _adjusted(pvalues: ArrayLike | pd.Series, method: str) -> np.ndarray | pd.Series:
    p = _pvalues(pvalues)
    out = p.copy()
    ok = np.flatnonzero(~np.isnan(p))
    m = ok.size
    if m and method != "none":
        order = ok[np.argsort(p[ok], kind="stable")]
        ranked = p[order]
        if method == "holm":  # max over j <= i of (m − j + 1)·p_(j)
            adj = np.maximum.accumulate((m - np.arange(m)) * ranked)
        else:  # bh: min over j >= i of m·p_(j)/j
            adj = np.minimum.accumulate((m * ranked / np.arange(1, m + 1))[::-1])[::-1]
        out[order] = np.minimum(adj, 1.0)
    if isinstance(pvalues, pd.Series):
        return pd.Series(out, index=pvalues.index, name=pvalues.name)
    return out


def holm(pvalues: ArrayLike | pd.Series) -> np.ndarray | pd.Series:
    """Holm step-down adjusted p-values (family-wise error), in input order; NaN stays NaN and is
    not counted in the family. A Series keeps its index.

    >>> holm([0.01, 0.04, 0.03, 0.005]).round(12).tolist()
    [0.03, 0.06, 0.06, 0.02]
    """
    return _adjusted(pvalues, "holm")


def benjamini_hochberg(pvalues: ArrayLike | pd.Series) -> np.ndarray | pd.Series:
    """Benjamini-Hochberg adjusted p-values (false discovery rate), in input order; NaN stays NaN
    and is not counted. A Series keeps its index.

    >>> benjamini_hochberg([0.01, 0.04, 0.03, 0.005]).round(12).tolist()
    [0.02, 0.04, 0.04, 0.02]
    """
    return _adjusted(pvalues, "bh")


def adjust(pvalues: ArrayLike | pd.Series, method: str = "holm") -> np.ndarray | pd.Series:
    """Adjusted p-values by ``method``: ``holm``, ``bh`` (Benjamini-Hochberg) or ``none``.

    >>> adjust([0.01, 0.04], "none").tolist()
    [0.01, 0.04]
    """
    return _adjusted(pvalues, require_choice("method", method, P_ADJUSTMENTS))


def effect_size(a: object, b: object) -> float:
    """Cohen's d_z of paired data: ``mean(b − a) / sd(b − a)`` (ddof=1), NaN pairs dropped.

    Zero variance gives ``±inf`` (0 when every difference is 0); fewer than 2 pairs give NaN.

    >>> effect_size([0, 0, 0], [1, 2, 3])
    2.0
    """
    va, vb, _ = _paired(a, b)
    return _d_z(vb - va)


def minimum_detectable_effect(
    a: object, b: object, *, alpha: float = 0.05, power: float = 0.8
) -> MDEResult:
    """Smallest mean difference a two-sided paired test detects: ``(z_{1−α/2} + z_power)·sd_d/√n``.

    Normal approximation with the observed ``sd`` of ``b − a``; ``relative`` is over ``|mean a|``.

    >>> mde = minimum_detectable_effect([1, 1, 1, 1], [1, 2, 3, 4])   # 2.801585·1.290994/2
    >>> round(mde.absolute, 6), round(mde.relative, 6)
    (1.808415, 1.808415)
    """
    alpha = require_range("alpha", alpha, 0, 1, closed="neither")
    power = require_range("power", power, 0, 1, closed="neither")
    va, vb, _ = _paired(a, b)
    return _mde(vb - va, float(va.mean()), alpha, power)


def gsb_bootstrap(
    a: object,
    b: object,
    *,
    tolerance: float = 0.0,
    relative: bool = False,
    higher_is_better: bool = True,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> GSBBootstrapResult:
    """ΔGSB of B against A (as :func:`metrics.gsb`) with a percentile bootstrap CI over units.

    >>> gsb_bootstrap([0.5, 0.5, 0.5, 0.5], [0.9, 0.5, 0.1, 0.2], n_resamples=200).delta
    -0.25
    """
    n_resamples = require_int("n_resamples", n_resamples, 1)
    confidence = require_range("confidence", confidence, 0, 1, closed="neither")
    require_int("seed", seed, 0)
    p = _prepare(a, b, tolerance, relative, higher_is_better, "bootstrap")
    res = _resample_stats([p.signs], "mean", n_resamples, seed)[:, 0]
    g = p.g
    return GSBBootstrapResult(g, g.delta, _percentile_ci(res, confidence), confidence, n_resamples)


@dataclass(frozen=True)
class PairMoments:
    """Sufficient statistics of one metric's pairs for the normal-path comparison: what an
    engine that can only aggregate (Spark, SQL) computes per metric and segment to get the
    :class:`PairedComparison` of ``compare_many`` at and above ``NORMAL_MIN_N``.

    Over the ``n`` pairs with a value on both sides (``a`` baseline, ``b`` candidate, per-pair
    difference ``d = b − a``; ``dropped`` pairs had a NaN): ``sum_a = Σa``, ``sum_b = Σb``,
    ``sum_d = Σd``; ``min_d``, ``max_d``; the GSB counts ``good`` and ``bad`` (``same`` is the
    rest, by the rule of :func:`metrics.gsb`); and the power sums of ``A = a − center_a`` and
    ``D = d − center_d``: ``sum_aa = ΣA²``, ``sum_dd = ΣD²``, ``sum_ad = ΣA·D`` (the variances
    and the delta method), ``sum_aaa = ΣA³``, ``sum_ddd = ΣD³``, ``sum_dda = ΣD²·A``,
    ``sum_daa = ΣD·A²`` (the skewness that :func:`normal_ok_from_moments` checks). The centres
    are any constants: 0 gives raw sums (one pass), the means of a first pass give sums that do
    not lose digits when the values sit far from 0 (what :func:`pair_moments` uses).
    """

    n: int
    sum_a: float
    sum_b: float
    sum_d: float
    min_d: float
    max_d: float
    good: int
    bad: int
    sum_aa: float
    sum_dd: float
    sum_ad: float
    sum_aaa: float = float("nan")
    sum_ddd: float = float("nan")
    sum_dda: float = float("nan")
    sum_daa: float = float("nan")
    center_a: float = 0.0
    center_d: float = 0.0
    dropped: int = 0

    def _centred(self, lift: float) -> tuple[float, float, float]:
        """``Σ(x − x̄)²``, ``Σ(x − x̄)³`` and the scale ``ΣX²`` of ``x = d − lift·a``."""
        c, n = lift, self.n
        s1 = (self.sum_d - n * self.center_d) - c * (self.sum_a - n * self.center_a)
        s2 = self.sum_dd - 2 * c * self.sum_ad + c * c * self.sum_aa
        s3 = self.sum_ddd - 3 * c * self.sum_dda + 3 * c * c * self.sum_daa - c**3 * self.sum_aaa
        shift = s1 / n  # x̄ minus the centre the sums were taken around
        scale = self.sum_dd + c * c * self.sum_aa
        return s2 - n * shift * shift, s3 - 3 * shift * s2 + 2 * n * shift**3, scale

    def sd(self, lift: float = 0.0) -> float:
        """sd (ddof=1) of ``d − lift·a`` (NaN below 2 pairs; exactly 0 when every d is equal)."""
        if self.n < 2:
            return float("nan")
        if lift == 0 and self.min_d == self.max_d:
            return 0.0
        return float(np.sqrt(max(self._centred(lift)[0], 0.0) / (self.n - 1)))

    def skew_ok(self, lift: float = 0.0) -> bool:
        """``|skewness|/√n <= 0.05`` for the mean of ``d − lift·a``, so the normal interval's
        skew error stays under ~3% of the standard error (yes when it is constant, or its spread
        is below 1e-12 of its scale: rounding noise)."""
        if lift == 0 and self.min_d == self.max_d:
            return True
        m2, m3, scale = self._centred(lift)
        if m2 <= 1e-12 * scale:
            return True
        skew = (m3 / self.n) / (m2 / self.n) ** 1.5
        return bool(abs(skew) / np.sqrt(self.n) <= _MAX_SKEW_OF_MEAN)

    def side_sds(self) -> tuple[float, float]:
        """sd (ddof=1) of ``a`` and of ``b = a + d`` (NaN below 2 pairs), from the centred
        sums: ``Σ(a − ā)² = ΣA² − n·(ā − center_a)²``, and ``B = A + D`` centred on
        ``center_a + center_d``."""
        n = self.n
        if n < 2:
            return float("nan"), float("nan")
        shift_a = self.sum_a / n - self.center_a
        shift_b = self.sum_b / n - (self.center_a + self.center_d)
        ss_a = self.sum_aa - n * shift_a * shift_a
        ss_b = self.sum_aa + 2 * self.sum_ad + self.sum_dd - n * shift_b * shift_b
        return float(np.sqrt(max(ss_a, 0.0) / (n - 1))), float(np.sqrt(max(ss_b, 0.0) / (n - 1)))

    def sum_squares(self) -> float:
        """Raw ``Σd²`` (exactly 0 when every difference is 0)."""
        if self.min_d == self.max_d == 0:
            return 0.0
        c = self.center_d
        return self.sum_dd + 2 * c * (self.sum_d - self.n * c) + self.n * c * c


def pair_moments(
    a: object,
    b: object,
    *,
    tolerance: float = 0.0,
    relative: bool = False,
    higher_is_better: bool = True,
) -> PairMoments:
    """The :class:`PairMoments` of two per-unit vectors (NaN pairs dropped), centred on the
    means: two passes over the pairs, dot products only."""
    va, vb, dropped = _paired(a, b)
    g = gsb(va, vb, tolerance, relative=relative, higher_is_better=higher_is_better)
    return _moments(va, vb, g.good, g.bad, dropped)


def _dot(x: np.ndarray, y: np.ndarray) -> float:
    """``Σ x·y`` on one thread (BLAS's threaded dot costs more than it saves at this size)."""
    return float(np.einsum("i,i->", x, y))


def _moments(va: np.ndarray, vb: np.ndarray, good: int, bad: int, dropped: int) -> PairMoments:
    d = vb - va
    n = va.size
    sum_a, sum_d = float(va.sum()), float(d.sum())
    ca, cd = sum_a / n, sum_d / n
    x, y = va - ca, d - cd
    xx, yy = x * x, y * y
    return PairMoments(
        n=n, sum_a=sum_a, sum_b=float(vb.sum()), sum_d=sum_d, min_d=float(d.min()),
        max_d=float(d.max()), good=good, bad=bad, sum_aa=float(xx.sum()), sum_dd=float(yy.sum()),
        sum_ad=_dot(x, y), sum_aaa=_dot(xx, x), sum_ddd=_dot(yy, y), sum_dda=_dot(yy, x),
        sum_daa=_dot(xx, y), center_a=ca, center_d=cd, dropped=dropped,
    )  # fmt: skip


def _signs_skew_ok(good: int, bad: int, n: int) -> bool:
    """The skewness check of :meth:`PairMoments.skew_ok` for GSB signs (+1 good, −1 bad,
    0 same), from their counts."""
    p, q = good / n, bad / n
    mean = p - q
    m2 = p + q - mean * mean
    if m2 <= 1e-12:
        return True
    m3 = p * (1 - mean) ** 3 + q * (-1 - mean) ** 3 + (1 - p - q) * (-mean) ** 3
    return abs(m3 / m2**1.5) / np.sqrt(n) <= _MAX_SKEW_OF_MEAN


def normal_ok_from_moments(m: PairMoments) -> bool:
    """:func:`normal_ok` from the sums: no unit holds more than 1% of ``Σd²`` (from ``min_d``
    and ``max_d``), and the skewness of ``d``, the GSB signs and ``d − lift·a`` is small (needs
    the third-power sums)."""
    total = m.sum_squares()
    if total > 0 and max(m.min_d * m.min_d, m.max_d * m.max_d) > _MAX_FLIP_SHARE * total:
        return False
    if not _signs_skew_ok(m.good, m.bad, m.n) or not m.skew_ok():
        return False
    mean_a = m.sum_a / m.n
    return mean_a == 0 or m.skew_ok((m.sum_d / m.n) / mean_a)


def normal_ok(
    a: object,
    b: object,
    *,
    tolerance: float = 0.0,
    relative: bool = False,
    higher_is_better: bool = True,
) -> bool:
    """Whether normal intervals are sound for these pairs, whatever their number: no unit holds
    more than 1% of ``Σd²`` (the sign-flip CLT), and ``|skewness|/√n <= 0.05`` for ``d``, the GSB
    signs and the lift's linearization ``d − lift·a`` (the interval CLT). ``method="auto"`` uses
    normal intervals when this holds and ``n >= NORMAL_MIN_N``.

    >>> normal_ok([0.0] * 1000, [1.0] + [0.0] * 999)   # one unit is the whole difference
    False
    """
    return normal_ok_from_moments(
        pair_moments(
            a, b, tolerance=tolerance, relative=relative, higher_is_better=higher_is_better
        )
    )


def compare_from_moments(
    m: PairMoments, *, confidence: float = 0.95, alpha: float = 0.05, power: float = 0.8
) -> PairedComparison:
    """The normal-path :class:`PairedComparison` (``compare_many(method="normal")``) from the
    sums alone: ``diff ± z·sd(d)/√n``, the delta-method lift ``lift ± z·sd(d − lift·a)/(√n·|mean
    a|)``, ΔGSB ``± z·sd(signs)/√n`` (from the counts), the normal sign-flip p
    ``2·Φ(−|Σd|/√Σd²)``, the paired t-test, d_z, the MDE and the exact sign test. Only
    ``n, sum_a, sum_b, sum_d, min_d, max_d, good, bad, sum_aa, sum_dd, sum_ad`` (and the
    centres) are read; the third-power sums serve :func:`normal_ok_from_moments`.
    """
    confidence = require_range("confidence", confidence, 0, 1, closed="neither")
    alpha = require_range("alpha", alpha, 0, 1, closed="neither")
    power = require_range("power", power, 0, 1, closed="neither")
    n = require_int("n", m.n, 1)
    z = float(_st().norm.ppf(0.5 + confidence / 2))
    root = float(np.sqrt(n))
    mean_a, diff = m.sum_a / n, m.sum_d / n
    sd = m.sd()
    half = z * sd / root
    lift = _lift(diff, mean_a)
    lift_ci = (float("nan"), float("nan"))
    if not np.isnan(lift):
        lift_half = z * m.sd(lift) / (root * abs(mean_a))
        lift_ci = (lift - lift_half, lift + lift_half)
    same = n - m.good - m.bad
    g = GSB(m.good, same, m.bad, (m.good - m.bad) / n, m.dropped)
    sign_mean = (m.good - m.bad) / n
    if n < 2:
        sign_sd = float("nan")
    elif max(m.good, m.bad, same) == n:
        sign_sd = 0.0
    else:
        sq = m.good * (1 - sign_mean) ** 2 + m.bad * (1 + sign_mean) ** 2 + same * sign_mean**2
        sign_sd = float(np.sqrt(sq / (n - 1)))
    sign_half = z * sign_sd / root
    square = m.sum_squares()
    z_flip = abs(m.sum_d) / np.sqrt(square) if square else 0.0
    p_rand = 1.0 if square == 0 else min(1.0, 2 * float(_st().norm.sf(z_flip)))
    t, df, p_t = _t_from(n, diff, sd)
    mde = float((_st().norm.ppf(1 - alpha / 2) + _st().norm.ppf(power)) * sd / root)
    sd_a, sd_b = m.side_sds()
    return PairedComparison(
        n=n, dropped=m.dropped, mean_a=mean_a, mean_b=m.sum_b / n, sd_a=sd_a, sd_b=sd_b,
        diff=diff, diff_ci=(diff - half, diff + half), lift=lift, lift_ci=lift_ci,
        p_randomization=p_rand, t=t, df=df, p_t=p_t, p_sign=sign_test(m.good, m.bad),
        effect_size=_d_z_from(n, diff, sd), mde=mde, mde_rel=_lift(mde, abs(mean_a)), gsb=g,
        gsb_ci=(sign_mean - sign_half, sign_mean + sign_half), confidence=confidence,
        n_resamples=0, method="normal",
    )  # fmt: skip


def normal_interval(a: object, b: object, *, confidence: float = 0.95) -> BootstrapResult:
    """The large-sample counterpart of :func:`paired_bootstrap` (mean): ``diff ± z·sd/√n`` and the
    delta-method lift interval, O(n); ``n_resamples`` is 0. At ``n >= NORMAL_MIN_N`` it agrees with
    the percentile bootstrap to within the bootstrap's Monte-Carlo error when :func:`normal_ok`.

    >>> r = normal_interval([0, 1, 0, 1], [1, 1, 0, 1])   # d = 1,0,0,0: sd 0.5, half 1.96·0.25
    >>> round(r.diff, 6), tuple(round(x, 6) for x in r.diff_ci)
    (0.25, (-0.239991, 0.739991))
    """
    confidence = require_range("confidence", confidence, 0, 1, closed="neither")
    c = compare_from_moments(pair_moments(a, b), confidence=confidence)
    return BootstrapResult(
        c.mean_a, c.mean_b, c.diff, c.diff_ci, c.lift, c.lift_ci, c.n, c.dropped, "mean",
        confidence, 0,
    )  # fmt: skip


def _checked_settings(
    n_resamples: int, confidence: float, alpha: float, power: float, seed: int, method: str
) -> tuple[int, float, float, float]:
    require_choice("method", method, COMPARE_METHODS)
    require_int("seed", seed, 0)
    return (
        require_int("n_resamples", n_resamples, 1),
        require_range("confidence", confidence, 0, 1, closed="neither"),
        require_range("alpha", alpha, 0, 1, closed="neither"),
        require_range("power", power, 0, 1, closed="neither"),
    )


@dataclass
class _Prepared:
    """One metric's pairs ready for :func:`_finish`: vectors, GSB, the chosen method, and the
    sums of the normal path (None on the bootstrap path)."""

    va: np.ndarray
    vb: np.ndarray
    dropped: int
    g: GSB
    moments: PairMoments | None
    tolerance: float
    relative: bool
    hib: bool

    @property
    def normal(self) -> bool:
        """Whether the intervals come from the normal path."""
        return self.moments is not None

    @property
    def signs(self) -> np.ndarray:
        """Per unit +1 (good), 0 (same), −1 (bad), for the resampled ΔGSB."""
        return _gsb_signs(self.va, self.vb, self.tolerance, self.relative, self.hib)


def _prepare(
    a: object, b: object, tolerance: float, relative: bool, hib: bool, method: str
) -> _Prepared:
    va, vb, dropped = _paired(a, b)
    g = replace(gsb(va, vb, tolerance, relative=relative, higher_is_better=hib), excluded=dropped)
    moments = None
    if method == "normal" or (method == "auto" and va.size >= NORMAL_MIN_N):
        moments = _moments(va, vb, g.good, g.bad, dropped)
        if method == "auto" and not normal_ok_from_moments(moments):
            moments = None
    return _Prepared(va, vb, dropped, g, moments, tolerance, relative, hib)


def _finish(
    p: _Prepared,
    res: np.ndarray | None,
    p_rand: float | None,
    n_resamples: int,
    confidence: float,
    alpha: float,
    power: float,
) -> PairedComparison:
    """The comparison from resampled means ``res`` (columns a, d, signs) and the sampled p, or,
    when ``p.normal``, from its sums (:func:`compare_from_moments`)."""
    if p.moments is not None:
        return compare_from_moments(p.moments, confidence=confidence, alpha=alpha, power=power)
    va, vb, g = p.va, p.vb, p.g
    d = vb - va
    mean_a, diff = float(va.mean()), float(d.mean())
    ms = _mean_sd(d) if d.size >= 2 else None  # one pass for t, effect size, MDE and the CI
    lift = _lift(diff, mean_a)
    # res and p_rand come with every non-normal metric (compare_many)
    res, p_rand = np.asarray(res), float(p_rand if p_rand is not None else np.nan)
    diff_ci, gsb_ci = (
        _percentile_ci(res[:, 1], confidence),
        _percentile_ci(res[:, 2], confidence),
    )
    lift_ci = (
        _percentile_ci(_ratio(res[:, 1], res[:, 0]), confidence)
        if not np.isnan(lift)
        else (float("nan"), float("nan"))
    )
    t, df, p_t = _t_test(d, ms)
    mde = _mde(d, mean_a, alpha, power, ms)
    return PairedComparison(
        n=va.size, dropped=p.dropped, mean_a=mean_a, mean_b=float(vb.mean()), sd_a=_sd(va),
        sd_b=_sd(vb), diff=diff, diff_ci=diff_ci, lift=lift, lift_ci=lift_ci,
        p_randomization=p_rand, t=t, df=df, p_t=p_t, p_sign=sign_test(g.good, g.bad),
        effect_size=_d_z(d, ms), mde=mde.absolute, mde_rel=mde.relative, gsb=g,
        gsb_ci=gsb_ci, confidence=confidence, n_resamples=n_resamples, method="bootstrap",
    )  # fmt: skip


def compare(
    a: object,
    b: object,
    *,
    tolerance: float = 0.0,
    relative: bool = False,
    higher_is_better: bool = True,
    n_resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
    alpha: float = 0.05,
    power: float = 0.8,
    method: str = "auto",
) -> PairedComparison:
    """All paired statistics of B against A in one pass (one shared bootstrap for all CIs).

    ``diff``, ``lift``, ``t`` and ``effect_size`` are signed ``b − a`` whatever
    ``higher_is_better``; GSB and the sign test follow it. ``method="bootstrap"``:
    ``n_resamples`` is used both for the bootstrap and the randomization test: with the same
    ``seed`` and ``n_resamples`` the CIs equal those of :func:`paired_bootstrap` and
    :func:`gsb_bootstrap`, and ``p_randomization`` that of :func:`randomization_test`.
    ``method="normal"``: normal and delta-method intervals and the normal approximation of the
    sign-flip test (module docstring), ``n_resamples`` reported as 0. ``method="auto"`` (default):
    normal at ``n >= NORMAL_MIN_N`` when :func:`normal_ok`, else bootstrap; ``method`` of the
    result says which.

    >>> c = compare([0.5, 0.5, 0.5, 0.5], [0.9, 0.5, 0.1, 0.2], n_resamples=200)
    >>> c.gsb.delta, c.p_sign, c.method
    (-0.25, 1.0, 'bootstrap')
    """
    return compare_many(
        {"": (a, b, higher_is_better)},
        tolerance=tolerance, relative=relative, n_resamples=n_resamples, seed=seed,
        confidence=confidence, alpha=alpha, power=power, method=method,
    )[""]  # fmt: skip


def compare_many(
    columns: Mapping[str, tuple[object, object, bool]],
    *,
    tolerance: float = 0.0,
    relative: bool = False,
    n_resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
    alpha: float = 0.05,
    power: float = 0.8,
    method: str = "auto",
) -> dict[str, PairedComparison]:
    """:func:`compare` of several metrics of the same units: ``{name: (a, b, higher_is_better)}``
    to ``{name: PairedComparison}``, each equal to ``compare(a, b, ...)`` bit for bit.

    The bootstrap and sign-flip draws depend only on the number of pairs, ``n_resamples`` and
    ``seed``, so they are drawn once for every metric with the same number of pairs and applied
    to all their columns: the cost of one comparison, not one per metric.

    >>> r = compare_many({"x": ([0, 1, 1, 0], [1, 1, 1, 0], True)}, n_resamples=100)
    >>> r["x"].diff, r["x"].method
    (0.25, 'bootstrap')
    """
    n_resamples, confidence, alpha, power = _checked_settings(
        n_resamples, confidence, alpha, power, seed, method
    )
    prepared = {
        name: _prepare(a, b, tolerance, relative, hib, method)
        for name, (a, b, hib) in columns.items()
    }
    by_n: dict[int, list[str]] = {}
    for name, p in prepared.items():
        if not p.normal:
            by_n.setdefault(p.va.size, []).append(name)
    resampled: dict[str, tuple[np.ndarray | None, float | None]] = {}
    for names in by_n.values():
        group = [prepared[name] for name in names]
        res = _resample_stats(
            [x for p in group for x in (p.va, p.vb - p.va, p.signs)], "mean", n_resamples, seed
        )
        pvalues = _flip_pvalues([p.vb - p.va for p in group], n_resamples, seed)
        for j, name in enumerate(names):
            resampled[name] = (res[:, 3 * j : 3 * j + 3], pvalues[j])
    out = {}
    for name, p in prepared.items():
        res_of, p_of = resampled.get(name, (None, None))
        out[name] = _finish(p, res_of, p_of, n_resamples, confidence, alpha, power)
    return out


def ab_test_size(
    mean_a: float,
    var_a: float,
    var_b: float,
    relative_lift: float,
    *,
    alpha: float = 0.05,
    power: float = 0.8,
    two_sided: bool = True,
) -> float:
    """Users per arm an online A/B test needs to detect ``relative_lift`` (an estimate).

    The standard two-sample normal formula for independent arms of equal size:
    ``n = (z_{1−α/2} + z_{power})² · (var_a + var_b) / Δ²`` with ``Δ = relative_lift · mean_a``
    (``z_{1−α}`` when ``two_sided=False``); ``var_a`` and ``var_b`` are the per-user variances of
    the metric in each arm (offline, the variance over test users of the baseline's and the
    candidate's per-user values). Returned unrounded; ``inf`` when ``Δ`` is 0. For a two-sided
    test it ignores the chance of rejecting in the wrong direction, so it is a hair conservative
    (about 2.5e-6 relative at α = 0.05, power = 0.8) against a solver that counts both tails.

    >>> round(ab_test_size(0.1, 0.01, 0.01, 0.1), 4)   # 2.801585² · 0.02 / 0.01²
    1569.7759
    >>> round(ab_test_size(0.1, 0.01, 0.01, 0.1, two_sided=False), 4)   # (1.644854 + 0.841621)²
    1236.5114
    """
    alpha = require_range("alpha", alpha, 0, 1, closed="neither")
    power = require_range("power", power, 0, 1, closed="neither")
    values = {"mean_a": mean_a, "var_a": var_a, "var_b": var_b, "relative_lift": relative_lift}
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | float | np.number):
            raise ValueError(f"'{name}' must be a number (got {value!r})")
        if not np.isfinite(value):
            raise ValueError(f"'{name}' must be finite (got {value!r})")
    for name in ("var_a", "var_b"):
        if values[name] < 0:
            raise ValueError(f"'{name}' must be >= 0 (got {values[name]!r})")
    delta = float(relative_lift) * float(mean_a)
    if delta == 0:
        return float("inf")
    z = _st().norm.ppf(1 - alpha / 2 if two_sided else 1 - alpha) + _st().norm.ppf(power)
    return float(z * z * (float(var_a) + float(var_b)) / (delta * delta))
