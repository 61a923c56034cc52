"""The worker groups are generic in their role (trainer.roles.RoleGroups): a type checker refuses a call of a
method of another role, or the wrong arguments or result type of a role's own method, which at run time would
surface only as an AttributeError on a rank (or a wrong value) in a run."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_type_hints

import pytest

from trainer.cluster.worker_group import Group, LocalWorkerGroup, WorkerGroup
from trainer.roles import ROLE_PROTOCOLS, Actor, RoleGroups

ROOT = Path(__file__).resolve().parents[3]

# each call below a `# wrong` marker must be an error; the others must type-check
SNIPPET = '''\
from typing import Any

from trainer import roles
from trainer.roles import RoleGroups


def calls(groups: RoleGroups) -> None:
    groups["actor_train"].call_all(roles.Role.ping)  # a method every role answers
    groups["actor_train"].call_sharded(roles.Actor.train_step, {}, step=1)
    groups["critic"].call_all(roles.Trained.save_checkpoint, "dir")
    weights: list[dict[str, Any]] = groups["actor_train"].call_all(roles.Actor.engine_weights)
    device, dtype = groups["actor_infer"].call_rank0(roles.Rollout.weight_format)
    scores: list[float] = groups["reward"].call_rank0(roles.Reward.score, {})
    roles.group_named(groups, "critic").call_all(roles.Trained.load_checkpoint, "dir")
    # wrong: actor_infer does not train
    groups["actor_infer"].call_all(roles.Actor.train_step, {}, step=1)
    # wrong: the reference model has no rollout engine
    groups["reference"].call_sharded(roles.Rollout.generate, {})
    # wrong: save_hf takes a tokenizer path too
    groups["actor_train"].call_all(roles.Actor.save_hf, "dir")
    # wrong: weight_format returns (device, dtype), not a str
    name: str = groups["actor_infer"].call_rank0(roles.Rollout.weight_format)
    # wrong: the reward worker has no critic values
    groups["reward"].call_sharded(roles.Critic.compute_values, {})
'''


def test_role_groups_names_each_role_with_its_protocol() -> None:
    assert get_type_hints(RoleGroups) == {role: Group[protocol] for role, protocol in ROLE_PROTOCOLS.items()}
    assert Group[Actor] == WorkerGroup[Actor] | LocalWorkerGroup[Actor]
    assert RoleGroups.__total__ is False
    assert type(RoleGroups()) is dict  # nothing changes at run time


def test_mypy_refuses_a_method_of_another_role(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mypy import api

    snippet = tmp_path / "calls.py"
    snippet.write_text(SNIPPET)
    wrong = {number + 1 for number, line in enumerate(SNIPPET.splitlines(), start=1) if "# wrong" in line}
    monkeypatch.chdir(ROOT)
    # imports skipped (torch, ray: Any), so a cold run takes ~2 s instead of a minute; the role Protocols and the
    # group classes are checked from their own files
    stdout, stderr, _ = api.run([
        "--config-file", str(ROOT / "pyproject.toml"), "--follow-imports", "skip", "--cache-dir", str(tmp_path / "cache"),
        "--no-error-summary", str(snippet), "trainer/roles/__init__.py", "trainer/cluster/worker_group.py",
    ])
    errors = [line for line in stdout.splitlines() if ": error:" in line]
    assert stderr == ""
    assert all(line.startswith(str(snippet)) for line in errors), errors
    lines = {int(re.match(r".*?:(\d+): error", line).group(1)) for line in errors}  # type: ignore[union-attr]
    assert lines == wrong, stdout
