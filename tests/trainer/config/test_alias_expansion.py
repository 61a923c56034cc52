"""YAML aliases are bounded by what they expand to (issue 34): a 2.4 kB 9x9x9x9 alias bomb stayed under the
node limit, was accepted and cost 6-10 s of CPU downstream; it is refused while the parser streams it, and
configs that reuse a section through an anchor still load as if the section were written out."""

from __future__ import annotations

import time
from pathlib import Path

import yaml

from trainer.config import load_raw, validate_config
from trainer.config.bounds import MAX_ALIAS_NODES

REPO = Path(__file__).resolve().parents[3]
DEMO = (REPO / "examples" / "demo_grpo_cpu.yaml").read_text()


def alias_bomb(levels: int, width: int = 9) -> str:
    lines = ["  a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    lines += [f"  a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return DEMO.replace("tracker_kwargs:\n", "tracker_kwargs:\n" + "\n".join(lines) + "\n", 1)


def test_a_9x4_alias_bomb_is_refused_in_half_a_second_with_a_clear_error() -> None:
    text = alias_bomb(4)
    assert len(text) - len(DEMO) < 300  # the bomb itself: four short lines (the probe's file was 2.4 kB)
    start = time.perf_counter()
    result = validate_config(text)
    elapsed = time.perf_counter() - start
    assert [i.message for i in result.errors] == [
        f"<text>: YAML aliases (*name) expand to more than {MAX_ALIAS_NODES:,} values; the limit is "
        f"{MAX_ALIAS_NODES:,} (write a large repeated section out, or reuse it fewer times)"
    ]
    assert elapsed < 0.5, f"took {elapsed:.2f} s"


def test_a_small_alias_tree_still_loads() -> None:
    """9x9 (90 values through aliases) is far under the bound and expands exactly."""
    assert load_raw(alias_bomb(2))["tracker_kwargs"]["a1"] == [["lol"] * 9] * 9


ANCHORED = DEMO.replace(
    "  generating_args:\n    max_new_tokens: ${response_length}\n    temperature: 1.0\n    top_p: 1.0\n",
    "  generating_args: &sampling\n    max_new_tokens: ${response_length}\n    temperature: 1.0\n    top_p: 1.0\n",
) + "validation:\n  generating_args: *sampling\n"


def test_a_config_that_reuses_a_section_through_an_anchor_loads_as_written_out() -> None:
    assert "&sampling" in ANCHORED
    written_out = yaml.safe_load(ANCHORED.replace(" &sampling", "").replace(
        "validation:\n  generating_args: *sampling\n",
        "validation:\n  generating_args:\n    max_new_tokens: ${response_length}\n    temperature: 1.0\n"
        "    top_p: 1.0\n"))
    loaded = load_raw(ANCHORED)
    assert loaded["validation"]["generating_args"] == loaded["actor_infer"]["generating_args"] == {
        "max_new_tokens": 3, "temperature": 1.0, "top_p": 1.0}
    assert loaded == load_raw(yaml.safe_dump(written_out, sort_keys=False))
    assert validate_config(ANCHORED).errors == []


def test_values_written_out_still_count_towards_the_node_limit() -> None:
    """The alias bound comes first for aliases; a long list written out still meets MAX_NODES."""
    from trainer.config.bounds import MAX_NODES

    text = "tracker_kwargs:\n  xs: [" + ", ".join(["1"] * MAX_NODES) + "]\n"
    errors = [i.message for i in validate_config(text).errors]
    assert errors == [f"<text>: expands to more than {MAX_NODES:,} values (after YAML aliases); the limit is {MAX_NODES:,}"]
