"""ROLL's IFEval rule reward (trainer.rewards.ifeval): every verifier of the published instruction list
(open-instruct's IF_FUNCTIONS_MAP, 25 ids) on a response that meets it and one that does not, hand-written
from the instruction's wording; the reward's parsing, `</think>` handling and repetition penalty; and the
ROLL worker class resolving to it through a config.

How it fails: break a verifier (e.g. count every word in verify_keyword_frequency, as ROLL's copy does) and
its pair fails; drop the repetition penalty and test_repetition_penalty_is_added fails.
"""

from __future__ import annotations

import json

import pytest

from trainer.config.registries import ROLL_REWARD_WORKERS
from trainer.rewards.ifeval import IF_FUNCTIONS, ifeval_score
from trainer.rewards.registry import build_reward
from trainer.rewards.text_rules import repetition_penalty

# func_name -> (constraint arguments, a response that meets it, one that does not). The verdict is compared
# with the repetition penalty off (it is tested apart).
CASES: dict[str, tuple[dict, str, str]] = {
    "verify_keywords": ({"keyword_list": ["Paris", "river"]}, "The river Seine crosses paris.",
                        "The Seine crosses Paris."),
    "verify_keyword_frequency": ({"word": "data", "N": 2}, "Data beats opinions; trust data over hunches.",
                                 "Data beats opinions."),
    "validate_forbidden_words": ({"forbidden_words": ["cheap", "free"]}, "An affordable plan for all.",
                                 "A FREE plan for all."),
    "verify_letter_frequency": ({"letter": "z", "N": 2}, "Zebras zigzag.", "Zebras zigzag zealously."),
    "validate_response_language": ({"language": "fr"},
                                   "Le chat dort tranquillement sur la table de la cuisine pendant la nuit.",
                                   "The cat sleeps quietly on the kitchen table during the night."),
    "verify_paragraph_count": ({"N": 2}, "First part.\n* * *\nSecond part.", "First part.\n* * *\n\n* * *\nThird."),
    "validate_word_constraint": ({"N": 10, "quantifier": "around"}, "one two three four five six seven eight nine",
                                 "one two three four five six seven eight"),
    "verify_sentence_constraint": ({"N": 2, "quantifier": "at most"}, "It rains. We stay in.",
                                   "It rains. We stay in. We read. We sleep."),
    "validate_paragraphs": ({"N": 2, "first_word": "Finally", "i": 2}, "Start here.\n\nFinally we end.",
                            "Start here.\n\nThen we end."),
    "verify_postscript": ({"postscript_marker": "P.S."}, "Dear Ann, see you soon.\nP.S. Bring the map.",
                          "Dear Ann, see you soon.\nP.S."),
    "validate_placeholders": ({"N": 2}, "Send it to [name] at [address].", "Send it to [name]."),
    "verify_bullet_points": ({"N": 2}, "Plan:\n* wake up\n* run", "Plan:\n* wake up\n* run\n- eat"),
    "validate_title": ({}, "<<Ode to Rain>>\nDrops fall.", "Ode to Rain\nDrops fall."),
    "validate_choice": ({"options": ["My answer is yes.", "My answer is no."]}, "My answer is yes.",
                        "I think my answer is yes."),
    "validate_highlighted_sections": ({"N": 2}, "This is *key* and *also key*.", "This is *key* only."),
    "validate_sections": ({"N": 2, "section_splitter": "SECTION"}, "SECTION 1 intro SECTION 2 body",
                          "SECTION 1 intro SECTION 2 body SECTION 3 end"),
    "validate_json_format": ({}, '{"city": "Oslo", "temp": -3}', 'city: "Oslo"'),
    "validate_repeat_prompt": ({"original_prompt": "Name a color."}, "Name a color. Blue.", "Blue. Name a color."),
    "validate_two_responses": ({}, "Blue is calm.\n******\nRed is bold.", "Blue is calm.\n******\nBlue is calm."),
    "validate_uppercase": ({}, "HELLO THERE, 2 FRIENDS!", "HELLO There"),
    "validate_lowercase": ({}, "hello there, 2 friends!", "hello There"),
    "validate_frequency_capital_words": ({"N": 2, "quantifier": "at least"}, "The NASA and ESA teams met.",
                                         "The NASA team met."),
    "validate_end": ({"end_phrase": "Is there anything else I can help with?"},
                     "Done. Is there anything else I can help with?",
                     "Is there anything else I can help with? Bye."),
    "validate_quotation": ({}, '"Quoted in full."', '"Quoted in part." Then not.'),
    "validate_no_commas": ({}, "No commas here at all.", "Well, one comma."),
}


def test_the_published_instruction_list_is_covered() -> None:
    assert len(IF_FUNCTIONS) == 25 and set(CASES) == set(IF_FUNCTIONS)


@pytest.mark.parametrize("func_name", sorted(CASES))
def test_each_instruction_met_and_unmet(func_name: str) -> None:
    args, good, bad = CASES[func_name]
    truth = json.dumps({"func_name": func_name, **args})
    assert ifeval_score(good, truth, repetition_max_penalty=0.0) == 1.0, good
    assert ifeval_score(bad, truth, repetition_max_penalty=0.0) == 0.0, bad


def test_keyword_frequency_counts_the_keyword_not_every_word() -> None:
    truth = {"func_name": "verify_keyword_frequency", "word": "apple", "N": 3}
    assert ifeval_score("apple pie and apple tart", truth) == 0.0  # 2 apples, though 5 words
    assert ifeval_score("An Apple, an apple, one more apple.", truth) == 1.0


def test_quantifiers_of_the_counting_instructions() -> None:
    words = " ".join(f"w{i}" for i in range(20))  # distinct words: no repetition penalty
    for quantifier, n, expected in [("at least", 20, 1.0), ("at least", 21, 0.0), ("at most", 19, 0.0),
                                    ("around", 22, 1.0), ("around", 23, 0.0), ("nearly", 20, 0.0)]:
        truth = {"func_name": "validate_word_constraint", "N": n, "quantifier": quantifier}
        assert ifeval_score(words, truth) == expected, (quantifier, n)
    # ROLL's copy: "around" is exactly N for capital words, within 1 for sentences
    caps = {"func_name": "validate_frequency_capital_words", "N": 3, "quantifier": "around"}
    assert ifeval_score("AB CD EF", caps) == 1.0 and ifeval_score("AB CD", caps) == 0.0
    sentences = {"func_name": "verify_sentence_constraint", "N": 4, "quantifier": "around"}
    assert ifeval_score("A b. C d. E f.", sentences) == 1.0 and ifeval_score("A b. C d.", sentences) == 0.0


def test_the_verdict_reads_the_answer_after_think_and_without_special_tokens() -> None:
    truth = {"func_name": "validate_lowercase"}
    assert ifeval_score("<think>Plan It Out</think>\n\nall lower here<|im_end|>", truth) == 1.0
    assert ifeval_score("<think>plan</think>Not lower", truth) == 0.0
    assert ifeval_score("no think tags at all", truth) == 1.0


def test_unused_arguments_and_nulls_are_ignored_and_failures_score_zero() -> None:
    # RLVR-IFeval rows carry every argument name, null where unused
    truth = {"func_name": "validate_no_commas", "N": None, "keyword_list": None, "quantifier": None}
    assert ifeval_score("fine", json.dumps(truth)) == 1.0
    assert ifeval_score("", {"func_name": "validate_response_language", "language": "en"}) == 0.0  # detect raises
    assert ifeval_score("text", {"func_name": "verify_letter_frequency", "letter": "ab", "N": 1}) == 0.0
    assert ifeval_score("text", {"func_name": "no_such_check"}) == 0.0
    # a dict column the loader turned into its Python repr still parses
    assert ifeval_score("fine", str({"func_name": "validate_no_commas", "N": None})) == 1.0


def test_a_reference_that_is_no_constraint_is_refused() -> None:
    with pytest.raises(ValueError, match=r"samples\[0\].answer: 'B' is not an IFEval constraint"):
        ifeval_score("x", "B")
    reward = build_reward("ifeval_rule")
    with pytest.raises(ValueError, match=r"samples\[0\].answer: missing"):
        reward(["p"], ["x"], [{"answer": None}])


def test_repetition_penalty_is_added() -> None:
    # 8 words, 6 trigrams: "a b c" x2 and "b c a" x2 and "c a b" x2 -> 3 distinct; -0.5 * (1 - 3/6) = -0.25
    assert repetition_penalty("a b c a b c a b") == pytest.approx(-0.25)
    assert repetition_penalty("only two") == 0.0
    truth = {"func_name": "validate_lowercase"}
    assert ifeval_score("a b c a b c a b", truth) == pytest.approx(0.75)
    # the penalty reads the whole response, think part included (ROLL scores resp_text1)
    # words "<think>x y z x y z x y</think>ok": 6 trigrams, (y, z, x) twice, so 5 distinct
    assert ifeval_score("<think>x y z x y z x y</think>ok", truth) == pytest.approx(1.0 - 0.5 * (1 - 5 / 6))
    reward = build_reward("ifeval_rule", repetition_max_penalty=0.0)
    assert reward(["p"], ["a b c a b c a b"], [{"answer": json.dumps(truth)}]) == [1.0]
    with pytest.raises(ValueError, match=r"repetition_max_penalty: 0\.5 must be <= 0"):
        build_reward("ifeval_rule", repetition_max_penalty=0.5)(["p"], ["a b c"], [{"answer": json.dumps(truth)}])


def test_roll_worker_class_names_the_reward() -> None:
    assert ROLL_REWARD_WORKERS["roll.pipeline.rlvr.rewards.ifeval_rule_reward_worker.GeneralRuleRewardWorker"] == (
        "ifeval_rule")
