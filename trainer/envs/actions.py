"""Parsing a model's reply into an action, and the tags the environments share.

Action format (`action_format` in a grid environment's env_config):

    answer_tag   the action is the text inside the first <answer>...</answer> (ROLL's format); a reply
                 without the tags breaks the format
    plain        the whole reply is the action; <answer>...</answer> tags are accepted too

Either way the candidate is stripped and lower-cased, and must then equal an action name or one of
its aliases exactly ("Right", "right", "R" and "<answer> r </answer>" all name `right`; "go right",
"Right!" and "R R" break the format). One action per turn.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from trainer.config.registries import ANSWER_TAG_PATTERN

ACTION_FORMATS: tuple[str, ...] = ("answer_tag", "plain")
ANSWER_TAG = re.compile(ANSWER_TAG_PATTERN, re.DOTALL)


def tagged(reply: str, pattern: re.Pattern[str]) -> str | None:
    """The text inside the first match of a `<tag>(.*?)</tag>` pattern, stripped; None without one."""
    match = pattern.search(reply)
    return match.group(1).strip() if match else None


def parse_action(reply: str, aliases: Mapping[str, str], action_format: str = "answer_tag") -> str | None:
    """The canonical action `reply` names (via `aliases`: lower-case spelling -> action), or None when
    the reply breaks the format (module docstring)."""
    if action_format not in ACTION_FORMATS:
        raise ValueError(f"env_config.action_format: {action_format!r}; valid: {', '.join(ACTION_FORMATS)}")
    candidate = tagged(reply, ANSWER_TAG)
    if candidate is None:
        if action_format == "answer_tag":
            return None
        candidate = reply.strip()
    return aliases.get(candidate.lower())
