"""Multi-turn episodes played through a rollout engine, as token sequences and batch rows.

A trajectory becomes one row of the RLVR batch layout (trainer.models.batch). Its prompt is the
first user message (instruction + first observation) through the chat template with the generation
prompt; everything after it is its response:

    reply_1 | obs_2 | reply_2 | obs_3 | … | reply_n

reply_k are the tokens the engine sampled, loss mask 1 (a closing EOS included, as in RLVR); obs_k
are the tokens between two replies, loss mask 0: what closes the assistant message (less what the
reply generated itself, e.g. its EOS), the user message holding the observation, and the next
generation prompt — what the chat template renders between two assistant contents (`ChatFormat`).
When the reply made tool calls (info["tool_results"], trainer.envs.tools) the observation is one tool
message per result, rendered with the template's tool role (`ToolFormat`: consecutive tool messages as
the template joins them, e.g. Qwen's <tool_response> blocks in one user turn); a template without a
tool role (it refuses or drops a tool message) gets them as one user message of
<tool_response>\nRESULT\n</tool_response> blocks, as ROLL's tool wrapper writes them. The first
prompt passes the environment's tool schemas to the template (`tools=`), as ROLL does.
The engine is given exactly these tokens each turn and they are the tokens trained on (token in,
token out): the conversation is never re-tokenised. The observation after the last reply is shown
in telemetry but is not part of the row.

A turn's reward is what env.step returned; a reply that breaks the format adds the env manager's
format_penalty. The trajectory's score is Σ rewards + Σ penalties (ROLL's trajectory reward, placed
on the last reply token by the loop). The episode ends when the environment says done, after
max_steps replies, after max_actions_per_traj valid actions, or when the next observation and reply
would not fit in response_length tokens (trainer.envs.base.DONE_REASONS).

ROLL's trajectory cap (`PlaySetup.sequence_length`, set from a ROLL agentic file's sequence_length:
trainer.config.topology.lengths, docs/decisions/0055) replaces the two limits with ROLL's rule
(TrajEnvManager/StepEnvManager.make_decision): the engine's input (the conversation so far, step-wise the
turn's prompt) plus its reply holds at most sequence_length tokens. Each turn samples at most
min(budget, sequence_length − input) tokens, so the reply that reaches the cap is cut there and still
steps the environment; once the next input would be sequence_length tokens or more, the episode ends
(max_length) with the turns played, the observation that did not fit left out, as ROLL drops it.

ROLL's AgentNativeStepEnvManager (decision 0061) plays environments that keep their own conversation
(trainer.envs.native.NativeEnv): step-wise, each turn's prompt is the environment's whole message list through the
chat template (`native_prompt`), the reply is stepped as its text with special tokens kept, and each turn samples
at most min(max_tokens_per_step, the role's max_new_tokens, the room left) tokens, as ROLL's make_decision.

ROLL's ProxyEnvManager (`env_manager_cls`, decision 0060) plays the same loop with three differences. Its agent
runner (trainer.envs.agent_runner.GEMRunner) writes the messages: a system message (agent_system_template and the
instruction) and one user message per observation through agent_template. Its tokens are ROLL's MessageTracker's:
each message tokenized alone (`message_ids`: a user message after ROLL's dummy history, its own tokens sliced
off), and after each reply one newline token and the next user message's tokens (generation prompt included),
whatever the reply generated: a reply cut at its budget gets no end-of-turn token. Each turn samples at most
min(max_tokens_per_step, the role's max_new_tokens, the room left). An episode that runs out of room is ROLL's
failed request: its score is 0 (EpisodeResult "Failed"), the turns played still trained. Its format penalty is
the environment's format_penalty only (ROLL's env default 0; the proxy never reads the env manager's).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from jinja2 import TemplateError
from torch import Tensor

from trainer.envs.base import DONE_REASONS, Env
from trainer.envs.manager import EnvManager, Episode, TurnLimits
from trainer.envs.native import NativeEnv
from trainer.models.batch import build_batch
from trainer.rollout.base import Generation, SamplingParams

_A, _O = "\x02ASSISTANT\x03", "\x02OBSERVATION\x03"  # sentinels no template alters
_T = ("\x02TOOL1\x03", "\x02TOOL2\x03", "\x02TOOL3\x03")
_HISTORY_CHANGES = ("chat template: rendering one more turn changes the earlier turns' text, so turns cannot be "
                    "appended token by token; use a template that renders history unchanged")


@dataclass(frozen=True)
class ToolFormat:
    """The chat template's text around the tool messages that follow an assistant reply."""

    open: str  # after the assistant close, before the first result: "<|im_start|>user\n<tool_response>\n" (Qwen)
    between: str  # between two results: "\n</tool_response>\n<tool_response>\n" (Qwen)
    close: str  # after the last result, through the next generation prompt


def tool_responses(results: list[str]) -> str:
    """Tool results as one user message's text, for templates without a tool role (ROLL's tool wrapper)."""
    return "\n".join(f"<tool_response>\n{result}\n</tool_response>" for result in results)


@dataclass(frozen=True)
class ChatFormat:
    """The chat template's text around an assistant reply and an observation (module docstring)."""

    assistant_close: str  # after an assistant's content, e.g. "<|im_end|>\n"
    user_open: str  # before an observation, e.g. "<|im_start|>user\n"
    user_close: str  # after it, through the next generation prompt: "<|im_end|>\n<|im_start|>assistant\n"
    tool: ToolFormat | None = None  # the template's tool role; None: it has none (results go in a user message)

    def _close(self, generated_close: str) -> str:
        close = self.assistant_close
        if generated_close and close.startswith(generated_close):
            close = close[len(generated_close):]
        return close

    def between_replies(self, observation: str, generated_close: str = "") -> str:
        """The text from the end of one reply to the start of the next; `generated_close` is what the
        reply already generated of the assistant close (its EOS token's text), which is not repeated."""
        return self._close(generated_close) + self.user_open + observation + self.user_close

    def between_tool_results(self, results: list[str], generated_close: str = "") -> str:
        """As between_replies, the observation being one tool message per result (module docstring)."""
        if not results:
            raise ValueError("between_tool_results: no tool result")
        if self.tool is None:
            return self.between_replies(tool_responses(results), generated_close)
        return self._close(generated_close) + self.tool.open + self.tool.between.join(results) + self.tool.close


def chat_format(tokenizer: Any) -> ChatFormat:
    """Read the ChatFormat off the tokenizer's chat template by rendering sentinel messages."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("actor_train.model_args.model_name_or_path: the agentic pipeline needs a tokenizer "
                         "with a chat template (its multi-turn conversations are rendered with it)")
    turn = [{"role": "user", "content": "x"}, {"role": "assistant", "content": _A}]
    before = tokenizer.apply_chat_template(turn, tokenize=False)
    after = tokenizer.apply_chat_template([*turn, {"role": "user", "content": _O}],
                                          add_generation_prompt=True, tokenize=False)
    if _A not in before or not after.startswith(before) or _O not in after[len(before):]:
        raise ValueError(_HISTORY_CHANGES)
    rest, at = after[len(before):], after[len(before):].index(_O)
    return ChatFormat(before[before.index(_A) + len(_A):], rest[:at], rest[at + len(_O):],
                      tool_format(tokenizer, turn, before))


def tool_format(tokenizer: Any, turn: list[dict[str, str]], before: str) -> ToolFormat | None:
    """The template's rendering of 1, 2 and 3 tool messages after `turn` (rendered: `before`), or None when
    it has no tool role: it raises on one, or drops its content."""
    def render(k: int) -> str:
        tools = [{"role": "tool", "content": sentinel} for sentinel in _T[:k]]
        return tokenizer.apply_chat_template([*turn, *tools], add_generation_prompt=True, tokenize=False)

    try:
        two = render(2)
    except (TemplateError, ValueError, TypeError, KeyError, IndexError):
        return None
    if not two.startswith(before):
        raise ValueError(_HISTORY_CHANGES)
    rest = two[len(before):]
    if _T[0] not in rest or _T[1] not in rest:
        return None
    first, second = rest.index(_T[0]), rest.index(_T[1])
    fmt = ToolFormat(rest[:first], rest[first + len(_T[0]):second], rest[second + len(_T[1]):])
    for k in (1, 3):
        if render(k) != before + fmt.open + fmt.between.join(_T[:k]) + fmt.close:
            raise ValueError("chat template: its tool role renders consecutive tool messages inconsistently "
                             f"({k} vs 2), so tool results cannot be appended token by token")
    return fmt


def first_prompt(tokenizer: Any, text: str, tools: Sequence[dict[str, Any]] = ()) -> str:
    """The first user message through the template with the generation prompt; `tools` (an environment's
    tool schemas) are passed as the template's `tools`, which a tool-aware template renders (ROLL)."""
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], tools=list(tools) or None,
                                         add_generation_prompt=True, tokenize=False)


def encode(tokenizer: Any, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


# ROLL's MessageTracker (roll/pipeline/agentic/env_manager/message_tracker.py): the dummy history a single message
# is rendered after
BASE_CHAT_HISTORY = ({"role": "system", "content": "You are a helpful assistant."},
                     {"role": "user", "content": "I am a user."})


def _template_ids(tokenizer: Any, messages: Sequence[dict[str, str]], add_generation_prompt: bool) -> list[int]:
    return encode(tokenizer, tokenizer.apply_chat_template(list(messages), add_generation_prompt=add_generation_prompt,
                                                           tokenize=False, enable_thinking=False))


def message_ids(tokenizer: Any, message: dict[str, str], add_generation_prompt: bool = False) -> list[int]:
    """One message's tokens as ROLL's MessageTracker.tokenize_single_message makes them: a system message through
    the chat template alone; any other rendered after BASE_CHAT_HISTORY, its tokens those past the history's own
    (full_ids[base_offset:])."""
    if message["role"] == "system":
        return _template_ids(tokenizer, [message], False)
    base = _template_ids(tokenizer, BASE_CHAT_HISTORY, False)
    return _template_ids(tokenizer, [*BASE_CHAT_HISTORY, message], add_generation_prompt)[len(base):]


def proxy_prompt(tokenizer: Any, messages: Sequence[dict[str, str]]) -> list[int]:
    """The proxy's first input: each message's message_ids, the last with the generation prompt (ROLL's
    MessageTracker.build_input_ids before any reply)."""
    return [tid for k, m in enumerate(messages)
            for tid in message_ids(tokenizer, m, add_generation_prompt=k == len(messages) - 1)]


def proxy_between(tokenizer: Any, user_text: str) -> list[int]:
    """The proxy's tokens from the end of one reply to the start of the next: the newline token ROLL inserts after
    every assistant message, then the next user message's message_ids with the generation prompt."""
    return encode(tokenizer, "\n")[:1] + message_ids(tokenizer, {"role": "user", "content": user_text}, True)


def native_prompt(tokenizer: Any, env: NativeEnv) -> list[int]:
    """The prompt of an agent-native turn (ROLL's AgentNativeStepEnvManager.format_messages): the environment's whole
    message list through the chat template with the generation prompt, its tool schemas as `tools`, thinking off,
    tokenized by the template."""
    ids = tokenizer.apply_chat_template(list(env.messages), tools=list(env.tool_schemas) or None, tokenize=True,
                                        add_generation_prompt=True, enable_thinking=False, return_dict=False)
    return list(ids)


def step_text(t: Trajectory, observation: str) -> str:
    """The user message of a step-wise turn (STEP_TEMPLATE), as ROLL's StepEnvManager.format_messages writes it:
    the replies so far n, the last history_length − 1 of them as "(step: s, observation: o, action: a, reward:
    r)" (a reply that broke the format carries ROLL's tip), then the current observation."""
    assert t.history_length is not None
    replies = [turn for turn in t.turns if turn["role"] == "assistant"]
    keep = t.history_length - 1
    recent = list(zip(t.observations[: len(replies)], replies, strict=True))[len(replies) - keep:] if keep else []
    if t.concat:  # ROLL's StepConcatEnvManager: the recent observations, then the current one, one per line
        return "\n".join([t.instruction] * bool(t.instruction) + [seen for seen, _ in recent] + [observation])
    done = len(replies)
    history = []
    for j, (seen, reply) in enumerate(recent):
        action = reply["text"] + ("" if reply["format_ok"] else INVALID_ACTION_TIP)
        history.append(f"(step: {done - len(recent) + j + 1}, observation: {seen}, action: {action}, "
                       f"reward: {reply['reward']})")
    return STEP_TEMPLATE.format(env_instruction=t.instruction, step_count=done, history_length=len(recent),
                                history=", ".join(history), current_step=done + 1, current_observation=observation)


# ROLL's StepEnvManager prompt (examples/config/step_envs.yaml's agent_template, less its Sokoban-only answer
# format lines, which the environment's instruction carries here)
STEP_TEMPLATE = (
    "## Env Instruction: {env_instruction}\n\n"
    "## State Description:\nPrior to this step, you have completed {step_count} steps.\n"
    "Recent History: Below are the most recent {history_length} observations, and your responses:\n"
    "[{history}]\n\n"
    "Current State:\nYou are currently at step {current_step}. Your current observation is: "
    "[{current_observation}]\nDecide the next action:"
)
INVALID_ACTION_TIP = ("(IMPORTANT TIPS: this action is not valid, your new response *must* strictly adhere to the "
                      "format according to env instructions.)")


@dataclass(frozen=True)
class Step:
    """One reply of a step-wise episode (ROLL's StepEnvManager): the prompt it answered and what was sampled."""

    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]


@dataclass
class Trajectory:
    episode: Episode
    limits: TurnLimits
    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)  # 1 on sampled tokens, 0 on observation tokens
    logprobs: list[float] = field(default_factory=list)  # the engine's, 0.0 on observation tokens
    token_turns: list[int] = field(default_factory=list)  # the reply index of each sampled token, -1 elsewhere
    rewards: list[float] = field(default_factory=list)  # env reward of each reply
    penalty: float = 0.0  # Σ format penalties
    actions: int = 0  # replies that parsed as an action
    done_reason: str | None = None
    success: bool = False
    turns: list[dict[str, Any]] = field(default_factory=list)  # telemetry: the conversation, turn by turn
    frames: list[str] = field(default_factory=list)  # env.render() after reset and after each reply
    observations: list[str] = field(default_factory=list)  # the observation each reply answered (GiGPO's anchor)
    history_length: int | None = None  # step-wise play (prompt_ids: the current turn's prompt); None: one conversation
    concat: bool = False  # step-wise play with StepConcatEnvManager's prompt (step_text)
    instruction: str = ""
    steps: list[Step] = field(default_factory=list)  # step-wise play: one row per reply
    native: bool = False  # step-wise play of an environment keeping its messages (native_prompt)
    proxy: bool = False  # played by ROLL's ProxyEnvManager (module docstring)
    failed: bool = False  # the proxy's failed episode (it ran out of room): score 0

    @property
    def score(self) -> float:
        """Σ rewards + Σ format penalties; 0 for the proxy's failed episode (ROLL's EpisodeResult "Failed")."""
        return 0.0 if self.failed else sum(self.rewards) + self.penalty

    @property
    def step_scores(self) -> list[float]:
        """Each reply's reward plus its format penalty (they sum to `score`)."""
        return [turn["reward"] + turn["penalty"] for turn in self.turns if turn["role"] == "assistant"]

    @property
    def replies(self) -> int:
        return len(self.rewards)

    def add(self, token_ids: list[int], *, sampled: bool, logprobs: list[float] | None = None) -> None:
        self.response_ids += token_ids
        self.loss_mask += [int(sampled)] * len(token_ids)
        self.token_turns += [self.replies if sampled else -1] * len(token_ids)
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(token_ids)

    def next_input(self) -> list[int]:
        """What the engine continues: the turn's own prompt (step-wise), else the whole conversation so far."""
        return self.prompt_ids if self.history_length is not None else self.prompt_ids + self.response_ids

    def to_state(self) -> dict[str, Any]:
        """JSON-ready (a checkpoint's played, not yet trained batch)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Trajectory:
        return cls(**{**state, "episode": Episode(**state["episode"]), "limits": TurnLimits(**state["limits"]),
                      "steps": [Step(**step) for step in state["steps"]]})

    def finish(self, reason: str, success: bool = False) -> None:
        if reason not in DONE_REASONS:
            raise ValueError(f"done reason {reason!r}; valid: {', '.join(DONE_REASONS)}")
        self.done_reason, self.success = reason, success


@dataclass
class PlaySetup:
    """What playing needs besides the episodes: the engine, the tokenizer and the length limits."""

    generate: Callable[[list[list[int]], SamplingParams], list[Generation]]
    tokenizer: Any
    chat: ChatFormat
    prompt_length: int
    response_length: int
    keep_frames: bool = False
    sequence_length: int | None = None  # ROLL's trajectory cap (module docstring); None: the two limits above


def play(setup: PlaySetup, manager: EnvManager, episodes: list[Episode], params: SamplingParams,
         turn_seed: Callable[[int, int], int]) -> list[Trajectory]:
    """Play every episode to its end, all of them in lockstep: each turn, one engine call per distinct
    per-turn token budget over the trajectories still running. `params.max_new_tokens` is the budget
    of environments without max_tokens_per_step; turn_seed(turn, budget) seeds each call."""
    envs, trajectories = [], []
    for episode in episodes:
        env = manager.make_env(episode.tag)
        observation = env.reset(episode.seed)
        instruction = manager.instruction(episode.tag, env)
        runner = manager.runner(episode.tag)
        trajectory = Trajectory(episode, manager.limits(episode.tag), [], observations=[observation],
                                history_length=manager.history_length(episode.tag), instruction=instruction,
                                concat=manager.step_concat, proxy=runner is not None)
        if trajectory.history_length is not None:
            text = step_text(trajectory, observation)
        else:
            text = f"{instruction}\n{observation}" if instruction else observation
        prompt = encode(setup.tokenizer, first_prompt(setup.tokenizer, text, env.tool_schemas))
        if isinstance(env, NativeEnv):  # AgentNativeStepEnvManager: the environment's messages are the prompt
            trajectory.native = True
            text, prompt = env.messages[-1]["content"], native_prompt(setup.tokenizer, env)
        first_turn: dict[str, Any] = {}
        if runner is not None:  # ProxyEnvManager: the agent runner's system and first user message
            system, user = runner.first_messages(instruction, observation)
            text, first_turn = user["content"], {"system": system["content"]}
            prompt = proxy_prompt(setup.tokenizer, [system, user])
        if setup.sequence_length is not None and len(prompt) >= setup.sequence_length:
            # ROLL would play no turn (and fail building the row); the cap must hold the prompt and a reply
            need = len(prompt) + _budget(trajectory, params)
            raise ValueError(f"sequence_length: the first prompt of {episode.tag} has {len(prompt)} tokens, which "
                             f"leaves no room for a reply within sequence_length = {setup.sequence_length}; "
                             f"override sequence_length={need} or shorten custom_envs.{episode.tag}.env_instruction")
        if setup.sequence_length is None and len(prompt) > setup.prompt_length:
            raise ValueError(f"prompt_length: the first prompt of {episode.tag} has {len(prompt)} tokens, "
                             f"more than {setup.prompt_length}; raise prompt_length or shorten "
                             f"custom_envs.{episode.tag}.env_instruction")
        trajectory.prompt_ids = prompt
        trajectory.turns.append({"role": "user", "text": text, "tokens": len(prompt), "loss": False, **first_turn})
        if setup.keep_frames:
            trajectory.frames.append(env.render())
        envs.append(env)
        trajectories.append(trajectory)
    turn = 0
    while running := [i for i, t in enumerate(trajectories) if t.done_reason is None]:
        turn += 1
        by_budget: dict[int, list[int]] = defaultdict(list)
        for i in running:
            by_budget[_budget(trajectories[i], params, setup.sequence_length)].append(i)
        for budget, rows in sorted(by_budget.items()):
            call = dataclasses.replace(params, max_new_tokens=budget, seed=turn_seed(turn, budget))
            prompts = [trajectories[i].next_input() for i in rows]
            gens = setup.generate(prompts, call)
            for i, gen in zip(rows, gens, strict=True):
                _advance(setup, manager, trajectories[i], envs[i], gen, params)
    return trajectories


def _budget(trajectory: Trajectory, params: SamplingParams, cap: int | None = None) -> int:
    """Tokens the next reply may sample: max_tokens_per_step (else the role's max_new_tokens; the agent-native and
    proxy managers: the smaller of the two), and under ROLL's trajectory cap no more than the room the input leaves
    (ROLL's make_decision)."""
    budget = trajectory.limits.max_new_tokens or params.max_new_tokens
    if trajectory.native or trajectory.proxy:  # ROLL's AgentNativeStepEnvManager / ProxyEnvManager: the smaller
        budget = min(budget, params.max_new_tokens)
    return budget if cap is None else min(budget, cap - len(trajectory.next_input()))


def _advance(setup: PlaySetup, manager: EnvManager, t: Trajectory, env: Env, gen: Generation,
             params: SamplingParams) -> None:
    """One reply: record it, step the environment, then end the episode or append the observation."""
    tokenizer = setup.tokenizer
    reply = tokenizer.decode(gen.token_ids, skip_special_tokens=True)
    if t.history_length is None:
        t.add(gen.token_ids, sampled=True, logprobs=list(gen.logprobs))
    else:
        t.steps.append(Step(t.prompt_ids, list(gen.token_ids), list(gen.logprobs)))
    # ROLL's agent-native manager steps the reply decoded with its special tokens (module docstring)
    observation, reward, done, info = env.step(tokenizer.decode(gen.token_ids) if t.native else reply)
    penalty = 0.0 if info["format_ok"] else manager.penalty(t.episode.tag)
    t.rewards.append(float(reward))
    t.penalty += penalty
    t.actions += int(info["format_ok"])
    t.turns.append({"role": "assistant", "text": reply, "tokens": len(gen.token_ids), "loss": True,
                    "reward": float(reward), "penalty": penalty, "format_ok": bool(info["format_ok"]),
                    "action": info.get("action"), "stop_reason": gen.stop_reason})
    if setup.keep_frames:
        t.frames.append(env.render())
    results = info.get("tool_results")
    observation_turn: dict[str, Any] = {"role": "user", "text": observation, "tokens": 0, "loss": False}
    if results is not None:  # tool messages: the template's tool role, else one user message
        observation_turn.update({"role": "tool", "text": "\n".join(results)} if setup.chat.tool is not None
                                else {"text": tool_responses(results)})
    if done:
        t.finish("success" if info.get("success") else "failure", success=bool(info.get("success")))
    elif t.replies >= t.limits.max_turns:
        t.finish("max_steps")
    elif t.limits.max_actions is not None and t.actions >= t.limits.max_actions:
        t.finish("max_actions")
    elif t.history_length is not None:  # step-wise: the next turn is a fresh prompt, not a continuation
        prompt = (native_prompt(tokenizer, env) if isinstance(env, NativeEnv)
                  else encode(tokenizer, first_prompt(tokenizer, step_text(t, observation))))
        room = setup.sequence_length if setup.sequence_length is not None else setup.prompt_length + 1
        if len(prompt) >= room:  # ROLL's cap: no turn once the prompt reaches it
            t.finish("max_length")
        else:
            t.prompt_ids = prompt
            t.observations.append(observation)
            observation_turn["tokens"] = len(prompt)
    else:
        runner = manager.runner(t.episode.tag)
        if runner is not None:  # ProxyEnvManager: a newline and the runner's next user message (module docstring)
            observation_turn["text"] = runner.user_text(observation, t.replies + 1)
            between = proxy_between(tokenizer, observation_turn["text"])
        else:
            # a reply ended by EOS (or a stop token such as <|im_end|>) generated the start of the close itself
            closing = tokenizer.decode(gen.token_ids[-1:]) if gen.stop_reason in ("eos", "stop") else ""
            between = encode(tokenizer, setup.chat.between_replies(observation, closing) if results is None
                             else setup.chat.between_tool_results(results, closing))
        if setup.sequence_length is not None:  # ROLL: no turn once the input reaches the cap
            full = len(t.prompt_ids) + len(t.response_ids) + len(between) >= setup.sequence_length
        else:
            full = len(t.response_ids) + len(between) + _budget(t, params) > setup.response_length
        if full:
            t.finish("max_length")
            t.failed = t.proxy  # ROLL's runner: the refused request fails the episode
        else:
            t.add(between, sampled=False)
            t.observations.append(observation)
            observation_turn["tokens"] = len(between)
    t.turns.append(observation_turn)


def trajectory_batch(trajectories: list[Trajectory], pad_token_id: int) -> dict[str, Tensor]:
    """The RLVR batch of the trajectories, with `response_mask` = the loss mask (sampled tokens only);
    observation tokens stay in input_ids and attention_mask, so the model still reads them."""
    batch = build_batch([t.prompt_ids for t in trajectories], [t.response_ids for t in trajectories],
                        pad_token_id)
    batch["response_mask"] = padded([t.loss_mask for t in trajectories], batch["response_mask"].size(1))
    return batch


def step_rows(trajectories: list[Trajectory]) -> list[tuple[int, int]]:
    """(trajectory, reply) of each row of a step-wise batch, in order."""
    return [(i, k) for i, t in enumerate(trajectories) for k in range(len(t.steps))]


def step_batch(trajectories: list[Trajectory], pad_token_id: int) -> dict[str, Tensor]:
    """The RLVR batch of step-wise trajectories: one row per reply (its turn's prompt, the reply sampled), in
    step_rows order (ROLL's StepEnvManager.formulate_rollouts)."""
    steps = [step for t in trajectories for step in t.steps]
    return build_batch([s.prompt_ids for s in steps], [s.response_ids for s in steps], pad_token_id)


def turn_index(trajectories: list[Trajectory], width: int) -> Tensor:
    """[batch, width] long: the index k of the reply each sampled token belongs to, −1 on observation
    and padding tokens (the step-wise estimators put turn k's advantage on its tokens)."""
    out = torch.full((len(trajectories), width), -1, dtype=torch.long)
    for i, t in enumerate(trajectories):
        out[i, : len(t.token_turns)] = torch.tensor(t.token_turns, dtype=torch.long)
    return out


def padded(rows: Sequence[Sequence[float]], width: int) -> Tensor:
    """Rows right-padded with 0 to `width` columns, as float."""
    out = torch.zeros((len(rows), width))
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.float32)
    return out


def env_metrics(trajectories: list[Trajectory], prefix: str) -> dict[str, float]:
    """Success rate, turns, actions, format errors and done reasons over all trajectories, and
    success / actions / score per environment tag (ROLL's `env/<tag>/success`, `env/<tag>/num_actions`)."""
    def mean(values: list[float]) -> float:
        return sum(values) / len(values) if values else 0.0

    replies = sum(t.replies for t in trajectories)
    metrics = {
        f"{prefix}/success": mean([float(t.success) for t in trajectories]),
        f"{prefix}/num_turns": mean([float(t.replies) for t in trajectories]),
        f"{prefix}/num_actions": mean([float(t.actions) for t in trajectories]),
        f"{prefix}/format_error_rate": (replies - sum(t.actions for t in trajectories)) / max(1, replies),
        **{f"{prefix}/done/{reason}": mean([float(t.done_reason == reason) for t in trajectories])
           for reason in DONE_REASONS},
    }
    for tag in sorted({t.episode.tag for t in trajectories}):
        mine = [t for t in trajectories if t.episode.tag == tag]
        metrics[f"{prefix}/{tag}/success"] = mean([float(t.success) for t in mine])
        metrics[f"{prefix}/{tag}/num_actions"] = mean([float(t.actions) for t in mine])
        metrics[f"{prefix}/{tag}/score"] = mean([t.score for t in mine])
    return metrics
