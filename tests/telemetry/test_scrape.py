"""`rackscale telemetry scrape` on dcgm-exporter pages served by a real HTTP server: what fails a
GPU and what does not, hosts and GPUs the fleet lacks named and skipped, a repeated scrape
recording nothing, rises measured against the recorded counters, and the findings moving a
tray through the lifecycle as certification's do."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rackscale.fleet import FleetSpec, RackGroup, RegionSpec, Topology
from rackscale.lifecycle import apply_findings, enroll, promote_passing, state_of, transition
from rackscale.state import FleetState
from rackscale.store import Kind, Store, load_topology
from rackscale.telemetry import TelemetryError, parse_page, scrape
from tests.telemetry.conftest import Exporter
from tests.telemetry.pages import page

DATA = Path(__file__).parent / "data"
XID, DBE = "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
CRC = "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"
THERMAL, REMAP = "DCGM_FI_DEV_THERMAL_VIOLATION", "DCGM_FI_DEV_ROW_REMAP_FAILURE"
# Two racks of two trays of two GPUs (the lab's shape): east/r01/c01/gpu0 ... east/r02/c02/gpu1.
SPEC = FleetSpec(name="tele", regions=[
    RegionSpec(name="east", racks=[RackGroup(template="lab-mini", count=2)])])


def _first(rise: float = 0.0, crc: float = 5.0) -> dict[str, dict[int, dict[str, float]]]:
    """Rack r01: an Xid 79 (hardware), an Xid 13 (application), an ECC double-bit error; rack
    r02: a row-remap failure. Plus a host and a GPU the fleet does not have."""
    return {
        "east-r01-c01": {0: {THERMAL: 100 + rise, CRC: crc}, 1: {XID: 79, THERMAL: 100 + rise}},
        "east-r01-c02": {0: {XID: 13, THERMAL: 50 + rise}, 1: {DBE: 2, THERMAL: 50 + rise}},
        "east-r02-c01": {0: {REMAP: 1}, 1: {CRC: crc}},
        "east-r02-c02": {0: {}, 1: {}, 4: {}},
        "gpu-node-99": {0: {XID: 79}},
    }


def _store(tmp_path: Path) -> tuple[Store, Topology, str]:
    db = f"sqlite:///{tmp_path / 't.db'}"
    store = Store(db)
    topo = Topology.build(SPEC)
    load_topology(store, topo)
    return store, topo, db


def _cli(*args: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "rackscale", "telemetry", *args, "--json"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _kinds(rep: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {f["component"]: (f["kind"], f["verdict"]) for f in rep["findings"]}


def test_a_full_exporter_page_reads_every_gpu_and_label() -> None:
    p = parse_page((DATA / "gb200-host.prom").read_text(), "gb200-host.prom")
    assert [(g.host, g.gpu) for g in p.gpus] == [("us-east-r01-c07", k) for k in range(4)]
    g1 = p.gpus[1]
    assert g1.values[XID] == 79 and g1.labels["err_msg"] == "GPU has fallen off the bus"
    assert g1.labels["modelName"] == "NVIDIA GB200" and "UUID" in g1.labels
    assert p.gpus[2].values[DBE] == 3 and p.gpus[3].crc_total == 12
    assert "DCGM_FI_DEV_SM_CLOCK" not in g1.values  # fields rackscale does not act on


def test_a_malformed_page_names_the_line_and_what_to_do() -> None:
    text = page({"h": {0: {}}}).splitlines()
    assert text[2].endswith("} 1980")
    text[2] = text[2].replace("} 1980", "} fast")  # a sample whose value is no number
    with pytest.raises(TelemetryError, match=r"^host\.prom:3: .*not Prometheus text.*/metrics"):
        parse_page("\n".join(text) + "\n", "host.prom")
    with pytest.raises(TelemetryError, match="no dcgm-exporter field rackscale reads"):
        parse_page("# TYPE up gauge\nup 1\n", "other.prom")


def test_scrape_over_http_records_findings_once(exporter: Exporter, tmp_path: Path) -> None:
    store, _, db = _store(tmp_path)
    exporter.pages["/metrics"] = page(_first())
    url = f"{exporter.url}/metrics"
    rep = _cli("scrape", "--dcgm", url, "--db", db)
    assert _kinds(rep) == {
        "east/r01/c01/gpu1": ("gpu_dead", "fail"),  # Xid 79: fallen off the bus
        "east/r01/c02/gpu1": ("hbm_degraded", "fail"),  # ECC double-bit errors
        "east/r02/c01/gpu0": ("hbm_degraded", "fail"),  # row remapping failed
    }
    xid = next(f for f in rep["findings"] if f["kind"] == "gpu_dead")["evidence"]
    assert xid["xid"] == 79 and xid["err_code"] == "79" and xid["source"] == url
    assert [n["xid"] for n in rep["noted"]] == [13]  # application Xid: fails nothing
    skipped = {(s["host"], s["gpu"]) for s in rep["skipped"]}
    assert skipped == {("gpu-node-99", None), ("east-r02-c02", 4)}
    assert all(s["why"] for s in rep["skipped"])
    assert rep["counters_recorded"] == 4  # every tray's first counters: the baseline
    findings = store.count_events(Kind.CERTIFY_FINDING)

    again = _cli("scrape", "--dcgm", url, "--db", db)  # the same page again
    assert again["findings"] == [] and again["repeated"] == 3
    assert again["counters_recorded"] == 0
    assert store.count_events(Kind.CERTIFY_FINDING) == findings
    store.close()


def test_rises_since_the_recorded_counters(exporter: Exporter, tmp_path: Path) -> None:
    """Thermal throttling on every GPU of rack r01 is its cooling (one CDU finding, not four
    GPU ones); CRC errors that rose are a warning on each GPU whose count rose."""
    store, topo, db = _store(tmp_path)
    url = f"{exporter.url}/metrics"
    exporter.pages["/metrics"] = page(_first())
    _cli("scrape", "--dcgm", url, "--db", db)
    exporter.pages["/metrics"] = page(_first(rise=2_000_000, crc=40))
    rep = _cli("scrape", "--dcgm", url, "--db", db)
    got = _kinds(rep)
    assert got == {"east/r01/cdu": ("coolant_flow_low", "fail"),
                   "east/r01/c01/gpu0": ("nvlink_port_down", "warn"),
                   "east/r02/c01/gpu1": ("nvlink_port_down", "warn")}
    cdu = next(f for f in rep["findings"] if f["component"] == "east/r01/cdu")["evidence"]
    assert cdu["gpus_throttled"] == 4 and cdu["gpus_reporting"] == 4
    assert "cdu_response" not in cdu  # no coolant response under way: the CDU is suspect
    crc = next(f for f in rep["findings"] if f["component"] == "east/r02/c01/gpu1")
    assert crc["evidence"]["previous"] == 5 and crc["evidence"]["rise"] == 35
    assert rep["counters_recorded"] == 3  # r02/c02's counters did not change
    # The rack's certification is now false on the CDU finding (the fleet state folds it).
    state = FleetState.load(store, topo)
    cert = state.certification("east/r01")
    assert cert is not None and not cert.ok and "coolant_flow_low" in cert.message
    store.close()


def test_findings_move_the_tray_through_the_lifecycle(exporter: Exporter,
                                                      tmp_path: Path) -> None:
    store, topo, _ = _store(tmp_path)
    enroll(store, topo, actor="test")
    tray = "east/r01/c01"
    for to in ("seatrial", "burn_in"):
        transition(store, tray, to, actor="test", reason="bring-up")
    store.append_event(tray, Kind.CERTIFY_RESULT, {"run_id": "c1", "backend": "twin",
                                                   "verdict": "pass"})
    transition(store, tray, "production", actor="test", reason="certified")
    exporter.pages["/metrics"] = page(_first())
    pages = [parse_page(page(_first()), "first")]
    scrape(store, topo, pages)
    apply_findings(store, topo)
    row = state_of(store, tray)
    assert row.state == "triage"
    moved = store.events(component_id=tray, kind=Kind.LIFECYCLE_TRANSITION)[-1]
    assert "gpu_dead" in moved.reason and moved.payload["finding_seq"]

    # Repaired and re-certified: newer passing evidence returns it (rack not serving: burn_in).
    for to in ("repair", "burn_in"):
        transition(store, tray, to, actor="test", reason="GPU swapped")
    store.append_event(tray, Kind.CERTIFY_RESULT, {"run_id": "c2", "backend": "twin",
                                                   "verdict": "pass"})
    rep = promote_passing(store, topo)
    assert state_of(store, tray).state in ("burn_in", "production"), rep
    # The exporter still shows Xid 79 after the passing certification: that is new evidence
    # against it, recorded once more (and once only).
    again = scrape(store, topo, pages)
    assert [f["component"] for f in again.findings] == ["east/r01/c01/gpu1"]
    assert scrape(store, topo, pages).findings == []
    store.close()


def test_a_hosts_file_maps_exporter_names(exporter: Exporter, tmp_path: Path) -> None:
    store, _, db = _store(tmp_path)
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("gpu-node-99: east/r02/c02\n")
    exporter.pages["/metrics"] = page({"gpu-node-99": {0: {XID: 79}}})
    rep = _cli("scrape", "--dcgm", f"{exporter.url}/metrics", "--hosts", str(hosts),
               "--db", db)
    assert _kinds(rep) == {"east/r02/c02/gpu0": ("gpu_dead", "fail")}
    hosts.write_text("gpu-node-99: east/r09/c01\n")
    done = subprocess.run([sys.executable, "-m", "rackscale", "telemetry", "scrape", "--dcgm",
                           f"{exporter.url}/metrics", "--hosts", str(hosts), "--db", db],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2 and "east/r09/c01" in done.stderr
    store.close()


def test_through_a_real_prometheus(exporter: Exporter, tmp_path: Path) -> None:
    """A site whose Prometheus already scrapes dcgm-exporter points rackscale at Prometheus's
    /federate: the page carries Prometheus's own labels and time stamps, and reads the same."""
    from urllib.parse import quote

    from tests.server.conftest import prometheus

    store, _, db = _store(tmp_path)
    exporter.pages["/metrics"] = page(_first())
    (tmp_path / "prom").mkdir()
    with prometheus([exporter], tmp_path / "prom") as prom:  # type: ignore[list-item]
        prom.wait_for('count(DCGM_FI_DEV_XID_ERRORS) == 10')
        match = quote('{__name__=~"DCGM_FI_DEV_.*"}')
        rep = _cli("scrape", "--dcgm", f"{prom.url}/federate?match[]={match}", "--db", db)
    assert _kinds(rep) == {"east/r01/c01/gpu1": ("gpu_dead", "fail"),
                           "east/r01/c02/gpu1": ("hbm_degraded", "fail"),
                           "east/r02/c01/gpu0": ("hbm_degraded", "fail")}
    gpu_dead = next(f for f in rep["findings"] if f["kind"] == "gpu_dead")
    assert gpu_dead["evidence"]["instance"] == exporter.url.removeprefix("http://")
    store.close()
