"""The HTML / Markdown report, built from a real comparison of two fitted models.

Expected numbers are formatted here from the PairComparison table, independently of the
renderer, and looked up in the parsed HTML tables.
"""

from __future__ import annotations

import base64
import dataclasses
import math
import os
import re
import shutil
import subprocess
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from support import QuickRun

from harness import synthetic
from harness.compare import CompareSpec, PairComparison, compare_pair, segment_data
from harness.datasets import Dataset
from harness.experiment import MetricSuite, qrels_from_test, run_models
from harness.gate import GateDecision, GateSpec, RuleResult, decide
from harness.models import ImplicitItemCosine, PopularityModel
from harness.report import ReportContext, render_html, render_markdown, write_report
from harness.split import make_split

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
VOID = {"meta", "img", "br", "hr", "link", "input", "col", "wbr", "source"}
MAIN_TAGS = (
    "html",
    "head",
    "body",
    "main",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "details",
    "summary",
    "div",
    "p",
    "ul",
    "li",
    "pre",
    "h1",
    "h2",
    "h3",
    "figure",
)
CHROMIUM = Path("/usr/bin/chromium")


# ------------------------------------------------------------------------------ HTML reading


class Page(HTMLParser):
    """Checks nesting (every non-void tag closed in order) and collects text, tables, images."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.starts: Counter[str] = Counter()
        self.ends: Counter[str] = Counter()
        self.text: list[str] = []
        self.tables: list[dict[str, Any]] = []
        self.images: list[dict[str, str | None]] = []
        self.doctype = ""
        self._open_tables: list[dict[str, Any]] = []
        self._cell: list[str] | None = None
        self._cell_class = ""

    def handle_decl(self, decl: str) -> None:
        self.doctype = decl

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.starts[tag] += 1
        if tag == "img":
            self.images.append(a)
        if tag in VOID:
            return
        self.stack.append(tag)
        if tag == "table":
            table: dict[str, Any] = {
                "attrs": a,
                "rows": [],
                "classes": [],
                "in_details": "details" in self.stack,
            }
            self.tables.append(table)
            self._open_tables.append(table)
        elif tag == "tr" and self._open_tables:
            self._open_tables[-1]["rows"].append([])
            self._open_tables[-1]["classes"].append([])
        elif tag in ("td", "th"):
            self._cell, self._cell_class = [], a.get("class") or ""

    def handle_endtag(self, tag: str) -> None:
        self.ends[tag] += 1
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
            return
        self.stack.pop()
        if tag in ("td", "th") and self._cell is not None and self._open_tables:
            self._open_tables[-1]["rows"][-1].append("".join(self._cell).strip())
            self._open_tables[-1]["classes"][-1].append(self._cell_class)
            self._cell = None
        elif tag == "table":
            self._open_tables.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)

    def all_text(self) -> str:
        return " ".join(" ".join(self.text).split())

    def table(self, **attrs: str) -> dict[str, Any]:
        hits = [t for t in self.tables if all(t["attrs"].get(k) == v for k, v in attrs.items())]
        assert len(hits) == 1, f"expected one table with {attrs}, found {len(hits)}"
        return hits[0]


def parse_fragment(html_text: str) -> Page:
    """An HTML fragment (no doctype), checked for nesting like a page."""
    page = Page()
    page.feed(html_text)
    page.close()
    assert page.errors == [] and page.stack == []
    return page


def parse(html_text: str) -> Page:
    page = Page()
    page.feed(html_text)
    page.close()
    assert page.errors == []
    assert page.stack == [], f"unclosed tags: {page.stack}"
    for tag in MAIN_TAGS:
        assert page.starts[tag] == page.ends[tag], (
            f"<{tag}> opened {page.starts[tag]} times, closed {page.ends[tag]}"
        )
    assert page.doctype.lower() == "doctype html"
    return page


# ------------------------------------------------------------------------------ expected text


def f4(x: float) -> str:
    return "—" if not math.isfinite(x) else f"{x:.4f}"


def with_ci(x: float, lo: float, hi: float, fmt: str) -> str:
    if not math.isfinite(x):
        return "—"
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return format(x, fmt)
    return f"{format(x, fmt)} [{format(lo, fmt)}, {format(hi, fmt)}]"


def p_text(p: float) -> str:
    return "—" if not math.isfinite(p) else "<0.001" if p < 0.001 else f"{p:.3f}"


def expected_cells(r: pd.Series) -> dict[str, str]:
    g = {
        k: float(r.get(k, np.nan))
        for k in r.index
        if k not in ("segment", "metric", "kind", "method")  # method: bootstrap | normal
    }
    nan = float("nan")
    get = lambda k: g.get(k, nan)  # noqa: E731
    return {
        "metric": str(r["metric"]),
        "baseline": f4(get("mean_a")),
        "candidate": f4(get("mean_b")),
        "diff": with_ci(get("diff"), get("diff_ci_low"), get("diff_ci_high"), "+.4f"),
        "lift": with_ci(get("lift"), get("lift_ci_low"), get("lift_ci_high"), "+.2%"),
        "p": p_text(get("p_randomization")),
        "p_adj": p_text(get("p_adjusted")),
        "d": "—" if not math.isfinite(get("effect_size")) else f"{get('effect_size'):+.2f}",
        "gsb": with_ci(get("gsb_delta"), get("gsb_ci_low"), get("gsb_ci_high"), "+.3f"),
    }


def expected_tone(r: pd.Series, lo_key: str, hi_key: str) -> str:
    lo, hi = float(r.get(lo_key, np.nan)), float(r.get(hi_key, np.nan))
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo <= 0 <= hi:
        return ""
    return "better" if (lo > 0) == bool(r["higher_is_better"]) else "worse"


# ------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Popularity vs item-kNN on small synthetic data: the comparison and the gate decision."""
    frame = synthetic.generate(n_users=300, n_items=200, n_events=6000, seed=0)
    split = make_split(frame, "global_time", cut=0.8)
    suite = MetricSuite(k=10, names=("ndcg@10", "recall@10", "coverage@10"))
    models = {"popularity": PopularityModel(), "itemknn": ImplicitItemCosine()}
    result = run_models(
        Dataset("synthetic", frame, "synthetic:seed=0"),
        split,
        models,
        suite,
        tmp_path_factory.mktemp("run") / "out",
        progress=False,
    )
    assert not result.failed
    spec = CompareSpec(n_resamples=200)
    a, b = result.outcomes["popularity"], result.outcomes["itemknn"]
    assert a.evaluation is not None and b.evaluation is not None
    segs = segment_data(split.train, a.evaluation.per_user.index.to_numpy(), spec)
    pair = compare_pair(
        "popularity",
        "itemknn",
        (a.evaluation.per_user, b.evaluation.per_user),
        suite.names,
        spec,
        summaries=(a.evaluation.summary, b.evaluation.summary),
        segments=segs,
        qrels=qrels_from_test(split.test, suite.relevance),
        recs=(a.recommendations, b.recommendations),
        options=suite.evaluate_options(),
    )
    gate = GateSpec(
        primary={"metric": "ndcg@10", "min_lift": 0.0},
        guardrails=[{"metric": "coverage@10", "margin": 0.1}],
        gsb={"metric": "ndcg@10", "min_delta": 0.0},
    )
    decision = decide(pair, gate)
    ctx = ReportContext(
        title="Offline evaluation: report-test",
        experiment="report-test",
        created="2024-05-01T12:00:00+00:00",
        dataset="synthetic (synthetic:seed=0), 6,000 events",
        split=split.name,
        split_stats=dict(split.stats),
        candidates={"candidates.kind": "full"},
        metric_options=dict(result.options),
        config_yaml="name: report-test\nmetrics:\n  k: 10\n",
        summary=result.table(),
        pairs=[pair],
        decisions={"itemknn": decision},
        overall=decision.decision,
        segment_definitions=segs.definitions,
        notes=["a note with <markup> & ampersand"],
        run_ids={"parent": "abc123"},
    )
    return {"ctx": ctx, "pair": pair, "decision": decision, "html": render_html(ctx)}


# ------------------------------------------------------------------------------ tests


def test_html_is_well_formed_and_shows_every_decision(real: dict[str, Any]) -> None:
    html_text, decision = real["html"], real["decision"]
    page = parse(html_text)
    text = page.all_text()
    assert f"Overall decision {decision.decision}" in text
    assert decision.decision in {"GO", "NO_GO", "INCONCLUSIVE"}
    statuses = Counter(r.status for r in decision.rules)
    assert f"{decision.decision} itemknn vs popularity (" in text  # the per-candidate line
    assert f"{statuses['pass']} pass" in text
    # one decision line per candidate, and a rules table with one row per rule
    rules = page.table(**{"class": "rules", "data-candidate": "itemknn"})
    body = rules["rows"][1:]
    assert [row[0] for row in body] == [r.rule for r in decision.rules]
    for row, rule in zip(body, decision.rules, strict=True):
        assert row[1:4] == [rule.metric, rule.segment, rule.status]
        assert row[7] == rule.reason
    assert "itemknn vs popularity" in text
    # the note is escaped in the source and readable in the text
    assert "<markup>" not in html_text and "a note with <markup> & ampersand" in text
    # self-contained: no scripts, stylesheets or external URLs
    assert "<script" not in html_text and "<link" not in html_text
    assert not re.search(r"(src|href)=\"(?!data:|#)", html_text)


def test_a_zero_baseline_rule_shows_its_unbounded_change_and_ci(real: dict[str, Any]) -> None:
    """Over a zero baseline the relative change is ±∞: the table shows it and its CI, which
    the reason cites (it read "—" and "no CI")."""
    decision: GateDecision = real["decision"]
    inf = math.inf
    rules = [
        RuleResult("primary", "ndcg@10", "all", "pass", inf, (inf, inf), 0.02, "r1"),
        RuleResult("guardrail", "ndcg@10", "all", "inconclusive", inf, (-inf, inf), -0.05, "r2"),
        RuleResult("primary", "ndcg@10", "all", "inconclusive", math.nan, (math.nan,) * 2, 0, "r3"),
    ]
    ctx = dataclasses.replace(
        real["ctx"], decisions={"itemknn": dataclasses.replace(decision, rules=rules)}
    )
    table = parse(render_html(ctx)).table(**{"class": "rules", "data-candidate": "itemknn"})
    assert [row[4:6] for row in table["rows"][1:]] == [
        ["+∞", "[+∞, +∞]"],
        ["+∞", "[−∞, +∞]"],
        ["—", "no CI"],
    ]


def test_badge_colour_follows_the_decision(real: dict[str, Any]) -> None:
    ctx: ReportContext = real["ctx"]
    for overall in ("GO", "NO_GO", "INCONCLUSIVE"):
        html_text = render_html(dataclasses.replace(ctx, overall=overall))
        assert re.search(rf'class="badge big {overall}">{overall}<', html_text)


def test_metric_rows_match_the_comparison_table(real: dict[str, Any]) -> None:
    pair: PairComparison = real["pair"]
    page = parse(real["html"])
    table = page.table(**{"class": "pair", "data-candidate": "itemknn", "data-segment": "all"})
    header, rows, classes = table["rows"][0], table["rows"][1:], table["classes"][1:]
    col = {name: i for i, name in enumerate(header)}
    assert header[:4] == ["Metric", "n", "Baseline: popularity", "Candidate: itemknn"]
    expected = pair.table[pair.table["segment"] == "all"]
    assert [r[0] for r in rows] == expected["metric"].tolist()
    assert len(rows) == 3
    for (_, r), row, cls in zip(expected.iterrows(), rows, classes, strict=True):
        want = expected_cells(r)
        got = {
            "metric": row[0],
            "baseline": row[col["Baseline: popularity"]],
            "candidate": row[col["Candidate: itemknn"]],
            "diff": row[col["Δ [95% CI]"]],
            "lift": row[col["Relative lift [95% CI]"]],
            "p": row[col["p (randomization)"]],
            "p_adj": row[col["p adjusted"]],
            "d": row[col["Effect size d_z"]],
            "gsb": row[col["ΔGSB [95% CI]"]],
        }
        assert got == want
        assert expected_tone(r, "diff_ci_low", "diff_ci_high") in cls[col["Δ [95% CI]"]]
        if expected_tone(r, "diff_ci_low", "diff_ci_high") == "":
            assert "better" not in cls[col["Δ [95% CI]"]]
            assert "worse" not in cls[col["Δ [95% CI]"]]
    # the run-level row has no CI and no test
    cov = rows[expected["metric"].tolist().index("coverage@10")]
    assert cov[col["p (randomization)"]] == "—" and "[" not in cov[col["Δ [95% CI]"]]
    # every other segment has its own table inside a <details>
    others = [s for s in dict.fromkeys(pair.table["segment"]) if s != "all"]
    assert others
    for seg in others:
        seg_table = page.table(**{"class": "pair", "data-segment": seg})
        assert seg_table["in_details"]
        assert len(seg_table["rows"]) - 1 == int((pair.table["segment"] == seg).sum())


def test_plots_are_embedded_pngs(real: dict[str, Any]) -> None:
    page = parse(real["html"])
    assert len(page.images) >= 3
    for img in page.images:
        src = img["src"] or ""
        assert src.startswith("data:image/png;base64,")
        data = base64.b64decode(src.split(",", 1)[1], validate=True)
        assert data.startswith(PNG_SIGNATURE) and len(data) > 2000
        assert img.get("alt")


def test_markdown_has_the_decision_tables_and_images(real: dict[str, Any], tmp_path: Path) -> None:
    ctx: ReportContext = real["ctx"]
    pair: PairComparison = real["pair"]
    md = render_markdown(ctx, tmp_path / "report_files")
    assert f"Overall decision: **{ctx.overall}**" in md
    assert f"**{real['decision'].decision}**: itemknn vs popularity" in md
    header = "| Metric | n | Baseline: popularity | Candidate: itemknn |"
    lines = md.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(header)]
    assert len(starts) == pair.table["segment"].nunique()
    first = starts[0]
    assert lines[first + 1].startswith("|:---|")
    for k, (_, r) in enumerate(pair.table[pair.table["segment"] == "all"].iterrows()):
        row = lines[first + 2 + k]
        assert row.startswith(f"| {r['metric']} |")
        assert expected_cells(r)["diff"] in row
        assert expected_cells(r)["baseline"] in row
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert len(links) >= 3
    for link in links:
        assert link.startswith("report_files/")
        assert (tmp_path / link).read_bytes().startswith(PNG_SIGNATURE)
    assert "```yaml\nname: report-test" in md


def test_markdown_without_image_dir_writes_nothing(real: dict[str, Any], tmp_path: Path) -> None:
    md = render_markdown(real["ctx"], None)
    assert "![" not in md and "Plot not written" in md


def test_write_report_creates_the_files(real: dict[str, Any], tmp_path: Path) -> None:
    folder = tmp_path / "run"
    paths = write_report(real["ctx"], folder)
    assert paths["html"] == folder / "report.html" and paths["html"].is_file()
    assert paths["markdown"] == paths["md"] == folder / "report.md"
    assert paths["markdown"].is_file()
    pngs = sorted((folder / "report_files").glob("*.png"))
    assert len(pngs) >= 3
    assert {p for k, p in paths.items() if k.startswith("image:")} == set(pngs)
    parse(paths["html"].read_text(encoding="utf-8"))
    for link in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", paths["markdown"].read_text()):
        assert (folder / link).is_file()


def test_sampled_candidates_warning_only_when_sampled(real: dict[str, Any]) -> None:
    ctx: ReportContext = real["ctx"]
    sampled = dataclasses.replace(
        ctx, candidates={"candidates.kind": "sampled", "candidates.n_negatives": 100}
    )
    sampled_html = render_html(sampled)
    page = parse(sampled_html)
    assert 'class="warning"' in sampled_html
    assert "Sampled metrics are biased" in page.all_text()
    assert "Warning" in render_markdown(sampled, None)
    for kind in ("full", "file"):
        other = dataclasses.replace(ctx, candidates={"candidates.kind": kind})
        html_text = render_html(other)
        assert 'class="warning"' not in html_text and "biased" not in html_text
        assert "Warning" not in render_markdown(other, None)


def test_no_pairs_failed_model_and_no_gate(real: dict[str, Any], tmp_path: Path) -> None:
    ctx: ReportContext = real["ctx"]
    summary = pd.concat(
        [
            ctx.summary.iloc[:1],
            pd.DataFrame(
                [[np.nan] * ctx.summary.shape[1]],
                index=["broken<model>"],
                columns=ctx.summary.columns,
            ),
        ]
    )
    bare = dataclasses.replace(
        ctx,
        summary=summary,
        pairs=[],
        decisions={},
        overall=None,
        segment_definitions={},
        notes=["broken<model> failed: RuntimeError: boom"],
        run_ids={},
    )
    page = parse(render_html(bare))
    text = page.all_text()
    assert "No comparison" in text and "only 1 model(s) produced results" in text
    assert "NO GATE" in text and "No launch gate" in text
    rows = page.table(**{"class": "summary"})["rows"]
    assert rows[2] == ["broken<model> (failed)", "—", "—", "—"]
    assert rows[1][1] == f4(float(ctx.summary.iloc[0, 0]))
    assert page.images == []
    md = render_markdown(bare, tmp_path / "report_files")
    assert "No comparison" in md and "broken\\<model\\> (failed)" in md
    told = dataclasses.replace(bare, notes=["no comparison: the baseline 'pop' failed"])
    assert "No comparison: the baseline 'pop' failed." in parse(render_html(told)).all_text()
    # the gate on, but no decision (the run's note says why): not "NO GATE"
    undecided = dataclasses.replace(bare, notes=["no gate decision: every candidate failed"])
    text = parse(render_html(undecided)).all_text()
    assert "NO DECISION" in text and "NO GATE" not in text and "No launch gate" not in text
    assert "The launch gate took no decision: every candidate failed." in text
    md = render_markdown(undecided, tmp_path / "report_files")
    assert "Overall decision: **NO DECISION**" in md and "NO GATE" not in md
    paths = write_report(bare, tmp_path / "bare")
    assert paths["html"].is_file() and not list((tmp_path / "bare" / "report_files").glob("*"))


def test_run_level_only_and_oriented_colours(real: dict[str, Any]) -> None:
    """A pair with a whole-run row, a lower-is-better row whose CI is above 0 (worse) and no
    per-user differences; a second pair with an empty table; a gate that checked nothing."""
    nan = float("nan")
    rows = [
        {
            "segment": "all",
            "metric": "coverage@10",
            "kind": "run-level",
            "higher_is_better": True,
            "mean_a": 0.2,
            "mean_b": 0.3,
            "diff": 0.1,
            "lift": 0.5,
            "n": nan,
        },
        {
            "segment": "all",
            "metric": "gini@10",
            "kind": "per-user",
            "higher_is_better": False,
            "n": 50,
            "mean_a": 0.5,
            "mean_b": 0.52,
            "diff": 0.02,
            "diff_ci_low": 0.01,
            "diff_ci_high": 0.03,
            "lift": 0.04,
            "lift_ci_low": 0.02,
            "lift_ci_high": 0.06,
            "p_randomization": 0.0004,
            "p_adjusted": 0.0008,
            "effect_size": 0.6,
            "mde": 0.01,
            "mde_rel": 0.02,
            "gsb_good": 10,
            "gsb_same": 5,
            "gsb_bad": 35,
            "gsb_delta": -0.5,
            "gsb_ci_low": -0.7,
            "gsb_ci_high": -0.3,
            "confidence": 0.9,
        },
    ]
    pair = PairComparison(
        "base",
        "cand",
        pd.DataFrame(rows),
        "ndcg@10",
        {},
        ["GSB metric 'ndcg@10' is not in the compared metrics"],
    )
    empty = PairComparison("base", "other", pd.DataFrame(), "ndcg@10")
    decision = decide(pair, GateSpec(primary={"metric": "ndcg@10"}))
    assert decision.decision == "INCONCLUSIVE"
    ctx = dataclasses.replace(
        real["ctx"], pairs=[pair, empty], decisions={"cand": decision}, overall=None
    )
    page = parse(render_html(ctx))
    text = page.all_text()
    assert "Overall decision INCONCLUSIVE" in text  # derived from the decisions
    assert "inconclusive" in text and "ndcg@10 was not compared" in text  # never skipped
    table = page.table(**{"class": "pair", "data-candidate": "cand", "data-segment": "all"})
    header = table["rows"][0]
    assert "Δ [90% CI]" in header
    cov, gini = table["rows"][1], table["rows"][2]
    assert cov[header.index("Δ [90% CI]")] == "+0.1000"
    assert cov[header.index("Relative lift [90% CI]")] == "+50.00%"
    assert gini[header.index("p (randomization)")] == "<0.001"
    gini_cls = table["classes"][2]
    assert "worse" in gini_cls[header.index("Δ [90% CI]")]  # lower is better, Δ > 0
    assert "worse" in gini_cls[header.index("ΔGSB [90% CI]")]
    assert "No metric could be compared for this pair." in text
    # only the lift plot of "cand": no per-user differences, no row for the GSB metric
    assert len(page.images) == 1 and "No pair has GSB counts." in text


def test_chromium_renders_the_report(real: dict[str, Any], tmp_path: Path) -> None:
    if not CHROMIUM.exists() and shutil.which("chromium") is None:
        reason = "chromium is not installed (/usr/bin/chromium; apt-get install -y chromium)"
        if os.environ.get("CI", "").lower() == "true":  # CI must not pass by skipping it
            pytest.fail(f"the browser test cannot run under CI=true: {reason}")
        pytest.skip(reason)
    exe = str(CHROMIUM) if CHROMIUM.exists() else str(shutil.which("chromium"))
    paths = write_report(real["ctx"], tmp_path / "run")
    shot = tmp_path / "shot.png"
    subprocess.run(
        [
            exe,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={shot}",
            "--window-size=1280,2000",
            paths["html"].resolve().as_uri(),
        ],
        check=False,
        capture_output=True,
        timeout=120,
    )
    assert shot.is_file(), "chromium wrote no screenshot"
    data = shot.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 20_000
    import matplotlib.image as mpimg

    pixels = mpimg.imread(shot)
    assert pixels.shape[:2] == (2000, 1280)
    assert float(pixels[..., :3].std()) > 0.05  # not a blank page


# ------------------------------------------------------------------------------ a real run


QUICK = {"n_users": 300, "n_items": 200, "n_events": 6000, "seed": 0}  # experiment=quick


def visible_text(html_text: str) -> str:
    """The text a reader sees: no <style>, <title> or attributes."""

    class Text(HTMLParser):
        def __init__(self) -> None:
            super().__init__(convert_charrefs=True)
            self.skip = 0
            self.parts: list[str] = []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag in ("style", "title", "script"):
                self.skip += 1

        def handle_endtag(self, tag: str) -> None:
            if tag in ("style", "title", "script"):
                self.skip -= 1

        def handle_data(self, data: str) -> None:
            if not self.skip:
                self.parts.append(data)

    parser = Text()
    parser.feed(html_text)
    return " ".join(" ".join(parser.parts).split())


def markdown_text(md: str) -> str:
    """What a Markdown viewer shows: no link targets, anchors or tags, escapes resolved."""
    import html as html_lib

    md = re.sub(r"\]\([^)]*\)", "]", md)  # link and image targets
    md = re.sub(r"</?(a|details|summary)\b[^>]*>", " ", md)
    md = re.sub(r"(?<!\\)\*\*", "", md)  # bold
    md = re.sub(r"(?<![\\\w])_|(?<![\\\s])_(?!\w)", "", md)  # italics
    md = re.sub(r"\\(.)", r"\1", md)
    return " ".join(html_lib.unescape(md).split())


NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?%?")


def iso_date(seconds: int) -> str:
    return pd.Timestamp(int(seconds), unit="s", tz="UTC").strftime("%Y-%m-%d")


@pytest.fixture(scope="module")
def quick(quick_run: QuickRun) -> dict[str, Any]:
    """What the shared ``python -m harness experiment=quick`` run printed and wrote."""
    import json

    proc = quick_run.proc
    assert proc.returncode == 0, proc.stderr[-2000:]
    html_path = quick_run.cwd / re.findall(r"^report:\s+(\S+)$", proc.stdout, re.MULTILINE)[-1]
    folder = html_path.parent
    assert folder == quick_run.folder
    return {
        "stdout": proc.stdout,
        "folder": folder,
        "html": html_path.read_text(encoding="utf-8"),
        "md": (folder / "report.md").read_text(encoding="utf-8"),
        "stats": json.loads((folder / "split_stats.json").read_text()),
        "summary": pd.read_csv(folder / "summary.csv", index_col=0),
    }


def expected_opening(run: dict[str, Any]) -> dict[str, str]:
    """The facts of the quick run, computed here from the regenerated data with pandas."""
    frame = synthetic.generate(**QUICK)
    cut = int(run["stats"]["cut"])  # the cut is the split's input; everything else is derived
    ts = frame["timestamp"]
    train, test = frame[ts < cut], frame[ts >= cut]
    seen = test["user"].isin(train["user"]) & test["item"].isin(train["item"])
    kept = test[seen]
    users_before, users_after = test["user"].nunique(), kept["user"].nunique()
    dropped_users, dropped_events = users_before - users_after, int((~seen).sum())
    assert dropped_users > 0  # the quick run does drop unseen users: the line must say so
    return {
        "dataset": (
            f"{len(frame):,} events, {frame['user'].nunique():,} users, "
            f"{frame['item'].nunique():,} items"
        ),
        "source": "n_users=300, n_items=200, n_events=6000, seed=0",
        "train": f"train {iso_date(train['timestamp'].min())} → "
        f"{iso_date(train['timestamp'].max())} ({len(train):,} events",
        "test": f"test {iso_date(kept['timestamp'].min())} → "
        f"{iso_date(kept['timestamp'].max())} ({len(kept):,} events, "
        f"{users_after:,} users)",
        "cut": pd.Timestamp(cut, unit="s", tz="UTC").strftime("%Y-%m-%d %H:%M:%S UTC"),
        "users": f"{dropped_users} of {users_before} test users "
        f"({dropped_users / users_before:.1%})",
        "events": f"{dropped_events:,} of {len(test):,} test events "
        f"({dropped_events / len(test):.1%})",
    }


def test_real_run_opens_with_dataset_split_dropped_users_and_verdict(
    quick: dict[str, Any],
) -> None:
    want = expected_opening(quick)
    summary = quick["summary"]
    best = str(summary["ndcg@10"].idxmax())  # the gate's primary metric in the default gate
    # each gated candidate's decision, as the terminal printed it
    decisions = dict(re.findall(r"^(\S+) vs \S+.*\n  gate: (\w+)", quick["stdout"], re.MULTILINE))
    assert decisions
    md_head = markdown_text("\n".join(quick["md"].splitlines()[:16]))
    html_text = visible_text(quick["html"])
    html_head = html_text[: html_text.index("Decision Summary")]  # up to the contents links
    for head in (md_head, html_head):
        assert f"Dataset: synthetic: {want['dataset']}" in head
        assert want["source"] in head and "{" not in head  # readable, not a Python dict
        assert f"Split: global_time at {want['cut']}" in head
        assert want["train"] in head and want["test"] in head
        assert f"Dropped (unseen in training): {want['users']} and {want['events']}" in head
        assert f"Verdict: {best} is best on ndcg@10" in head
        for candidate, decision in decisions.items():
            assert f"{decision} {candidate} vs popularity (" in head.replace(":", "")
    # the sanity baseline's pair is shown and marked as not gated, in both formats
    assert "random" not in decisions
    assert "random vs popularity (baseline) not gated" in html_text
    assert "random vs popularity (baseline) ⚪ not gated" in markdown_text(quick["md"])
    # no epoch seconds anywhere: every time is a date
    for key in ("cut", "train_time_min", "test_time_max"):
        seconds = int(quick["stats"][key])
        for text in (quick["md"], quick["html"]):
            assert str(seconds) not in text and f"{seconds:,}" not in text


def test_real_run_html_and_markdown_say_the_same_numbers(quick: dict[str, Any]) -> None:
    html_numbers = Counter(NUMBER.findall(visible_text(quick["html"])))
    md_numbers = Counter(NUMBER.findall(markdown_text(quick["md"])))
    assert sum(html_numbers.values()) > 500  # the tables are there
    assert html_numbers == md_numbers
    # and the Markdown's plots are the HTML's plots
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", quick["md"])
    embedded = re.findall(r'src="data:image/png;base64,([^"]+)"', quick["html"])
    assert len(links) == len(embedded) >= 3
    on_disk = {(quick["folder"] / link).read_bytes() for link in links}
    assert on_disk == {base64.b64decode(data) for data in embedded}


def test_real_run_markdown_renders_to_the_same_tables_and_numbers(
    quick: dict[str, Any],
) -> None:
    """Through a real CommonMark + tables renderer (markdown-it-py, installed with ranx)."""
    import html as html_lib

    markdown_it = pytest.importorskip("markdown_it")
    rendered = (
        markdown_it.MarkdownIt("commonmark", {"html": True}).enable("table").render(quick["md"])
    )
    page = parse_fragment(rendered)
    report = parse(quick["html"])
    assert len(page.tables) == len(report.tables) >= 10
    for got, want in zip(page.tables, report.tables, strict=True):
        # every cell, in order; Markdown has no colour, so ▲/▼ stand for better/worse
        for got_row, want_row, classes in zip(
            got["rows"], want["rows"], want["classes"], strict=True
        ):
            arrows = [
                " ▲" if "better" in c else " ▼" if "worse" in c.split() else "" for c in classes
            ]
            assert got_row == [w + a for w, a in zip(want_row, arrows, strict=True)]
    alts = [html_lib.unescape(a) for a in re.findall(r'<img [^>]*alt="([^"]*)"', rendered)]
    assert len(alts) == len(report.images)
    text = visible_text(rendered) + " " + " ".join(alts)  # the HTML shows alt as a caption
    assert Counter(NUMBER.findall(text)) == Counter(NUMBER.findall(visible_text(quick["html"])))


def test_real_run_html_is_self_contained(quick: dict[str, Any]) -> None:
    html_text = quick["html"]
    parse(html_text)
    assert "<script" not in html_text and "<link" not in html_text and "<iframe" not in html_text
    assert "@import" not in html_text and "url(" not in html_text
    targets = re.findall(r"\b(?:src|href|action|srcset|poster)\s*=\s*\"([^\"]*)\"", html_text)
    assert targets and all(t.startswith(("data:image/png;base64,", "#")) for t in targets)
    ids = set(re.findall(r'\bid="([^"]+)"', html_text))
    assert {t[1:] for t in targets if t.startswith("#")} <= ids  # every contents link lands
    # readable in MLflow's artifact iframe: scales to the frame, bounded width, wide tables scroll
    assert '<meta name="viewport" content="width=device-width' in html_text
    width = int(re.search(r"main \{ max-width: (\d+)px", html_text).group(1))  # type: ignore[union-attr]
    assert 800 <= width <= 1200
    assert '<div class="scroll"><table class="pair"' in html_text


def test_verdict_and_opening_lines_from_hand_made_stats(real: dict[str, Any]) -> None:
    """A lower-is-better headline metric, unseen users kept (not dropped), a validation part."""
    ctx: ReportContext = real["ctx"]
    summary = pd.DataFrame(
        {"gini@10": [0.40, 0.30, np.nan], "ndcg@10": [0.2, 0.1, np.nan]},
        index=["popularity", "itemknn", "broken"],
    )
    stats = {
        "unseen_policy": "keep",
        "cut": 86_400,
        "n_train_events": 10,
        "n_train_users": 3,
        "train_time_min": 0,
        "train_time_max": 86_399,
        "n_valid_events": 4,
        "n_valid_users": 2,
        "valid_time_min": 43_200,
        "valid_time_max": 86_000,
        "n_test_events": 8,
        "n_test_users": 4,
        "test_time_min": 86_400,
        "test_time_max": 3 * 86_400,
        "test_unseen_users": 1,
        "test_unseen_events": 2,
        "valid_unseen_users": 0,
        "valid_unseen_events": 0,
        "train_filtered_events": 3,
        "train_filtered_users": 1,
        "train_filtered_items": 0,
        "n_test_pairs": 7,
        "test_pairs_in_train": 2,
    }
    hand = dataclasses.replace(
        ctx, summary=summary, split_stats=stats, primary_metric="gini@10", split="global_time"
    )
    v = hand.verdict()
    assert (v.metric, v.best, v.value) == ("gini@10", ["itemknn"], 0.30)  # lower is better
    assert v.failed == ["broken"] and [d for _, d in v.decisions] == [real["decision"].decision]
    md = render_markdown(hand, None)
    head = markdown_text("\n".join(md.splitlines()[:16]))
    assert "Verdict: itemknn is best on gini@10 (0.3000); itemknn " in head
    assert v.sentence() == "itemknn is best on gini@10 (0.3000)"  # no gini row in the pair
    # the report's own sentence: a tie, the baseline best, a lift with its CI
    tied = dataclasses.replace(hand, summary=summary.assign(**{"gini@10": [0.3, 0.3, np.nan]}))
    assert tied.verdict().sentence() == "popularity and itemknn tie as best on gini@10 (0.3000)"
    base = dataclasses.replace(hand, primary_metric="ndcg@10").verdict()
    assert base.sentence() == (
        "popularity, the baseline, is best on ndcg@10 (0.2000): no candidate beats it"
    )
    row = real["pair"].row("ndcg@10")
    lift = real["ctx"].verdict()
    assert lift.best == [str(real["ctx"].summary["ndcg@10"].idxmax())] == ["itemknn"]
    assert lift.sentence() == (
        f"itemknn is best on ndcg@10 ({row['mean_b']:.4f}; {row['lift']:+.2%} "
        f"[{row['lift_ci_low']:+.2%}, {row['lift_ci_high']:+.2%}] vs popularity)"
    )
    assert "Failed: broken." in head
    assert (
        "Split: global_time at 1970-01-02 00:00:00 UTC: train 1970-01-01 → 1970-01-01 "
        "(10 events, 3 users); validation 1970-01-01 → 1970-01-01 (4 events, 2 users); "
        "test 1970-01-02 → 1970-01-04 (8 events, 4 users)"
    ) in head
    assert (
        "Unseen in training, kept: 1 of 4 test users (25.0%) and 2 of 8 test events (25.0%); "
        "0 of 2 validation users (0.0%) and 0 of 4 validation events (0.0%)"
    ) in head
    assert "Filtered: 3 events, 1 users, 0 items removed from training" in head
    assert (
        "Already in training: 2 of 7 test (user, item) pairs (28.6%) were already in the "
        "user's training history: models that exclude seen items (the default) can never hit them"
    ) in head


def test_unseen_line_says_none_when_nothing_is_unseen() -> None:
    from harness.report.view import unseen_line

    stats = {
        "unseen_policy": "drop",
        "n_test_users": 5,
        "n_test_events": 9,
        "test_dropped_users": 0,
        "test_dropped_events": 0,
        "n_valid_events": 0,
    }
    assert unseen_line(stats) == (
        "Dropped (unseen in training)",
        "none: every test user and item is in training (split.unseen=drop)",
    )
    dropped = {**stats, "test_dropped_users": 1, "test_dropped_events": 3}
    assert unseen_line(dropped) == (  # shares of the test part before dropping: 1/6, 3/12
        "Dropped (unseen in training)",
        "1 of 6 test users (16.7%) and 3 of 12 test events (25.0%): user or item not in "
        "training (split.unseen=drop)",
    )
    assert unseen_line({"n_test_users": 5}) is None  # no policy recorded: nothing to say
    from harness.report.view import seen_pairs_line

    assert seen_pairs_line({"n_test_pairs": 9, "test_pairs_in_train": 0}) is None
    assert seen_pairs_line({}) is None  # a split cached before the count: nothing to say


def test_a_p_value_is_never_printed_across_0_05() -> None:
    """Found by an audit: 50/1001 = 0.04995 (a randomization p with 1000 resamples) printed as
    "0.050"."""
    from harness.report.format import fmt_p

    assert [fmt_p(p) for p in (50 / 1001, 0.0496, 0.05, 0.0504, 0.123, 0.0004)] == [
        "0.04995",
        "0.04960",
        "0.050",
        "0.050",
        "0.123",
        "<0.001",
    ]


def test_a_lower_is_better_lift_is_marked_where_it_is_printed() -> None:
    """Found by an audit: a GO beside "popularity@10 lift -19.88%" with no word that a fall is
    the gain (the gate's own lines read it oriented, +19.88%)."""
    from harness.cli import format_verdicts
    from harness.compare import CompareSpec, compare_pair
    from harness.compare.__main__ import comparison_table
    from harness.gate import GateSpec, decide
    from harness.report.view import _decision_line

    idx = pd.Index(range(40), name="user")
    a = pd.DataFrame({"popularity@10": np.linspace(1, 9, 40)}, index=idx)
    b = a * 0.8
    spec = CompareSpec(n_resamples=50, gsb_metric="popularity@10")
    pair = compare_pair("base", "cand", (a, b), ["popularity@10"], spec)
    assert pair.row("popularity@10")["lift"] == pytest.approx(-0.2)
    decision = decide(pair, GateSpec(primary={"metric": "popularity@10", "min_lift": 0.0}))
    assert decision.decision == "GO"
    _, line = _decision_line("cand", decision, [pair])
    assert line.endswith("popularity@10 lift -20.00% [-20.00%, -20.00%] (lower is better)")
    head = format_verdicts([pair], {"cand": decision}, "GO").splitlines()[0]
    assert head.endswith("lift -20.00% [-20.00%, -20.00%] (lower is better)")
    assert comparison_table(pair).splitlines()[-1] == "(lower is better: popularity@10)"
