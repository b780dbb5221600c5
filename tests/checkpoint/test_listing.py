"""`checkpoint ls` (and the API, which lists through the same rule) reports what the tiers hold:
a DCP checkpoint's `.metadata` is an object like any other, a checkpoint's state is the
furthest it reached (not whichever name sorts last), and an imported checkpoint's local copy
is there."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from rackscale.checkpoint import LocalDirStore, Tiers, default_config
from rackscale.checkpoint.manifest import ORDER
from rackscale.cli import app

runner = CliRunner()


def test_a_dotfile_object_is_listed_and_the_stores_own_temporaries_are_not(
        tmp_path: Path) -> None:
    store = LocalDirStore(tmp_path / "s", sync=False)
    store.put("ck/data/.metadata", b"m")
    store.put("ck/data/__0_0.distcp", b"d")
    upload = store.create_upload("ck/data/big")  # a multipart upload under way
    store.upload_part("ck/data/big", upload, 1, b"x")
    (tmp_path / "s" / "ck" / "data" / ".__0_0.distcp.1234abcd.tmp").write_bytes(b"half")
    assert store.list("ck/") == ["ck/data/.metadata", "ck/data/__0_0.distcp"]
    assert store.list("ck/data/.meta") == ["ck/data/.metadata"]


def _dcp_dir(tmp_path: Path) -> Path:
    src = tmp_path / "dcp"
    src.mkdir()
    (src / ".metadata").write_bytes(b"metadata" * 100)
    (src / "__0_0.distcp").write_bytes(b"rank0" * 1000)
    (src / "__1_0.distcp").write_bytes(b"rank1" * 1000)
    return src


def _ls(tmp_path: Path) -> dict:
    r = runner.invoke(app, ["checkpoint", "ls", "--json"])
    assert r.exit_code == 0, r.output
    return {row["id"]: row for row in json.loads(r.output)["checkpoints"]}


def test_an_imported_dcp_checkpoint_lists_as_held_everywhere_in_its_furthest_state(
        tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["checkpoint", "import", str(_dcp_dir(tmp_path)), "--step", "7",
                            "--json"])
    assert r.exit_code == 0, r.output
    states = json.loads(r.output)["states"]
    furthest = [s.value for s in ORDER if s.value in states][-1]
    assert furthest != "staged"
    row = _ls(tmp_path)["step-00000007"]
    assert row["state"] == furthest
    assert row["tiers"]["local"] == "yes", row["tiers"]
    assert row["tiers"]["us-east"] == "yes", row["tiers"]
    # Another node (no catalog of this one's): the state comes from the manifest, whose keys
    # are stored sorted; it is still the furthest state, not "staged".
    shutil.rmtree(Path(Tiers(default_config("rackscale-data")).root) / "catalog")
    assert _ls(tmp_path)["step-00000007"]["state"] == furthest
