"""Prompt datasets: rows from JSON / JSONL / CSV / Parquet files or a synthetic task, rendered and tokenized.

`load_prompt_dataset(data_args, tokenizer, prompt_length=…)` returns a list of samples:

    {"index": int, "id": str, "prompt": str (rendered text), "input_ids": list[int],
     "answer": str | None, "tag": str | None, "task": str | None, "difficulty": float | None}

`difficulty` comes from a `difficulty` column in [0, 1] when the data has one (ROLL's column for
`difficulty_loss_weight`). ROLL's code-sandbox columns (`case_type`, `test_cases`,
`test_case_function`) are carried as they are when the row has them (trainer.rewards.code_sandbox).

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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, get_args

from trainer.config.importers.rules import lookup
from trainer.config.registries import CHAT_TEMPLATES, RAW_TEMPLATES
from trainer.config.schema import DataArgs, template_error
from trainer.data.synthetic import get_task

logger = logging.getLogger(__name__)

FILE_FORMATS = (".json", ".jsonl", ".csv", ".parquet")
CODE_TEST_COLUMNS = ("case_type", "test_cases", "test_case_function")  # ROLL's code-sandbox reward reads them
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
                        split: str = "train") -> list[dict[str, Any]]:
    """Rendered, tokenized prompt samples (see the module docstring for fields and length rules)."""
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

    samples, too_long = [], []
    for i, row in enumerate(rows):
        text = render_prompt(row, tokenizer, template=template,
                             prompt_key=None if synthetic else prompt_key, messages_key=messages_key)
        ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
        fitted = fit_prompt_length(ids, prompt_length, "drop" if side == "error" else side)
        if fitted is None or len(fitted) < len(ids):
            too_long.append(i)
        if fitted is None:
            continue
        answer = row_field(row, answer_key)
        samples.append({
            "index": len(samples),
            "id": str(row[id_key]) if id_key and row.get(id_key) is not None else str(i),
            "prompt": text if len(fitted) == len(ids) else tokenizer.decode(fitted),
            "input_ids": fitted,
            "answer": None if answer is None else str(answer),
            "tag": row.get(tag_key) if tag_key else row.get("task"),
            "task": row.get("task"),
            "difficulty": _difficulty(row.get("difficulty")),
            **{key: row[key] for key in CODE_TEST_COLUMNS if key in row},
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
