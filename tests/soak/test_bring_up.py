"""The soak's bring-up: a certification finding before any fault is injected must show
twice before the soak refuses (one measurement bent by a loaded host stopped a soak)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rackscale.fleet import Topology, seed_fleet
from rackscale.soak.fleet import SoakFleet, SoakFleetError


class _Stop(Exception):
    pass


class _Scripted(SoakFleet):
    """The soak's fleet with certifications that answer from a script (no lab)."""

    verdicts: list[bool]
    asked: list[Path]

    def _certify_now(self, scope: str | None, out: Path) -> dict[str, Any]:
        self.asked.append(out)
        ok = self.verdicts[len(self.asked) - 1]
        return {"passed": ok, "why": "" if ok else "lab/r02/c02/nic0 flapping",
                "out": str(out), "run_id": None}


def _fleet(tmp_path: Path, verdicts: list[bool], monkeypatch) -> tuple[SoakFleet, list]:
    logged: list[tuple[str, dict[str, Any]]] = []
    fleet = _Scripted(lab_dir=tmp_path / "lab", fleet_file="lab.yaml", out=tmp_path,
                      db=f"sqlite:///{tmp_path / 'soak.db'}", topo=Topology.build(seed_fleet()),
                      log=lambda kind, **kw: logged.append((kind, kw)))
    fleet.verdicts, fleet.asked = verdicts, []

    def walked(**_kw: Any) -> None:
        raise _Stop  # past the certification: the controller's walk is not this test's

    monkeypatch.setattr(fleet.ctl, "run", walked)
    return fleet, [fleet.asked, logged]


def test_a_clean_first_certification_is_not_repeated(tmp_path: Path, monkeypatch) -> None:
    fleet, (asked, _) = _fleet(tmp_path, [True], monkeypatch)
    with pytest.raises(_Stop):
        fleet.bring_up()
    assert [p.name for p in asked] == ["certify-bring-up"]


def test_a_finding_that_does_not_show_again_lets_the_soak_go_on(tmp_path: Path,
                                                              monkeypatch) -> None:
    fleet, (asked, logged) = _fleet(tmp_path, [False, True], monkeypatch)
    with pytest.raises(_Stop):
        fleet.bring_up()
    assert [p.name for p in asked] == ["certify-bring-up", "certify-bring-up-retest"]
    assert [k for k, _ in logged if k == "bring_up_retest"] == ["bring_up_retest"]


def test_a_finding_that_shows_twice_stops_the_soak_naming_it(tmp_path: Path,
                                                           monkeypatch) -> None:
    fleet, (asked, _) = _fleet(tmp_path, [False, False], monkeypatch)
    with pytest.raises(SoakFleetError, match="nic0 flapping"):
        fleet.bring_up()
    assert len(asked) == 2
