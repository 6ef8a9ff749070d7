"""Render a :class:`ReportContext` through the Jinja2 templates and write the report files.

``report.html`` is self-contained (inline CSS, plots as base64 PNG, no script or external URL:
MLflow shows it in an iframe); ``report.md`` says the same and links the plots as PNG files in
``report_files/``. Every piece of text is escaped: HTML by Jinja's autoescape, Markdown by the
``md`` filter.
"""

from __future__ import annotations

import base64
import functools
import html
import re
from collections.abc import Mapping
from pathlib import Path

import jinja2
import pandas as pd
from markupsafe import Markup

from harness.gate import DECISIONS
from harness.report.context import ReportContext
from harness.report.view import Cell, ReportView, build

__all__ = ["IMAGE_FOLDER", "render_html", "render_markdown", "write_report"]

IMAGE_FOLDER = "report_files"
_ICONS = {"GO": "🟢", "NO_GO": "🔴", "INCONCLUSIVE": "🟡"}
_MD_SPECIAL = re.compile(r"([\\`*|<>])|(?<!\w)_|_(?!\w)")


def md_escape(text: object) -> str:
    """Text safe inside Markdown (and table cells): special characters backslash-escaped."""
    out = _MD_SPECIAL.sub(lambda m: "\\" + m.group(0), str(text))
    return out.replace("\r", " ").replace("\n", " ")


def _md_cell(c: Cell) -> str:
    """A table cell in Markdown: bold for tones, an arrow for better/worse."""
    text = md_escape(c.text)
    if c.tone == "better":
        return f"**{text}** ▲"
    if c.tone == "worse":
        return f"**{text}** ▼"
    if c.tone in ("best", "pass", "fail", "inconclusive"):
        return f"**{text}**"
    return text


def _html_cell(text: str) -> Markup:
    """Cell text; ``estimate [low, high]`` may wrap before the interval, never inside it."""
    estimate, sep, interval = str(text).partition(" [")
    if not sep or not interval.endswith("]"):
        return Markup.escape(text)
    return Markup('<span class="nw">{}</span> <span class="nw">[{}</span>').format(
        estimate, interval
    )


def _fence(text: str, lang: str = "") -> str:
    """A fenced code block longer than any backtick run inside ``text``."""
    runs = [len(m) for m in re.findall(r"`+", text)]
    fence = "`" * max(3, max(runs, default=0) + 1)
    return f"{fence}{lang}\n{text.rstrip()}\n{fence}"


@functools.cache
def _environment(kind: str) -> jinja2.Environment:
    """The Jinja2 environment of the ``html`` or ``md`` template (templates in the package)."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("harness.report", "templates"),
        autoescape=kind == "html",
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    env.globals["decisions_known"] = DECISIONS
    env.filters.update(
        b64=lambda data: base64.b64encode(data).decode("ascii"),
        cell=_html_cell,
        md=md_escape,
        mdcell=_md_cell,
        h=lambda text: html.escape(str(text), quote=True),
        icon=lambda decision: _ICONS.get(decision or "", "⚪"),
        fence=_fence,
    )
    return env


def _tidy_markdown(text: str) -> str:
    """At most one blank line in a row and no trailing spaces, outside fenced code."""
    out: list[str] = []
    fence: str | None = None
    for line in text.splitlines():
        opening = re.match(r"^(`{3,})", line)
        if fence is None:
            if opening:
                fence = opening.group(1)
            line = line.rstrip()
            if line == "" and (not out or out[-1] == ""):
                continue
        elif line.rstrip() == fence:
            fence = None
        out.append(line)
    while out and out[-1] == "":
        out.pop()
    return "\n".join(out) + "\n"


def _html(view: ReportView) -> str:
    return _environment("html").get_template("report.html.j2").render(v=view)


def _markdown(view: ReportView, prefix: str | None) -> str:
    text = _environment("md").get_template("report.md.j2").render(v=view, prefix=prefix)
    return _tidy_markdown(text)


def render_html(ctx: ReportContext) -> str:
    """The report as one self-contained HTML page (inline CSS, plots as base64 PNG)."""
    return _html(build(ctx))


def _write_images(images: Mapping[str, bytes], image_dir: Path) -> dict[str, Path]:
    image_dir.mkdir(parents=True, exist_ok=True)
    for stale in image_dir.glob("*.png"):  # plots of an earlier report in the same folder
        if stale.name not in images:
            stale.unlink()
    paths = {}
    for name, data in images.items():
        path = image_dir / name
        path.write_bytes(data)
        paths[name] = path
    return paths


def render_markdown(ctx: ReportContext, image_dir: Path | None = None) -> str:
    """The report as Markdown (GitHub tables); plots are written as PNG files into
    ``image_dir`` and linked relative to its parent (where the Markdown file is expected)."""
    view = build(ctx)
    if image_dir is None:
        return _markdown(view, None)
    _write_images(view.images, Path(image_dir))
    return _markdown(view, f"{Path(image_dir).name}/")


def write_report(ctx: ReportContext, folder: Path) -> dict[str, Path]:
    """Write ``report.html``, ``report.md``, ``report_files/*.png`` and, when models were
    compared, ``comparison.csv`` (every pair's table, one row per segment × metric) into
    ``folder``.

    Returns ``{"html": …, "markdown": …, "md": <the same>, "images": <report_files>}`` plus
    ``"comparison"`` when written and one ``"image:<file name>"`` entry per plot.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    view = build(ctx)
    image_dir = folder / IMAGE_FOLDER
    written = _write_images(view.images, image_dir)
    html_path, md_path = folder / "report.html", folder / "report.md"
    html_path.write_text(_html(view), encoding="utf-8")
    md_path.write_text(_markdown(view, f"{IMAGE_FOLDER}/"), encoding="utf-8")
    out: dict[str, Path] = {
        "html": html_path,
        "markdown": md_path,
        "md": md_path,
        "images": image_dir,
    }
    if ctx.pairs:
        tables = [p.table.assign(baseline=p.baseline, candidate=p.candidate) for p in ctx.pairs]
        out["comparison"] = folder / "comparison.csv"
        pd.concat(tables, ignore_index=True).to_csv(out["comparison"], index=False)
    out.update({f"image:{name}": path for name, path in written.items()})
    return out
