"""The Jinja2 environment of report.html's templates (report/templates): autoescape on, so a
value is escaped by the template engine, never by hand, and an unknown name is an error."""

from __future__ import annotations

from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined

ENV = Environment(loader=PackageLoader("rackscale.report", "templates"), autoescape=True,
                  undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def macro(template: str, name: str, *args: Any) -> str:
    """One macro of a template called with `args` (HTML passed in must be wrapped in Markup),
    as a plain str: the pages still join such pieces with + and f-strings, and a Markup
    would escape what it is joined with."""
    return str(getattr(ENV.get_template(template).module, name)(*args))
