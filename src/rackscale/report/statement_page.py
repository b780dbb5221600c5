"""The statement block of report.html: the evidence bundle's hash, whether the bundle is
signed and verified, the ETTR each soak measured under a sustained workload, and (with a
GPU-hour price) what each lost step costs per month.

The markup is templates/statement.html (autoescape on); this module only picks the data."""

from __future__ import annotations

from typing import Any

from rackscale.report.soak import statement_rows
from rackscale.report.templates import macro


def _status(status: dict[str, Any] | None) -> dict[str, Any] | None:
    """The signature status as the template shows it; None when the bundle is not signed."""
    if not status or not status.get("key_id"):
        return None
    return {"key_id": str(status["key_id"]), "verified": status.get("verified"),
            "when": str(status.get("checked_at", ""))[:19],
            "detail": str(status.get("detail", ""))}


def _cost(cost: dict[str, Any] | None) -> dict[str, Any] | None:
    if not cost:
        return None
    # Numbers are formatted here, as the page always wrote them (thousands separators,
    # whole currency units per month).
    return {"price": f'{cost["gpu_hour_price"]:g}', "hours": f'{cost["hours_per_month"]:g}',
            "total": f'{cost["total_per_month"]:,.0f}',
            "steps": [{"step": r["step"], "lost_gpus": f'{r["lost_gpus"]:,}',
                       "per_month": f'{r["per_month"]:,.0f}', "basis": r["basis"]}
                      for r in cost["steps"]]}


def statement_html(doc: dict[str, Any], status: dict[str, Any] | None) -> str:
    ev = doc.get("evidence") or {}
    bundle = ({"root": str(ev["root"]), "files": ev.get("files"), "dir": str(ev.get("dir"))}
              if ev.get("root") else None)
    return macro("statement.html", "statement", bundle, _status(status),
                 _cost(doc.get("cost")), statement_rows(doc.get("soak")))
