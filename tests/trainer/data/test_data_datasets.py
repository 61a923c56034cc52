"""Prompt datasets: file formats, templates, length rules, synthetic tasks through data_args."""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trainer.config.schema import DataArgs
from trainer.data.datasets import fit_prompt_length, load_prompt_dataset, read_rows

ROWS = [
    {"question": "What is 2 + 3?\nAnswer briefly.", "answer": "5", "domain": "math", "uid": "q1"},
    {"question": "  Spaces  matter ", "answer": "x", "domain": "misc", "uid": "q2"},
    {"question": "Name a colour.", "answer": "red", "domain": "misc", "uid": "q3"},
]


def write_all_formats(tmp_path: Path) -> dict[str, Path]:
    paths = {fmt: tmp_path / f"rows.{fmt}" for fmt in ("json", "jsonl", "csv", "parquet")}
    paths["json"].write_text(json.dumps(ROWS))
    paths["jsonl"].write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    with paths["csv"].open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(ROWS[0]))
        writer.writeheader()
        writer.writerows(ROWS)
    pq.write_table(pa.Table.from_pylist(ROWS), paths["parquet"])
    return paths


@pytest.mark.parametrize("fmt", ["json", "jsonl", "csv", "parquet"])
def test_every_format_gives_the_same_samples(tmp_path: Path, tiny_tokenizer: Any, fmt: str) -> None:
    path = write_all_formats(tmp_path)[fmt]
    args = {"file_name": str(path), "prompt": "question", "response": "answer", "tag": "domain", "id": "uid",
            "template": "none"}
    samples = load_prompt_dataset(args, tiny_tokenizer)
    assert [s["prompt"] for s in samples] == [r["question"] for r in ROWS]
    assert [s["answer"] for s in samples] == ["5", "x", "red"]
    assert [s["tag"] for s in samples] == ["math", "misc", "misc"]
    assert [s["id"] for s in samples] == ["q1", "q2", "q3"]
    assert tiny_tokenizer.decode(samples[1]["input_ids"]) == "  Spaces  matter "


def test_schema_data_args_list_of_files_and_native_template(tmp_path: Path, tiny_tokenizer: Any) -> None:
    paths = write_all_formats(tmp_path)
    args = DataArgs(file_name=[str(paths["jsonl"]), str(paths["parquet"])], prompt="question", response="answer",
                    template="native", max_samples=5)
    samples = load_prompt_dataset(args, tiny_tokenizer)
    assert len(samples) == 5
    assert samples[0]["prompt"] == ("<|im_start|>user\nWhat is 2 + 3?\nAnswer briefly.<|im_end|>\n"
                                    "<|im_start|>assistant\n")
    assert tiny_tokenizer.decode(samples[3]["input_ids"]) == samples[3]["prompt"]
    assert [s["index"] for s in samples] == list(range(5))


def test_messages_column_from_jsonl_and_csv(tmp_path: Path, tiny_tokenizer: Any) -> None:
    chat = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"}]
    (tmp_path / "m.jsonl").write_text(json.dumps({"chat": chat, "answer": "hello"}) + "\n")
    with (tmp_path / "m.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["chat", "answer"])
        writer.writeheader()
        writer.writerow({"chat": json.dumps(chat), "answer": "hello"})
    expected = "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    for name in ("m.jsonl", "m.csv"):
        sample = load_prompt_dataset({"file_name": str(tmp_path / name), "messages": "chat"}, tiny_tokenizer)[0]
        assert sample["prompt"] == expected
    raw = load_prompt_dataset({"file_name": str(tmp_path / "m.jsonl"), "messages": "chat", "template": "none"},
                              tiny_tokenizer)
    assert raw[0]["prompt"] == "Be terse.\nHi"
    with pytest.raises(ValueError, match=r"data_args.prompt / data_args.messages"):
        load_prompt_dataset({"file_name": str(tmp_path / "m.jsonl"), "messages": "chat", "prompt": "q"},
                            tiny_tokenizer)


def test_a_dotted_response_reads_a_nested_field_from_jsonl_and_parquet(tmp_path: Path, tiny_tokenizer: Any) -> None:
    """verl's rows keep the answer in reward_model.ground_truth, SkyRL's in reward_spec.ground_truth (struct
    columns in parquet); a flat column of that very name wins, a missing field is no answer."""
    rows = [{"question": "2 + 3?", "reward_model": {"style": "rule", "ground_truth": "5"}},
            {"question": "1 + 1?", "reward_model": {"style": "rule"}}]
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "r.parquet")
    for name in ("r.jsonl", "r.parquet"):
        args = {"file_name": str(tmp_path / name), "prompt": "question", "response": "reward_model.ground_truth"}
        assert [s["answer"] for s in load_prompt_dataset(args, tiny_tokenizer)] == ["5", None], name
    flat = tmp_path / "flat.jsonl"
    flat.write_text(json.dumps({"question": "q", "reward_model.ground_truth": "flat"}) + "\n")
    args = {"file_name": str(flat), "prompt": "question", "response": "reward_model.ground_truth"}
    assert load_prompt_dataset(args, tiny_tokenizer)[0]["answer"] == "flat"


def test_length_rules(tmp_path: Path, tiny_tokenizer: Any, caplog: pytest.LogCaptureFixture) -> None:
    path = write_all_formats(tmp_path)["jsonl"]
    base = {"file_name": str(path), "prompt": "question", "template": "none"}
    # byte-level tokens: prompt lengths are 30, 17 and 14 tokens
    left = load_prompt_dataset({**base, "truncation_side": "left"}, tiny_tokenizer, prompt_length=15)
    assert [len(s["input_ids"]) for s in left] == [15, 15, 14]
    assert left[0]["prompt"] == "\nAnswer briefly."[-15:]
    right = load_prompt_dataset({**base, "truncation_side": "right"}, tiny_tokenizer, prompt_length=15)
    assert right[1]["prompt"] == "  Spaces  matte"
    with caplog.at_level(logging.WARNING, logger="trainer.data.datasets"):
        kept = load_prompt_dataset({**base, "truncation_side": "drop"}, tiny_tokenizer, prompt_length=15)
    assert [s["prompt"] for s in kept] == ["Name a colour."]
    assert "2 of 3 prompts longer than prompt_length=15 were dropped" in caplog.text
    with pytest.raises(ValueError, match=r"prompt_length: 2 of 3 prompts are longer than 15 tokens \(rows \[0, 1\]\)"):
        load_prompt_dataset(base, tiny_tokenizer, prompt_length=15)  # default rule: error
    assert fit_prompt_length([1, 2, 3], 3, "error") == [1, 2, 3]
    with pytest.raises(ValueError, match=r"truncation_side: unknown 'middle'"):
        fit_prompt_length([1, 2, 3, 4], 3, "middle")


def test_synthetic_data_args(tiny_tokenizer: Any) -> None:
    args = {"template": "none", "synthetic": {"task": "reverse", "num_prompts": 12, "seed": 3}}
    train = load_prompt_dataset(args, tiny_tokenizer)
    assert len(train) == 12
    for s in train:
        word = s["prompt"].split()[1]
        assert s["answer"] == word[::-1] and s["task"] == s["tag"] == "reverse"
    assert load_prompt_dataset(args, tiny_tokenizer) == train  # same seed, same data
    assert load_prompt_dataset(DataArgs(**args), tiny_tokenizer) == train  # the schema's section works alike
    evals = load_prompt_dataset(args, tiny_tokenizer, split="eval")
    assert [s["prompt"] for s in evals] != [s["prompt"] for s in train]
    longer = load_prompt_dataset({**args, "synthetic": {**args["synthetic"], "kwargs": {"length": 5}}},
                                 tiny_tokenizer)
    assert {len(s["answer"]) for s in longer} == {5}


def test_bad_inputs_name_the_field(tmp_path: Path, tiny_tokenizer: Any) -> None:
    with pytest.raises(ValueError, match=r"data_args.file_name: .*does not exist"):
        read_rows(str(tmp_path / "missing.jsonl"))
    (tmp_path / "a.txt").write_text("x")
    with pytest.raises(ValueError, match=r"unsupported format; valid: .json, .jsonl, .csv, .parquet"):
        read_rows(str(tmp_path / "a.txt"))
    (tmp_path / "a.jsonl").write_text(json.dumps({"q": "hi"}) + "\n")
    with pytest.raises(ValueError, match=r"data_args.prompt: column 'question' is missing; columns: q"):
        load_prompt_dataset({"file_name": str(tmp_path / "a.jsonl"), "prompt": "question"}, tiny_tokenizer)
    with pytest.raises(ValueError, match=r"data_args.template: unknown template 'alpaca'; valid: native, "):
        load_prompt_dataset({"file_name": str(tmp_path / "a.jsonl"), "prompt": "q", "template": "alpaca"},
                            tiny_tokenizer)
    with pytest.raises(ValueError, match=r"task: unknown synthetic task 'sort'; valid: add, copy, reverse"):
        load_prompt_dataset({"synthetic": {"task": "sort"}}, tiny_tokenizer)


def test_gsm8k_fixture_loads(fixtures_dir: Path, tiny_tokenizer: Any) -> None:
    samples = load_prompt_dataset({"file_name": "gsm8k_mini.jsonl", "dataset_dir": str(fixtures_dir),
                                   "prompt": "question", "response": "answer"}, tiny_tokenizer, prompt_length=256)
    assert len(samples) == 20
    assert all("####" in s["answer"] for s in samples)
