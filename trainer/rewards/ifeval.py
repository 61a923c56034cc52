"""ROLL's IFEval rule reward (GeneralRuleRewardWorker): the 25 instruction-following verifiers of the IFEval
taxonomy, as open-instruct's `if_functions.py` writes them and ROLL vendors them.

Each sample's reference (`ground_truth` in ROLL's data, our `answer`) is a JSON object naming one verifier
and its arguments, as in allenai's RLVR-IFeval data: `{"func_name": "verify_keyword_frequency", "word":
"data", "N": 3, "quantifier": null, …}`. The verifier gets the arguments its signature names; a verifier
that raises (e.g. language detection on an empty text) scores 0.0, as in ROLL. The reward is
1.0/0.0 for the verdict plus the 3-gram repetition penalty (trainer.rewards.text_rules) of the whole
response; the verdict reads the text after the last `</think>`.

Where ROLL's copy and open-instruct differ, ROLL's is kept (the recipe trains with it) except one bug:
ROLL's `verify_keyword_frequency` counts every word (`word == word`); here it counts the keyword, as
open-instruct does (docs/decisions/0044).
"""

from __future__ import annotations

import ast
import inspect
import json
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

from trainer.rewards.text_rules import after_last_think, repetition_penalty, strip_special_tokens

logger = logging.getLogger(__name__)


def verify_keywords(text: str, keyword_list: list[str]) -> bool:
    """Include keywords {keyword1}, {keyword2} in your response (case-insensitive substrings)."""
    lower = text.lower()
    return all(keyword.lower() in lower for keyword in keyword_list)


def verify_keyword_frequency(text: str, word: str, N: int) -> bool:
    """In your response, the word {word} should appear {N} times (whole words, case-insensitive)."""
    keyword = word.lower()
    return sum(1 for w in re.findall(r"\b\w+\b", text.lower()) if w == keyword) == N


def validate_forbidden_words(text: str, forbidden_words: list[str]) -> bool:
    """Do not include keywords {forbidden words} in the response (case-insensitive substrings)."""
    lower = text.lower()
    return not any(word.lower() in lower for word in forbidden_words)


def verify_letter_frequency(text: str, letter: str, N: int) -> bool:
    """In your response, the letter {letter} should appear {N} times (case-sensitive)."""
    if len(letter) != 1:
        raise ValueError(f"letter: {letter!r} is not a single character")
    return text.count(letter) == N


def validate_response_language(text: str, language: str) -> bool:
    """Your ENTIRE response should be in {language} (an ISO 639-1 code, as langdetect reports it)."""
    from langdetect import DetectorFactory, detect

    DetectorFactory.seed = 0  # langdetect samples; a fixed seed gives one verdict per text
    return bool(detect(text) == language)


def verify_paragraph_count(text: str, N: int) -> bool:
    """Your response should contain {N} paragraphs, separated by the markdown divider `* * *`; none empty."""
    cleaned = "\n".join(line.strip() for line in text.splitlines()).strip()
    paragraphs = cleaned.split("* * *")
    if any(not p.strip() for p in paragraphs):
        return False
    return len(paragraphs) == N


def validate_word_constraint(text: str, N: int, quantifier: str) -> bool:
    """Answer with at least / around / at most {N} words (around: within max(round(N/10), 1))."""
    count = len(text.strip().split())
    if quantifier == "at least":
        return count >= N
    if quantifier == "at most":
        return count <= N
    if quantifier == "around":
        return abs(count - N) <= max(round(N * 0.1), 1)
    return False


_SENTENCE_END = re.compile(r"(?<!\w\.\w.)(?<![A-Z][a-z]\.)(?<=\.|\?)\s")


def verify_sentence_constraint(text: str, N: int, quantifier: str) -> bool:
    """Answer with at least / around / at most {N} sentences (split after `.` or `?` and a space, not after
    abbreviations such as `e.g.` or `Mr.`; around: within 1)."""
    count = len(_SENTENCE_END.split(text))
    if quantifier == "at least":
        return count >= N
    if quantifier == "around":
        return abs(count - N) <= 1
    if quantifier == "at most":
        return count <= N
    return False


def validate_paragraphs(text: str, N: int, first_word: str, i: int) -> bool:
    """There should be {N} paragraphs separated by two line breaks; the {i}-th (1-based) starts with
    {first word}."""
    paragraphs = text.split("\n\n")
    return len(paragraphs) == N and paragraphs[i - 1].strip().startswith(first_word)


def verify_postscript(text: str, postscript_marker: str) -> bool:
    """At the end of your response, add a postscript starting with {postscript marker} (not the marker alone)."""
    index = text.find(postscript_marker)
    return index >= 0 and len(text[index:].strip()) > len(postscript_marker)


def validate_placeholders(text: str, N: int) -> bool:
    """The response must contain at least {N} placeholders in square brackets, such as [address]."""
    return len(re.findall(r"\[(.*?)\]", text)) >= N


def verify_bullet_points(text: str, N: int) -> bool:
    """Your answer must contain exactly {N} bullet points (lines starting with `*` or `-`)."""
    return sum(1 for line in text.split("\n") if line.strip().startswith(("*", "-"))) == N


def validate_title(text: str) -> bool:
    """Your answer must contain a title wrapped in double angular brackets, such as <<poem of joy>>."""
    return bool(re.search(r"<<(.*?)>>", text))


def validate_choice(text: str, options: list[str]) -> bool:
    """Answer with one of the following options: {options} (ROLL: the response is contained in an option)."""
    return any(text in option for option in options)


def validate_highlighted_sections(text: str, N: int) -> bool:
    """Highlight at least {N} sections with markdown, i.e. *highlighted section*."""
    return len(re.findall(r"\*(.*?)\*", text)) >= N


def validate_sections(text: str, N: int, section_splitter: str) -> bool:
    """Your response must have {N} sections, each beginning with {section splitter} (text before the first
    splitter counts as a section unless empty)."""
    sections = text.split(section_splitter)
    if sections[0] == "":
        sections.pop(0)
    return len(sections) == N


def validate_json_format(text: str) -> bool:
    """Entire output should be wrapped in JSON format (the whole text parses as JSON)."""
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def validate_repeat_prompt(text: str, original_prompt: str) -> bool:
    """First repeat the request without change, then give your answer."""
    return text.startswith(original_prompt)


def validate_two_responses(text: str) -> bool:
    """Give two different responses separated by exactly one `******`."""
    if text.count("******") != 1:
        return False
    first, second = (part.strip() for part in text.split("******"))
    return first != second


def validate_uppercase(text: str) -> bool:
    """Your entire response should be in capital letters only."""
    return text == text.upper()


def validate_lowercase(text: str) -> bool:
    """Your entire response should be in lowercase letters; no capital letters are allowed."""
    return text == text.lower()


def validate_frequency_capital_words(text: str, N: int, quantifier: str) -> bool:
    """Words in all capital letters should appear at least / around / at most {N} times (ROLL: around means
    exactly N)."""
    count = len(re.findall(r"\b[A-Z]+\b", text))
    if quantifier == "at least":
        return count >= N
    if quantifier == "around":
        return count == N
    if quantifier == "at most":
        return count <= N
    return False


def validate_end(text: str, end_phrase: str) -> bool:
    """Finish your response with this exact phrase {end phrase}; no other words should follow."""
    return text.endswith(end_phrase)


def validate_quotation(text: str) -> bool:
    """Wrap your entire response with double quotation marks."""
    return text.startswith('"') and text.endswith('"')


def validate_no_commas(text: str) -> bool:
    """In your entire response, refrain from the use of any commas."""
    return "," not in text


# The published instruction list: open-instruct's IF_FUNCTIONS_MAP, which ROLL's worker copies.
IF_FUNCTIONS: dict[str, Callable[..., bool]] = {f.__name__: f for f in (
    verify_keywords, verify_keyword_frequency, validate_forbidden_words, verify_letter_frequency,
    validate_response_language, verify_paragraph_count, validate_word_constraint, verify_sentence_constraint,
    validate_paragraphs, verify_postscript, validate_placeholders, verify_bullet_points, validate_title,
    validate_choice, validate_highlighted_sections, validate_sections, validate_json_format,
    validate_repeat_prompt, validate_two_responses, validate_uppercase, validate_lowercase,
    validate_frequency_capital_words, validate_end, validate_quotation, validate_no_commas,
)}


def parse_constraint(ground_truth: Any, index: int) -> dict[str, Any]:
    """The constraint object of one sample: a dict, its JSON text, or its Python repr (a dict column that the
    loader turned into text)."""
    if isinstance(ground_truth, dict):
        return dict(ground_truth)
    text = str(ground_truth)
    for parse in (json.loads, ast.literal_eval):
        try:
            value = parse(text)
        except (ValueError, SyntaxError):
            continue
        if isinstance(value, dict):
            return value
    raise ValueError(f"samples[{index}].answer: {text[:80]!r} is not an IFEval constraint; the ifeval_rule reward "
                     "reads a JSON object {\"func_name\": …, its arguments} (ROLL's ground_truth column: set "
                     "data_args.response to it)")


def check_constraint(text: str, constraint: dict[str, Any]) -> bool:
    """The verdict of the constraint's verifier on `text`; False for an unknown verifier or one that raises."""
    name = constraint.get("func_name")
    func = IF_FUNCTIONS.get(str(name))
    if func is None:
        logger.warning("ifeval_rule: unknown func_name %r scores 0.0; known: %s", name, ", ".join(IF_FUNCTIONS))
        return False
    params = inspect.signature(func).parameters
    kwargs = {k: v for k, v in constraint.items() if k in params and k != "text"}
    try:
        return bool(func(text, **kwargs))
    except Exception as exc:
        logger.debug("ifeval_rule: %s raised %s: %s", name, type(exc).__name__, exc)
        return False


def ifeval_score(response: str, ground_truth: Any, *, index: int = 0, repetition_ngram_size: int = 3,
                 repetition_max_penalty: float = -0.5) -> float:
    """1.0/0.0 for the constraint on the answer after `</think>`, plus the repetition penalty of the response."""
    text = strip_special_tokens(response)
    verdict = check_constraint(after_last_think(text), parse_constraint(ground_truth, index))
    return float(verdict) + repetition_penalty(text, repetition_ngram_size, repetition_max_penalty)


def ifeval_rule_reward(prompts: Sequence[str], responses: Sequence[str], samples: Sequence[dict[str, Any]],
                       *, repetition_ngram_size: int = 3, repetition_max_penalty: float = -0.5) -> list[float]:
    """ROLL's IFEval rule reward of each response against its sample's constraint (`samples[i]["answer"]`)."""
    scores = []
    for i, (response, sample) in enumerate(zip(responses, samples, strict=True)):
        if sample.get("answer") is None:
            raise ValueError(f"samples[{i}].answer: missing; the ifeval_rule reward needs the constraint "
                             "(set data_args.response to ROLL's ground_truth column)")
        scores.append(ifeval_score(response, sample["answer"], index=i, repetition_ngram_size=repetition_ngram_size,
                                   repetition_max_penalty=repetition_max_penalty))
    return scores
