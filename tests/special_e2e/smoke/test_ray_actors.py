"""Where a run's actors live, from Ray's state API records: roles by class name, counted per node, peaks kept."""

import json
import os
import signal
import threading

from tests.special_e2e.smoke.ray_actors import merge_peak, placement, role_of, sample_until_stopped

NODES = {"id1": "10.0.0.1", "id2": "10.0.0.2"}


def actor(class_name, node_id, state="ALIVE"):
    return {"class_name": class_name, "node_id": node_id, "state": state}


def test_roles_come_from_verls_and_the_recipes_class_names():
    assert role_of("create_colocated_worker_cls.<locals>.WorkerDict") == "FSDP ranks"
    assert role_of("vLLMHttpServer") == "vLLM replicas" and role_of("CreditWorker") == "credit-actor shards"
    assert role_of("GCPOTaskRunner") is None


def test_alive_actors_are_counted_per_node_and_the_most_at_once_is_kept():
    first = placement(
        [
            actor("WorkerDict", "id1"),
            actor("WorkerDict", "id2"),
            actor("CreditWorker", "id1"),
            actor("CreditWorker", "id2", state="DEAD"),
            actor("GCPOTaskRunner", "id1"),
        ],
        NODES,
    )
    assert first == {"FSDP ranks": {"10.0.0.1": 1, "10.0.0.2": 1}, "credit-actor shards": {"10.0.0.1": 1}}
    later = placement([actor("CreditWorker", "id2"), actor("CreditWorker", "id2")], NODES)
    peak = merge_peak(merge_peak({}, first), later)
    assert peak["credit-actor shards"] == {"10.0.0.1": 1, "10.0.0.2": 2}
    assert peak["FSDP ranks"] == {"10.0.0.1": 1, "10.0.0.2": 1}


def test_the_sampler_keeps_trying_until_the_state_api_answers_and_stops_on_sigterm(tmp_path):
    answers = [
        RuntimeError("ServerUnavailable"),
        {"vLLM replicas": {"10.0.0.1": 1}},
        {"vLLM replicas": {"10.0.0.2": 1}},
    ]

    def sample(address):
        answer = answers.pop(0) if answers else {}
        if isinstance(answer, Exception):
            raise answer
        return answer

    out = tmp_path / "actors.json"
    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGTERM))
    previous = signal.getsignal(signal.SIGTERM)
    try:
        timer.start()
        record = sample_until_stopped(out, "http://127.0.0.1:8265", interval_s=0.05, sample=sample)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert record["errors"] == 1 and "ServerUnavailable" in record["last_error"]
    assert record["peak"] == {"vLLM replicas": {"10.0.0.1": 1, "10.0.0.2": 1}}
    assert json.loads(out.read_text()) == record
