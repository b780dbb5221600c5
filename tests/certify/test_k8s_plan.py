"""`certify plan --k8s`: the ladder's campaign rendered as Kubernetes Indexed Jobs, checked
against the Kubernetes schemas; the rendered pod command run for real on this host."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from rackscale.certify import Ladder, LadderConfig, TwinBackend
from rackscale.certify.k8s import K8sOptions, K8sPlanError, waves
from rackscale.certify.k8s import render_manifests as render
from rackscale.certify.k8s import validate_manifests as validate
from rackscale.certify.plan import plan_campaign
from rackscale.cli import app
from rackscale.cli.fleet import spec_of
from rackscale.faults import TwinHardware
from rackscale.fleet import Topology, seed_fleet

LAB = str(Path(__file__).parents[2] / "src/rackscale/lab/data/lab.yaml")
SRC = str(Path(__file__).parents[2] / "src")
runner = CliRunner()


@pytest.fixture(scope="module")
def lab_topo() -> Topology:
    return Topology.build(spec_of(LAB))


def _jobs(files: list[tuple[str, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    return [d for _, docs in files for d in docs if d["kind"] == "Job"]


def _members(job: dict[str, Any]) -> tuple[str, ...]:
    return tuple(json.loads(job["metadata"]["annotations"]["rackscale.io/members"]))


def _node(gpu: str) -> str:
    """A GPU's node, from its id alone: its tray's id with '/' as '-'."""
    return gpu.rsplit("/", 1)[0].replace("/", "-")


def _env(job: dict[str, Any]) -> dict[str, str]:
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    return {e["name"]: e["value"] for e in env}


@pytest.mark.parametrize("fleet", ["lab", "seed"])
def test_plan_is_the_ladders_campaign(fleet: str, lab_topo: Topology) -> None:
    topo = lab_topo if fleet == "lab" else Topology.build(seed_fleet())
    plan = plan_campaign(topo)
    ran = Ladder(topo, TwinBackend(TwinHardware(topo, None, seed=7)),
                 LadderConfig(repeats=1)).run()
    assert plan.findings == 0 and not ran.findings
    assert len(plan.batches) == ran.campaign.batches
    assert sum(len(b.groups) for b in plan.batches if b.collective) == \
        ran.campaign.collective_tests
    assert [b.stage for b in plan.batches] == sorted(b.stage for b in plan.batches)
    assert {b.stage for b in plan.batches} == {1, 2, 3, 4}
    scoped = plan_campaign(topo, LadderConfig(scope=topo.racks[0].id, stages=(2,)))
    gpus = {g for b in scoped.batches for grp in b.groups for g in grp}
    assert gpus and all(g.startswith(topo.racks[0].id + "/") for g in gpus)


def test_rendered_manifests_validate_and_a_broken_one_does_not(lab_topo: Topology) -> None:
    files = render(plan_campaign(lab_topo), lab_topo)
    n = sum(len(docs) for _, docs in files)
    assert validate(files, "1.31") == n
    broken = copy.deepcopy(files)
    broken[1][1][0]["spec"]["completions"] = "two"  # a count must be an integer
    with pytest.raises(K8sPlanError, match=r"001-w0-stage1-gemm\.yaml document 1.*"
                                           r"completions"):
        validate(broken, "1.31")
    broken = copy.deepcopy(files)
    broken[4][1][0]["spec"]["template"]["spec"]["containers"][0]["gpus"] = 1  # unknown field
    with pytest.raises(K8sPlanError, match="gpus"):
        validate(broken, "1.31")


@pytest.mark.parametrize("fleet", ["lab", "seed"])
def test_every_group_is_one_job_on_its_nodes(fleet: str, lab_topo: Topology) -> None:
    topo = lab_topo if fleet == "lab" else Topology.build(seed_fleet())
    plan = plan_campaign(topo)
    jobs = _jobs(render(plan, topo))
    by_batch: dict[int, list[dict[str, Any]]] = {}
    for j in jobs:
        by_batch.setdefault(int(j["metadata"]["labels"]["rackscale.io/batch"]), []).append(j)
    assert sorted(by_batch) == [b.order for b in plan.batches]
    for b in plan.batches:
        got = by_batch[b.order]
        if b.collective:
            assert sorted(_members(j) for j in got) == sorted(b.groups)
        else:  # per-rank: one Job per node, every GPU of the batch exactly once
            gpus = [g for j in got for g in _members(j)]
            assert sorted(gpus) == sorted(g for (g,) in b.groups)
        for j in got:
            members, spec = _members(j), j["spec"]
            pod = spec["template"]["spec"]
            term = pod["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
            assert term["matchExpressions"][0]["values"] == sorted({_node(g) for g in members})
            assert spec["completionMode"] == "Indexed"
            assert spec["completions"] == spec["parallelism"] == len(members)
            limits = pod["containers"][0]["resources"]["limits"]
            assert limits == {"nvidia.com/gpu": 1}
            env = _env(j)
            off = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_NVLS_ENABLE": "0"}
            if b.nvlink is False:
                assert off.items() <= env.items()
            else:
                assert not set(off) & set(env)
            op = json.loads(env["RACKSCALE_OP"])
            if b.collective:
                assert op["world"] == len(members) and op["store_host"].startswith(
                    j["metadata"]["name"] + "-0.")


group_lists = st.lists(st.lists(st.integers(0, 12), min_size=1, max_size=5, unique=True)
                       .map(lambda g: tuple(f"g{i}" for i in sorted(g))), max_size=12)


@settings(max_examples=200, deadline=None)
@given(group_lists)
def test_waves_are_disjoint_and_first_fit(groups: list[tuple[str, ...]]) -> None:
    out = waves(groups)
    assert sorted(g for w in out for g in w) == sorted(groups)
    for i, w in enumerate(out):
        seen = [x for g in w for x in g]
        assert len(seen) == len(set(seen))  # a wave's groups share no GPU
        for g in w:  # and a group waits only for waves it overlaps
            assert all(any(set(g) & set(h) for h in out[k]) for k in range(i))


def test_cli_stdout_out_dir_and_errors(tmp_path: Path) -> None:
    res = runner.invoke(app, ["certify", "plan", "--fleet", LAB, "--k8s"])
    assert res.exit_code == 0, res.output
    assert "RENDERED, NOT EXECUTED" in res.stdout
    docs = list(yaml.safe_load_all(res.stdout))
    files = runner.invoke(app, ["certify", "plan", "--fleet", LAB, "--k8s", "--out",
                                str(tmp_path / "m")])
    assert files.exit_code == 0, files.output
    names = sorted(p.name for p in (tmp_path / "m").iterdir())
    from_files = [d for n in names for d in yaml.safe_load_all((tmp_path / "m" / n).read_text())]
    assert from_files == docs  # files in name order are the stdout stream, in order
    batches = [int(d["metadata"]["labels"]["rackscale.io/batch"]) for d in docs
               if d["kind"] == "Job"]
    assert batches == sorted(batches)
    plain = runner.invoke(app, ["certify", "plan", "--fleet", LAB, "--json"])
    assert plain.exit_code == 0 and json.loads(plain.stdout)["rendered_not_executed"] is True

    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nregions:\n  - name: x\n    racks: [{template: nope, count: 1}]\n")
    res = runner.invoke(app, ["certify", "plan", "--fleet", str(bad), "--k8s"])
    assert res.exit_code == 2 and "bad.yaml:4" in res.output and "nope" in res.output
    assert "Traceback" not in res.output
    res = runner.invoke(app, ["certify", "plan", "--fleet", LAB, "--k8s", "--namespace",
                              "Bad_NS"])
    assert res.exit_code == 2 and "--namespace" in res.output
    res = runner.invoke(app, ["certify", "plan", "--fleet", LAB, "--out", str(tmp_path)])
    assert res.exit_code == 2 and "--k8s" in res.output
    res = runner.invoke(app, ["certify", "plan", "--fleet", LAB, "--k8s", "--k8s-version",
                              "9.0"])
    assert res.exit_code == 2 and "--k8s-version" in res.output


def _pod_process(job: dict[str, Any], index: int, **overrides: Any) -> subprocess.Popen[str]:
    """Start the container command of one pod of `job` here, with its env (as the kubelet
    would, plus the completion index it sets); `overrides` replace fields of the command."""
    container = job["spec"]["template"]["spec"]["containers"][0]
    env = _env(job)
    env["RACKSCALE_OP"] = json.dumps(json.loads(env["RACKSCALE_OP"]) | overrides)
    argv = [sys.executable if a == "python3" else a for a in container["command"]]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=os.environ | env | {"JOB_COMPLETION_INDEX": str(index),
                                                    "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"})


def test_the_rendered_pod_command_runs(lab_topo: Topology) -> None:
    """The pods' command and environment, run as processes here: a per-rank GEMM and a
    2-rank collective (its store address is the pod DNS name there, the loopback here)."""
    pytest.importorskip("torch")
    opts = K8sOptions(gemm_n=128, repeats=2, iface="lo", timeout_s=60)
    files = render(plan_campaign(lab_topo, LadderConfig(stages=(1, 2))), lab_topo, opts)
    jobs = _jobs(files)
    gemm = next(j for j in jobs if j["metadata"]["labels"]["rackscale.io/probe"] == "gemm")
    tray = next(j for j in jobs
                if j["metadata"]["labels"]["rackscale.io/probe"] == "nvlink_allreduce")
    assert tray["spec"]["completions"] == 2
    port = 31000 + os.getpid() % 2000
    procs = [_pod_process(gemm, 0, min_s=0.1)] + [
        _pod_process(tray, i, store_host="127.0.0.1", store_port=port, nbytes=1 << 16)
        for i in range(2)]
    outs = [p.communicate(timeout=240) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-800:]
    replies = [[json.loads(x) for x in out.splitlines()] for out, _ in outs]
    assert len(replies[0]) == 2 and all(r["ok"] and r["checksum_ok"] for r in replies[0])
    for r in replies[1] + replies[2]:
        assert r["ok"] and r["result_ok"] and r["seconds"] > 0
