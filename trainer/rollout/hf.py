"""`hf_infer`: batched sampling with a Hugging Face causal LM and a KV cache (the CPU path).

A hand-written decode loop rather than ``model.generate``: on CPU with tiny models the generate
machinery (logits-processor lists, stopping criteria, output dataclasses) costs more than the
forward pass, and our own loop gives the exact log-probs we document in ``Generation``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from torch import Tensor, nn
from transformers.cache_utils import DynamicCache

from trainer.data.collate import left_pad
from trainer.rollout.base import Generation, SamplingParams


def filter_logits(logits: Tensor, top_k: int, top_p: float, min_p: float) -> Tensor:
    """Mask (to -inf) the tokens that top-k, top-p (nucleus) and min-p sampling exclude.

    top-k keeps the k largest logits; top-p keeps the smallest prefix of tokens sorted by
    probability whose mass reaches p; min-p keeps tokens with ``p(token) >= min_p * max_token p``.
    The most likely token always survives.
    """
    if top_k > 0 and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if min_p > 0.0:
        probs = logits.softmax(-1)
        threshold = min_p * probs.max(dim=-1, keepdim=True).values
        logits = logits.masked_fill(probs < threshold, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        # drop a token when the mass *before* it already reaches top_p
        drop_sorted = (cumulative - sorted_logits.softmax(-1)) >= top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def apply_repetition_penalty(logits: Tensor, seen: Tensor, penalty: float) -> Tensor:
    """CTRL's rule as vLLM and HF apply it: on tokens already seen (prompt or response),
    ``logit / penalty`` where the logit is positive and ``logit * penalty`` where it is not."""
    if penalty == 1.0:
        return logits
    penalised = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, penalised, logits)


def seen_tokens(prompts: list[list[int]], vocab_size: int) -> Tensor:
    """[batch, vocab] bool mask of the tokens each prompt contains (for the repetition penalty)."""
    seen = torch.zeros((len(prompts), vocab_size), dtype=torch.bool)
    for row, prompt in enumerate(prompts):
        seen[row, torch.tensor(prompt, dtype=torch.long)] = True
    return seen


class HFInferEngine:
    """Rollout engine over an in-memory ``PreTrainedModel`` (``hf_infer``)."""

    def __init__(
        self,
        model: nn.Module,
        *,
        eos_token_ids: list[int],
        pad_token_id: int,
        device: str = "cpu",
        max_batch_size: int | None = None,
        decode: Callable[[list[int]], str] | None = None,
    ) -> None:
        """``decode`` (token ids -> text, e.g. ``tokenizer.decode``) is needed for stop strings."""
        self.model = model.to(device).eval()
        self.decode = decode
        self.device = torch.device(device)
        self.eos_token_ids = list(eos_token_ids)
        self.pad_token_id = pad_token_id
        self.max_batch_size = max_batch_size
        self.asleep = False

    # -- weights and memory -------------------------------------------------------------------
    def load_weights(self, state_dict: Mapping[str, Tensor]) -> None:
        """Copy new weights in place (after each policy update); names must match the model's."""
        params = dict(self.model.named_parameters())
        params.update(dict(self.model.named_buffers()))
        unknown = sorted(set(state_dict) - set(self.model.state_dict()))
        if unknown:
            raise KeyError(f"load_weights: unknown parameter names {unknown[:5]}")
        with torch.no_grad():
            for name, value in state_dict.items():
                if name in params:
                    params[name].copy_(value.to(params[name].device, params[name].dtype))

    def sleep(self) -> None:
        """Release accelerator memory while a colocated role trains (weights parked on CPU)."""
        if self.device.type != "cpu":
            self.model.to("cpu")
            torch.cuda.empty_cache()
        self.asleep = True

    def wake(self) -> None:
        self.model.to(self.device)
        self.asleep = False

    # -- generation ---------------------------------------------------------------------------
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        """Sample ``params.n`` responses per prompt; results ordered by (prompt, sample)."""
        if self.asleep:
            raise RuntimeError("hf_infer engine is asleep: call wake() before generate()")
        if not prompts:
            return []
        expanded = [(p, s) for p in range(len(prompts)) for s in range(params.n)]
        generator = torch.Generator(device="cpu")
        if params.seed is not None:
            generator.manual_seed(params.seed)
        else:
            generator.seed()
        chunk = self.max_batch_size or len(expanded)
        results: list[Generation] = []
        for start in range(0, len(expanded), chunk):
            part = expanded[start : start + chunk]
            results.extend(self._generate_batch([prompts[p] for p, _ in part], part, params, generator))
        return results

    @torch.no_grad()
    def _generate_batch(
        self,
        prompts: list[list[int]],
        index: list[tuple[int, int]],
        params: SamplingParams,
        generator: torch.Generator,
    ) -> list[Generation]:
        padded = left_pad(prompts, self.pad_token_id)
        batch, width = padded["input_ids"].shape
        steps = params.max_new_tokens
        if params.stop_strings and self.decode is None:
            raise ValueError("stop_strings: this hf_infer engine was built without a tokenizer to decode with")
        # the mask for every step, sliced as the sequence grows (new tokens are always attended)
        full_mask = torch.cat([padded["attention_mask"], torch.ones((batch, steps), dtype=torch.long)], -1)
        full_mask = full_mask.to(self.device)
        step_ids = padded["input_ids"].to(self.device)
        step_pos = (full_mask[:, :width].cumsum(-1) - 1).clamp(min=0)
        eos = torch.tensor([] if params.ignore_eos else self.eos_token_ids, dtype=torch.long)
        stop = torch.tensor(list(params.stop_token_ids), dtype=torch.long)
        ending = torch.cat([eos, stop]).unique()
        filtering = params.top_k > 0 or params.top_p < 1.0 or params.min_p > 0.0
        seen = None

        cache = DynamicCache()
        tokens = torch.full((batch, steps), self.pad_token_id, dtype=torch.long)
        logprobs = torch.zeros((batch, steps))
        lengths = torch.full((batch,), steps, dtype=torch.long)
        reasons = ["length"] * batch
        done = torch.zeros(batch, dtype=torch.bool)
        for t in range(steps):
            out = self.model(
                input_ids=step_ids,
                attention_mask=full_mask[:, : width + t],
                position_ids=step_pos,
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            )
            cache = out.past_key_values
            logits = out.logits[:, -1, :].float().cpu()
            if seen is None and params.repetition_penalty != 1.0:
                seen = seen_tokens(prompts, logits.size(-1))
            # what is sampled from: penalised, EOS/stop masked before min_new_tokens, then scaled
            processed = apply_repetition_penalty(logits, seen, params.repetition_penalty) if seen is not None \
                else logits
            if t < params.min_new_tokens and ending.numel():
                processed = processed.index_fill(-1, ending, float("-inf"))
            if params.temperature == 0.0:
                logp = logits.log_softmax(-1)
                chosen = processed.argmax(-1)
            else:
                logp = (logits / params.temperature).log_softmax(-1)
                scaled = processed / params.temperature
                if filtering:
                    probs = filter_logits(scaled, params.top_k, params.top_p, params.min_p).softmax(-1)
                else:
                    probs = logp.exp() if processed is logits else scaled.softmax(-1)
                chosen = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
            chosen = torch.where(done, torch.full_like(chosen, self.pad_token_id), chosen)
            tokens[:, t] = chosen
            logprobs[:, t] = logp.gather(-1, chosen[:, None]).squeeze(-1)
            if seen is not None:
                seen[torch.arange(batch), chosen] = True
            hit_eos = torch.isin(chosen, eos) & ~done
            hit_stop = torch.isin(chosen, stop) & ~done & ~hit_eos
            if params.stop_strings and t + 1 >= params.min_new_tokens:
                hit_stop |= self._completes_stop_string(tokens[:, : t + 1], ~done & ~hit_eos, params.stop_strings)
            if bool((hit_eos | hit_stop).any()):
                for row in torch.nonzero(hit_eos | hit_stop).flatten().tolist():
                    lengths[row] = t + 1
                    reasons[row] = "eos" if hit_eos[row] else "stop"
                done |= hit_eos | hit_stop
                if bool(done.all()):
                    break
            step_ids = chosen[:, None].to(self.device)
            step_pos = step_pos[:, -1:] + 1

        return [
            Generation(
                prompt_index=p,
                sample_index=s,
                token_ids=tokens[row, : lengths[row]].tolist(),
                logprobs=logprobs[row, : lengths[row]].tolist(),
                stop_reason=reasons[row],
            )
            for row, (p, s) in enumerate(index)
        ]

    def _completes_stop_string(self, tokens: Tensor, active: Tensor, stop_strings: Sequence[str]) -> Tensor:
        """Rows whose response text now contains a stop string (checked each step, so the first
        occurrence ends the response at the token that completed it)."""
        assert self.decode is not None
        hit = torch.zeros(tokens.size(0), dtype=torch.bool)
        for row in torch.nonzero(active).flatten().tolist():
            text = self.decode(tokens[row].tolist())
            hit[row] = any(s in text for s in stop_strings)
        return hit
