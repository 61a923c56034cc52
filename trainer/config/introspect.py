"""Walking the schema's section models (shared by validation messages and the Markdown reference)."""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from trainer.config.schema import PipelineConfig


def models_in(annotation: Any) -> tuple[list[type[BaseModel]], bool]:
    """BaseModel classes inside an annotation, and whether it is a dict or a list of them (a path then has one
    more part, the key or the index, before the model's fields)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return models_in(typing.get_args(annotation)[0])
    if origin in (dict, Mapping):
        models, _ = models_in(typing.get_args(annotation)[1])
        return models, True
    if origin is list:
        models, _ = models_in(typing.get_args(annotation)[0])
        return models, bool(models)
    if origin in (typing.Union, types.UnionType):
        found: list[type[BaseModel]] = []
        is_dict = False
        for arg in typing.get_args(annotation):
            models, arg_is_dict = models_in(arg)
            found.extend(models)
            is_dict = is_dict or arg_is_dict
        return found, is_dict
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation], False
    return [], False



@functools.cache
def sections() -> list[tuple[str, type[BaseModel]]]:
    """Every section model once, with the first path where it appears (breadth first)."""
    seen: set[type[BaseModel]] = set()
    out: list[tuple[str, type[BaseModel]]] = []
    queue: list[tuple[str, type[BaseModel]]] = [("", PipelineConfig)]
    while queue:
        path, model = queue.pop(0)
        if model in seen:
            continue
        seen.add(model)
        if not model.__name__.startswith("StrategyArgs_"):
            out.append((path, model))
        for name, info in model.model_fields.items():
            models, is_dict = models_in(info.annotation)
            prefix = "" if model is PipelineConfig else f"{path}."
            key = ".<i>" if typing.get_origin(info.annotation) is list else ".<name>"
            child = f"{prefix}{name}" + (key if is_dict else "")
            if model is PipelineConfig and name == "actor_train":
                child = "<worker>"  # WorkerConfig is shared by every role; name it once
            for sub in models:
                if sub.__name__.startswith("StrategyArgs_"):
                    config_model = sub.model_fields["strategy_config"].annotation
                    queue.append((f"{child}.strategy_config", config_model))
                else:
                    queue.append((child, sub))
    return out


@functools.cache
def key_locations() -> dict[str, list[str]]:
    """Field name -> the sections (display paths) that have it, for "it belongs in …" hints."""
    out: dict[str, list[str]] = {}
    for path, model in sections():
        for name in model.model_fields:
            out.setdefault(name, []).append(path or "the top level")
    return out
