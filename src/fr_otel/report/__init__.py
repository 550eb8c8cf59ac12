"""The incident report: the analyzer's verdict and the cross-rank grid as one HTML page.

``build.build_report(path)`` returns an ``IncidentReport`` (the ``Analysis`` and the
``grid.Grid`` relation); ``html.render_html`` turns it into a self-contained page.

Nothing is imported here: the CLI loads ``defaults`` and ``words`` to start, and the
DuckDB analysis behind ``build`` and ``grid`` only when a report is asked for.
"""
