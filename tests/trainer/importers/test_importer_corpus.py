"""Config files as the frameworks' users write them (corpus/, written for these tests in the layout of each
release) import and validate; chosen values land where a hand calculation says. Issue 21.

Every expected value below is worked out by hand from the file (batch arithmetic in the comments),
never read from the importers' tables.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.config import validate_config
from trainer.config.importers import release_family
from trainer.config.issues import ValidationResult
from trainer.config.loading import load_raw

CORPUS = Path(__file__).parent / "corpus"
# file -> (format, release family the importer must recognise)
FILES = {
    "verl_v0.3_grpo_fsdp.yaml": ("verl", "v0.3"),
    "verl_v0.3_ppo_megatron.yaml": ("verl", "v0.3"),
    "verl_v0.4_dapo.yaml": ("verl", "v0.4"),
    "verl_v0.4_gsm8k_grpo.yaml": ("verl", "v0.4"),
    "verl_v0.5_grpo_fsdp.yaml": ("verl", "main"),  # main keeps every v0.5 key: the newest family that knows them
    "verl_main_megatron.yaml": ("verl", "main"),
    "verl_main_tree/recipe.yaml": ("verl", "main"),
    "skyrl_early_ppo.yaml": ("skyrl", "early"),
    "skyrl_v0.1_grpo.yaml": ("skyrl", "v0.1"),
    "skyrl_v0.3_megatron_lora.yaml": ("skyrl", "v0.3"),
    "skyrl_main_inference_engine.yaml": ("skyrl", "main"),
    "rlinf_ppo_megatron_critic.yaml": ("rlinf", "current"),
    "rlinf_grpo_fsdp.yaml": ("rlinf", "current"),
    "rlinf_grpo_moe_megatron.yaml": ("rlinf", "current"),
    "roll_v0.3_rlvr_megatron.yaml": ("roll", ""),
    "roll_main_agentic.yaml": ("roll", ""),
    "roll_main_rlvr_fsdp2.yaml": ("roll", ""),
}


@pytest.fixture(scope="module")
def results() -> dict[str, ValidationResult]:
    return {name: validate_config(CORPUS / name) for name in FILES}


def _warned(result: ValidationResult, path: str, *words: str) -> bool:
    return any(w.path == path and all(word in w.message for word in words) for w in result.warnings)


@pytest.mark.parametrize("name", FILES)
def test_corpus_file_imports_and_validates(name: str, results: dict[str, ValidationResult]) -> None:
    """Coherent (a backend this build lacks, e.g. megatron_train or sglang, is only a not_built error), no
    key of the framework refused, and read as the right format and release."""
    result = results[name]
    fmt, family = FILES[name]
    assert result.config is not None and result.rule_errors == [], [str(i) for i in result.errors]
    assert not [i for i in result.issues if "unknown key" in i.message]
    assert result.source_format == fmt
    if family:
        assert release_family(load_raw(CORPUS / name), fmt).name == family


def test_verl_v03_grpo(results: dict[str, ValidationResult]) -> None:
    result = results["verl_v0.3_grpo_fsdp.yaml"]
    cfg = result.config
    assert (cfg.rollout_batch_size, cfg.num_return_sequences_in_group, cfg.max_steps) == (128, 8, 300)
    # mini 64 prompts × n 8 = 512 samples = micro 8 × 4 GPUs × 16
    args = cfg.actor_train.training_args
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (8, 16)
    assert (args.learning_rate, args.warmup_ratio, args.lr_scheduler_type, args.max_grad_norm) == (2e-6, 0.1, "cosine",
                                                                                                     0.5)
    assert cfg.use_kl_loss and cfg.kl_loss_coef == 0.002 and cfg.kl_penalty == "low_var_kl" and cfg.ppo_epochs == 2
    assert cfg.actor_train.data_args.truncation_side == "left"
    assert cfg.actor_infer.strategy_args.strategy_config.tensor_parallel_size == 2
    assert cfg.reference.strategy_args.strategy_config.cpu_offload is True and cfg.reference.infer_batch_size == 16
    assert cfg.checkpoint_config.output_dir == "/ckpt/policylab_corpus/verl_v03_grpo" and cfg.max_ckpts_to_keep == 3
    assert cfg.critic is None  # GRPO: verl creates no critic, whatever critic.* says
    assert _warned(result, "trainer.val_generations_to_log_to_wandb", "= 10")
    assert _warned(result, "actor_rollout_ref.rollout.engine_kwargs.swap_space", "= 16")


def test_verl_v03_ppo_megatron(results: dict[str, ValidationResult]) -> None:
    result = results["verl_v0.3_ppo_megatron.yaml"]
    cfg = result.config
    actor = cfg.actor_train.strategy_args
    assert actor.strategy_name == "megatron_train"
    mcore = actor.strategy_config
    assert (mcore.tensor_model_parallel_size, mcore.pipeline_model_parallel_size) == (2, 2)
    assert mcore.param_offload and mcore.grad_offload and mcore.optimizer_offload
    assert mcore.use_dist_checkpointing and mcore.dist_checkpointing_path == "/ckpt/mcore/qwen2.5-7b"
    # 16 GPUs / (TP 2 × PP 2) = dp 4; mini 64 × n 1 = 64 samples = micro 2 × dp 4 × 8
    assert cfg.actor_train.training_args.gradient_accumulation_steps == 8
    assert cfg.actor_train.training_args.max_grad_norm == 0.8  # Megatron's optim.clip_grad
    assert cfg.critic.strategy_args.strategy_name == "megatron_train"
    assert cfg.critic.training_args.gradient_accumulation_steps == 8
    assert (cfg.critic.training_args.learning_rate, cfg.critic_warmup, cfg.value_clip) == (1e-5, 5, 0.5)
    assert (cfg.adv_estimator, cfg.lambd) == ("gae", 0.95)
    assert cfg.actor_train.device_mapping == list(range(16))
    assert cfg.actor_infer.strategy_args.strategy_config.load_format == "dummy"
    assert cfg.reference is None  # no KL term: kl_coef 0 and no KL loss
    assert result.errors == []  # megatron_train is built (it needs CUDA: preflight's concern)


def test_verl_v04_dapo_recipe(results: dict[str, ValidationResult]) -> None:
    result = results["verl_v0.4_dapo.yaml"]
    cfg = result.config
    assert (cfg.pg_clip_low, cfg.pg_clip_high, cfg.clip_ratio_c) == (0.2, 0.28, 10.0)
    assert cfg.policy_loss == "ppo" and not cfg.difficulty_mask
    # filter_groups: groups whose rewards are all equal are replaced; 10 batches × 1536 − 512 extra prompts
    assert cfg.is_use_additional_prompts and cfg.max_additional_running_prompts == 10 * 1536 - 512
    assert all(r.query_filter_config.type == "std_filter" and r.query_filter_config.filter_args == {"std_threshold": 0}
               for r in cfg.rewards.values())
    # 4 nodes × 8 GPUs = 32; mini 32 prompts × n 16 = 512 samples = micro 2 × 32 × 8
    assert cfg.actor_train.training_args.gradient_accumulation_steps == 8
    assert (cfg.prompt_length, cfg.response_length, cfg.rollout_batch_size) == (2048, 8192, 512)
    assert cfg.actor_train.strategy_args.strategy_config.cpu_offload is True
    assert cfg.actor_train.training_args.warmup_steps == 10 and cfg.actor_train.training_args.weight_decay == 0.1
    assert (cfg.val_n_sample, cfg.val_greedy) == (32, False)
    assert cfg.validation.generating_args.top_p == 0.7
    assert cfg.reference is None
    assert _warned(result, "reward_model.overlong_buffer.enable", "overlong")
    assert _warned(result, "actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space", "= 32")


def test_verl_v04_short_file_composes_on_ppo_trainer(results: dict[str, ValidationResult]) -> None:
    result = results["verl_v0.4_gsm8k_grpo.yaml"]
    cfg = result.config
    assert result.ok, result.errors
    # mini 16 prompts × n 4 = 64 samples = micro 4 × 2 GPUs × 8
    args = cfg.actor_train.training_args
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps, args.learning_rate) == (4, 8, 5e-7)
    assert cfg.use_kl_loss and cfg.kl_penalty == "low_var_kl"  # verl's default kl_loss_type, from ppo_trainer
    assert cfg.actor_train.data_args.truncation_side == "error"  # ppo_trainer's data.truncation
    assert cfg.validation.generating_args.temperature == 0 and cfg.val_greedy  # ppo_trainer's val_kwargs
    assert cfg.reference.infer_batch_size == 8 and cfg.max_steps == 40
    assert _warned(result, "actor_rollout_ref.rollout.multi_turn.max_assistant_turns", "= 3")


def test_verl_v05_composed_tree_with_target_keys(results: dict[str, ValidationResult]) -> None:
    result = results["verl_v0.5_grpo_fsdp.yaml"]
    cfg = result.config
    assert result.ok, result.errors
    assert (cfg.policy_loss, cfg.loss_agg_mode, cfg.kl_penalty, cfg.kl_loss_coef) == ("gspo", "seq-mean-token-mean",
                                                                                      "mse", 0.01)
    # mini 32 × n 8 = 256 samples = micro 4 × 8 GPUs × 8
    args = cfg.actor_train.training_args
    assert (args.gradient_accumulation_steps, args.warmup_ratio, args.min_lr_ratio) == (8, 0.05, 0.1)
    assert cfg.actor_infer.strategy_args.strategy_config.load_format == "dummy"
    assert cfg.norm_adv_by_std_in_grpo is False and cfg.track_with == "tensorboard"
    assert not [w for w in result.warnings if "_target_" in w.path]
    assert _warned(result, "ray_kwargs.ray_init.num_cpus", "= 64")


def test_verl_main_megatron_moe(results: dict[str, ValidationResult]) -> None:
    result = results["verl_main_megatron.yaml"]
    cfg = result.config
    mcore = cfg.actor_train.strategy_args.strategy_config
    assert (mcore.tensor_model_parallel_size, mcore.pipeline_model_parallel_size,
            mcore.expert_model_parallel_size) == (4, 2, 2)
    assert (mcore.recompute_granularity, mcore.recompute_method, mcore.recompute_num_layers) == ("full", "uniform", 1)
    assert mcore.param_offload and mcore.optimizer_offload
    # 16 GPUs / (TP 4 × PP 2) = dp 2; mini 64 × n 8 = 512 samples = micro 1 × dp 2 × 256
    args = cfg.actor_train.training_args
    assert (args.gradient_accumulation_steps, args.adam_beta2, args.lr_scheduler_type) == (256, 0.95, "cosine")
    assert args.min_lr_ratio == pytest.approx(0.1)
    assert cfg.reference.strategy_args.strategy_name == "megatron_infer"
    assert cfg.reference.strategy_args.strategy_config.expert_model_parallel_size == 2
    assert cfg.actor_train.data_args.max_samples == 20000 and cfg.validation.data_args.max_samples == 500
    assert _warned(result, "trainer.use_v1", "= True")
    assert _warned(result, "algorithm.rollout_correction.rollout_is", "'token'")


def test_verl_hydra_tree_on_disk() -> None:
    """recipe.yaml composes framework/ppo_trainer.yaml through hydra.searchpath; `override model_engine:
    megatron` turns `${model_engine}_actor` into actor/megatron_actor.yaml, which pulls ../engine@megatron
    and actor.yaml before its own body (_self_ last)."""
    path = CORPUS / "verl_main_tree" / "recipe.yaml"
    raw = load_raw(path)
    actor = raw["actor_rollout_ref"]["actor"]
    assert actor["strategy"] == "megatron" and actor["clip_ratio"] == 0.25  # megatron_actor's body over actor.yaml
    assert actor["optim"] == {"lr": 1e-6, "clip_grad": 0.5}  # both layers merged
    assert actor["megatron"]["pipeline_model_parallel_size"] == 2  # engine/megatron.yaml at actor.megatron
    assert actor["megatron"]["tensor_model_parallel_size"] == 2  # the recipe, last
    assert raw["actor_rollout_ref"]["ref"]["strategy"] == "megatron"
    assert raw["data"]["max_response_length"] == 1024 and raw["actor_rollout_ref"]["rollout"]["response_length"] == 1024
    cfg = validate_config(path).config
    # 8 GPUs / (TP 2 × PP 2) = dp 2; mini 32 × n 4 = 128 samples = micro 2 × dp 2 × 32
    assert cfg.actor_train.training_args.gradient_accumulation_steps == 32
    assert (cfg.pg_clip, cfg.actor_train.training_args.max_grad_norm) == (0.25, 0.5)


def test_verl_multi_turn_is_refused() -> None:
    result = validate_config(CORPUS / "verl_main_multiturn.yaml")
    assert result.config is None
    issue = next(i for i in result.errors if i.path == "actor_rollout_ref.rollout.multi_turn.enable")
    assert "refused" in issue.message and "single-turn" in issue.message


def test_skyrl_early_ppo(results: dict[str, ValidationResult]) -> None:
    cfg = results["skyrl_early_ppo.yaml"].config
    assert cfg.kl_penalty == "abs" and cfg.dual_clip_loss and (cfg.pg_clip_low, cfg.pg_clip_high) == (0.2, 0.28)
    assert cfg.whiten_advantages and cfg.lambd == 0.95 and cfg.kl_loss_coef == 0.005
    # placement: policy 4 GPUs, reference on them, critic 2 next, 2 engines × TP 1 after that
    assert cfg.actor_train.device_mapping == [0, 1, 2, 3] and cfg.reference.device_mapping == [0, 1, 2, 3]
    assert cfg.critic.device_mapping == [4, 5] and cfg.actor_infer.device_mapping == [6, 7]
    # mini 64 × n 1 = 64 samples: policy micro 4 × dp 4 × 4, critic micro 4 × dp 2 × 8
    assert cfg.actor_train.training_args.gradient_accumulation_steps == 4
    assert cfg.critic.training_args.gradient_accumulation_steps == 8
    assert cfg.actor_train.training_args.adam_beta2 == 0.95 and cfg.actor_train.training_args.warmup_steps == 10
    assert (cfg.seed, cfg.save_steps, cfg.eval_steps, cfg.max_ckpts_to_keep) == (7, 20, 10, 2)


def test_skyrl_v01_grpo(results: dict[str, ValidationResult]) -> None:
    cfg = results["skyrl_v0.1_grpo.yaml"].config
    assert (cfg.kl_penalty, cfg.policy_loss, cfg.dual_clip_loss) == ("mse", "ppo", True)
    assert cfg.loss_agg_mode == "seq-mean-token-sum-norm" and cfg.norm_adv_by_std_in_grpo is False
    args = cfg.actor_train.training_args
    assert (args.lr_scheduler_type, args.warmup_steps) == ("cosine", 20)
    # colocate_all on 8 GPUs (4 engines × TP 2); mini 32 × n 8 = 256 samples = micro 2 × dp 8 × 16
    assert all(r.device_mapping == list(range(8)) for r in (cfg.actor_train, cfg.actor_infer, cfg.reference))
    assert args.gradient_accumulation_steps == 16
    assert (cfg.response_length, cfg.actor_infer.generating_args.temperature) == (4096, 0.8)
    assert cfg.resume_from_checkpoint is True and cfg.checkpoint_config.output_dir == "/ckpt/skyrl_v01"


def test_skyrl_v03_megatron_lora(results: dict[str, ValidationResult]) -> None:
    result = results["skyrl_v0.3_megatron_lora.yaml"]
    cfg = result.config
    assert cfg.actor_train.strategy_args.strategy_name == "megatron_train"
    mcore = cfg.actor_train.strategy_args.strategy_config
    assert mcore.tensor_model_parallel_size == 2 and mcore.overlap_grad_reduce
    assert cfg.reference.strategy_args.strategy_config.tensor_model_parallel_size == 2
    assert cfg.reference.model_args.model_name_or_path == "/models/Qwen2.5-Coder-7B-Instruct-sft"
    assert (cfg.policy_loss, cfg.loss_agg_mode, cfg.entropy_loss_coef) == ("gspo", "seq-mean-token-mean", 0.005)
    assert cfg.actor_infer.generating_args.stop_strings == ["</sql>", "</answer>"]
    assert cfg.actor_infer.generating_args.repetition_penalty == 1.05
    assert cfg.actor_train.model_args.lora_rank is None  # rank 0 trains all weights
    # 4 GPUs / TP 2 = dp 2; mini 16 × n 4 = 64 samples = micro 2 × dp 2 × 16
    assert cfg.actor_train.training_args.gradient_accumulation_steps == 16
    assert _warned(result, "generator.eval_sampling_params.stop", "</sql>")


def test_skyrl_main_inference_engine_section(results: dict[str, ValidationResult]) -> None:
    cfg = results["skyrl_main_inference_engine.yaml"].config
    infer = cfg.actor_infer.strategy_args.strategy_config
    assert (infer.gpu_memory_utilization, infer.enforce_eager, infer.max_num_seqs) == (0.85, True, 256)
    # policy on 2 GPUs (reference colocated), 2 engines × TP 1 on the next two
    assert cfg.actor_train.device_mapping == [0, 1] and cfg.actor_infer.device_mapping == [2, 3]
    assert (cfg.adv_estimator, cfg.kl_penalty, cfg.add_token_level_kl, cfg.use_kl_loss) == ("rloo", "kl", True, False)
    assert (cfg.init_kl_coef, cfg.kl_ctrl_type, cfg.target_kl, cfg.kl_horizon) == (0.01, "adaptive", 0.05, 5000)
    # mini 16 × n 4 = 64 samples = micro 4 × dp 2 × 8
    assert cfg.actor_train.training_args.gradient_accumulation_steps == 8


def test_rlinf_ppo_with_critic(results: dict[str, ValidationResult]) -> None:
    cfg = results["rlinf_ppo_megatron_critic.yaml"].config
    assert cfg.adv_estimator == "gae" and cfg.critic is not None
    assert cfg.critic.strategy_args.strategy_name == "megatron_train"
    assert cfg.critic.device_mapping == [0, 1, 2, 3]
    assert cfg.critic.model_args.model_name_or_path == "/models/DeepSeek-R1-Distill-Qwen-1.5B"  # the policy model
    # 128 prompts × 1 / 4 minibatches = 32 samples per step: actor micro 8 × dp 2 (TP 2) × 2, critic 8 × dp 4 × 1
    assert cfg.actor_train.training_args.gradient_accumulation_steps == 2
    assert cfg.critic.training_args.gradient_accumulation_steps == 1
    assert (cfg.value_clip, cfg.critic_warmup, cfg.lambd) == (0.3, 2, 0.95)
    critic = cfg.critic.training_args
    assert (critic.learning_rate, critic.lr_scheduler_type) == (1e-5, "linear")
    assert critic.min_lr_ratio == pytest.approx(0.1)
    assert cfg.actor_train.backend_timeout == 45 and cfg.critic.backend_timeout == 45


def test_rlinf_fsdp_with_built_in_backend_defaults(results: dict[str, ValidationResult]) -> None:
    cfg = results["rlinf_grpo_fsdp.yaml"].config
    fsdp = cfg.actor_train.strategy_args.strategy_config
    assert (fsdp.cpu_offload, fsdp.param_dtype, fsdp.reduce_dtype) == (True, "bf16", "fp32")
    assert cfg.actor_train.model_args.disable_gradient_checkpointing is False
    assert cfg.use_kl_loss and (cfg.pg_clip_low, cfg.pg_clip_high) == (0.2, 0.28)
    # 64 prompts × 8 / 4 minibatches = 128 samples per step = micro 1 × dp 8 × 16
    assert cfg.actor_train.training_args.gradient_accumulation_steps == 16
    assert cfg.response_length == 6144 - 1024


def test_rlinf_moe_keys(results: dict[str, ValidationResult]) -> None:
    result = results["rlinf_grpo_moe_megatron.yaml"]
    mcore = result.config.actor_train.strategy_args.strategy_config
    assert (mcore.expert_model_parallel_size, mcore.expert_tensor_parallel_size, mcore.moe_grouped_gemm) == (4, 1, True)
    # 16 GPUs / (TP 2 × PP 2) = dp 4; 64 × 16 / 4 minibatches = 256 samples = micro 1 × dp 4 × 64
    assert result.config.actor_train.training_args.gradient_accumulation_steps == 64
    assert _warned(result, "actor.model.megatron_checkpoint", "/ckpt/mcore/qwen3-30b-a3b")
    assert _warned(result, "actor.model.moe_router_topk", "= 8")


def test_roll_main_agentic(results: dict[str, ValidationResult]) -> None:
    result = results["roll_main_agentic.yaml"]
    cfg = result.config
    train = cfg.train_env_manager
    assert (train.env_groups, train.n_groups, train.group_size) == (8, [8], 8)
    assert (cfg.val_env_manager.env_groups, cfg.val_env_manager.n_groups) == (64, [32, 32])
    assert cfg.reward_normalization.grouping == "state"  # traj_group_id: one env group shares its start state
    fsdp = cfg.actor_train.strategy_args.strategy_config
    assert (fsdp.reduce_dtype, fsdp.cpu_offload) == ("fp32", False)
    sokoban = cfg.custom_envs["SimpleSokoban"]
    assert sokoban.env_type == "sokoban" and sokoban.max_steps == 5  # the file's helper variable beats traj_envs'
    assert sokoban.max_tokens_per_step == 128 and cfg.max_ckpts_to_keep == 3
    assert cfg.custom_envs["FrozenLake"].env_config["format_penalty"] == -0.01
    assert _warned(result, "custom_envs.SimpleSokoban.agent_template", "no effect")


def test_roll_v03_rlvr(results: dict[str, ValidationResult]) -> None:
    result = results["roll_v0.3_rlvr_megatron.yaml"]
    cfg = result.config
    assert cfg.rewards["ifeval"].scoring_mode == "soft" and cfg.rewards["ifeval"].reward_type is None
    assert cfg.rewards["llm_judge"].judge_prompt == "Qwen2.5-7B-Instruct-RLVR-prompt"
    assert cfg.rewards["llm_judge"].judge_model_type == "inference"  # LLMJudgeRewardWorker runs (decision 0039)
    assert not result.errors  # ROLL's IFEval worker is the ifeval_rule reward (decision 0044)


def test_roll_main_rlvr_new_names(results: dict[str, ValidationResult]) -> None:
    result = results["roll_main_rlvr_fsdp2.yaml"]
    cfg = result.config
    assert (cfg.max_ckpts_to_keep, cfg.policy_loss, cfg.sft_loss_coef) == (4, "gspo", 0.1)
    fsdp = cfg.actor_train.strategy_args.strategy_config
    assert (fsdp.cpu_offload, fsdp.reduce_dtype) == (True, "fp32")  # offload_policy, torch's float32
    assert cfg.rewards["code"].code_url == "http://sandbox.internal:8080"
    # ROLL's dataset_filter acts (decision 0043): typed, no "not built" warning
    assert cfg.dataset_filter.model_dump() == {"source": "deepmath", "min_difficulty": 3.0, "max_difficulty": 8.0,
                                               "num_samples": 10000}
    assert not [i for i in result.warnings if i.path.startswith("dataset_filter")]


@pytest.mark.parametrize(("fmt", "text", "path", "nearest"), [
    ("verl", "actor_rollout_ref: {actor: {policy_loss: {loss_mod: vanilla}}}",
     "actor_rollout_ref.actor.policy_loss.loss_mod", "actor_rollout_ref.actor.policy_loss.loss_mode"),
    ("skyrl", "trainer: {algorithm: {kl_estimator_typ: k3}}\ngenerator: {}",
     "trainer.algorithm.kl_estimator_typ", "trainer.algorithm.kl_estimator_type"),
])
def test_a_typo_of_a_newer_key_names_the_key(fmt: str, text: str, path: str, nearest: str) -> None:
    result = validate_config(text)
    issue = next(i for i in result.warnings if i.path == path)  # a foreign file: a warning (issue 31)
    assert "unknown key" in issue.message and f"did you mean {nearest}?" in issue.message


def test_required_placeholder_asks_for_the_value() -> None:
    """verl main leaves rollout.name as ??? for the user; a file composed on it without a name is told so."""
    result = validate_config("defaults: [ppo_trainer, _self_]\nactor_rollout_ref: {model: {path: /m}}\n"
                             "data: {train_files: /d.parquet}\nreward_model: {reward_manager: naive}\n"
                             "trainer: {use_v1: true}\n")
    issue = next(i for i in result.errors if i.path == "actor_rollout_ref.rollout.name")
    assert issue.message.startswith("required:") and "actor_rollout_ref.rollout.name=vllm" in issue.message


def test_every_surface_section_survives_loading() -> None:
    """Each framework's top-level sections are kept by the loader (not dropped as helper variables)."""
    from trainer.config.importers.builtin import SURFACES
    from trainer.config.loading import FOREIGN_TOP_LEVEL_KEYS

    for surface in SURFACES.values():
        tops = {key.split(".")[0] for key in [*surface.key_set, *surface.open_sections] if not key.startswith("*")}
        assert tops <= FOREIGN_TOP_LEVEL_KEYS, (surface.framework, tops - FOREIGN_TOP_LEVEL_KEYS)


def test_a_known_key_without_effect_warns_only_when_chosen() -> None:
    """verl v0.4's data.use_shm has no native home: set to true it is a warning with the reason; at its
    release default (false) it says nothing."""
    base = ("actor_rollout_ref: {model: {path: /m}, actor: {ppo_mini_batch_size: 8, ppo_micro_batch_size_per_gpu: 2},"
            " rollout: {n: 2, tensor_model_parallel_size: 1}}\nalgorithm: {adv_estimator: grpo}\n"
            "trainer: {nnodes: 1, n_gpus_per_node: 2, total_training_steps: 3}\n")
    chosen = validate_config(base + "data: {train_files: t.parquet, train_batch_size: 8, use_shm: true}\n")
    assert chosen.rule_errors == [] and _warned(chosen, "data.use_shm", "= True", "shared-memory")
    default = validate_config(base + "data: {train_files: t.parquet, train_batch_size: 8, use_shm: false}\n")
    assert default.rule_errors == [] and not [w for w in default.warnings if w.path == "data.use_shm"]


def test_skyrl_groups_land_at_their_package() -> None:
    """`deepspeed_config@deepspeed_config.train: train` (a group placed at another package) feeds
    `${deepspeed_config.train}`; with the DeepSpeed strategy its ZeRO stage (3 in SkyRL) reaches the policy."""
    text = (CORPUS / "skyrl_early_ppo.yaml").read_text().replace("strategy: fsdp2", "strategy: deepspeed")
    raw = load_raw(text)
    assert raw["trainer"]["policy"]["deepspeed_config"]["zero_optimization"]["stage"] == 3
    assert raw["trainer"]["ref"]["deepspeed_config"]["zero_optimization"]["offload_param"]["pin_memory"] is True
    cfg = validate_config(text).config
    assert cfg.actor_train.strategy_args.strategy_name == "deepspeed_train"
    assert cfg.actor_train.strategy_args.strategy_config.zero_optimization.stage == 3
