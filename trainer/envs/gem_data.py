"""ROLL's GEM dataset environments, `roll_math` and `roll_qa` (roll/pipeline/agentic/env/gem/{math,qa}_env.py,
over gem-llm 0.0.4's MathEnv / QaEnv), read from a local dataset (docs/decisions/0059-gem-dataset-environments.md).

Both are single-turn (contextual bandits): the observation is a dataset row's question, the reply is graded once and
the episode ends (terminated and truncated, GEM's TERMINAL_STATE as the next observation):

    roll_math  answer = the reply's last \\boxed{...} (gem.utils.parsing.extract_last_boxed_answer); none: reward 0
               and the action is invalid. Else reward 1.0 when GEM's MathEnv.check_correct holds, 0 otherwise:
               math_verify.verify(parse(str(gold)), parse(answer)) for the gold answer, or for any of a list of
               them, run in a separate process with a 1 s limit (ROLL's mp_pool.apply_async(...).get(timeout=1));
               a timeout or an error is "not correct".
    roll_qa    answer = the last <answer>...</answer> (extract_boxed: the last \\boxed{...}); none: reward 0, invalid.
               Else reward 1.0 when gem.utils.qa_em.em_check holds: the answer equals a gold answer (str() of each,
               a list allowed) after SQuAD normalisation (lower case, punctuation and a/an/the removed, whitespace
               collapsed); 0.0 otherwise. GEM's QaEnv wraps every question in its think/answer prompt (apply_prompt).

`format_ok` is ROLL's `action_is_valid`, `success` is reward > 0 (ROLL's metrics).

Which row reset(seed) plays, as ROLL picks it:

    roll_math  ROLL's GlobalDataset in "sample" mode (the mode its TrajEnvManager gives every MathEnv): with all
               seeds set to `seed`, row random.randint(0, n - 1) of the dataset as loaded (not shuffled).
    roll_qa    GEM's QaEnv: the dataset shuffled once by datasets' Dataset.shuffle(seed=env_config.seed) (the
               permutation numpy.random.default_rng(seed).permutation(n)); reset seeds Python's generator with
               `seed` (gem.utils.seeding.set_seed) and plays position random.randint(0, n - 1) of the shuffled rows.

random.seed(s); random.randint(a, b) equals random.Random(s).randint(a, b), so no global generator is touched.

The data (`env_config.dataset_name`): ROLL loads a Hugging Face dataset id through a Ray dataset actor. There is no
network when a run starts, so here it is read from what is on this machine (load_rows): a local .jsonl / .json /
.csv / .parquet file or a folder of files of one type (ROLL's create_local_dataset), or, when the `datasets` package
is installed, a dataset already in the Hugging Face cache, loaded offline. Anything else fails when the environment
is built, naming custom_envs.<tag>.env_config.dataset_name and what to set it to.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import multiprocessing
import os
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trainer.envs.base import Env, StepResult

TERMINAL_STATE = (
    "<｜TERMINAL_STATE｜>"  # gem.utils.constants.TERMINAL_STATE: the observation after the last step
)
FILE_TYPES = {
    "json": "json",
    "jsonl": "json",
    "csv": "csv",
    "parquet": "parquet",
}  # ROLL's FILEEXT2TYPE, read here
CHECK_TIMEOUT_S = 1.0  # ROLL's res.get(timeout=1) around MathEnv.check_correct
QA_PROMPT = (
    "For any question, always reason through your thought process using:\n"
    "<think> your reasoning here </think>\n"
    "Then, provide your final answer using:\n"
    "<answer> your answer here </answer>\n\n"
    "Question: {question}\n"
)  # gem.envs.qa_env.apply_prompt


# -- the data ------------------------------------------------------------------------------------------------------
def unreachable(name: str, why: str, columns: Sequence[str]) -> ValueError:
    """The error of a dataset that cannot be read here; make_env prefixes custom_envs.<tag>."""
    return ValueError(
        f"env_config.dataset_name: {name!r} {why}. ROLL downloads it from the Hugging Face Hub; runs here read no "
        f"network, so set env_config.dataset_name to a local .jsonl/.json/.csv/.parquet file (or a folder of them) "
        f"with the columns {', '.join(repr(c) for c in columns)}, or install `datasets` and place the dataset in the "
        "Hugging Face cache (it is loaded offline)"
    )


def local_files(name: str) -> list[Path] | None:
    """The data files `name` names (a file, or a folder's files in name order), None when it is not a local path;
    ValueError for a file type not read here or a folder mixing types (ROLL's rule)."""
    path = Path(name).expanduser()
    if not path.exists():
        return None
    files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
    kinds = {FILE_TYPES.get(p.suffix.lstrip(".").lower()) for p in files}
    if not files or None in kinds or len(kinds) > 1:
        raise ValueError(
            f"env_config.dataset_name: {name!r} must be a data file or a folder of data files of one "
            f"type ({', '.join(FILE_TYPES)}); found {[p.name for p in files] or 'an empty folder'}"
        )
    return files


def read_file(path: Path) -> list[dict[str, Any]]:
    """The rows of one local data file: JSON Lines or a JSON list of objects, CSV with a header, or Parquet."""
    kind = FILE_TYPES[path.suffix.lstrip(".").lower()]
    if kind == "csv":
        with path.open(newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))
    if kind == "parquet":
        if importlib.util.find_spec("pyarrow") is None:
            raise ValueError(
                f"env_config.dataset_name: {str(path)!r} is Parquet, which needs the pyarrow package "
                "(not installed); convert it to .jsonl or pip install pyarrow"
            )
        import pyarrow.parquet as pq

        return list(pq.read_table(path).to_pylist())
    text = path.read_text(encoding="utf-8")
    stripped = text.lstrip()
    rows = (
        json.loads(text)
        if stripped.startswith("[")
        else [json.loads(line) for line in text.splitlines() if line.strip()]
    )
    if not all(isinstance(row, dict) for row in rows):
        raise ValueError(f"env_config.dataset_name: {str(path)!r} must hold one JSON object per row")
    return rows


def load_cached(name: str, split: str | None) -> list[dict[str, Any]]:
    """A Hugging Face dataset id from the local cache, offline (the `datasets` package; HF_DATASETS_OFFLINE and
    HF_HUB_OFFLINE are set to 1 unless the environment sets them)."""
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import datasets

    loaded = datasets.load_dataset(name, split=split)
    if isinstance(loaded, datasets.DatasetDict):  # GEM's MathEnv / QaEnv: the one split, else name it
        if len(loaded) != 1:
            raise ValueError(f"env_config.split: {name!r} has the splits {list(loaded)}; set one")
        loaded = next(iter(loaded.values()))
    return [dict(row) for row in loaded]


def load_rows(name: Any, split: str | None, columns: Sequence[str]) -> list[dict[str, Any]]:
    """The dataset's rows (module docstring), each with `columns`; ValueError naming env_config.<key> otherwise."""
    if not isinstance(name, str) or not name:
        raise ValueError(
            f"env_config.dataset_name: {name!r}; set it to the dataset (a local data file or folder)"
        )
    files = local_files(name)
    if files is not None:
        if split not in (None, "train"):  # local files load as one "train" split (datasets' rule)
            raise ValueError(
                f"env_config.split: {split!r}, but the local data {name!r} is one split, 'train'; "
                "override ~env_config.split"
            )
        rows = [row for path in files for row in read_file(path)]
    elif importlib.util.find_spec("datasets") is None:
        raise unreachable(name, "is not a local path and the `datasets` package is not installed", columns)
    else:
        try:
            rows = load_cached(name, split)
        except ValueError:
            raise
        except Exception as exc:  # datasets raises its own errors for a dataset not in the cache offline
            raise unreachable(
                name, f"is not in the local Hugging Face cache ({type(exc).__name__})", columns
            ) from None
    if not rows:
        raise ValueError(f"env_config.dataset_name: {name!r} has no rows")
    for key, column in zip(("question_key", "answer_key"), columns, strict=True):
        if column not in rows[0]:
            raise ValueError(
                f"env_config.{key}: {column!r} is not a column of {name!r} (columns: {list(rows[0])})"
            )
    return rows


def row_index(seed: int, n: int) -> int:
    """ROLL's draw: random.seed(seed); random.randint(0, n - 1)."""
    return random.Random(seed).randint(0, n - 1)


def shuffled(n: int, seed: int) -> list[int]:
    """datasets' Dataset.shuffle(seed): row order numpy.random.default_rng(seed).permutation(n)."""
    return [int(i) for i in np.random.default_rng(seed).permutation(n)]


# -- the checks ----------------------------------------------------------------------------------------------------
def math_correct(model_answer: str, gold: Any) -> bool:
    """GEM's MathEnv.check_correct: verify(parse(str(g)), parse(model_answer)) for the gold answer g (str, int or
    float) or any g of a list; another gold type is an error (ROLL: not correct)."""
    from math_verify import parse, verify

    if isinstance(gold, (str, float, int)):
        golds = [str(gold)]
    elif isinstance(gold, list):
        golds = gold
    else:
        raise ValueError(f"Unexpected answer type: {type(gold)}")
    parsed = parse(model_answer)
    return any(verify(parse(str(g)), parsed) for g in golds)


def _warm() -> bool:
    import math_verify  # noqa: F401  (imported once, so the first check does not spend its second importing)

    return True


class MathChecker:
    """math_correct in one worker process with CHECK_TIMEOUT_S per check (ROLL's multiprocessing.Pool(1) per
    environment; here one pool for all, spawned, replaced after a check that overran)."""

    pool: Any = None

    @classmethod
    def _pool(cls) -> Any:
        if cls.pool is None:
            cls.pool = multiprocessing.get_context("spawn").Pool(1)
            cls.pool.apply(_warm)
        return cls.pool

    @classmethod
    def correct(cls, model_answer: str, gold: Any, timeout_s: float = CHECK_TIMEOUT_S) -> bool:
        pool = cls._pool()
        try:
            return bool(pool.apply_async(math_correct, (model_answer, gold)).get(timeout=timeout_s))
        except multiprocessing.TimeoutError:
            pool.terminate()  # the overrunning check dies with its worker
            cls.pool = None
            return False
        except Exception:  # ROLL: except (TimeoutError, Exception): is_correct = False
            return False


def qa_correct(model_answer: str, gold: Any) -> bool:
    """GEM's QaEnv.check_correct: em_check(answer, [str(g) ...]) (SQuAD-normalised exact match)."""
    from gem.utils.qa_em import em_check

    if isinstance(gold, (str, float, int)):
        golds = [str(gold)]
    elif isinstance(gold, list):
        golds = [str(g) for g in gold]
    else:
        raise ValueError(f"Unexpected answer type: {type(gold)}")
    return bool(em_check(model_answer, golds))


# -- the environments ----------------------------------------------------------------------------------------------
class DatasetEnv(Env):
    """A single-turn question from a dataset row (module docstring); subclasses extract and grade the answer."""

    def __init__(self, rows: list[dict[str, Any]], question_key: str, answer_key: str) -> None:
        self.rows, self.question_key, self.answer_key = rows, question_key, answer_key
        self.question, self.answer, self.last = "", None, ""

    def pick(self, seed: int) -> dict[str, Any]:
        raise NotImplementedError

    def reset(self, seed: int) -> str:
        row = self.pick(seed)
        self.question, self.answer = str(row[self.question_key]), row[self.answer_key]
        self.last = self.question
        return self.question

    def extract(self, reply: str) -> str | None:
        raise NotImplementedError

    def correct(self, answer: str) -> bool:
        raise NotImplementedError

    def step(self, reply: str) -> StepResult:
        answer = self.extract(reply)
        reward = 0.0 if answer is None else (1.0 if self.correct(answer) else 0.0)
        self.last = TERMINAL_STATE
        return StepResult(
            TERMINAL_STATE,
            reward,
            True,
            {"format_ok": answer is not None, "success": reward > 0, "action": answer},
        )

    def render(self) -> str:
        return self.last


class RollMath(DatasetEnv):
    """ROLL's roll_math (module docstring): a \\boxed{} answer checked with math_verify, reward 1.0 or 0."""

    instruction = ""  # ROLL's MathEnv.reset returns env_instruction ""

    def __init__(
        self,
        dataset_name: str = "",
        split: str | None = None,
        question_key: str = "problem",
        answer_key: str = "answer",
        seed: int = 0,
    ) -> None:
        super().__init__(load_rows(dataset_name, split, (question_key, answer_key)), question_key, answer_key)
        self.seed = seed  # ROLL's MathEnv keeps it; its dataset actor draws rows from reset's seed alone
        MathChecker._pool()

    def pick(self, seed: int) -> dict[str, Any]:
        return self.rows[row_index(seed, len(self.rows))]

    def extract(self, reply: str) -> str | None:
        from gem.utils.parsing import extract_last_boxed_answer

        return extract_last_boxed_answer(reply)

    def correct(self, answer: str) -> bool:
        return MathChecker.correct(answer, self.answer)


class RollQa(DatasetEnv):
    """ROLL's roll_qa (module docstring): GEM's think/answer prompt around the question, an <answer> (or, with
    extract_boxed, a \\boxed{}) answer, SQuAD-normalised exact match, reward 1.0 or 0.0."""

    def __init__(
        self,
        dataset_name: str = "",
        split: str | None = None,
        question_key: str = "question",
        answer_key: str = "answer",
        seed: int = 0,
        extract_boxed: bool = False,
    ) -> None:
        rows = load_rows(dataset_name, split, (question_key, answer_key))
        rows = [{**row, question_key: QA_PROMPT.format(question=row[question_key])} for row in rows]
        super().__init__([rows[i] for i in shuffled(len(rows), seed)], question_key, answer_key)
        self.extract_boxed = extract_boxed

    def pick(self, seed: int) -> dict[str, Any]:
        return self.rows[row_index(seed, len(self.rows))]

    def extract(self, reply: str) -> str | None:
        from gem.utils.parsing import extract_last_boxed_answer, extract_last_tagged_answer

        return extract_last_boxed_answer(reply) if self.extract_boxed else extract_last_tagged_answer(reply)

    def correct(self, answer: str) -> bool:
        return qa_correct(answer, self.answer)
