"""Storage under a soak: soak.json's `storage` for the cache on and off, the cache on/off
table rebuilt from two soak.json files (a real soak's, `data/soak1/`, copied and altered), the
storage what-if's prediction for the same change, and bad input."""

from __future__ import annotations

import copy
import importlib.util
import json
import math
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from typer.testing import CliRunner

from rackscale.checkpoint import ConfigError
from rackscale.cli import app
from rackscale.recovery import job_tiers
from rackscale.soak import from_dict
from rackscale.soak.storage import StorageCompareError, compare, storage_summary

DATA = Path(__file__).parent / "data" / "soak1"
RESULT: dict[str, Any] = json.loads((DATA / "soak.json").read_text(encoding="utf-8"))
SCHEDULE = from_dict(json.loads((DATA / "schedule.json").read_text(encoding="utf-8")))
BENCH = Path(__file__).parents[2] / "bench" / "bench_soak.py"
SLOWER_S = 2.0  # what the fixture's cache-off soak adds to each restore


def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_soak", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def pair() -> tuple[dict[str, Any], dict[str, Any]]:
    """The real soak as the cache-on run, and a copy whose restores each took 2 s longer as
    the cache-off run (the extra time added to its lost GPU-time, the ETTR lowered to match)."""
    on = copy.deepcopy(RESULT) | {"storage": {"local_cache": True}}
    off = copy.deepcopy(RESULT) | {"storage": {"local_cache": False}}
    extra = 0.0
    for f in off["faults"]:
        if f["recovered"]:
            f["badput_s"]["restore"] += SLOWER_S
            extra += SLOWER_S
    off["badput_s"]["restore"] += extra
    off["ettr"] = {k: (v - extra / off["window_s"] if k in ("value", "lo", "hi") else v)
                   for k, v in off["ettr"].items()}
    return on, off


def write_pair(tmp: Path) -> tuple[Path, Path]:
    out = []
    for name, r in zip(("on", "off"), pair(), strict=True):
        d = tmp / name
        d.mkdir()
        shutil.copy(DATA / "schedule.json", d / "schedule.json")
        (d / "soak.json").write_text(json.dumps(r), encoding="utf-8")
        out.append(d / "soak.json")
    return out[0], out[1]


def test_the_default_tiers_have_the_cache_on(tmp_path: Path) -> None:
    s = storage_summary(None, tmp_path / "job")
    assert s["config"] is None and s["local_cache"] is True and s["replication"] is False


def test_a_config_with_the_cache_off_says_so(tmp_path: Path) -> None:
    cfg = tmp_path / "tiers.json"
    off = job_tiers(tmp_path / "job").model_copy(update={"local_cache": False})
    cfg.write_text(off.model_dump_json(), encoding="utf-8")
    s = storage_summary(cfg, tmp_path / "job")
    assert s == s | {"config": str(cfg), "local_cache": False, "replication": False,
                     "region": "region", "replicas": []}


def test_a_missing_config_is_refused_with_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"tiers\.yaml does not exist; write one"):
        storage_summary(tmp_path / "tiers.yaml", tmp_path / "job")


def test_a_file_that_is_no_tiers_config_names_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "schedule.json"
    shutil.copy(DATA / "schedule.json", bad)
    with pytest.raises(ConfigError, match=r"schedule\.json: .*docs/checkpoint\.md"):
        storage_summary(bad, tmp_path / "job")
    cfg = tmp_path / "tiers.yaml"
    cfg.write_text("local_dir: /tmp/x\nregion: {name: r, kind: dir, path: /tmp/r}\n"
                   "local_cache: maybe\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"tiers\.yaml: local_cache: "):
        storage_summary(cfg, tmp_path / "job")


def test_job_soak_refuses_a_missing_config_before_the_lab(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["job", "soak", "--lab", str(tmp_path / "no-lab"),
                                   "--config", str(tmp_path / "none.yaml"),
                                   "--out", str(tmp_path / "soak")])
    assert res.exit_code == 2
    assert "none.yaml does not exist" in res.output


def test_the_table_from_two_soaks_sets_measured_beside_simulated(tmp_path: Path) -> None:
    on, off = write_pair(tmp_path)
    b = bench()
    c = b.storage_result(on, off)
    d = c["measured"]["off_minus_on"]
    assert d["restore_s_per_restart"] == pytest.approx(SLOWER_S)
    assert d["lost_gpu_s"] == pytest.approx(3 * SLOWER_S * RESULT["job"]["gpus"], rel=0.01)
    assert d["lost_work_gpu_s"] == 0 and d["ettr_pp"] < 0
    text = b.storage_table(c)
    for row in ("on (measured)", "off (measured)", "off - on (measured)", "on (simulated)",
                "off (simulated)", "off - on (simulated)"):
        assert f"| {row} |" in text
    assert "+2.00" in text
    assert b.main(["--storage-tabulate", str(on), str(off), "--json",
                   str(tmp_path / "out.json")]) == 0
    assert json.loads((tmp_path / "out.json").read_text())["simulated"]["simulated"] is True


def test_the_whatif_predicts_a_finite_cost_of_turning_the_cache_off() -> None:
    on, off = pair()
    sim = compare(on, off, SCHEDULE, trials=400)["simulated"]
    st = sim["storage"]
    assert st["restore_local_s"] < st["restore_region_s"]  # the soaks' restores, as fed
    d = sim["off_minus_on"]
    assert math.isfinite(d["lost_gpu_s"]["mean"]) and d["lost_gpu_s"]["mean"] > 0
    assert d["restore_s_per_restart"] > 0 and d["ettr_pp"] < 0


def test_two_different_schedules_are_refused() -> None:
    on, off = pair()
    off["schedule"] = off["schedule"] | {"seed": 7}
    with pytest.raises(StorageCompareError, match=r"different schedules.*--schedule"):
        compare(on, off, SCHEDULE)


def test_a_soak_without_a_storage_record_is_refused() -> None:
    on, off = pair()
    del on["storage"]
    with pytest.raises(StorageCompareError, match="cache on: no storage record"):
        compare(on, off, SCHEDULE)
    on, off = pair()
    with pytest.raises(StorageCompareError, match="local_cache False"):
        compare(off, on, SCHEDULE)


def test_a_stopped_soak_is_a_row_of_its_own_and_counts_as_not_met(tmp_path: Path) -> None:
    """A soak whose job stopped (out of spares) gives the bench no figures: its row says so,
    with the reason, beside the soaks that ran, and the goal line counts it as not met."""
    b = bench()
    soak = tmp_path / "soak.json"
    soak.write_text(json.dumps(RESULT), encoding="utf-8")
    (tmp_path / "schedule.json").write_text((DATA / "schedule.json").read_text("utf-8"),
                                            encoding="utf-8")
    ran = b.row(soak) | {"mix": "cooling-0"}
    stopped = {"mix": "cooling-1", "faults": 3, "seed": 202, "stopped": "3 slots must leave"}
    text = b.table([ran, stopped])
    assert "| cooling-1 | 3 | 202 | - | - | - | - | no: the job stopped |" in text
    assert "cooling-1 seed 202: stopped: 3 slots must leave" in text
    assert f"{int(ran['met'])} of 2 met" in text  # a stopped soak met nothing
    assert b._error_of(json.dumps({"error": {"message": "no spare"}}), "") == "no spare"
