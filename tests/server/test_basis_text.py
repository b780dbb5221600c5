"""The words for a figure's basis are one table (rackscale.provenance.BASIS_TEXT): the
dashboard, the HTML report and `rackscale report show` say the same for every ledger step."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient
from typer.testing import CliRunner

from rackscale.cli import app
from rackscale.provenance import BASIS_TEXT, basis_text
from rackscale.report import render_html, report_document
from rackscale.server import ServerConfig, create_app
from rackscale.store import Store

from .conftest import copy_db


def test_the_dashboard_and_the_report_show_the_same_basis_text(demo_db: Path,
                                                               tmp_path: Path) -> None:
    db = copy_db(demo_db, tmp_path / "b.db")
    store = Store(f"sqlite:///{db}", readonly=True)
    doc, ledger = report_document(store)
    bases = {str(s.basis) for s in ledger.steps}
    assert "not_run" in bases  # the demo store has no simulation: the text that once differed
    dashboard = TestClient(create_app(ServerConfig(db=store.url), store)).get("/").text
    report = render_html(doc)
    shown = CliRunner().invoke(app, ["report", "show", "--db", store.url])
    assert shown.exit_code == 0, shown.output
    for b in bases:
        text = basis_text(b)
        assert text == BASIS_TEXT[b]
        assert f">{text}</span>" in dashboard, b
        assert f">{text}</span>" in report, b
        assert text in shown.output, b
    assert "NOT RUN" not in dashboard + report + shown.output
