"""Where a run's Ray actors live, from Ray's state API: sampled while a multi-node run trains, so that the cluster
smoke can check that FSDP ranks, vLLM replicas and credit-actor shards ran on every node."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional

from tests.special_e2e.smoke.processes import _parent_alive, _Stop

# Ray's class name of each role's actors (verl 0.9.1, this recipe); verl's fused FSDP worker is created as
# "create_colocated_worker_cls.<locals>.WorkerDict"
ROLE_CLASSES = {
    "FSDP ranks": ("WorkerDict",),
    "vLLM replicas": ("vLLMHttpServer",),
    "credit-actor shards": ("CreditWorker",),
    "reward workers": ("RewardLoopWorker",),
    "agent-loop workers": ("AgentLoopWorkerTQ", "AgentLoopWorker"),
}


def role_of(class_name: str) -> Optional[str]:
    short = class_name.rsplit(".", 1)[-1]
    for role, classes in ROLE_CLASSES.items():
        if short in classes:
            return role
    return None


def placement(actors: Iterable[Mapping], node_ips: Mapping[str, str]) -> dict[str, dict[str, int]]:
    """{role: {node IP: alive actors}} from state-API records (``class_name``, ``node_id``, ``state``) and
    {node_id: IP}."""
    seen: dict[str, dict[str, int]] = {}
    for actor in actors:
        role = role_of(str(actor.get("class_name", "")))
        if role is None or actor.get("state") != "ALIVE":
            continue
        ip = node_ips.get(actor.get("node_id"), "?")
        seen.setdefault(role, {})
        seen[role][ip] = seen[role].get(ip, 0) + 1
    return seen


def merge_peak(peak: dict[str, dict[str, int]], sample: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """The most actors of each role seen on each node at one time, over samples."""
    for role, by_ip in sample.items():
        for ip, count in by_ip.items():
            peak.setdefault(role, {})
            peak[role][ip] = max(peak[role].get(ip, 0), count)
    return peak


def _state_api_sample(address: str) -> dict[str, dict[str, int]]:
    from ray.util.state import list_actors, list_nodes

    ips = {node.node_id: node.node_ip for node in list_nodes(address=address, limit=1000)}
    actors = [
        {"class_name": a.class_name, "node_id": a.node_id, "state": a.state}
        for a in list_actors(address=address, limit=10000)
    ]
    return placement(actors, ips)


def sample_until_stopped(
    out: Path,
    address: str,
    interval_s: float = 10.0,
    parent_pid: Optional[int] = None,
    sample: Callable[[str], dict] = _state_api_sample,
) -> dict:
    """Sample the actors' placement until SIGTERM (or the parent is gone); write the peak per role and node, the
    number of samples and the last error (the dashboard answers only once the head is up) to ``out``."""
    stop = _Stop()
    record = {"address": address, "peak": {}, "samples": 0, "errors": 0, "last_error": ""}
    while not stop.requested and _parent_alive(parent_pid):
        try:
            merge_peak(record["peak"], sample(address))
            record["samples"] += 1
        except Exception as err:  # the state API is not up yet, or the head is gone: keep trying
            record["errors"] += 1
            record["last_error"] = f"{type(err).__name__}: {err}"[:300]
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=1), encoding="utf-8")
        tmp.replace(out)
        time.sleep(interval_s)
    return record
