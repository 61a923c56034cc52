"""A run spans two Ray nodes (actor_train on the head, actor_infer on the second node, weight sync across
them), as Ray's own records show; and it survives losing the second node mid-run."""

from __future__ import annotations

import pytest

from tests.faults.harness import (
    DEVICES_PER_NODE,
    FAULTS,
    ROWS,
    SECOND_NODE,
    SEED,
    FaultError,
    Stack,
    cleanup_stopped,
    current,
    expectations,
    fault_rng,
    launch,
    ray_state,
    run_fault,
    wait_for,
)
from trainer.cluster.resources import node_resource

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]



def node_index_of_actors(stack: Stack) -> dict[str, int]:
    """Ray's records: the live actor of each role and rank -> the index of the node it runs on (the node's
    `policylab_node_<i>` resource)."""
    index_of = {}
    for node in ray_state(stack, "nodes", limit=100):
        marks = [i for i in range(8) if node_resource(i) in node.resources_total]
        if len(marks) == 1:
            index_of[node.node_id] = marks[0]
    actors = ray_state(stack, "actors")
    return {a.repr_name: index_of[a.node_id] for a in actors if a.repr_name and a.node_id in index_of}


def test_roles_run_on_the_nodes_their_device_ids_name(fault_stack, tenant_client) -> None:
    client, experiment = tenant_client
    run_id = launch(client, experiment, ())
    try:
        def placed() -> dict[str, int] | None:
            state = current(client, run_id)
            if state and state["status"] in {"failed", "cancelled"}:
                raise FaultError(f"run {run_id} ended: {state['status']}: {state['message']}")
            where = node_index_of_actors(fault_stack)
            return where if {"actor_train:0", "actor_infer:0"} <= where.keys() and state["current_step"] >= 2 else None

        where = wait_for(placed, 240, f"run {run_id}'s workers on the cluster and two steps done")
        # device 0 -> node 0 (the head), device DEVICES_PER_NODE -> node 1 (the second node)
        assert where["actor_train:0"] == 0, where
        assert where["actor_infer:0"] == 1, where
        assert DEVICES_PER_NODE == 4
        # weight sync across the nodes: the engine's log-probs are the trainer's (ppo_epochs=2 recomputes them)
        metrics = client.get(f"/api/runs/{run_id}/metrics/export/?format=json")
        column = metrics["columns"].index("rollout/logprob_diff_max")
        gaps = [row[column] for row in metrics["rows"] if row[column] is not None]
        assert gaps and max(gaps) < 1e-3, gaps
    finally:
        client.request(f"/api/runs/{run_id}/cancel/", {})
        wait_for(lambda: (s := current(client, run_id)) and s["status"] in {"cancelled", "succeeded", "failed"},
                 120, f"run {run_id} to stop")


def test_the_run_survives_losing_the_second_node(fault_stack, tenant_client) -> None:
    client, experiment = tenant_client
    fault = next(f for f in FAULTS if f.name == SECOND_NODE)
    try:
        row = run_fault(fault_stack, client, experiment, fault, fault_rng(SEED, fault))
    finally:
        cleanup_stopped(fault_stack)
    ROWS.append(row)
    assert not expectations(row, fault), (row.outcome, expectations(row, fault))
