"""The fleet's current truth, read from the event log: conditions per part, lifecycle state
per rack and tray, the twin's plant.

`FleetState` folds typed events into conditions (`state/conditions.py`) and remembers the
seq it has read up to, so `refresh` applies only what was appended since. Every room that
asks "may this part serve" or "what is wrong with this rack" reads one of these; none derives
it from events on its own.

The rules it owns:
- **Newest evidence wins.** A part's certification is the newest run that said something
  about it: its own `certify.result`, else (for a tray) its rack's result of a newer run. A
  `not_run` result is no evidence and replaces nothing.
- **One run is one piece of evidence.** A failing finding of run R on a part a tray or rack
  holds (GPU, NIC, CDU, power shelf, NVLink switch tray, the rack) makes that tray's or rack's
  certification false; the same run's result of that part cannot turn it back to true (the
  ladder may call a rack "pass" while a finding of the run sits on its power shelf).
- **The fabric under a rack.** A failing finding on a leaf or spine marks every rack whose
  GPUs route through it (`FabricHealthy` false) until a later run passes the rack.
- **One plant.** The newest `twin.plant` event says which CDUs and power shelves of the twin
  are faulted; its conditions are simulated and say so.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from rackscale.fleet import Topology, is_within
from rackscale.state import snapshot
from rackscale.state.conditions import Condition, ConditionType, Status
from rackscale.store import (
    CertifyFindingV1,
    CertifyResultV1,
    Event,
    Kind,
    LifecycleTransitionV1,
    Store,
    TwinPlantV1,
)

C = ConditionType
# The event kinds the state is folded from: a refresh reads only these.
FOLDED_KINDS = (Kind.CERTIFY_FINDING, Kind.CERTIFY_RESULT, Kind.TWIN_PLANT,
                Kind.LIFECYCLE_TRANSITION)
FINDING = "Finding"  # reason of a condition a failing finding set
RACK_FINDING = "RackPartFailed"  # a tray's result failed for a finding on its rack's part
PLANT_KINDS = {"coolant_flow_low": C.COOLING, "power_shelf_down": C.POWER}


@dataclass(frozen=True, slots=True)
class LifecycleState:
    """A rack's or tray's lifecycle state as its newest transition event says."""

    state: str
    seq: int
    # The finding that moved it there (triage, a cordon on evidence), None for other moves: a
    # part pulled by evidence returns on evidence, one an operator pulled waits for them.
    finding_seq: int | None = None


@dataclass(frozen=True, slots=True)
class Gate:
    """Whether a part may enter a state that needs passing evidence (certified, production):
    `evidence_seq` is the event that allows it, else None and `why` says what is missing."""

    evidence_seq: int | None
    why: str

    @property
    def open(self) -> bool:
        return self.evidence_seq is not None


class FleetState:
    """Conditions of every tray and rack of one topology, folded from the event log."""

    # Events folded past the last snapshot before a refresh leaves a new one: a fleet's
    # onboarding (about 110k events at 128k GPUs) leaves one, a demo (a few thousand) none.
    SNAPSHOT_EVERY = 20_000

    def __init__(self, topo: Topology) -> None:
        self.topo = topo
        self.seq = 0  # the newest event read
        self._cond: dict[str, dict[ConditionType, Condition]] = {}
        self.lifecycle: dict[str, LifecycleState] = {}
        # cid -> state -> seq of its newest move into that state (enrollment, `from` None,
        # is no move): the lifecycle reads a part's last repair from here, not from the log.
        self.entered: dict[str, dict[str, int]] = {}
        self._plant: Event | None = None
        self._snapshot_seq = 0  # the seq of the snapshot this state started from or wrote
        # Parts whose own certification condition is false: the only ones `failing` can name,
        # so triage looks at these, not at every row of the fleet (34k at 128k GPUs).
        self._failed_own: set[str] = set()

    @classmethod
    def load(cls, store: Store, topo: Topology, *, until_seq: int | None = None) -> FleetState:
        state = cls(topo)
        state.refresh(store, until_seq=until_seq)
        return state

    def refresh(self, store: Store, *, until_seq: int | None = None) -> int:
        """Apply the events appended since the last refresh (up to `until_seq`); returns how
        many were read. A fresh state starts from the store's snapshot when one fits, and
        leaves a new one once it has folded `SNAPSHOT_EVERY` events past it."""
        if self.seq == 0 and (snap := snapshot.read(store, self.topo, until_seq=until_seq)):
            self._restore(snap.seq, snap.body, store)
        # A first read filters by kind; a read on from a cursor asks only for the seq range
        # (the primary key) and filters here: with a kind filter SQLite walks the kind index
        # over every certify event of the log to find the few new ones (7.6 ms at 128k GPUs).
        kinds = FOLDED_KINDS if self.seq == 0 else None
        events = store.events(kinds=kinds, after_seq=self.seq, until_seq=until_seq)
        mine = [ev for ev in events if ev.kind in FOLDED_KINDS]
        self.apply_all(mine)
        if events:
            self.seq = max(self.seq, events[-1].seq)
        if self.seq - self._snapshot_seq >= self.SNAPSHOT_EVERY and \
                snapshot.write(store, self.topo, self.seq, self._encode()):
            self._snapshot_seq = self.seq
        return len(mine)

    # ------------------------------------------------------------------ snapshot
    def _encode(self) -> dict[str, object]:
        """The state's contents as flat integer lists over one table of its strings (ids,
        reasons, messages) and one of its times: at 128k GPUs 34k conditions share a handful
        of messages, and a list of integers decodes several times faster than objects."""
        strings: dict[str, int] = {}
        times: dict[datetime, int] = {}

        def ref(text: str | None) -> int:
            return -1 if text is None else strings.setdefault(text, len(strings))

        cond = [v for cid, conds in self._cond.items() for c in conds.values()
                for v in (ref(cid), ref(c.type.value), ref(c.status.value), ref(c.reason),
                          ref(c.message), c.seq, times.setdefault(c.since, len(times)),
                          ref(c.run_id))]
        life = [v for cid, st in self.lifecycle.items()
                for v in (ref(cid), ref(st.state), st.seq,
                          -1 if st.finding_seq is None else st.finding_seq)]
        entered = [v for cid, moves in self.entered.items() for state, seq in moves.items()
                   for v in (ref(cid), ref(state), seq)]
        return {"seq": self.seq, "strings": list(strings),
                "times": [t.isoformat() for t in times], "cond": cond, "lifecycle": life,
                "entered": entered,
                "plant_seq": None if self._plant is None else self._plant.seq}

    def _restore(self, seq: int, body: dict[str, Any], store: Store) -> None:
        """Take a snapshot's contents (`_encode`) as this fresh state's, at `seq`."""
        text: list[Any] = body["strings"]
        types, statuses = {t.value: t for t in ConditionType}, {s.value: s for s in Status}
        times = [datetime.fromisoformat(t) for t in body["times"]]
        cond, life, moves = body["cond"], body["lifecycle"], body["entered"]
        self._cond = {}
        for i in range(0, len(cond), 8):
            cid, ty, st, why, msg, at, since, run = cond[i:i + 8]
            kind = types[text[ty]]
            self._cond.setdefault(text[cid], {})[kind] = Condition(
                type=kind, status=statuses[text[st]], reason=text[why], message=text[msg],
                seq=at, since=times[since], run_id=None if run < 0 else text[run])
        self._failed_own = {cid for cid, conds in self._cond.items()
                            if (c := conds.get(C.CERTIFIED)) is not None
                            and c.status is Status.FALSE}
        self.lifecycle = {text[life[i]]: LifecycleState(
            text[life[i + 1]], life[i + 2], None if life[i + 3] < 0 else life[i + 3])
            for i in range(0, len(life), 4)}
        self.entered = {}
        for i in range(0, len(moves), 3):
            self.entered.setdefault(text[moves[i]], {})[text[moves[i + 1]]] = moves[i + 2]
        plant = body["plant_seq"]
        self._plant = None if plant is None else \
            store.events(after_seq=plant - 1, until_seq=plant)[0]
        self.seq = self._snapshot_seq = seq

    def apply_all(self, events: Iterable[Event]) -> None:
        for ev in events:
            self.apply(ev)

    def apply(self, ev: Event) -> None:
        """Fold one event in (events must come in seq order)."""
        if ev.seq <= self.seq:
            raise ValueError(f"event {ev.seq} is not newer than the state ({self.seq}): "
                             "events are applied in seq order, once")
        self.seq = ev.seq
        if ev.kind == Kind.CERTIFY_RESULT:
            self._result(ev, ev.read(CertifyResultV1))
        elif ev.kind == Kind.CERTIFY_FINDING:
            self._finding(ev, ev.read(CertifyFindingV1))
        elif ev.kind == Kind.LIFECYCLE_TRANSITION:
            moved = ev.read(LifecycleTransitionV1)
            self.lifecycle[ev.component_id] = LifecycleState(moved.to, ev.seq,
                                                             moved.finding_seq)
            if moved.from_ is not None:
                self.entered.setdefault(ev.component_id, {})[moved.to] = ev.seq
        elif ev.kind == Kind.TWIN_PLANT:
            self._plant = ev

    # ------------------------------------------------------------------ folding
    def _set(self, cid: str, cond: Condition) -> None:
        self._cond.setdefault(cid, {})[cond.type] = cond
        if cond.type is C.CERTIFIED:
            if cond.status is Status.FALSE:
                self._failed_own.add(cid)
            else:
                self._failed_own.discard(cid)

    def _result(self, ev: Event, p: CertifyResultV1) -> None:
        cid = ev.component_id
        if cid not in self.topo.index:
            return
        old = self._cond.get(cid, {}).get(C.CERTIFIED)
        if p.verdict == "not_run":
            if old is None:
                self._set(cid, Condition(
                    type=C.CERTIFIED, status=Status.UNKNOWN, reason="NotRun", seq=ev.seq,
                    since=ev.time, run_id=p.run_id,
                    message=f"certification run {p.run_id} did not test it"))
            return
        run = p.run_id
        if old is not None and old.reason == FINDING and old.run_id is not None \
                and old.run_id == run:
            return  # the run's own finding on a part it holds stands
        passed = p.verdict == "pass"
        reason = "CertifyPassed" if passed else "CertifyFailed"
        if not passed and p.findings and not any(is_within(f, cid) for f in p.findings):
            reason = RACK_FINDING  # failed for a part of its rack, not of its own
        self._set(cid, Condition(
            type=C.CERTIFIED, status=Status.TRUE if passed else Status.FALSE,
            reason=reason, seq=ev.seq, since=ev.time,
            run_id=run, message=f"certify.result {p.verdict} in run {run}"
            + (f" ({', '.join(p.findings)})" if p.findings else "")))
        fabric = self._cond.get(cid, {}).get(C.FABRIC)
        if passed and fabric is not None and not fabric.ok and fabric.run_id != run:
            self._set(cid, Condition(
                type=C.FABRIC, status=Status.TRUE, reason="CertifyPassed", seq=ev.seq,
                since=ev.time, run_id=run, message=f"passed run {run} after the fabric finding"))

    def _finding(self, ev: Event, p: CertifyFindingV1) -> None:
        cid = p.component or ev.component_id
        if p.verdict != "fail" or cid not in self.topo.index:
            return  # warnings and passes move nothing; triage refuses unknown parts
        part, racks = self._marks(cid)
        message = f"{p.kind} at {cid} (stage {p.stage}, run {p.run_id})"
        if part is not None:
            self._set(part, Condition(type=C.CERTIFIED, status=Status.FALSE, reason=FINDING,
                                      seq=ev.seq, since=ev.time, run_id=p.run_id,
                                      message=message))
        for rack in racks:
            self._set(rack, Condition(type=C.FABRIC, status=Status.FALSE, reason=FINDING,
                                      seq=ev.seq, since=ev.time, run_id=p.run_id,
                                      message=message))

    def _marks(self, cid: str) -> tuple[str | None, list[str]]:
        """What a failing finding on `cid` (a fleet id) marks: the tray or rack holding it
        (its certification turns false), and the racks whose GPUs route through it when it is
        a leaf or spine (their `FabricHealthy` turns false). A part outside both marks
        nothing: a region's or the fleet's finding gates no single rack."""
        holder = self.topo.holder(cid)
        if holder.level in ("tray", "rack"):
            return (holder.tray if holder.level == "tray" else holder.rack), []
        if holder.level == "fabric":
            racks = np.unique(self.topo.gpu_rack[self.topo.affected_gpus(cid)]).tolist()
            return None, [self.topo.racks[r].id for r in racks]
        return None, []

    # ------------------------------------------------------------------ queries
    def condition(self, cid: str, type_: ConditionType) -> Condition | None:
        if type_ in PLANT_KINDS.values():
            return self._plant_condition(cid, type_)
        return self._cond.get(cid, {}).get(type_)

    def conditions(self, cid: str) -> list[Condition]:
        """Every condition of `cid`, by type (its certification as `certification` gives it)."""
        out = []
        for t in ConditionType:
            c = self.certification(cid) if t is C.CERTIFIED else self.condition(cid, t)
            if c is not None:
                out.append(c)
        return out

    def certification(self, cid: str) -> Condition | None:
        """The part's newest certification: for a tray, its own result unless its rack's
        result comes from a newer run (a run that named the tray decides for it)."""
        own = self._cond.get(cid, {}).get(C.CERTIFIED)
        if cid not in self.topo.index:
            return own
        rack = self.topo.holder(cid).rack
        if rack is None or rack == cid:
            return own
        of_rack = self._cond.get(rack, {}).get(C.CERTIFIED)
        if of_rack is None or of_rack.status is Status.UNKNOWN:
            return own
        if own is None or (own.run_id != of_rack.run_id and of_rack.seq > own.seq):
            return of_rack
        return own

    def gate(self, cid: str, *, floor: int = 0) -> Gate:
        """May `cid` enter certified or production: its newest certification passed and is
        newer than event `floor` (its last repair). A fabric finding under a rack does not
        close it: the leaf is shared, its racks' NVLink domains still run jobs, and the report
        flags the GPUs it touches (the condition says so)."""
        cert = self.certification(cid)
        if cert is None:
            return Gate(None, "no certification on record")
        if not cert.ok:
            return Gate(None, f"newest certification is {cert.status.value.lower()}: "
                              f"{cert.message} (event {cert.seq})")
        if cert.seq <= floor:
            return Gate(None, f"its passing certification (event {cert.seq}) is older than "
                              f"its last repair or triage (event {floor})")
        return Gate(cert.seq, cert.message)

    def failing(self, cid: str) -> Condition | None:
        """The part's newest certification when it failed on evidence of the part itself,
        else None. A tray whose rack failed (a switch tray, the CDU) is held by its rack's
        gate, not failed with it: the rack is what goes out of service."""
        cert = self.certification(cid)
        own = self._cond.get(cid, {}).get(C.CERTIFIED)
        if cert is None or cert is not own or cert.status is not Status.FALSE:
            return None
        return None if cert.reason == RACK_FINDING else cert

    def failing_parts(self) -> list[str]:
        """Every part `failing` names, sorted."""
        return sorted(cid for cid in self._failed_own if self.failing(cid) is not None)

    def stands(self, ev: Event, newest_run: str | None) -> bool:
        """Whether a `certify.result` or `certify.finding` is still evidence of its part: its
        run is the one the part's certification now rests on (`certification`), so a newer
        run that spoke of the part supersedes it and a run that left the part out (a scoped
        run's `not_run`) does not. A finding on the fabric stands while a rack under it still
        rests on that run or carries its `FabricHealthy` false; one on a part outside racks
        and the fabric, or not in the fleet, stands while its run is `newest_run`."""
        if ev.kind == Kind.CERTIFY_RESULT:
            run = ev.read(CertifyResultV1).run_id
            if ev.component_id not in self.topo.index:
                return run == newest_run
            return self._rests_on(ev.component_id, run)
        if ev.kind != Kind.CERTIFY_FINDING:
            raise ValueError(f"event {ev.seq} is a {ev.kind}: only certification results "
                             "and findings are evidence that stands or not")
        finding = ev.read(CertifyFindingV1)
        cid, run = finding.component or ev.component_id, finding.run_id
        if cid not in self.topo.index:
            return run == newest_run
        part, racks = self._marks(cid)
        if part is not None:
            return self._rests_on(part, run)
        if racks:
            return any(self._rests_on(rack, run) or self._fabric_finding_of(rack, run)
                       for rack in racks)
        return run == newest_run

    def _fabric_finding_of(self, rack: str, run: str | None) -> bool:
        """Whether the rack's `FabricHealthy` is false on a finding of `run`."""
        fabric = self._cond.get(rack, {}).get(C.FABRIC)
        return fabric is not None and not fabric.ok and fabric.run_id == run

    def _rests_on(self, part: str, run: str | None) -> bool:
        cert = self.certification(part)
        return run is not None and cert is not None and cert.run_id == run

    def parts_with_conditions(self) -> list[str]:
        """Every part some certification or fabric evidence was folded in for."""
        return sorted(self._cond)

    def last_entered(self, cid: str, states: Iterable[str]) -> int:
        """Seq of the part's newest move into any of `states` (0: never moved there)."""
        mine = self.entered.get(cid)
        return max((mine.get(s, 0) for s in states), default=0) if mine else 0

    def state_of(self, cid: str) -> str | None:
        st = self.lifecycle.get(cid)
        return None if st is None else st.state

    # ------------------------------------------------------------------ the plant
    @property
    def plant(self) -> TwinPlantV1 | None:
        """The twin's plant as the newest `twin.plant` event gave it (None: never applied)."""
        return None if self._plant is None else self._plant.read(TwinPlantV1)

    def _plant_condition(self, cid: str, type_: ConditionType) -> Condition | None:
        ev = self._plant
        if ev is None or cid not in self.topo.index or self.topo.kinds[self.topo.idx(cid)] \
                != "rack":
            return None
        plant = ev.read(TwinPlantV1)
        for f in plant.faults:
            if PLANT_KINDS.get(f.kind) is type_ and is_within(f.target, cid) \
                    and f.target != cid:
                sev = "" if f.severity is None else f" severity {f.severity:g}"
                return Condition(type=type_, status=Status.FALSE, reason=f.kind, seq=ev.seq,
                                 since=ev.time, message=f"{f.kind}{sev} at {f.target} in the "
                                 "digital twin's plant (simulated)")
        return Condition(type=type_, status=Status.TRUE, reason="PlantNominal", seq=ev.seq,
                         since=ev.time, message="nominal in the digital twin's plant (simulated)")
