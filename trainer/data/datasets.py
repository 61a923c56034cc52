"""Prompt datasets: rows from JSON / JSONL / CSV / Parquet files or a synthetic task, rendered and tokenized.

`load_prompt_dataset(data_args, tokenizer, prompt_length=…)` returns a list of samples:

    {"index": int, "id": str, "prompt": str (rendered text), "input_ids": list[int],
     "answer": str | None, "tag": str | None, "task": str | None, "difficulty": float | None}

Columns: `data_args.prompt` / `data_args.messages`, `response` (the answer), `tag` and `id` name them. Left
unset, ROLL's layout is read where the row has it (ROLL's data_args defaults and reward workers): a
`messages` chat when the row has no `prompt`, the answer in `ground_truth` when it has no `answer`, the
domain in `tag` when it has no `task`.

`difficulty` comes from a `difficulty` column in [0, 1] when the data has one (ROLL's column for
`difficulty_loss_weight`). ROLL's code-sandbox columns (`case_type`, `test_cases`,
`test_case_function`) are carried as they are when the row has them (trainer.rewards.code_sandbox),
and so is ROLL's `domain` column (`domain_interleave_probs`).

`dataset_filter` (ROLL's `source` / `min_difficulty` / `max_difficulty` / `num_samples`) selects the
training rows before they are rendered (`filter_rows`); the counts kept and dropped go to `log`.

Rendering: `template: native` (or a ROLL ChatML template name such as `qwen2_5`) applies
`tokenizer.apply_chat_template(messages, add_generation_prompt=True)`, a plain `prompt` column
becoming one user message; `template: none` feeds the raw prompt text (message contents joined by
newlines). Prompts are tokenized without extra special tokens.

Length rule for prompts longer than `prompt_length` tokens (`data_args.truncation_side`):
`left` keeps the last `prompt_length` tokens (the end of the prompt, next to the answer), `right`
keeps the first ones, `drop` leaves the sample out with one warning giving the count, and `error`
raises a ValueError giving the count and the first offending rows.
"""

from __future__ import annotations

import csv
import json
import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

from trainer.config.importers.rules import lookup
from trainer.config.registries import CHAT_TEMPLATES, RAW_TEMPLATES
from trainer.config.schema import DataArgs, template_error
from trainer.data.synthetic import get_task

logger = logging.getLogger(__name__)

FILE_FORMATS = (".json", ".jsonl", ".csv", ".parquet")
CODE_TEST_COLUMNS = ("case_type", "test_cases", "test_case_function")  # ROLL's code-sandbox reward reads them
CARRIED_COLUMNS = (*CODE_TEST_COLUMNS, "domain")  # carried into the sample as they are when the row has them
TRUNCATION_SIDES: tuple[str, ...] = get_args(DataArgs.model_fields["truncation_side"].annotation)


def _arg(data_args: Any, key: str, default: Any = None) -> Any:
    """A field of data_args, whether it is the pydantic section, a mapping or None."""
    if data_args is None:
        return default
    if isinstance(data_args, Mapping):
        return data_args.get(key, default)
    return getattr(data_args, key, default)


def read_rows(file_name: str | Sequence[str], dataset_dir: str | Path | None = None) -> list[dict[str, Any]]:
    """All rows of one or more files, in order; the format follows the file suffix."""
    names = [file_name] if isinstance(file_name, str | Path) else list(file_name)
    rows: list[dict[str, Any]] = []
    for name in names:
        path = Path(name)
        if dataset_dir is not None and not path.is_absolute():
            path = Path(dataset_dir) / path
        if not path.is_file():
            raise ValueError(f"data_args.file_name: {str(path)!r} does not exist")
        rows.extend(_read_file(path))
    return rows


def _read_file(path: Path) -> list[dict[str, Any]]:
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        with path.open(encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    if suffix == ".json":
        text = path.read_text(encoding="utf-8")
        try:
            data = json.loads(text)
        except json.JSONDecodeError:  # JSON lines saved as .json (common for ROLL data)
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        if isinstance(data, dict) and isinstance(data.get("data"), list):
            data = data["data"]
        if not isinstance(data, list):
            raise ValueError(f"data_args.file_name: {str(path)!r} must hold a JSON list of objects")
        return data
    if suffix == ".csv":
        with path.open(encoding="utf-8", newline="") as f:
            return list(csv.DictReader(f))
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    raise ValueError(f"data_args.file_name: {str(path)!r} has an unsupported format; valid: {', '.join(FILE_FORMATS)}")


def render_prompt(row: Mapping[str, Any], tokenizer: Any, *, template: str = "native",
                  prompt_key: str | None = "prompt", messages_key: str | None = None) -> str:
    """The prompt text fed to the model for one row (see the module docstring)."""
    if messages_key:
        messages = row.get(messages_key)
        if isinstance(messages, str):  # CSV cells hold the chat as JSON text
            messages = json.loads(messages)
        if not isinstance(messages, list) or not all(isinstance(m, Mapping) for m in messages):
            raise ValueError(f"data_args.messages: column {messages_key!r} must hold a list of "
                             "{role, content} messages")
    else:
        key = prompt_key or "prompt"
        if row.get(key) is None:
            raise ValueError(f"data_args.prompt: column {key!r} is missing; columns: {', '.join(map(str, row))}")
        messages = [{"role": "user", "content": str(row[key])}]
    if template in CHAT_TEMPLATES:
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    if template in RAW_TEMPLATES:
        return "\n".join(str(m["content"]) for m in messages)
    raise ValueError(f"data_args.template: {template_error(template)}")


def fit_prompt_length(input_ids: list[int], prompt_length: int | None, side: str) -> list[int] | None:
    """Apply the length rule: ids unchanged if they fit, cut per `side`, None for `drop`, raise for `error`."""
    if side not in TRUNCATION_SIDES:
        raise ValueError(f"data_args.truncation_side: unknown {side!r}; valid: {', '.join(TRUNCATION_SIDES)}")
    if prompt_length is None or len(input_ids) <= prompt_length:
        return input_ids
    if side == "left":
        return input_ids[-prompt_length:]
    if side == "right":
        return input_ids[:prompt_length]
    if side == "drop":
        return None
    raise ValueError(f"prompt_length: prompt of {len(input_ids)} tokens exceeds {prompt_length}")


def _difficulty(value: Any) -> float | None:
    if value is None or value == "":
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"data column `difficulty`: {value!r} is not a number (expected 0..1)") from None


@dataclass
class FilterCounts:
    """What `filter_rows` kept and dropped (rows in its scope: of `source`, or every row)."""

    rows: int = 0
    in_scope: int = 0
    kept: int = 0
    outside_range: int = 0
    no_difficulty: int = 0
    beyond_num_samples: int = 0

    def line(self, dataset_filter: Any) -> str:
        scope = f"of source {dataset_filter.source!r}" if dataset_filter.source is not None else "in all"
        low, high = dataset_filter.min_difficulty, dataset_filter.max_difficulty
        dropped = [f"{self.outside_range} outside difficulty [{'-inf' if low is None else low}, "
                   f"{'inf' if high is None else high}]", f"{self.no_difficulty} without a difficulty",
                   f"{self.beyond_num_samples} beyond num_samples={dataset_filter.num_samples}"]
        others = self.rows - self.in_scope
        return (f"kept {self.kept} of {self.in_scope} training rows {scope} (dropped: "
                f"{', '.join(dropped)})" + (f"; {others} rows of other sources kept as they are" if others else "")
                + f"; {self.kept + others} of {self.rows} rows remain")


def _bound_difficulty(value: Any, row: int) -> float | None:
    if value is None or value == "":
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"dataset_filter: row {row}'s `difficulty` {value!r} is not a number") from None


def filter_rows(rows: Sequence[dict[str, Any]], dataset_filter: Any) -> tuple[list[dict[str, Any]], FilterCounts]:
    """ROLL's dataset_filter over raw rows, file order kept. Rows in scope (`source` column equal to
    `dataset_filter.source`; every row when unset) are kept when

        min_difficulty <= float(row["difficulty"]) <= max_difficulty     (an unset bound: no bound)

    (a row without a difficulty value is dropped when a bound is set), then the first `num_samples` of
    them (0: all); rows of other sources pass unchanged. Raises, naming the field, when `source` matches no
    row, the rows have no `difficulty` column to bound, or no row in scope passes."""
    source, low, high = dataset_filter.source, dataset_filter.min_difficulty, dataset_filter.max_difficulty
    limit = dataset_filter.num_samples
    counts = FilterCounts(rows=len(rows))
    in_scope = [source is None or row.get("source") == source for row in rows]
    counts.in_scope = sum(in_scope)
    if source is not None and not counts.in_scope:
        found = Counter(str(row["source"]) for row in rows if row.get("source") is not None)
        listing = (", ".join(f"{s} ({n})" for s, n in sorted(found.items())) if found
                   else f"none: no row has a `source` column (columns: {_columns(rows)})")
        raise ValueError(f"dataset_filter.source: no training row has source {source!r}; sources found (rows): "
                         f"{listing}")
    bounded = low is not None or high is not None
    if bounded and not any("difficulty" in row for row, scoped in zip(rows, in_scope, strict=True) if scoped):
        field = "min_difficulty" if low is not None else "max_difficulty"
        raise ValueError(f"dataset_filter.{field}: the training rows have no `difficulty` column to filter on "
                         f"(columns: {_columns(rows)})")
    kept: list[dict[str, Any]] = []
    for i, (row, scoped) in enumerate(zip(rows, in_scope, strict=True)):
        if not scoped:
            kept.append(row)
            continue
        if bounded:
            value = _bound_difficulty(row.get("difficulty"), i)
            if value is None:
                counts.no_difficulty += 1
                continue
            if (low is not None and value < low) or (high is not None and value > high):
                counts.outside_range += 1
                continue
        if limit and counts.kept >= limit:
            counts.beyond_num_samples += 1
            continue
        counts.kept += 1
        kept.append(row)
    if not counts.kept:
        raise ValueError(f"dataset_filter: no training row passes ({counts.line(dataset_filter)}); widen "
                         "min_difficulty / max_difficulty or check source")
    return kept, counts


def _columns(rows: Sequence[dict[str, Any]]) -> str:
    names: dict[str, None] = {}
    for row in rows[:100]:
        names.update(dict.fromkeys(map(str, row)))
    return ", ".join(names) or "none"


def _filter_is_set(dataset_filter: Any) -> bool:
    return dataset_filter is not None and (
        dataset_filter.source is not None or dataset_filter.min_difficulty is not None
        or dataset_filter.max_difficulty is not None or bool(dataset_filter.num_samples))


def load_rows(data_args: Any, split: str = "train") -> list[dict[str, Any]]:
    """Raw rows of the split: from the synthetic task or from (eval_)file_name."""
    synthetic = _arg(data_args, "synthetic")
    if synthetic is not None:
        task = get_task(_arg(synthetic, "task"))
        seed = int(_arg(synthetic, "seed", 0)) + (0 if split == "train" else 1_000_003)
        return task.make_prompts(int(_arg(synthetic, "num_prompts", 1024)), seed, **(_arg(synthetic, "kwargs") or {}))
    key = "file_name" if split == "train" else "eval_file_name"
    file_name = _arg(data_args, key)
    if not file_name:
        raise ValueError(f"data_args.{key}: no prompt file given (or set data_args.synthetic)")
    return read_rows(file_name, _arg(data_args, "dataset_dir"))


def row_field(row: dict[str, Any], path: str) -> Any:
    """row[path], or for a dotted path absent as a column, the nested field (a parquet struct column reads
    as a dict): "reward_model.ground_truth" -> row["reward_model"]["ground_truth"]. None when missing."""
    return row[path] if path in row else lookup(row, path)[1]


def load_prompt_dataset(data_args: Any, tokenizer: Any, *, prompt_length: int | None = None,
                        split: str = "train", dataset_filter: Any = None,
                        log: Callable[[str], None] = logger.info) -> list[dict[str, Any]]:
    """Rendered, tokenized prompt samples (see the module docstring for fields and length rules);
    `dataset_filter` (a schema.DatasetFilter) selects the rows first, its counts going to `log`."""
    if split not in ("train", "eval"):
        raise ValueError(f"split: {split!r}; valid: train, eval")
    prompt_key, messages_key = _arg(data_args, "prompt"), _arg(data_args, "messages")
    if prompt_key and messages_key:
        raise ValueError("data_args.prompt / data_args.messages: set one of them, not both")
    synthetic = _arg(data_args, "synthetic") is not None
    answer_key = _arg(data_args, "response") or "answer"
    tag_key, id_key = _arg(data_args, "tag"), _arg(data_args, "id")
    template = _arg(data_args, "template", "native")
    side = _arg(data_args, "truncation_side", "error")
    rows = load_rows(data_args, split)
    max_samples = _arg(data_args, "max_samples")
    if max_samples:
        rows = rows[:max_samples]
    if _filter_is_set(dataset_filter):
        rows, counts = filter_rows(rows, dataset_filter)
        log(f"dataset_filter: {counts.line(dataset_filter)}")

    samples, too_long = [], []
    for i, row in enumerate(rows):
        roll_chat = not (synthetic or prompt_key or messages_key) and "prompt" not in row and "messages" in row
        text = render_prompt(row, tokenizer, template=template, prompt_key=None if synthetic else prompt_key,
                             messages_key="messages" if roll_chat else messages_key)
        ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
        fitted = fit_prompt_length(ids, prompt_length, "drop" if side == "error" else side)
        if fitted is None or len(fitted) < len(ids):
            too_long.append(i)
        if fitted is None:
            continue
        answer = row_field(row, answer_key)
        if answer is None and not _arg(data_args, "response"):
            answer = row.get("ground_truth")  # ROLL's reward workers read this column
        samples.append({
            "index": len(samples),
            "id": str(row[id_key]) if id_key and row.get(id_key) is not None else str(i),
            "prompt": text if len(fitted) == len(ids) else tokenizer.decode(fitted),
            "input_ids": fitted,
            "answer": None if answer is None else str(answer),
            "tag": row.get(tag_key) if tag_key else row.get("task", row.get("tag")),
            "task": row.get("task"),
            "difficulty": _difficulty(row.get("difficulty")),
            **{key: row[key] for key in CARRIED_COLUMNS if key in row},
        })
    if too_long and side == "error":
        raise ValueError(f"prompt_length: {len(too_long)} of {len(rows)} prompts are longer than {prompt_length} "
                         f"tokens (rows {too_long[:5]}); raise prompt_length or set "
                         "data_args.truncation_side to left, right or drop")
    if too_long:
        action = "dropped" if side == "drop" else f"truncated ({side})"
        logger.warning("%d of %d prompts longer than prompt_length=%s were %s", len(too_long), len(rows),
                       prompt_length, action)
    if not samples:
        raise ValueError("data_args: the dataset has no usable prompts")
    return samples
