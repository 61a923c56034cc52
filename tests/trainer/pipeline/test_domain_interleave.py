"""dataset_filter and domain_interleave_probs in a run (docs/decisions/0043): every rollout batch takes
3 prompts of `copy` and 1 of `add` (0.75 / 0.25 of 4), the copy prompts only from the rows the filter keeps,
and a run stopped after step 2 and resumed draws exactly the prompts of the uninterrupted run."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from tests.trainer.pipeline.conftest import events, load_cfg, run_local
from trainer.pipeline.run.ledger import LEDGER_FILE, read_ledger

WORDS = ["".join(w) for w in itertools.product("abcde", repeat=3)][:16]
# copy rows (source s1): difficulty 0, 0.25, 0.5, 0.75, …; the filter [0.2, 0.6] keeps 0.25 and 0.5 (8 of 16).
# add rows (source s2): difficulty 0, outside the range, kept because the filter is scoped to s1.
COPY = [{"prompt": f"copy {w}\n", "answer": w, "task": "copy", "domain": "copy", "source": "s1",
         "difficulty": (i % 4) / 4} for i, w in enumerate(WORDS)]
ADD = [{"prompt": f"add {a}+{b}\n", "answer": str(a + b), "task": "add", "domain": "add", "source": "s2",
        "difficulty": 0.0} for a, b in [(1, 2), (3, 4), (5, 6), (7, 8), (2, 2), (4, 4), (6, 6), (8, 8)]]
KEPT_COPY = {r["prompt"] for r in COPY if 0.2 <= r["difficulty"] <= 0.6}
DOMAIN = {r["prompt"]: r["domain"] for r in COPY + ADD}


def overrides(data: Path) -> tuple[str, ...]:
    return ("save_steps=2", "eval_steps=0", "seed=5", "logged_rollout_samples=64",
            "~actor_train.data_args.synthetic", f"actor_train.data_args.file_name={data}",
            "+actor_train.data_args.domain_interleave_probs.copy=0.75",
            "+actor_train.data_args.domain_interleave_probs.add=0.25",
            "+dataset_filter.source=s1", "+dataset_filter.min_difficulty=0.2", "+dataset_filter.max_difficulty=0.6")


def prompts_by_step(output_dir: Path) -> dict[int, list[str]]:
    """Each step's prompts in batch order (group ids), from the rollouts events."""
    out: dict[int, list[str]] = {}
    for event in events(output_dir, "rollouts"):
        groups = {s["group_id"]: s["prompt"] for s in event["data"]["samples"]}
        out[event["step"]] = [groups[g] for g in sorted(groups)]
    return out


def drawn(output_dir: Path) -> dict[int, list[int]]:
    records, _ = read_ledger(output_dir / LEDGER_FILE)
    return {r["batch"]: r["prompts"] for r in records if r is not None and r["ev"] == "draw"}


def test_batches_follow_the_domain_shares_and_resume_exactly(tmp_path: Path) -> None:
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in COPY + ADD))
    common = (*overrides(data), "max_steps=4")
    full_dir, cut_dir = tmp_path / "full", tmp_path / "cut"
    cfg = load_cfg(full_dir, *common)
    assert list(cfg.actor_train.data_args.domain_interleave_probs) == ["copy", "add"]
    assert run_local(cfg) == 0

    full = prompts_by_step(full_dir)
    assert sorted(full) == [1, 2, 3, 4]
    for step, prompts in full.items():
        assert [DOMAIN[p] for p in prompts] == ["copy", "copy", "copy", "add"], step
        assert {p for p in prompts if DOMAIN[p] == "copy"} <= KEPT_COPY, step
    copies = [p for step in (1, 2, 3, 4) for p in full[step] if DOMAIN[p] == "copy"]
    assert len(set(copies[:8])) == 8  # copy's stream: its 8 kept prompts once each, then the next pass

    # the same run stopped after step 2 (its checkpoint), then resumed with `latest`
    assert run_local(load_cfg(cut_dir, *common, "max_steps=2")) == 0
    assert run_local(load_cfg(cut_dir, *common, "resume_from_checkpoint=latest")) == 0
    resumed = prompts_by_step(cut_dir)
    assert resumed == full
    assert drawn(cut_dir) == drawn(full_dir)
    state = json.loads((cut_dir / "checkpoints" / "step_2" / "trainer_state.json").read_text())["sampler"]
    assert {d: s["epoch"] * s["num_samples"] + s["index"] for d, s in state["domains"].items()} == {"copy": 6, "add": 2}
