"""Helpers of every section model: fld (a field with its form category and status), Section (unknown keys
are errors), Inactive markers, and the small shared types."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

PathAccess = Literal["read", "write"]
SEED_MAX = 2**32 - 1  # numpy's seeds are 32-bit; a larger seed would fail at the first generator
STEP_MAX = 2**31 - 1  # max_steps becomes the platform's Run.total_steps, a 32-bit integer column


@dataclass(frozen=True)
class Inactive:
    """Why a field the schema accepts does not act in this build (docs/decisions/0011).

    import_only: kept so that an imported or ROLL config loses nothing, but nothing here reads it.
    planned: reserved for a backend or feature that is not built yet.
    Every field without an Inactive acts: the engine reads it (tests/trainer/config/test_field_status.py)."""

    status: Literal["import_only", "planned"]
    reason: str


def import_only(reason: str) -> Inactive:
    return Inactive("import_only", reason)


def planned(feature: str) -> Inactive:
    return Inactive("planned", f"{feature} is not built yet")


def fld(
    default: Any = ...,
    *,
    category: str,
    description: str,
    path: PathAccess | None = None,
    inactive: Inactive | None = None,
    acts_through: str | None = None,
    common: bool = False,
    **kwargs: Any,
) -> Any:
    """A pydantic Field carrying a description and the form category it is grouped under.

    `path` marks a file-system location the run reads or writes: the platform confines those
    (trainer.config.confinement). `inactive` says the engine does not act on it, and why.
    `acts_through` names the fields a schema validator copies this one into (an older spelling).
    `common` marks one of the ~20 knobs people change most: the editor's basic view shows only these."""
    extra = _extra(category, path, inactive, acts_through) | ({"common": True} if common else {})
    return Field(default, description=description, json_schema_extra=extra, **kwargs)


def fld_factory(
    factory: Any, *, category: str, description: str, path: PathAccess | None = None,
    inactive: Inactive | None = None, **kwargs: Any,
) -> Any:
    extra = _extra(category, path, inactive, None)
    return Field(default_factory=factory, description=description, json_schema_extra=extra, **kwargs)


def _extra(category: str, path: PathAccess | None, inactive: Inactive | None, acts_through: str | None) -> dict[str, Any]:
    extra: dict[str, Any] = {"category": category}
    if path is not None:
        extra["path"] = path
    if inactive is not None:
        extra |= {"status": inactive.status, "status_reason": inactive.reason}
    if acts_through is not None:
        extra["acts_through"] = acts_through
    return extra


class Section(BaseModel):
    """Base of every config section: unknown keys are errors.

    `class X(Section, inactive=planned("…"))` marks every field X declares as inactive (fields that
    carry their own status keep it)."""

    model_config = ConfigDict(extra="forbid", validate_default=False, populate_by_name=True)

    def __init_subclass__(cls, inactive: Inactive | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)  # `inactive` is applied once pydantic has built the fields

    @classmethod
    def __pydantic_init_subclass__(cls, inactive: Inactive | None = None, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if inactive is None:
            return
        own = inspect.get_annotations(cls)
        for name, info in cls.model_fields.items():
            if name in own and isinstance(info.json_schema_extra, dict) and "status" not in info.json_schema_extra:
                info.json_schema_extra |= {"status": inactive.status, "status_reason": inactive.reason}
        cls.model_rebuild(force=True)


def field_status(model: type[BaseModel], name: str) -> tuple[str, str]:
    """("acts", "") or (status, reason) of `model.name`."""
    extra = model.model_fields[name].json_schema_extra
    if isinstance(extra, dict) and "status" in extra:
        return extra["status"], extra["status_reason"]
    return "acts", ""


Dtype = Literal["fp32", "bf16", "fp16"]
# remax: the schema accepts it, this build cannot run it: its baseline is a greedy rollout per prompt, which
# the RLVR pipeline does not generate
UNBUILT_ADV_ESTIMATORS = ("remax",)
# ROLL's step-wise estimators: advantages per turn of a multi-turn trajectory, agentic runs only
# (trainer.algorithms.step_advantages.STEP_ADV_ESTIMATORS, which a test keeps equal)
AGENTIC_ADV_ESTIMATORS = ("gigpo", "step_reinforce", "agentic_reinforce")
NormType = Literal["batch", "group", "running", "none"]
AutoInt = int | Literal["auto"]
AutoFloat = float | Literal["auto"]
AutoBool = bool | Literal["auto"]
