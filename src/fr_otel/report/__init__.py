"""The incident report: the analyzer's verdict and the cross-rank grid as one HTML page.

``build_report(path)`` returns an ``IncidentReport`` (the ``Analysis`` and the ``Grid``
relation); ``render_html`` turns it into a self-contained page.
"""

from fr_otel.report.build import IncidentReport, build_report
from fr_otel.report.grid import DEFAULT_COLUMNS, Grid, build_grid
from fr_otel.report.html import render_html

__all__ = [
    "DEFAULT_COLUMNS",
    "Grid",
    "IncidentReport",
    "build_grid",
    "build_report",
    "render_html",
]
