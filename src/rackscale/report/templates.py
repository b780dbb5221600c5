"""The Jinja2 environment of report.html's templates (report/templates): autoescape on, so a
value is escaped by the template engine, never by hand, and an unknown name is an error."""

from __future__ import annotations

import html
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from rackscale.inputs import shown


def _as_html(value: Any) -> Any:
    """Every {{ value }} passes here before autoescape: a value that is not HTML yet is escaped
    to the entities report.html has always carried (html.escape's &quot; and &#x27;, where
    markupsafe writes &#34; and &#39;), so a section moved onto a template leaves report.html
    byte-identical to the f-string page it replaces. HTML (Markup, a macro's output) passes
    as it is; an undefined name still fails (StrictUndefined). Filters that escape by
    themselves (join, ~) would write markupsafe's entities: the pages join text in Python.
    Bidi and zero-width characters are written as their escapes (`\\u202e`): an entity would
    still reorder the page's text."""
    return value if hasattr(value, "__html__") else Markup(html.escape(shown(str(value))))


ENV = Environment(loader=PackageLoader("rackscale.report", "templates"), autoescape=True,
                  undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                  finalize=_as_html)


def macro(template: str, name: str, *args: Any) -> str:
    """One macro of a template called with `args` (HTML passed in must be wrapped in Markup),
    as a plain str: the pages still join such pieces with + and f-strings, and a Markup
    would escape what it is joined with."""
    return str(getattr(ENV.get_template(template).module, name)(*args))
