"""`rackscale certify` commands, the store events they write, and the demo step."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from rackscale.certify import PROBES, Groups, Ladder, LadderConfig, Scope, Timed, TwinBackend
from rackscale.certify.probes import ProbeRegistry, UnknownProbe
from rackscale.cli import app
from rackscale.cli.certify import _evidence_text, step_certify
from rackscale.cli.demo import DemoContext
from rackscale.faults import Fault, TwinHardware, demo_faults_path, faults_from, load_faults
from rackscale.fleet import Topology, seed_fleet
from rackscale.store import Store

runner = CliRunner()


def test_run_with_demo_faults_exits_1_and_stores_the_contract(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/r.db"
    out = tmp_path / "findings.jsonl"
    res = runner.invoke(app, ["certify", "run", "--fleet", "seed-504", "--faults", "demo",
                              "--json", "--db", db, "--out", str(tmp_path)])
    assert res.exit_code == 1, res.output
    body = json.loads(res.stdout)
    assert body["backend"] == "twin" and body["simulated"] is True
    assert len(body["findings"]) == 7
    store = Store(db)
    run = store.events(kind="certify.run")[0]
    assert run.component_id == "seed-504"
    for key in ("run_id", "backend", "seed", "faults_file", "stages", "collective_tests",
                "allpairs_tests", "campaign_s", "gpus_total", "gpus_clear", "gpus_healthy",
                "findings"):
        assert key in run.payload
    findings = store.events(kind="certify.finding")
    assert {e.component_id for e in findings} == {e.payload["component"] for e in findings}
    for e in findings:
        assert {"component", "kind", "stage", "evidence", "confidence", "run_id", "backend",
                "verdict"} <= set(e.payload)
    results = {e.component_id: e.payload for e in store.events(kind="certify.result")}
    assert len(results) == 7 * 18 + 7  # every tray and every rack
    assert results["us-east/r04"]["verdict"] == "fail"  # its switch tray is down
    assert results["us-east/r01"]["verdict"] == "pass"
    assert results["us-east/r01/c11"]["verdict"] == "fail"  # holds the sdc GPU
    assert results["us-east/r01/c10"] == results["us-east/r01/c10"] | {
        "verdict": "pass", "stages_passed": [1, 2, 3, 4]}
    assert results["us-west/r01/c01"]["blocked_by"] == ["us-west/leaf-rail1-0"]
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 7 and all(x["run_id"] == run.payload["run_id"] for x in lines)

    listed = runner.invoke(app, ["certify", "findings", "--db", db, "--json"])
    assert listed.exit_code == 0
    assert len(json.loads(listed.stdout)["findings"]) == 7
    table = runner.invoke(app, ["certify", "findings", "--db", db], env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.output
    assert "simulated on the digital twin" in table.output  # not just the backend's name


def test_healthy_fleet_exits_0(tmp_path: Path) -> None:
    res = runner.invoke(app, ["certify", "run", "--fleet", "seed-504", "--stages", "1,2",
                              "--db", f"sqlite:///{tmp_path}/r.db", "--out",
                              str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "GPUs clear of findings: 504/504" in res.output


def test_bad_stage_and_unknown_probe_exit_2(tmp_path: Path) -> None:
    res = runner.invoke(app, ["certify", "run", "--fleet", "seed-504", "--stages", "7",
                              "--db", f"sqlite:///{tmp_path}/r.db"])
    assert res.exit_code == 2
    res = runner.invoke(app, ["certify", "probe", "fft"])
    assert res.exit_code == 2


def test_probe_on_twin_prints_simulated_figure() -> None:
    res = runner.invoke(app, ["certify", "probe", "gemm", "--backend", "twin", "--json"])
    assert res.exit_code == 0, res.output
    body = json.loads(res.stdout)
    assert body["source"] == "simulated" and body["value"] > 1000


def test_world_is_checked_only_for_the_collective() -> None:
    res = runner.invoke(app, ["certify", "probe", "allreduce", "--backend", "twin", "--world",
                              "1"])
    assert res.exit_code == 2 and "--world must be >= 2" in res.output
    res = runner.invoke(app, ["certify", "probe", "hbm", "--backend", "twin", "--world", "1",
                              "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["unit"] == "TB/s"


def test_probe_that_raises_becomes_a_fail_finding() -> None:
    topo = Topology.build(seed_fleet())

    class Broken:
        name, unit = "hbm", "TB/s"

        def __init__(self, backend: object) -> None:
            pass

        def detect(self) -> bool:
            return True

        def run(self, scope: object) -> object:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    reg: ProbeRegistry = PROBES.copy()
    reg.add("hbm", Broken, replace=True)  # type: ignore[arg-type]
    run = Ladder(topo, TwinBackend(TwinHardware(topo, seed=1)), registry=reg).run()
    assert [(f.kind, f.stage) for f in run.findings] == [("probe_error", 1)]
    assert "illegal memory access" in run.findings[0].evidence["error"]
    assert run.gpus_healthy == 0


def test_registry_lists_valid_names_on_unknown_probe() -> None:
    topo = Topology.build(seed_fleet())
    with pytest.raises(UnknownProbe, match="valid probes: gemm, hbm"):
        PROBES.create("fft", TwinBackend(TwinHardware(topo)))


def test_demo_step_stores_events_and_summary(tmp_path: Path) -> None:
    topo = Topology.build(seed_fleet())
    ctx = DemoContext(topo=topo, store=Store(f"sqlite:///{tmp_path}/d.db"), seed=7,
                      data_dir=tmp_path)
    step_certify(ctx)
    res = ctx.results.certify
    assert res is not None
    targets = {f.target for f in load_faults(demo_faults_path(), topo).faults}
    assert set(res.failed_components) == targets
    assert res.gpus_healthy == 504 - 36 - 72 - 72 - 4
    assert ctx.store.count_events("certify.") == 1 + 7 + 7 * 18 + 7
    assert (tmp_path / "findings.jsonl").exists()
    assert np.isfinite(res.summary()["campaign_s"])


def test_allreduce_with_a_wrong_sum_is_an_error_not_a_figure() -> None:
    """The real backend checks each all-reduce's sum (result_ok); a fast but wrong collective
    must fail its group, not pass on its bandwidth."""
    topo = Topology.build(seed_fleet())

    class WrongSum(TwinBackend):
        def allreduce(self, groups, nbytes, nvlink, t):  # type: ignore[no-untyped-def]
            timed = super().allreduce(groups, nbytes, nvlink, t)
            ok = np.ones(len(groups), bool)
            ok[1] = False
            return Timed(timed.seconds, timed.errors, {"result_ok": ok})

    probe = PROBES.create("nvlink_allreduce", WrongSum(TwinHardware(topo, seed=1)))
    m = probe.run(Scope(groups=Groups.of([[0, 1, 2, 3], [4, 5, 6, 7]])))
    assert np.isfinite(m.values[0]) and np.isnan(m.values[1])
    assert list(m.errors) == [1] and "wrong sum" in m.errors[1]


def test_sdc_evidence_counts_against_the_repeats_actually_run() -> None:
    """With --repeats 4 an SDC in every repeat reads 4/4, not 4/8 (a hard-coded default)."""
    topo = Topology.build(seed_fleet())
    gpu = topo.gpu_ids[5]
    ff = faults_from([Fault(target=gpu, kind="sdc")], topo)
    run = Ladder(topo, TwinBackend(TwinHardware(topo, ff, seed=3)),
                 LadderConfig(stages=(1,), repeats=4)).run()
    (f,) = run.findings
    assert (f.component, f.kind) == (gpu, "sdc")
    assert f.evidence["repeats"] == 4
    assert _evidence_text(f.evidence) == "wrong GEMM result in 4/4 repeats"


def test_the_demo_faults_on_another_fleet_are_refused_without_the_install_path() -> None:
    """The one start policy (certify room) names the demo faults, never the package's path:
    the server shows this message to API clients."""
    from rackscale.certify import DEMO_FAULTS, DemoFaultsMismatch, twin_faults
    from rackscale.fleet import synthetic_fleet

    topo = Topology.build(synthetic_fleet(2, regions=1))
    with pytest.raises(DemoFaultsMismatch) as err:
        twin_faults(topo, DEMO_FAULTS)
    assert "demo faults do not fit fleet synthetic-2" in str(err.value)
    assert demo_faults_path() not in str(err.value)
    assert twin_faults(topo, None) == (None, None)
