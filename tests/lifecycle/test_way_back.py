"""A coolant fault played out to the end by one `lifecycle run --until-idle`, and the way back
(`lifecycle repair`, a new certification, production), through the real CLI on the seed fleet.

The escalation steps are shortened with `--coolant-steps-s` so the sequence takes about a
second; the run waits for each step as it would for the default 5/15/30/90 s."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.pg import fresh_database
from typer.testing import CliRunner

from rackscale.cli import app
from rackscale.fleet import Topology, seed_fleet
from rackscale.lifecycle import SimPlant, power_targets

runner = CliRunner()
RACK = "us-west/r02"
STEPS = "0.2,0.4,0.6,0.8"


def _cli(*args: str, code: int = 0) -> str:
    res = runner.invoke(app, list(args))
    assert res.exit_code == code, res.output
    return res.output


def flat(text: str) -> str:
    """Output with the terminal's line wrapping undone."""
    return " ".join(text.split())


class Site:
    def __init__(self, tmp: Path, db: str) -> None:
        self.db = db
        self.plant = str(tmp / "plant.json")
        self.none = tmp / "none.yaml"
        self.none.write_text("version: 1\nfaults: []\n")
        self.cool = tmp / "cool.yaml"
        self.cool.write_text("version: 1\nfaults:\n  - {target: " + RACK + "/cdu, kind: "
                             "coolant_flow_low, severity: 0.5}\n")

    def run(self, *args: str, faults: Path | None = None, code: int = 0,
            steps: str = STEPS) -> str:
        extra = ["--faults", str(faults)] if faults else []
        return _cli("lifecycle", "run", "--until-idle", "--period-s", "0", "--coolant-steps-s",
                    steps, "--db", self.db, "--plant", self.plant, *extra, *args, code=code)

    def state(self, cid: str = RACK) -> str:
        out = _cli("lifecycle", "status", "--rack", cid, "--db", self.db, "--json")
        return str(json.loads(out)["state"])

    def tray_state(self, tray: str) -> str:
        out = _cli("lifecycle", "status", "--rack", tray.rsplit("/", 1)[0], "--db", self.db,
                   "--json")
        return next(str(t["state"]) for t in json.loads(out)["trays"] if t["id"] == tray)

    def moves(self, cid: str = RACK) -> list[str]:
        events = json.loads(_cli("lifecycle", "history", cid, "--db", self.db, "--json"))
        return [e["payload"]["to"] for e in events if e["kind"] == "lifecycle.transition"]

    def actions(self, cid: str = RACK) -> list[str]:
        events = json.loads(_cli("lifecycle", "history", cid, "--db", self.db, "--json"))
        return [e["payload"]["action"] for e in events if e["kind"] == "lifecycle.interlock"]

    def powered(self) -> list[str]:
        shelves, trays = power_targets(Topology.build(seed_fleet()))[RACK]
        plant = SimPlant.load(Path(self.plant))
        return [t for t in (*shelves, *trays) if plant.power.get(t)]


def _fresh_pg(url: str) -> str:
    return fresh_database(url, "wb")


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres",
                                                                marks=pytest.mark.postgres)])
def site(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Site:
    """The seed fleet onboarded to production on the twin: day 1 in four commands, on SQLite
    and on a real PostgreSQL server."""
    tmp = tmp_path_factory.mktemp("wayback")
    db = (f"sqlite:///{tmp / 'wb.db'}" if request.param == "sqlite"
          else _fresh_pg(request.getfixturevalue("postgres_url")))
    s = Site(tmp, db)
    _cli("fleet", "load", "--fleet", "seed-504", "--db", s.db)
    out = flat(s.run("--goal", "production", faults=s.none))
    assert "waiting" in out and "burn_in: " in out  # every rack waits for its evidence
    _cli("certify", "run", "--db", s.db, "--faults", str(s.none))
    s.run()
    assert s.state() == "production"
    return s


def test_until_idle_plays_a_coolant_fault_to_the_end_and_the_way_back(site: Site) -> None:
    # --max-wait-s shorter than the next step: stops with work pending, exit 3, says what
    # (the cap is due at once, the drain 30 s later: well past the 1 s allowed)
    out = flat(site.run("--max-wait-s", "1", faults=site.cool, code=3, steps="0,30,31,32"))
    assert "--max-wait-s 1 spent" in out and RACK in out
    assert "next: coolant fault (flow_low" in out  # each quiet pass says what it waits for
    assert site.state() == "degraded"

    # one command: cap, drain, power off, isolate with the valve closed
    site.run(faults=site.cool)
    assert site.state() == "isolated"
    assert site.moves()[-4:] == ["degraded", "draining", "maintenance", "isolated"]
    assert site.actions()[-5:] == ["warn", "cap", "drain", "off", "isolate"]
    assert site.powered() == []
    trays = json.loads(_cli("lifecycle", "status", "--rack", RACK, "--db", site.db,
                            "--json"))["trays"]
    assert {t["state"] for t in trays} == {"production"}  # their own rows, unchanged
    assert not any(t["serving"] for t in trays)  # but none serves: the rack is isolated
    assert {t["serving_state"] for t in trays} == {"isolated"}
    site.run(faults=site.cool)  # the closed valve hides the fault; it is not "cleared"
    assert site.actions()[-1] == "isolate"

    # advance names the way back; repair is refused while the flow is still short
    out = flat(_cli("lifecycle", "advance", RACK, "--to", "cabled", "--reason", "x", "--db",
                    site.db, "--plant", site.plant, code=2))
    assert f"lifecycle repair {RACK}" in out
    out = flat(_cli("lifecycle", "repair", RACK, "--reason", "pump swapped", "--db", site.db,
                    "--plant", site.plant, "--faults", str(site.cool), code=2))
    assert "coolant still faulty (flow_low" in out and "nothing changed" in out
    assert site.state() == "isolated"

    # fault cleared: repair, onboarding again, held at burn_in until new evidence
    out = _cli("lifecycle", "repair", RACK, "--reason", "pump swapped", "--db", site.db,
               "--plant", site.plant, "--faults", str(site.none), "--json")
    assert json.loads(out)["path"] == ["maintenance", "cabled"]
    out = flat(site.run(faults=site.none))
    assert site.state() == "burn_in"
    assert "older than its last repair" in out
    assert site.moves()[-5:] == ["cabled", "cooling_verified", "powered", "firmware",
                                 "burn_in"]
    _cli("certify", "run", "--scope", RACK, "--db", site.db, "--faults", str(site.none))
    site.run()
    assert site.state() == "production"
    assert len(site.powered()) > 0


def test_repair_of_a_serving_part_is_refused_and_changes_nothing(site: Site) -> None:
    before = site.moves("us-east/r01")
    state = site.state("us-east/r01")
    out = flat(_cli("lifecycle", "repair", "us-east/r01", "--reason", "x", "--db", site.db,
                    "--plant", site.plant, code=2))
    assert f"us-east/r01 is {state}" in out and "isolated, maintenance, rma" in out
    assert site.moves("us-east/r01") == before


def test_a_repair_that_leaves_an_open_finding_is_refused(site: Site, tmp_path: Path) -> None:
    """A tray with two failed GPUs: a repair that names one of them as fixed leaves the other
    finding open and is refused, naming it; naming both (or neither: the whole tray) goes
    ahead, and only a new passing certification returns the tray to production."""
    tray, rack = "us-east/r02/c03", "us-east/r02"
    bad = tmp_path / "two-gpus.yaml"
    bad.write_text("version: 1\nfaults:\n"
                   f"  - {{target: {tray}/gpu1, kind: gpu_dead}}\n"
                   f"  - {{target: {tray}/gpu2, kind: gpu_dead}}\n")
    _cli("certify", "run", "--scope", rack, "--db", site.db, "--faults", str(bad), code=1)
    site.run()
    assert site.tray_state(tray) == "triage"
    before = site.moves(tray)

    out = flat(_cli("lifecycle", "repair", tray, "--reason", "gpu1 reseated", "--fixed",
                    f"{tray}/gpu1", "--db", site.db, "--plant", site.plant, code=2))
    assert f"{tray}/gpu2" in out and "does not address" in out and "nothing changed" in out
    assert f"{tray}/gpu1 " not in out  # the part it fixed is not named as open
    out = flat(_cli("lifecycle", "repair", tray, "--reason", "x", "--fixed",
                    "us-east/r01/c01/gpu0", "--db", site.db, "--plant", site.plant, code=2))
    assert f"us-east/r01/c01/gpu0 is not part of {tray}" in out
    assert site.moves(tray) == before  # neither refusal moved anything

    out = _cli("lifecycle", "repair", tray, "--reason", "both GPUs replaced", "--fixed",
               f"{tray}/gpu1", "--fixed", f"{tray}/gpu2", "--db", site.db, "--plant",
               site.plant, "--json")
    done = json.loads(out)
    assert done["path"] == ["repair", "burn_in"] and done["fixed"] == [f"{tray}/gpu1",
                                                                       f"{tray}/gpu2"]
    events = json.loads(_cli("lifecycle", "history", tray, "--db", site.db, "--json"))
    assert events[-2]["payload"]["fixed"] == [f"{tray}/gpu1", f"{tray}/gpu2"]
    site.run()
    assert site.tray_state(tray) == "burn_in"  # the failed run is older than the repair
    _cli("certify", "run", "--scope", rack, "--db", site.db, "--faults", str(site.none))
    site.run()
    assert site.tray_state(tray) == "production"
