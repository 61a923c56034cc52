"""Real config files of verl, SkyRL, RLinf and ROLL across releases (tests/fixtures/foreign_corpus, saved verbatim
from the frameworks' repositories; SOURCES.md names each file's repository, commit and path). Issue 31.

Each file validates (warnings allowed), or is refused only for values the user must set (`???`, or a value the
framework itself requires, such as verl's micro-batch size), for engines this build lacks (SGLang) and for
objectives it does not build (FlowRL's tb_coef, verl's disco loss), each error naming the override that runs the
file on what is built; with those overrides the file validates. A file whose recipe needs a part PolicyLab does not
build (a ROLL environment, an engine mode) may stay refused, each such error saying what is not built (issue 43:
ROLL's current example tree). The refusals are in each snapshot. What PolicyLab says about each file is
snapshot-tested (`<file>.issues.json` next to it), so a changed warning shows in review; regenerate the
snapshots with POLICYLAB_UPDATE_SNAPSHOTS=1.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
from pathlib import Path

import pytest

from trainer.config import validate_config
from trainer.config.importers import release_family
from trainer.config.issues import ValidationResult
from trainer.config.loading import load_raw

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "foreign_corpus"
ROW = re.compile(r"^\| `(?P<file>[^`]+)` \| (?P<repo>\S+) \| `(?P<commit>[0-9a-f]{40})` \| `(?P<path>[^`]+)` \|$")
OVERRIDE = re.compile(r"override (\S+=\S+|~\S+)$")
UPDATE = os.environ.get("POLICYLAB_UPDATE_SNAPSHOTS") == "1"
# A key added to a file: under a section every file of the format has, and a new top-level section.
NEW_KEY_SECTION = {"verl": "actor_rollout_ref.actor", "skyrl": "trainer.algorithm", "rlinf": "algorithm"}


def sources() -> dict[str, dict[str, str]]:
    rows = [ROW.match(line) for line in (CORPUS / "SOURCES.md").read_text(encoding="utf-8").splitlines()]
    return {m["file"]: m.groupdict() for m in rows if m}


# Defaults layers other corpus files compose, not cases of their own: ROLL's examples/config/*.yaml, RLinf's
# hybrid_engines/ and base_*.yaml.
LAYER = re.compile(r"^roll/config/|/hybrid_engines/|/base_[^/]+\.yaml$")
FILES = sorted(f for f in sources() if not LAYER.search(f))
# What a refusal without an override may say: the file's recipe needs a part PolicyLab does not build.
NOT_BUILT = ("not built", "not a registered environment")


def fmt_of(name: str) -> str:
    return name.split("/")[0]


def check(name: str, overrides: list[str] | tuple[str, ...] = ()) -> ValidationResult:
    return _check(name, tuple(overrides))


@functools.cache
def _check(name: str, overrides: tuple[str, ...]) -> ValidationResult:
    logging.disable(logging.WARNING)  # the importers' "read as …" notice
    try:
        return validate_config(CORPUS / name, list(overrides))
    finally:
        logging.disable(logging.NOTSET)


@functools.cache
def fixing_overrides(name: str) -> tuple[list[str], ValidationResult]:
    """The overrides the errors name, applied until the file validates (a `???` hides the errors behind it)."""
    overrides: list[str] = []
    result = check(name)
    for _ in range(4):
        if result.ok:
            break
        named = [m.group(1) for m in (OVERRIDE.search(issue.message) for issue in result.errors) if m]
        if not named or any(o in overrides for o in named):
            break
        overrides += named
        result = check(name, overrides)
    return overrides, result


def snapshot(name: str, result: ValidationResult, overrides: list[str]) -> dict:
    family = ""
    if fmt_of(name) != "roll" and result.source_format == fmt_of(name):
        family = release_family(load_raw(CORPUS / name, overrides), fmt_of(name)).name
    return {
        "format": fmt_of(name),
        "release_family": family,
        "refused_for": [f"{i.path}: {i.message}" for i in check(name).errors],
        "overrides_that_validate": overrides if result.ok else None,
        "refused_after_overrides": [f"{i.path}: {i.message}" for i in result.errors],
        "warnings": [f"{i.path}: {i.message}" for i in result.warnings],
    }


def test_every_corpus_file_has_a_source_row_and_every_row_a_file() -> None:
    on_disk = {str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*.yaml")}
    assert on_disk == set(sources())
    assert len(FILES) >= 120, f"the corpus holds {len(FILES)} files"
    for row in sources().values():
        assert row["repo"] in ("volcengine/verl", "verl-project/verl-recipe", "NovaSky-AI/SkyRL", "RLinf/RLinf",
                               "alibaba/ROLL"), row


@pytest.mark.parametrize("name", FILES)
def test_corpus_file_validates_or_names_the_overrides(name: str) -> None:
    """Read as its own format; refused only for values to set and engines to swap, each naming its override; with
    those overrides it validates. What it says is the committed snapshot."""
    overrides, result = fixing_overrides(name)
    unnamed = [str(i) for i in result.errors if not OVERRIDE.search(i.message)]
    assert result.ok or all(any(n in e for n in NOT_BUILT) for e in unnamed), \
        f"{name} with {overrides}: refused for a reason that names neither an override nor what is not built: {unnamed}"
    assert result.source_format == fmt_of(name)
    assert not [w for w in result.warnings if w.path.startswith("<")], result.warnings
    got = snapshot(name, result, overrides)
    path = CORPUS / f"{name}.issues.json"
    if UPDATE or not path.exists():
        path.write_text(json.dumps(got, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    assert got == json.loads(path.read_text(encoding="utf-8")), \
        f"{name}: what PolicyLab says changed; review, then POLICYLAB_UPDATE_SNAPSHOTS=1"


@pytest.mark.parametrize("name", [f for f in FILES if fmt_of(f) != "roll"])
def test_a_new_key_in_a_foreign_file_is_a_warning(name: str) -> None:
    """A key no release of the framework has (the next release's, or a user's) is a warning naming it, nested or at
    the top level; the file still validates."""
    fmt = fmt_of(name)
    overrides, fixed = fixing_overrides(name)
    nested = f"{NEW_KEY_SECTION[fmt]}.policylab_corpus_new_knob"
    result = check(name, [*overrides, f"+{nested}=7", "+policylab_corpus_new_section.knob=3"])
    assert result.ok or not fixed.ok, [str(i) for i in result.errors]  # a refused recipe stays refused, no more
    for key in (nested, "policylab_corpus_new_section.knob"):
        assert any(w.path == key and "not used by PolicyLab" in w.message for w in result.warnings), key


# one file of each ROLL folder: the typo rule is the same for all, the folders differ in pipeline and engines
ROLL_SAMPLES = sorted({f.rsplit("/", 1)[0]: f for f in reversed(FILES) if fmt_of(f) == "roll"}.values())


@pytest.mark.parametrize("name", ROLL_SAMPLES)
@pytest.mark.parametrize(("typo", "meant"), [("actor_train.training_args.learning_rat", "learning_rate"),
                                             ("rollout_batch_sise", "rollout_batch_size")])
def test_a_typo_in_a_native_roll_file_is_an_error(name: str, typo: str, meant: str) -> None:
    """ROLL's layout is native: a key of no ROLL dataclass stays an error, naming the key it is close to."""
    overrides, _ = fixing_overrides(name)
    result = check(name, [*overrides, f"+{typo}=8"])
    issue = next(i for i in result.errors if i.path == typo)
    assert "unknown key" in issue.message and f"did you mean {meant}?" in issue.message
