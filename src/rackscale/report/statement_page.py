"""The statement block of report.html: the evidence bundle's hash, whether the bundle is
signed and verified, and (with a GPU-hour price) what each lost step costs per month."""

from __future__ import annotations

from html import escape
from typing import Any


def _status(status: dict[str, Any] | None) -> str:
    if not status or not status.get("key_id"):
        return ('<span class="notrun">not signed</span>: sign with <code>rackscale report sign '
                'DIR --key FILE</code>, check with <code>rackscale report verify DIR --pubkey '
                'FILE.pub</code>')
    key = f'signed by <code>{escape(str(status["key_id"]))}</code>'
    verified = status.get("verified")
    if verified is None:
        return f"{key}; not verified yet (<code>rackscale report verify</code>)"
    when = escape(str(status.get("checked_at", ""))[:19])
    if verified:
        return (f'{key}; <b style="color:#2f9e44">verified</b> {when} UTC: signature, every '
                "evidence hash and every ledger figure recomputed from the evidence")
    return (f'{key}; <b style="color:#c92a2a">verification FAILED</b> {when} UTC: '
            f'{escape(str(status.get("detail", "")))}')


def _cost(cost: dict[str, Any] | None) -> str:
    if not cost:
        return ""
    rows = "".join(
        f'<tr><td>{escape(r["step"])}</td><td class="num">{r["lost_gpus"]:,}</td>'
        f'<td class="num">{r["per_month"]:,.0f}</td><td>{escape(r["basis"])}</td></tr>'
        for r in cost["steps"])
    return (f'<h3>cost of each lost step (at {cost["gpu_hour_price"]:g} per GPU-hour, '
            f'{cost["hours_per_month"]:g} h a month)</h3><table id="cost"><thead><tr><th>step'
            '</th><th>GPUs lost</th><th>per month</th><th>basis</th></tr></thead><tbody>'
            f'{rows}<tr><td><b>total</b></td><td></td><td class="num"><b>'
            f'{cost["total_per_month"]:,.0f}</b></td><td></td></tr></tbody></table>')


def statement_html(doc: dict[str, Any], status: dict[str, Any] | None) -> str:
    ev = doc.get("evidence") or {}
    root = ev.get("root")
    bundle = (f'evidence bundle <code id="bundle-root">{escape(str(root))}</code> '
              f'({ev.get("files")} files in {escape(str(ev.get("dir")))}/)' if root else
              '<span class="notrun">no evidence bundle</span>')
    return (f'<section id="statement"><h2>Verifiable statement</h2><div class="card"><p>'
            f'{bundle}<br><span id="verification">{_status(status)}</span></p></div>'
            f'{_cost(doc.get("cost"))}</section>')
