"""`report diff` of runs in the store: a run's report is rebuilt from the event log as it
stood then, and diffed by the same code as two report.json files."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from rackscale.cli import app
from rackscale.fleet import Topology, seed_fleet
from rackscale.report import diff_documents, document_at, report_document, resolve_point
from rackscale.store import Store, load_topology

from .events import certify, onboard, simulate, walk

runner = CliRunner()
TOPO = Topology.build(seed_fleet("seed-504"))
RACKS = [r.id for r in TOPO.racks]
CANDIDATES = [{"component": f"{r}/c{t:02d}/gpu{g}", "kind": "slow_gpu", "verdict": "fail",
               "stage": 1, "evidence": {"tflops": 30.0}, "confidence": 0.95}
              for r in RACKS for t, g in ((3, 1), (11, 2))]
CANDIDATES += [{"component": f"{r}/s02", "kind": "nvlink_switch_down", "verdict": "fail",
                "stage": 3, "evidence": {}, "confidence": 0.99} for r in RACKS[1::3]]
CANDIDATES += [{"component": f"{r}/cdu", "kind": "coolant_flow_low", "verdict": "fail",
                "stage": 2, "evidence": {}, "confidence": 0.9} for r in RACKS[2::4]]

run_st = st.tuples(st.lists(st.sampled_from(range(len(CANDIDATES))), unique=True, max_size=5),
                   st.sets(st.sampled_from(RACKS), max_size=2),  # racks sent to maintenance
                   st.floats(0.5, 0.99).map(lambda x: round(x, 3)))  # simulated ETTR
# the report's own stamps and timings, not what it reports
STAMPS = ("generated_at", "build_s")


def _content(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k not in STAMPS}


def _record(store: Store, n: int, run: tuple) -> None:
    """One round as the demo records it: a certification run, triage (racks to maintenance),
    a simulation."""
    faults, maintenance, ettr = run
    certify(store, TOPO, [CANDIDATES[i] for i in faults], run_id=f"c{n}")
    for rack in sorted(maintenance):
        walk(store, rack, ["maintenance"], start="production")
    simulate(store, TOPO, ettr=ettr, run_id=f"s{n}")


# no shrinking: each example fills a store (seconds); a failure is shown as generated
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(st.lists(run_st, min_size=2, max_size=3))
def test_a_run_in_the_store_gives_the_report_built_after_it(runs: list) -> None:
    """For random rounds of runs: the report rebuilt for each run equals the report built
    right after it, a run diffed with itself is empty, and two runs' diff is the diff of
    the reports built then."""
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(f"sqlite:///{tmp}/rackscale.db")
        try:
            load_topology(store, TOPO)
            onboard(store, TOPO)
            live = []
            for n, run in enumerate(runs):
                _record(store, n, run)
                live.append(report_document(store)[0])
            # more events after the last round: in the last run's report (it runs to now)
            walk(store, RACKS[0], ["maintenance"], start="production")
            live[-1] = report_document(store)[0]
            for n, doc in enumerate(live):
                for ref in (f"c{n}", f"s{n}"):
                    point = resolve_point(store, ref)
                    then = document_at(store, point)
                    assert _content(then) == _content(doc), ref
                    assert point.until_seq == doc["last_event_seq"]
                    assert diff_documents(then, then)["empty"]
            a, b = (document_at(store, resolve_point(store, r)) for r in ("c0", "c1"))
            by_files, by_store = diff_documents(live[0], live[1]), diff_documents(a, b)
            for key in ("ledger", "findings_new", "findings_cleared", "racks", "job_shapes",
                        "empty"):
                assert by_store[key] == by_files[key], key
        finally:
            store.close()


def test_cli_diff_of_runs_seq_and_files(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/rackscale.db"
    store = Store(db)
    load_topology(store, TOPO)
    onboard(store, TOPO)
    _record(store, 0, ([0, len(CANDIDATES) - 1], set(), 0.9))
    _record(store, 1, ([0, 2], {RACKS[3]}, 0.8))
    report = json.dumps(report_document(store)[0])
    first_run = store.events(kind="certify.run")[0].seq
    store.close()
    (tmp_path / "now.json").write_text(report)
    cleared, added = CANDIDATES[-1], CANDIDATES[2]

    r = runner.invoke(app, ["report", "diff", "--db", db, "c0", "c1", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert [f["component"] for f in out["findings_new"]] == [added["component"]]
    assert [f["component"] for f in out["findings_cleared"]] == [cleared["component"]]
    assert {x["id"]: x["change"] for x in out["racks"]}[RACKS[3]] == "left production"
    goodput = next(s for s in out["ledger"] if s["key"] == "goodput")
    assert goodput["delta"] < 0 and "certification run c0" in out["old"]["source"]
    # a file on one side, the store on the other: the same diff code
    r = runner.invoke(app, ["report", "diff", "--db", db, "c1", str(tmp_path / "now.json"),
                            "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["empty"], r.output
    r = runner.invoke(app, ["report", "diff", "--db", db, "s1", "latest"],
                      env={"COLUMNS": "160"})
    assert r.exit_code == 0 and "no changes" in r.output, r.output
    assert "simulation run s1" in r.output
    # seq:N just before the first certification run: nothing certified then
    r = runner.invoke(app, ["report", "diff", "--db", db, f"seq:{first_run - 1}", "c0",
                            "--json"])
    assert r.exit_code == 0, r.output
    certified = next(s for s in json.loads(r.stdout)["ledger"] if s["key"] == "certified")
    assert certified["old"] == 0 or certified["delta"] != 0
    # the fleet loaded again with changes after c0: its report counts today's inventory
    store = Store(db)
    store.append_event(TOPO.spec.name, "fleet.loaded", {"fleet": TOPO.spec.name,
                                                        "changed": True})
    store.close()
    r = runner.invoke(app, ["report", "diff", "--db", db, "c0", "c1", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert any("loaded again with changes" in w for w in out["old"]["warnings"])
    assert not any("loaded again" in w for w in out["new"]["warnings"])  # c1 runs to now
    r = runner.invoke(app, ["report", "diff", "--db", db, "c0", "c1"], env={"COLUMNS": "200"})
    assert "warning (old)" in r.output and "today's" in r.output
    for bad, says in (("nope", "certification runs: c1"), ("seq:0", "seq:N"),
                      ("seq:x", "seq:N"), ("missing.json", "missing.json")):
        r = runner.invoke(app, ["report", "diff", "--db", db, bad, "c1"])
        assert r.exit_code == 2 and says in r.output and "Traceback" not in r.output, r.output
