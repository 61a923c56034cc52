"""ROLL's dataset_filter (source, min_difficulty, max_difficulty, num_samples) on the training rows
(trainer.data.datasets.filter_rows; docs/decisions/0043). Expected rows are worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainer.config.schema import DatasetFilter
from trainer.data.datasets import filter_rows, load_prompt_dataset

ROWS = [
    {"id": 0, "source": "deepmath", "difficulty": 2},
    {"id": 1, "source": "deepmath", "difficulty": 3},  # on the lower bound: kept
    {"id": 2, "source": "deepmath", "difficulty": "5.5"},  # ROLL's column is a string
    {"id": 3, "source": "other", "difficulty": 9},  # another source: kept as it is
    {"id": 4, "source": "deepmath", "difficulty": 8},  # on the upper bound: kept
    {"id": 5, "source": "deepmath", "difficulty": 9},
    {"id": 6, "source": "deepmath", "difficulty": None},
    {"id": 7, "source": "deepmath", "difficulty": 4},  # in range, but num_samples=3 are taken already
]


def ids(rows: list[dict]) -> list[int]:
    return [r["id"] for r in rows]


def test_rows_of_the_source_are_kept_within_the_difficulty_range_up_to_num_samples() -> None:
    kept, counts = filter_rows(ROWS, DatasetFilter(source="deepmath", min_difficulty=3, max_difficulty=8,
                                                   num_samples=3))
    assert ids(kept) == [1, 2, 3, 4]
    assert (counts.rows, counts.in_scope, counts.kept) == (8, 7, 3)
    assert (counts.outside_range, counts.no_difficulty, counts.beyond_num_samples) == (2, 1, 1)
    line = counts.line(DatasetFilter(source="deepmath", min_difficulty=3, max_difficulty=8, num_samples=3))
    assert "kept 3 of 7 training rows of source 'deepmath'" in line
    assert "2 outside difficulty [3.0, 8.0], 1 without a difficulty, 1 beyond num_samples=3" in line
    assert "1 rows of other sources kept" in line and "4 of 8 rows remain" in line


def test_without_a_source_every_row_is_in_scope_and_unset_bounds_are_open() -> None:
    assert ids(filter_rows(ROWS, DatasetFilter(min_difficulty=8))[0]) == [3, 4, 5]
    assert ids(filter_rows(ROWS, DatasetFilter(max_difficulty=3))[0]) == [0, 1]
    assert ids(filter_rows(ROWS, DatasetFilter(num_samples=2))[0]) == [0, 1]  # no bound: no difficulty needed


def test_a_source_no_row_has_is_an_error_listing_the_sources() -> None:
    with pytest.raises(ValueError, match=r"dataset_filter.source: no training row has source 'gsm8k'; sources "
                                         r"found \(rows\): deepmath \(7\), other \(1\)"):
        filter_rows(ROWS, DatasetFilter(source="gsm8k"))
    with pytest.raises(ValueError, match=r"no row has a `source` column \(columns: prompt, answer\)"):
        filter_rows([{"prompt": "p", "answer": "a"}], DatasetFilter(source="gsm8k"))


def test_a_missing_difficulty_column_is_an_error_naming_the_columns() -> None:
    rows = [{"prompt": "p", "answer": "a", "tag": "math"}]
    with pytest.raises(ValueError, match=r"dataset_filter.min_difficulty: the training rows have no `difficulty` "
                                         r"column to filter on \(columns: prompt, answer, tag\)"):
        filter_rows(rows, DatasetFilter(min_difficulty=0.5))
    with pytest.raises(ValueError, match=r"dataset_filter.max_difficulty: .* no `difficulty` column"):
        filter_rows(rows, DatasetFilter(max_difficulty=0.5))


def test_a_filter_that_leaves_nothing_and_a_difficulty_that_is_no_number_are_errors() -> None:
    # none of the source's rows passes (the other source's row would remain): a mistake, not a dataset
    with pytest.raises(ValueError, match=r"dataset_filter: no training row passes \(kept 0 of 7 .*widen"):
        filter_rows(ROWS, DatasetFilter(source="deepmath", min_difficulty=10))
    with pytest.raises(ValueError, match=r"no training row passes \(kept 0 of 8 training rows in all"):
        filter_rows(ROWS, DatasetFilter(min_difficulty=10))
    with pytest.raises(ValueError, match=r"row 1's `difficulty` 'hard' is not a number"):
        filter_rows([{"difficulty": 1}, {"difficulty": "hard"}], DatasetFilter(max_difficulty=3))


def test_the_loader_applies_the_filter_and_logs_the_counts(tmp_path: Path, tiny_tokenizer: object) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({**row, "prompt": f"question {row['id']}", "answer": "1"}) + "\n"
                            for row in ROWS))
    data_args = {"file_name": str(path), "template": "none", "id": "id"}
    lines: list[str] = []
    samples = load_prompt_dataset(data_args, tiny_tokenizer, dataset_filter=DatasetFilter(
        source="deepmath", min_difficulty=3, max_difficulty=8, num_samples=3), log=lines.append)
    assert [s["id"] for s in samples] == ["1", "2", "3", "4"]
    assert [s["prompt"] for s in samples] == ["question 1", "question 2", "question 3", "question 4"]
    assert len(lines) == 1 and lines[0].startswith("dataset_filter: kept 3 of 7")
    # the default filter (ROLL's DatasetFilterConfig()) keeps every row and logs nothing
    assert len(load_prompt_dataset(data_args, tiny_tokenizer, dataset_filter=DatasetFilter(),
                                   log=lines.append)) == len(ROWS)
    assert len(lines) == 1
