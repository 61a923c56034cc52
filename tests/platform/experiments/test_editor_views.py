"""The editor's basic view (the schema's `common` fields), errors of a refused save, the imported file kept beside
the native config, and the memory-fit estimate in the live check."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from policylab.experiments.models import Experiment, Project
from tests.platform.experiments.test_pages import form_fields
from trainer.config import config_json_schema

pytestmark = pytest.mark.django_db
REPO_ROOT = Path(__file__).resolve().parents[3]
VERL = (REPO_ROOT / "examples" / "foreign" / "verl_grpo_gsm8k.yaml").read_text()


@pytest.fixture
def project(team_a) -> Project:
    return Project.objects.create(team=team_a, name="proj")


def common_names() -> set[str]:
    """Field names the schema marks common (the basic view), read from the JSON Schema the editor is built from."""
    names: set[str] = set()

    def walk(node) -> None:
        if isinstance(node, dict):
            for name, prop in (node.get("properties") or {}).items():
                if isinstance(prop, dict) and prop.get("common"):
                    names.add(name)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(config_json_schema())
    return names


def test_the_basic_view_is_the_schemas_common_fields(browser, project) -> None:
    html = browser.get(f"/projects/{project.pk}/experiments/new/").content.decode()
    assert 'class="tab-panel basic"' in html  # the editor opens on the basic view
    common = re.findall(r'<div class="field[^"]*\bcommon\b[^"]*" data-path="([^"]+)"', html)
    everything = re.findall(r'<div class="field[^"]*" data-path="([^"]+)"', html)
    assert 15 <= len(set(p.rsplit(".", 1)[-1] for p in common)) <= 25 and len(everything) > 10 * len(common) / 2
    assert {p.rsplit(".", 1)[-1] for p in common} <= common_names()
    for path in ("rollout_batch_size", "actor_train.training_args.learning_rate", "adv_estimator",
                 "actor_train.model_args.model_name_or_path", "actor_infer.device_mapping", "init_kl_coef"):
        assert path in common, path
    assert "ppo_epochs" not in common and "ppo_epochs" in everything  # one click away, in the same form
    # the roles share one schema: a training knob is basic only under a training role, sampling under generation
    assert "actor_infer.generating_args.temperature" in common
    for path in ("actor_infer.training_args.learning_rate", "actor_train.generating_args.temperature",
                 "rewards.synthetic.device_mapping"):
        assert path in everything and path not in common, path
    assert '<details class="subsection" data-section="actor_train" data-common' in html


def test_a_refused_save_says_why_where_the_live_check_cannot_overwrite_it(browser, project) -> None:
    url = f"/projects/{project.pk}/experiments/new/"
    post = form_fields(browser.get(url).content.decode()) | {"name": "  ", "editor_mode": "form"}
    answer = browser.post(url, post)
    html = answer.content.decode()
    assert answer.status_code == 200 and not Experiment.objects.exists()
    banner = re.search(r'<div id="save-errors".*?</div>', html, flags=re.S).group(0)
    assert "Not saved" in banner and "<code>name</code> an experiment needs a name" in banner
    assert re.search(r'<ul class="field-errors" id="name-errors"><li>an experiment needs a name</li>', html)
    # the banner and the name's list carry no data-errors-for: the live check (config_editor.js) clears only those
    assert "data-errors-for" not in banner


def test_a_form_filled_from_an_imported_file_keeps_the_file(browser, project, alice) -> None:
    url = f"/projects/{project.pk}/experiments/new/"
    post = form_fields(browser.get(url).content.decode()) | {"name": "from verl", "imported_source": VERL}
    assert browser.post(url, post).status_code == 302
    experiment = Experiment.objects.get(name="from verl")
    assert (experiment.source_format, experiment.source_text) == ("verl", VERL)
    assert experiment.config["exp_name"] == "demo_grpo_cpu"  # what runs is the form's config
    page = browser.get(f"/experiments/{experiment.pk}/").content.decode()
    assert "imported from verl" in page and 'id="original-config"' in page and "actor_rollout_ref:" in page
    # saved from the form without an import: nothing but the native config
    post = form_fields(browser.get(url).content.decode()) | {"name": "plain"}
    browser.post(url, post)
    plain = Experiment.objects.get(name="plain")
    assert (plain.source_format, plain.source_text) == ("roll", "")
    assert 'id="original-config"' not in browser.get(f"/experiments/{plain.pk}/").content.decode()


def test_the_live_check_estimates_memory_per_role(browser, project, tmp_path, settings) -> None:
    post = form_fields(browser.get(f"/projects/{project.pk}/experiments/new/").content.decode())
    memory = browser.post("/editor/check/", post).json()["memory"]
    assert memory["device_bytes"] == 80 * 1024**3 and memory["models"] == {"tiny://tiny?seed=0": "tiny model"}
    roles = {r["role"]: r for r in memory["roles"]}
    assert set(roles) == {"actor_train", "actor_infer"}  # the synthetic reward has no model
    assert roles["actor_train"]["fits"] is True and roles["actor_train"]["parts"]["optimizer"] > 0
    # A model named by a path under the read roots is sized from its config.json; a hub id from the declared size.
    model = tmp_path / "models" / "big"
    model.mkdir(parents=True)
    model.joinpath("config.json").write_text('{"model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672, '
                                             '"num_hidden_layers": 80, "num_attention_heads": 64, '
                                             '"num_key_value_heads": 8, "vocab_size": 128256}')
    settings.POLICYLAB_READ_ROOTS = [*settings.POLICYLAB_READ_ROOTS, str(tmp_path / "models")]
    big = post | {"actor_train.model_args.model_name_or_path": str(model), "memory_device_gib": "40"}
    answer = browser.post("/editor/check/", big).json()["memory"]
    assert answer["models"][str(model)] == "config.json" and answer["device_bytes"] == 40 * 1024**3
    assert any(w.startswith("actor_train needs") and "will not fit in 40 GiB" in w for w in answer["warnings"])
    hub = post | {"actor_train.model_args.model_name_or_path": "org/model"}
    unknown = browser.post("/editor/check/", hub).json()["memory"]
    assert unknown["models"]["org/model"] == "unknown"
    declared = hub | {"memory_params": "7", "memory_layers": "32", "memory_hidden": "4096", "memory_kv_heads": "8",
                      "memory_head_dim": "128", "memory_vocab": "32000"}
    sized = browser.post("/editor/check/", declared).json()["memory"]
    assert sized["models"]["org/model"] == "declared"
    assert next(r for r in sized["roles"] if r["role"] == "actor_train")["parts"]["weights"] > 7e9
