"""The editor's form is generated from the schema and reads back the config it shows."""

from __future__ import annotations

import pytest
from django.http import QueryDict

from policylab.experiments.config_editor import FormParseError, build_form, parse_form
from trainer.config import ConfigIssue, config_json_schema, validate_config


def submitted(section, post: QueryDict | None = None) -> QueryDict:
    """What a browser submits for `section` (checkboxes only when checked)."""
    post = post if post is not None else QueryDict(mutable=True)
    if section.optional and section.included:
        post[section.include_name] = "1"
    if section.included:
        for group in section.groups:
            for field in group.fields:
                if field.kind == "checkbox":
                    if field.value:
                        post[field.path] = "1"
                else:
                    post[field.path] = field.input_value
        for sub in section.sections:
            submitted(sub, post)
    return post


def fields(section):
    for group in section.groups:
        yield from ((group.category, f) for f in group.fields)
    for sub in section.sections:
        yield from fields(sub)


def test_form_follows_the_schema_categories_defaults_and_descriptions(demo_yaml) -> None:
    config = validate_config(demo_yaml).config.model_dump(mode="json")
    form = build_form(config)
    schema = config_json_schema()
    by_path = {f.path: (category, f) for category, f in fields(form)}
    for name, prop in schema["properties"].items():
        if name in by_path:
            category, field = by_path[name]
            assert category == prop["category"] and field.description == prop["description"]
    assert by_path["adv_estimator"][1].kind == "select"
    assert '"grpo"' in [value for value, _ in by_path["adv_estimator"][1].choices]
    assert by_path["use_kl_loss"][1].kind == "checkbox"
    assert by_path["actor_train.training_args.learning_rate"][1].value == pytest.approx(2e-3)
    sections = {s.path for s in form.sections}
    assert {"actor_train", "actor_infer", "reference", "critic", "rewards", "validation"} <= sections
    rewards = next(s for s in form.sections if s.path == "rewards")
    assert [s.path for s in rewards.sections] == ["rewards.synthetic"]


def test_form_round_trip_gives_back_the_same_config(demo_yaml) -> None:
    config = validate_config(demo_yaml).config.model_dump(mode="json")
    parsed = parse_form(submitted(build_form(config)))
    result = validate_config(parsed)
    assert result.ok, result.errors
    assert result.config.model_dump(mode="json") == config


def test_an_edited_field_changes_the_config_and_bad_text_names_the_field(demo_yaml) -> None:
    config = validate_config(demo_yaml).config.model_dump(mode="json")
    post = submitted(build_form(config))
    post["rollout_batch_size"] = "3"
    parsed = parse_form(post)
    assert parsed["rollout_batch_size"] == 3
    post["actor_train.training_args.learning_rate"] = "fast"
    with pytest.raises(FormParseError) as caught:
        parse_form(post)
    assert [i.path for i in caught.value.issues] == ["actor_train.training_args.learning_rate"]


def test_issues_land_on_their_input_or_the_closest_section(demo_yaml) -> None:
    config = validate_config(demo_yaml).config.model_dump(mode="json")
    form = build_form(
        config,
        [
            ConfigIssue("actor_train.training_args.learning_rate", "must be > 0"),
            ConfigIssue("actor_train.training_args.lr", "unknown key; did you mean learning_rate?"),
        ],
    )
    by_path = {f.path: f for _, f in fields(form)}
    assert by_path["actor_train.training_args.learning_rate"].errors == ["must be > 0"]
    actor = next(s for s in form.sections if s.path == "actor_train")
    training = next(s for s in actor.sections if s.path == "actor_train.training_args")
    assert training.errors == ["actor_train.training_args.lr: unknown key; did you mean learning_rate?"]
    assert actor.error_count == 2
