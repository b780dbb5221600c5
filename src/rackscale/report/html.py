"""The HTML pieces every section of report.html is made of: one way to write a table."""

from __future__ import annotations

from collections.abc import Iterable
from html import escape


def table(table_id: str, heads: Iterable[str], rows: str, *, caption: str = "") -> str:
    """A table with column headers (`heads`, plain text; screen readers get them as column
    headers) over `rows` (the body's <tr>s, already HTML); `caption` is plain text."""
    cap = f"<caption>{escape(caption)}</caption>" if caption else ""
    head = "".join(f'<th scope="col">{escape(h)}</th>' for h in heads)
    return (f'<table id="{escape(table_id)}">{cap}<thead><tr>{head}</tr></thead>'
            f'<tbody>{rows}</tbody></table>')
