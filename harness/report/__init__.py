"""The run report: one self-contained HTML file and the same content as Markdown.

One job per module: :mod:`~harness.report.context` (what the report shows, built from a run),
:mod:`~harness.report.format` (number, percent and date formats), :mod:`~harness.report.plots`
(matplotlib PNGs), :mod:`~harness.report.view` (the context formatted for the templates),
``templates/`` (Jinja2: ``report.html.j2``, ``report.md.j2``) and :mod:`~harness.report.render`
(rendering and writing the files).
"""

from harness.report.context import DatasetInfo, ReportContext, Verdict
from harness.report.format import fmt_ci, fmt_lift, fmt_p, fmt_value
from harness.report.render import IMAGE_FOLDER, render_html, render_markdown, write_report
from harness.report.view import SAMPLED_CANDIDATES_WARNING

__all__ = [
    "IMAGE_FOLDER",
    "SAMPLED_CANDIDATES_WARNING",
    "DatasetInfo",
    "ReportContext",
    "Verdict",
    "fmt_ci",
    "fmt_lift",
    "fmt_p",
    "fmt_value",
    "render_html",
    "render_markdown",
    "write_report",
]
