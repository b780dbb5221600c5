"""The HTML pieces every section of report.html is made of: one way to write a table."""

from __future__ import annotations

from collections.abc import Iterable

from markupsafe import Markup

from rackscale.report.templates import macro


def table(table_id: str, heads: Iterable[str], rows: str, *, caption: str = "") -> str:
    """A table with column headers (`heads`, plain text; screen readers get them as column
    headers) over `rows` (the body's <tr>s, already HTML); `caption` is plain text."""
    return macro("html.html", "table", table_id, list(heads), Markup(rows), caption)
