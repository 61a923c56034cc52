"""Each fault of the suite at a random step of a real run through the platform (harness.py): the run ends
succeeded (auto-resumed from its latest checkpoint where the trainer died), with no metric point lost or
duplicated, rollouts and checkpoints as in the run directory, and the page and the API in agreement."""

from __future__ import annotations

import pytest

from tests.faults.harness import (
    FAULTS,
    ROWS,
    SECOND_NODE,
    SEED,
    cleanup_stopped,
    expectations,
    fault_rng,
    run_fault,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]



@pytest.mark.parametrize("fault", [f for f in FAULTS if f.name != SECOND_NODE], ids=lambda f: f.name)
def test_the_run_survives(fault, fault_stack, tenant_client) -> None:
    client, experiment = tenant_client
    try:
        row = run_fault(fault_stack, client, experiment, fault, fault_rng(SEED, fault))
    finally:
        cleanup_stopped(fault_stack)
    ROWS.append(row)
    assert not expectations(row, fault), (row.outcome, expectations(row, fault))
