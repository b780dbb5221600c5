"""The certification campaign as Kubernetes manifests: rendered, never executed here.

Every test of a planned batch (`certify.plan`) becomes one Indexed Job (batch/v1,
completionMode Indexed), one completion per rank, each pod asking for one GPU
(`nvidia.com/gpu: 1`) and running the same rank agent the runners start, in its one-shot
mode (`agent --once`, the rank from JOB_COMPLETION_INDEX). A Job may only land on the nodes
that hold its GPUs: a required node affinity on the node name (one node per tray or HGX
node, named as for Slurm: the component id with "/" as "-"), and a topology spread of at most
one pod of difference between nodes, which places exactly k pods per node when each node
holds k of the group's GPUs. A collective's rank 0 hosts the rendezvous store; the others
find it by its stable pod name through one headless Service. NVLink-off tests carry the NCCL
variables of `runners.fabric_env`.

Order: a batch starts when every Job of the batch before it has completed. Groups of one
batch that share GPUs are split into waves that run one after another, since the default
scheduler does not place a Job's pods all or nothing and two collectives waiting for the same
GPUs could each hold part of them. Labels and annotations (`rackscale.io/batch`, `/wave`,
`/stage`, `/order`) carry the order; `--out DIR` also writes one file per batch and wave,
named so that sorting the names gives the order.

The kubelet's device plugin picks which GPU of a node a pod gets, so the component id of a
rank is the node's GPU the pod reports, not fixed in the manifest.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rackscale.certify.plan import CampaignPlan, PlannedBatch
from rackscale.certify.runners.fabric_env import NVLINK_OFF_ENV
from rackscale.errors import UserError
from rackscale.fleet import Topology, slurm_node_name

GROUP = "rackscale.io"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# probes with no rank command: NVSwitch plane bandwidth needs the fabric's telemetry (NMX)
UNRENDERED = ("nvlink_plane",)


class K8sPlanError(UserError):
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class K8sOptions:
    """How the manifests are rendered. Validated at construction."""

    namespace: str = "rackscale-certify"
    image: str = "rackscale:latest"
    node_label: str = "kubernetes.io/hostname"
    service: str = "rackscale-ranks"
    iface: str = "eth0"  # the pods' interface for the rendezvous store and NCCL's sockets
    store_port: int = 29500
    timeout_s: int = 900  # a Job past this fails (activeDeadlineSeconds): a FAIL, not a hang
    repeats: int = 8
    gemm_n: int = 8192
    copy_bytes: int = 2 << 30

    def __post_init__(self) -> None:
        for name in ("namespace", "service"):
            value = getattr(self, name)
            if not DNS_LABEL.match(value) or len(value) > 63:
                raise K8sPlanError(f"--{name} {value!r}: use a DNS label (lowercase letters, "
                                   "digits and '-', at most 63 characters)")
        if not self.image.strip():
            raise K8sPlanError("--image: name the container image that holds rackscale")
        if not 1024 <= self.store_port <= 65535 - 64:
            raise K8sPlanError(f"store port {self.store_port}: use 1024..65471")
        if self.timeout_s < 1 or not 1 <= self.repeats <= 64:
            raise K8sPlanError("timeout must be >= 1 s and repeats 1..64")


def node_map(topo: Topology) -> dict[str, str]:
    """The Kubernetes node holding each GPU: its tray's (HGX: node's) name, as for Slurm."""
    return {g: slurm_node_name(tray) for g, tray in topo.tray_of_gpus().items()}


def waves(groups: Iterable[tuple[str, ...]]) -> list[list[tuple[str, ...]]]:
    """Groups split into waves of disjoint groups, each group in the first wave it fits."""
    out: list[list[tuple[str, ...]]] = []
    used: list[set[str]] = []
    for g in groups:
        for wave, busy in zip(out, used, strict=True):
            if busy.isdisjoint(g):
                wave.append(g)
                busy.update(g)
                break
        else:
            out.append([g])
            used.append(set(g))
    return out


def _op(batch: PlannedBatch, opts: K8sOptions, name: str, world: int) -> dict[str, Any]:
    """The agent command of every pod of one Job: the ops `RunnerBackend` sends."""
    if batch.probe == "gemm":
        return {"op": "gemm", "n": opts.gemm_n, "min_s": 1.0}
    if batch.probe == "hbm":
        return {"op": "copy", "nbytes": opts.copy_bytes}
    if batch.probe == "thermal":
        return {"op": "nvml"}  # the GPU's temperature, clock and power (nvidia-ml-py)
    return {"op": "allreduce", "tag": name, "world": world,
            "store_host": f"{name}-0.{opts.service}.{opts.namespace}.svc",
            "store_port": opts.store_port, "nbytes": batch.message_bytes or 1 << 30,
            "iters": 20, "warmup": 5, "timeout_s": float(opts.timeout_s), "iface": opts.iface}


def _env(batch: PlannedBatch, opts: K8sOptions, op: dict[str, Any]) -> list[dict[str, str]]:
    env = {"RACKSCALE_OP": json.dumps(op, sort_keys=True), "RACKSCALE_REPEATS":
           str(opts.repeats)}
    if batch.collective:
        env |= {"NCCL_SOCKET_IFNAME": opts.iface, "GLOO_SOCKET_IFNAME": opts.iface}
        if batch.nvlink is False:
            env |= NVLINK_OFF_ENV
    return [{"name": k, "value": v} for k, v in env.items()]


def _pod_spec(batch: PlannedBatch, opts: K8sOptions, name: str, nodes: list[str],
              env: list[dict[str, str]]) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": opts.node_label, "operator": "In", "values": nodes}]}]}}},
        "containers": [{
            "name": "rank", "image": opts.image,
            "command": ["python3", "-m", "rackscale.certify.runners.agent", "--once"],
            "env": env,
            "resources": {"limits": {"nvidia.com/gpu": 1}, "requests": {"nvidia.com/gpu": 1}},
        }],
    }
    if len(nodes) > 1:
        spec["topologySpreadConstraints"] = [{
            "maxSkew": 1, "topologyKey": opts.node_label, "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {f"{GROUP}/job": name}}}]
    if batch.collective:
        spec["subdomain"] = opts.service  # pod <job>-<index>.<service>: rank 0's address
    return spec


def _job(plan: CampaignPlan, batch: PlannedBatch, wave: int, index: int,
         members: tuple[str, ...], node_of: dict[str, str], opts: K8sOptions,
         ) -> dict[str, Any]:
    name = f"rs-b{batch.order:03d}-w{wave}-g{index:04d}"
    nodes = sorted({node_of[g] for g in members})
    per_node = {n: sum(node_of[g] == n for g in members) for n in nodes}
    op = _op(batch, opts, name, len(members))
    labels = {f"{GROUP}/campaign": plan_label(plan), f"{GROUP}/stage": str(batch.stage),
              f"{GROUP}/batch": str(batch.order), f"{GROUP}/wave": str(wave),
              f"{GROUP}/probe": batch.probe, f"{GROUP}/job": name}
    if batch.nvlink is not None:
        labels[f"{GROUP}/nvlink"] = "on" if batch.nvlink else "off"
    total = len(plan.batches)
    annotations = {
        f"{GROUP}/rendered": "rendered by `rackscale certify plan --k8s`; not executed by it",
        f"{GROUP}/order": f"batch {batch.order + 1} of {total}, wave {wave}: starts when every "
                          "Job of the batch (and wave) before it has completed",
        f"{GROUP}/members": json.dumps(list(members)),
        f"{GROUP}/ranks-per-node": json.dumps(per_node, sort_keys=True),
    }
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": opts.namespace, "labels": labels,
                     "annotations": annotations},
        "spec": {
            "completionMode": "Indexed", "completions": len(members),
            "parallelism": len(members), "backoffLimit": 0,
            "activeDeadlineSeconds": opts.timeout_s, "ttlSecondsAfterFinished": 86400,
            "template": {"metadata": {"labels": dict(labels)},
                         "spec": _pod_spec(batch, opts, name, nodes,
                                           _env(batch, opts, op))},
        },
    }


def plan_label(plan: CampaignPlan) -> str:
    """The fleet's name as a label value (<= 63 of [a-z0-9-_.], alphanumeric at both ends)."""
    text = re.sub(r"[^A-Za-z0-9_.-]", "-", plan.fleet)[:63].strip("-_.")
    return text or "fleet"


def _tests(batch: PlannedBatch, node_of: dict[str, str]) -> list[tuple[str, ...]]:
    """The Jobs of a batch: each collective group, or the GPUs of one node (per-rank)."""
    if batch.collective:
        return list(batch.groups)
    by_node: dict[str, list[str]] = {}
    for (g,) in batch.groups:
        by_node.setdefault(node_of[g], []).append(g)
    return [tuple(v) for v in by_node.values()]


def render_manifests(plan: CampaignPlan, topo: Topology, opts: K8sOptions | None = None,
           ) -> list[tuple[str, list[dict[str, Any]]]]:
    """Files of manifests in order: (file name, documents); first the Namespace and the
    headless Service, then one file per batch and wave."""
    opts = opts or K8sOptions()
    campaign = plan_label(plan)
    base = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": opts.namespace}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": opts.service, "namespace": opts.namespace,
                      "labels": {f"{GROUP}/campaign": campaign}},
         "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                  "selector": {f"{GROUP}/campaign": campaign}}},
    ]
    files = [("000-namespace.yaml", base)]
    node_of = node_map(topo)
    for batch in plan.batches:
        if batch.probe in UNRENDERED:
            continue
        for w, wave in enumerate(waves(_tests(batch, node_of))):
            docs = [_job(plan, batch, w, i, members, node_of, opts)
                    for i, members in enumerate(wave)]
            files.append((f"{batch.order + 1:03d}-w{w}-stage{batch.stage}-"
                          f"{batch.probe.replace('_', '-')}.yaml", docs))
    return files


@functools.lru_cache(maxsize=32)
def _validator(kind: str, api_version: str, version: str) -> Any:
    """kubernetes-validate's strict schema of one kind, compiled once: its own `validate`
    re-reads the schema definitions for every document (seconds per hundred documents)."""
    import jsonschema
    from kubernetes_validate import utils
    from referencing import Registry, Resource

    known = [v for v in utils.all_versions() if utils.major_minor(v) <= utils.major_minor(version)]
    if not known:
        raise K8sPlanError(f"no Kubernetes schemas for {version}; the oldest known is "
                           f"{utils.all_versions()[0]}")
    folder = f"kubernetes-json-schema/v{known[-1]}-local-strict"
    api = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    try:
        schema = utils.schema_contents(f"{folder}/{kind.lower()}-{api}.json", version)
    except FileNotFoundError:
        raise K8sPlanError(f"no Kubernetes {version} schema for {kind} {api_version}") from None
    defs = utils.schema_contents(f"{folder}/_definitions.json", version)
    registry = Resource.from_contents(defs) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def validate_manifests(files: list[tuple[str, list[dict[str, Any]]]], version: str) -> int:
    """Check every document against the strict Kubernetes `version` schemas (no unknown
    fields, with kubernetes-validate's schemas); raises K8sPlanError naming the file,
    document and field. Returns the number of documents checked."""
    try:
        import kubernetes_validate
    except ImportError:
        raise K8sPlanError("validating needs kubernetes-validate: pip install "
                           "'rackscale[k8s]', or render with --no-validate") from None
    import jsonschema
    if kubernetes_validate.utils.major_minor(version) > kubernetes_validate.latest_version():
        raise K8sPlanError(f"no Kubernetes {version} schemas. Fix: --k8s-version "
                           f"{kubernetes_validate.latest_version()} or older")
    count = 0
    for fname, docs in files:
        for i, doc in enumerate(docs):
            try:
                _validator(doc["kind"], doc["apiVersion"], version).validate(doc)
            except jsonschema.ValidationError as err:
                path = ".".join(str(p) for p in err.absolute_path)
                raise K8sPlanError(f"{fname} document {i + 1} ({doc['kind']} "
                                   f"{doc['metadata']['name']}): {path}: {err.message}") \
                    from None
            count += 1
    return count
