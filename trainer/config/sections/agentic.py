"""Agentic runs: environment managers, custom environments and the step-wise estimators' knobs."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import model_validator

from trainer.config.sections.base import Section, fld, fld_factory, import_only, planned
from trainer.config.sections.rollout import GeneratingArgs


class EnvManagerConfig(Section):
    env_groups: int = fld(1, category="Agentic", ge=1, description="Environment groups, played in lockstep.")
    group_size: int = fld(
        1, category="Agentic", ge=1,
        description="Environments per group; all share one configuration and seed, so they form one "
        "comparison group.",
    )
    tags: list[str] = fld_factory(list, category="Agentic", description="Environment names (keys of custom_envs).")
    n_groups: list[int] | None = fld(
        None, category="Agentic", description="Groups given to each tag; unset splits env_groups evenly."
    )
    max_traj_per_env: int = fld(
        -1, category="Agentic",
        description="Most trajectories one environment may play per batch (-1: no limit); a batch needing "
        "more is refused.",
    )
    max_env_num_per_worker: int = fld(
        0, category="Agentic", ge=0, inactive=import_only("environments run in the driver process, all in lockstep"),
        description="Environments per worker (0: all).",
    )
    format_penalty: float = fld(
        0.0, category="Agentic", le=0, description="Reward added (a value <= 0) when a reply breaks the action format."
    )
    worker_cls: str | None = fld(
        None, category="Agentic", description="ROLL env-manager class path (looked up in a registry, never imported)."
    )
    num_env_groups: int | None = fld(
        None, category="Agentic", ge=1, acts_through="env_groups",
        description="ROLL main's name of env_groups (copied into it when env_groups is unset).",
    )
    num_groups_partition: list[int] | None = fld(
        None, category="Agentic", acts_through="n_groups",
        description="ROLL main's name of n_groups (copied into it when n_groups is unset).",
    )
    group_size_redundancy: int = fld(
        0, category="Agentic", ge=0, inactive=import_only("groups are played in lockstep; none is abandoned"),
        description="Extra environments per group whose late trajectories ROLL may drop.",
    )
    llm_proxy: dict[str, Any] = fld_factory(
        dict, category="Agentic", inactive=import_only("the policy being trained plays every environment"),
        description="ROLL's LLM proxy (policy, openai or random) that plays the environments.",
    )
    group_filter_cls: str | None = fld(
        None, category="Agentic", inactive=import_only("classes named in a config are never imported"),
        description="ROLL's group-level filter class.",
    )
    system_envs: dict[str, str] = fld_factory(
        dict, category="Agentic", inactive=import_only("environments run in the driver process"),
        description="Environment variables of ROLL's environment workers.",
    )
    generating_args: GeneratingArgs | None = fld(
        None, category="Agentic", inactive=import_only("environments are played with actor_infer.generating_args"),
        description="ROLL: sampling settings of this env manager's rollouts.",
    )

    @model_validator(mode="after")
    def _roll_main_names(self) -> EnvManagerConfig:
        if self.num_env_groups is not None and "env_groups" not in self.model_fields_set:
            self.env_groups = self.num_env_groups
        if self.num_groups_partition is not None and "n_groups" not in self.model_fields_set:
            self.n_groups = list(self.num_groups_partition)
        return self


class CustomEnvConfig(Section):
    env_type: str = fld(
        ..., category="Agentic",
        description="Registered environment type: frozen_lake, sokoban, calculator, tool_use (tool calls in "
        "the Qwen/Hermes format), or GEM's game:GuessTheNumber-v0 and rg:letter_counting (the gem-llm package).",
    )
    max_steps: int | None = fld(
        None, category="Agentic", ge=1,
        description="Replies before the episode is cut off (unset: max_actions_per_traj, else 10).",
    )
    max_actions_per_traj: int | None = fld(
        None, category="Agentic", ge=1,
        description="Valid actions before the episode is cut off; replies that break the format do not count.",
    )
    max_tokens_per_step: int | None = fld(
        None, category="Agentic", ge=1,
        description="Tokens sampled per turn (unset: actor_infer's max_new_tokens, else response_length).",
    )
    env_instruction: str | None = fld(
        None, category="Agentic",
        description="Text shown before the first observation (unset: the environment's own; empty: none).",
    )
    env_config: dict[str, Any] = fld_factory(
        dict, category="Agentic", description="Settings of the environment type (docs: trainer/envs)."
    )
    env_manager_cls: str | None = fld(
        None, category="Agentic",
        description="ROLL's env-manager class for this environment (it overrides the env manager's worker_cls): "
        "StepEnvManager plays it step-wise (a fresh prompt each turn with the recent turns as text, see "
        "history_length; one training row per reply), StepConcatEnvManager the same with the prompt made of the recent "
        "observations, one per line; AgentNativeStepEnvManager step-wise too, each prompt the environment's own "
        "message list through the chat template (environments that keep their messages: sokoban_native_env; "
        "decision 0061); ProxyEnvManager one conversation per row whose prompts agent_runner_cls writes (decision "
        "0060); TrajEnvManager or unset, one multi-turn conversation per row.",
    )
    history_length: int | None = fld(
        None, category="Agentic", ge=1,
        description="Step-wise environments (StepEnvManager): as in ROLL, each turn's prompt shows the last "
        "history_length − 1 turns (observation, reply, reward) before the current observation; unset: none.",
    )
    use_thread_lock: bool = fld(False, category="Agentic", inactive=import_only("environments run in the driver"),
                                description="ROLL: serialise this environment's steps across threads.")
    agent_system_template: str | None = fld(
        None, category="Agentic",
        description="ROLL's system prompt for this environment; read only by ProxyEnvManager's GEMRunner (the system "
        "message: it, a blank line, the environment's instruction).",
    )
    agent_template: str | None = fld(
        None, category="Agentic",
        description="ROLL's per-turn prompt template ({observation}, {turn_idx}, {actions_left}, "
        "{max_response_length}, {suffix}); read only by ProxyEnvManager's GEMRunner (each user message).",
    )
    max_env_step_concurrent: int | None = fld(
        None, category="Agentic", ge=1, inactive=import_only("environments run in the driver"),
        description="ROLL: most concurrent steps of this environment type.",
    )
    tool_wrapper: dict[str, Any] | None = fld(
        None, category="Agentic",
        description="ROLL's tools around this environment, as GEM's ToolEnvWrapper plays them: wrapper_args "
        "(tool_reward, tool_success_reward, max_tool_uses) and tool_configs [{tool_id, tool_args}]; built tool: "
        "python_code, run in the bubblewrap sandbox (search and mcp call outside services and are refused).",
    )
    agent_runner_cls: str | None = fld(
        None, category="Agentic", inactive=import_only("classes named in a config are never imported; environments "
                                                       "are played by the trajectory manager"),
        description="ROLL: the AgentRunner class that plays this environment under env_manager_cls ProxyEnvManager "
        "(built: roll.pipeline.agentic.agent_runner.gem_runner.GEMRunner); other managers do not read it.",
    )


class AgenticKnobs(Section):
    """Agentic: environments, trajectory batches, the step-wise estimators' weights."""

    train_env_manager: EnvManagerConfig | None = fld(
        None, category="Agentic",
        description="Environments used for training rollouts; set, the run is agentic (multi-turn episodes).",
    )
    val_env_manager: EnvManagerConfig | None = fld(
        None, category="Agentic", description="Environments used for evaluation rollouts."
    )
    pipeline_mode: Literal["train", "rollout_only"] = fld(
        "train", category="Agentic",
        description="train: the agentic run plays and trains. rollout_only: ROLL's AgenticRolloutPipeline "
        "(decision 0062): actor_infer alone plays rollout_batch_size trajectories per step with "
        "train_env_manager for max_steps steps, logs their scores and env metrics under val/ and records every "
        "trajectory as a rollout; no actor_train, reference or critic is built, nothing trains and no weight "
        "checkpoint is written. Unset, an agentic file with no actor_train section (ROLL's sign) is rollout_only.",
    )
    custom_envs: dict[str, CustomEnvConfig] = fld_factory(
        dict, category="Agentic", description="Environment definitions by tag."
    )
    batch_adjust_mode: Literal["copy", "delete", "auto", "random_sample"] = fld(
        "copy", category="Agentic",
        description="How a batch of trajectories (step-wise managers: replies) that is not a whole number of "
        "optimizer steps is made one: copy pads it with copies of its rows (the only mode built; delete, auto and "
        "random_sample are refused where the batch needs adjusting). A whole batch is never adjusted.",
    )
    episode_reward_weight: float = fld(
        1.0, category="Agentic", ge=0,
        description="gigpo: weight of the episode-level term (the trajectory's score normalised with "
        "reward_normalization) in each turn's advantage.",
    )
    step_reward_weight: float = fld(
        1.0, category="Agentic", ge=0,
        description="gigpo: weight of the step-level term (the turn's step return normalised among the turns that "
        "answered the same observation from the same start state) in each turn's advantage.",
    )
    step_reward_gamma: float = fld(
        0.95, category="Agentic", ge=0, le=1,
        description="gigpo, step_reinforce: discount of the step return G_k = r_k + gamma * G_k+1 over a "
        "trajectory's turns (r_k: the turn's reward plus its format penalty).",
    )
    ratio_type: Literal["token", "segment"] = fld(
        "token", category="Agentic", inactive=planned("segment-level importance ratios"),
        description="Importance ratio per token or per turn segment.",
    )
    parse_tool_call_parameter_to_dict: bool = fld(
        False, category="Agentic",
        description="Tool calls whose \"arguments\" is a JSON string holding the object are decoded into it "
        "before the tool runs; off, such a call is malformed (tool-calling environments: tool_use).",
    )
    skip_mock_system_prompt: bool = fld(
        False, category="Agentic", inactive=import_only("prompts come from env_instruction and the chat template"),
        description="Do not insert an empty system turn before rendering the template.",
    )
