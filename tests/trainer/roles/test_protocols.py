"""Each role class implements its Protocol, the interface the loop calls it by: every method the
Protocol names exists on the class with the same parameters (a renamed or dropped method, or a changed
signature, would otherwise surface only as a failed remote call in a run)."""

from __future__ import annotations

import inspect

import pytest

from trainer.roles import ROLE_PROTOCOLS, WORKER_CLASSES


def protocol_methods(protocol: type) -> dict[str, inspect.Signature]:
    return {name: inspect.signature(member) for name, member in inspect.getmembers(protocol, inspect.isfunction)
            if not name.startswith("_")}


@pytest.mark.parametrize("role", sorted(ROLE_PROTOCOLS))
def test_the_role_class_implements_its_protocol(role: str) -> None:
    worker = WORKER_CLASSES[role]
    methods = protocol_methods(ROLE_PROTOCOLS[role])
    assert methods, f"{ROLE_PROTOCOLS[role].__name__} names no method"
    for name, expected in methods.items():
        assert hasattr(worker, name), f"{worker.__name__} lacks {name} of {ROLE_PROTOCOLS[role].__name__}"
        got = inspect.signature(getattr(worker, name))
        assert list(got.parameters) == list(expected.parameters), f"{worker.__name__}.{name}{got} != {expected}"


def test_every_role_the_runner_builds_has_a_protocol() -> None:
    assert set(WORKER_CLASSES) == set(ROLE_PROTOCOLS)
