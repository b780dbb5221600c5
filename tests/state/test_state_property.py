"""Property: over any history of passing and failing certifications (fleet-wide or scoped to one
rack), repairs, operator drains and reloads on a random mixed fleet, every view agrees on every
rack, no rack or tray whose newest certification failed serves once the lifecycle has run, and
a rack the fleet state calls wholly good counts all its GPUs usable."""

from __future__ import annotations

import re
import tempfile
from collections import Counter
from pathlib import Path

import yaml
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from rackscale.certify import LadderConfig, TwinRunRequest, record_run, run_on_twin
from rackscale.faults import Fault
from rackscale.fleet import FleetSpec, Topology
from rackscale.lifecycle import (
    Controller,
    SimCoolingDriver,
    SimPlant,
    SimPowerDriver,
    apply_findings,
    promote_passing,
    set_goal,
    transition,
)
from rackscale.lifecycle.repository import LifecycleRow
from rackscale.report import build_ledger, collect
from rackscale.server import ServerConfig, create_app
from rackscale.state import FleetState, serving_state
from rackscale.store import Store, load_topology

TEMPLATES = ["gb200-nvl72", "gb300-nvl72", "vr-nvl72", "hgx-h100", "hgx-h200", "hgx-b200"]
SERVING = {"production", "degraded"}


@st.composite
def fleets(draw: st.DrawFn) -> FleetSpec:
    groups = draw(st.lists(st.sampled_from(TEMPLATES), min_size=1, max_size=3, unique=True))
    return FleetSpec.model_validate({"name": "prop", "regions": [
        {"name": "r", "racks": [{"template": t, "count": draw(st.integers(1, 2))}
                               for t in groups]}]})


def _fault_pool(topo: Topology) -> list[Fault]:
    """Faults of every lifecycle level: inside a tray, on a rack's part, on the fabric."""
    out = []
    for rack in topo.racks:
        tray = f"{rack.id}/{rack.template.tray_prefix()}02"
        out += [Fault(target=f"{tray}/gpu1", kind="gpu_dead"),
                Fault(target=f"{rack.id}/ps1", kind="power_shelf_down")]
    out.append(Fault(target=topo.leaves[0], kind="leaf_degraded", severity=0.5))
    return out


OPS = st.lists(st.one_of(
    st.just(("certify", ())), st.tuples(st.just("certify"), st.lists(st.integers(0, 40),
                                                                     max_size=3)),
    st.tuples(st.just("scoped"), st.tuples(st.integers(0, 40), st.lists(st.integers(0, 40),
                                                                         max_size=2))),
    st.just(("lifecycle", ())), st.tuples(st.just("drain"), st.integers(0, 40)),
    st.just(("reload", ()))), min_size=2, max_size=7)


class World:
    def __init__(self, spec: FleetSpec, tmp: Path) -> None:
        self.topo = Topology.build(spec)
        self.tmp = tmp
        self.store = Store(f"sqlite:///{tmp / 'p.db'}")
        load_topology(self.store, self.topo)
        self.plant = SimPlant.for_topology(self.topo)
        self.ctl = Controller(self.store, self.topo, SimPowerDriver(self.plant),
                              SimCoolingDriver(self.plant))
        self.ctl.enroll()
        set_goal(self.store, list(self.ctl.targets), "production")
        self.state = FleetState(self.topo)
        self.pool = _fault_pool(self.topo)
        self.seed = 0

    def certify(self, picks: tuple[int, ...] | list[int], scope: int | None = None) -> None:
        """A run with the pool's faults `picks`; with `scope`, of that rack only (the others
        are `not_run` and keep their older evidence)."""
        chosen = sorted({self.pool[i % len(self.pool)] for i in picks}, key=lambda f: f.target)
        self.seed += 1
        path = None
        if chosen:
            path = self.tmp / f"faults-{self.seed}.yaml"
            path.write_text(yaml.safe_dump({"version": 1, "faults": [
                f.model_dump(exclude_none=True) for f in chosen]}))
        config = LadderConfig(scope=None if scope is None
                              else self.topo.racks[scope % len(self.topo.racks)].id)
        run = run_on_twin(self.topo, TwinRunRequest(config=config, seed=self.seed,
                                                    faults=None if path is None else str(path)))
        record_run(self.store, run)

    def lifecycle(self) -> None:
        for _ in range(30):  # the CLI's `lifecycle run --until-idle`: triage, then passes
            tri = apply_findings(self.store, self.topo, state=self.ctl.state)
            promote_passing(self.store, self.topo, report=tri, state=self.ctl.state)
            rep = self.ctl.reconcile()
            if not rep.changed and not tri.promoted and not tri.trays_triaged \
                    and not tri.racks_rack_level:
                return

    def drain(self, i: int) -> None:
        rack = self.topo.racks[i % len(self.topo.racks)].id
        with self.store.session() as s:
            row = s.get(LifecycleRow, rack)
            serving = row is not None and row.state in SERVING
        if serving:
            transition(self.store, rack, "draining", actor="operator", reason="maintenance")

    def states(self) -> dict[str, str]:
        with self.store.session() as s:
            return {r.component_id: r.state for r in s.query(LifecycleRow)}


# A rack on the dashboard: a tile (data-usable) on a small fleet, a chip (its title says
# "N/M GPUs usable") on a large one.
_TILE = re.compile(r'<a class="(?:rack|chip) [^"]*" href="/racks/[^"]+" data-rack="([^"]+)" '
                   r'data-state="([^"]*)" data-findings="[^"]*"(?: data-usable="(\d+)")?'
                   r' title="[^"]*?(?:(\d+)/\d+ GPUs usable)?[^"]*"')


def _dashboard(page: str) -> dict[str, tuple[str, int]]:
    """Each rack's state and usable GPUs as the dashboard's fleet page shows them."""
    return {m[1]: (m[2], int(m[3] or m[4])) for m in _TILE.finditer(page)}


def _check(w: World, lifecycle_ran: bool) -> None:
    w.state.refresh(w.store)
    fresh = FleetState.load(w.store, w.topo)
    states = w.states()
    parts = list(states)
    # the state read incrementally is the state read from scratch
    assert [w.state.conditions(p) for p in parts] == [fresh.conditions(p) for p in parts]
    assert {p: fresh.state_of(p) for p in parts} == states
    if lifecycle_ran:
        for p, s in states.items():
            rack = w.topo.holder(p).rack or p
            if s in SERVING and states[rack] in SERVING:  # a tray serves inside a serving rack
                cert = fresh.certification(p)
                assert cert is not None and cert.ok, (p, s, cert)
    ledger = build_ledger(collect(w.store))
    client = TestClient(create_app(ServerConfig(db=w.store.url), w.store))
    api = {r["id"]: (r["state"], r["usable_gpus"])
           for r in client.get("/api/v1/racks?limit=500").json()["items"]}
    metrics = {s.labels["rack"]: s.value
               for fam in text_string_to_metric_families(client.get("/metrics").text)
               for s in fam.samples if s.name == "rackscale_rack_usable_gpus"}
    rows = {r["id"]: (r["state"], r["usable_gpus"]) for r in ledger.racks}
    assert api == rows
    # every GPU counted in the state that decides whether a job can use it, the fleet state's
    # rule (a production tray of a rack that does not serve counts in the rack's state), the
    # same in the summary and in /metrics
    topo = w.topo
    by_state: Counter[str] = Counter(
        serving_state(fresh.state_of(topo.ids[int(topo.gpu_tray[g])]),
                      fresh.state_of(topo.racks[int(topo.gpu_rack[g])].id)) or "unenrolled"
        for g in range(len(topo.gpu_ids)))
    assert client.get("/api/v1/summary").json()["gpus_by_state"] == dict(by_state)
    gpus: Counter[str] = Counter()
    for fam in text_string_to_metric_families(client.get("/metrics").text):
        for smp in fam.samples:
            if smp.name == "rackscale_gpus":
                gpus[smp.labels["state"]] += int(smp.value)
    assert gpus == by_state
    assert _dashboard(client.get("/").text) == rows
    assert metrics == {k: float(v) for k, (_, v) in rows.items()}
    by_id = {r["id"]: r for r in ledger.racks}
    for rack in w.topo.racks:
        # the lifecycle's state is the one the report and the server show, and the fleet
        # state's (the read model the lifecycle gates on)
        assert rows[rack.id][0] == states[rack.id] == fresh.state_of(rack.id)
        for tray in by_id[rack.id]["trays"]:
            assert tray["state"] == fresh.state_of(tray["id"]), tray["id"]
            # a GPU the report counts usable is one the fleet state lets serve: its rack
            # serves and its newest certification passed (once the lifecycle has acted on it)
            if lifecycle_ran and tray["usable_gpus"] > 0:
                cert = fresh.certification(tray["id"])
                assert states[rack.id] in SERVING, (tray["id"], states[rack.id])
                assert cert is not None and cert.ok, (tray["id"], cert)
        # a rack that is not serving has no usable GPUs, in every view
        if states[rack.id] not in SERVING:
            assert rows[rack.id][1] == 0, (rack.id, states[rack.id])
        # and the converse: a rack in production with every tray in production, whose newest
        # certification and every tray's passed, counts all its GPUs usable (a scoped run of
        # another rack leaves it as it stood; an HGX rack counts its whole nodes)
        trays = by_id[rack.id]["trays"]
        cert = fresh.certification(rack.id)
        if lifecycle_ran and states[rack.id] == "production" and cert is not None and cert.ok \
                and all(t["state"] == "production" and (c := fresh.certification(t["id"]))
                        is not None and c.ok for t in trays):
            assert rows[rack.id][1] == by_id[rack.id]["gpus"], (rack.id, rows[rack.id], cert)


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(spec=fleets(), ops=OPS)
def test_every_view_agrees_and_no_failed_part_serves(spec: FleetSpec, ops: list) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        w = World(spec, Path(tmp))
        ran = False
        for op, arg in ops:
            if op == "certify":
                w.certify(arg)
                ran = False
            elif op == "scoped":
                w.certify(arg[1], scope=arg[0])
                ran = False
            elif op == "lifecycle":
                w.lifecycle()
                ran = True
            elif op == "drain":
                w.drain(arg)
            else:  # a restarted controller: a new state read from the log
                w.ctl.state = FleetState(w.topo)
            _check(w, ran)
        w.lifecycle()
        _check(w, True)
        w.store.close()
