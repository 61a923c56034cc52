"""`hf_infer`: batched sampling with a Hugging Face causal LM and a KV cache, on CPU or GPU.

A hand-written decode loop rather than ``model.generate``: on CPU with tiny models the generate
machinery (logits-processor lists, stopping criteria, output dataclasses) costs more than the
forward pass, and our own loop gives the exact log-probs we document in ``Generation``.

Everything a decode step does stays on the engine's device: sampling (with a ``torch.Generator``
on that device, seeded from ``SamplingParams.seed``), log-probs, top-k / top-p / min-p, the
repetition penalty, min_new_tokens masking and the EOS / stop-token checks; the token, log-prob and
finished-row buffers live there too. The host sees a batch's results once, at its end. On an
accelerator the loop asks "has every row finished?" only every ``CHECK_EVERY`` steps (each ask
waits for the device); on CPU it asks every step, which is free. Stop strings are the exception:
they need the response text, so with ``stop_strings`` set the new tokens come to the host each step.

Seeded runs are reproducible per device. On CPU they give exactly the tokens and log-probs of the
earlier CPU-only loop (same float ops, same ``torch.multinomial`` draws from a CPU generator);
tests/trainer/rollout/test_hf_seeded_tokens.py pins that.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from torch import Tensor, nn
from transformers.cache_utils import DynamicCache

from trainer.data.collate import left_pad
from trainer.rollout.base import Generation, SamplingParams

# On an accelerator, check "every row finished" every this many steps (each check is a host sync;
# a batch that finished early runs at most CHECK_EVERY - 1 extra steps).
CHECK_EVERY = 8
# stop reasons as codes in a tensor (index into this tuple)
REASONS = ("length", "eos", "stop")
LENGTH, EOS, STOP = range(3)


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


def prompt_seen_mask(input_ids: Tensor, attention_mask: Tensor, vocab_size: int) -> Tensor:
    """[batch, vocab] bool mask of the tokens each (left-padded) prompt contains, for the
    repetition penalty; built on the prompts' device."""
    # padding goes to a spare last column, dropped after: only True is ever written, so repeats are harmless
    ids = input_ids.masked_fill(attention_mask == 0, vocab_size)
    seen = torch.zeros((ids.size(0), vocab_size + 1), dtype=torch.bool, device=ids.device)
    return seen.scatter_(1, ids, True)[:, :vocab_size]


def token_mask(ids: Tensor, vocab_size: int) -> Tensor:
    """[vocab] bool mask, True at ``ids``; ids outside the vocabulary (never sampled) are ignored."""
    # such ids go to a spare last column, dropped after
    ids = torch.where((ids >= 0) & (ids < vocab_size), ids, vocab_size)
    mask = torch.zeros(vocab_size + 1, dtype=torch.bool, device=ids.device)
    return mask.index_fill_(0, ids, True)[:vocab_size]


def gumbel_sample(probs: Tensor, generator: torch.Generator) -> Tensor:
    """One token per row of ``probs`` [batch, vocab] as ``argmax(p / q)`` with ``q ~ Exp(1)``
    (the Gumbel-max trick): the algorithm ``torch.multinomial`` itself uses for one sample, minus
    its input checks, which read values back to the host (a sync per step on an accelerator)."""
    q = torch.empty_like(probs).exponential_(1.0, generator=generator)
    return (probs / q).argmax(-1)


def sample(probs: Tensor, generator: torch.Generator) -> Tensor:
    """One token per row: ``torch.multinomial`` on CPU (the draws the CPU loop always made, so
    seeded runs keep their tokens), ``gumbel_sample`` elsewhere."""
    if probs.device.type == "cpu":
        return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    return gumbel_sample(probs, generator)


def first_ends(ends: Tensor, tokens: Tensor, is_eos: Tensor) -> tuple[Tensor, Tensor]:
    """Length and stop-reason code of each row from ``ends`` [batch, steps] (True where a row
    ended): a row ends at its first True (later columns are padding), or runs to full length.
    The reason is EOS when the token that ended the row is an EOS token, STOP otherwise."""
    ended = ends.any(-1)
    first = ends.int().argmax(-1)  # argmax returns the first of equal maxima
    last_token = tokens.gather(1, first[:, None]).squeeze(1)
    lengths = torch.where(ended, first + 1, ends.size(1))
    reasons = torch.where(is_eos[last_token], EOS, STOP)
    return lengths, torch.where(ended, reasons, LENGTH)


class StopStrings:
    """The host side of stop strings: response text must be decoded, so each check copies the
    columns not yet seen (and which rows still run) to the host, one sync per check. Checked each
    step, so the first occurrence ends a response at the token that completed it."""

    def __init__(self, decode: Callable[[list[int]], str], stop_strings: Sequence[str], batch: int) -> None:
        self.decode = decode
        self.stop_strings = list(stop_strings)
        self.text_ids: list[list[int]] = [[] for _ in range(batch)]

    def completed(self, tokens: Tensor, running: Tensor) -> tuple[Tensor, bool]:
        """Rows still running whose response text (``tokens`` so far) now contains a stop string,
        and whether every row has finished once they stop."""
        have = len(self.text_ids[0])
        rows = torch.cat([running[:, None].long(), tokens[:, have:]], 1).tolist()
        hit = []
        for ids, (alive, *new) in zip(self.text_ids, rows, strict=True):
            ids.extend(new)
            hit.append(bool(alive) and any(s in self.decode(ids) for s in self.stop_strings))
        finished = all(not alive or h for (alive, *_), h in zip(rows, hit, strict=True))
        return torch.tensor(hit, device=tokens.device), finished


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
        # steps between "every row finished?" checks: free on CPU, a host sync on an accelerator
        self.check_every = 1 if self.device.type == "cpu" else CHECK_EVERY

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

    def shutdown(self) -> None:
        """Nothing to release beyond the model, which the role owns (vLLM's engine has processes to stop)."""

    # -- generation ---------------------------------------------------------------------------
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        """Sample ``params.n`` responses per prompt; results ordered by (prompt, sample)."""
        if self.asleep:
            raise RuntimeError("hf_infer engine is asleep: call wake() before generate()")
        if not prompts:
            return []
        expanded = [(p, s) for p in range(len(prompts)) for s in range(params.n)]
        generator = torch.Generator(device=self.device)
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
        if params.stop_strings and self.decode is None:
            raise ValueError("stop_strings: this hf_infer engine was built without a tokenizer to decode with")
        padded = left_pad(prompts, self.pad_token_id)
        batch, width = padded["input_ids"].shape
        steps = params.max_new_tokens
        device = self.device
        # the mask for every step, sliced as the sequence grows (new tokens are always attended)
        full_mask = torch.cat([padded["attention_mask"], torch.ones((batch, steps), dtype=torch.long)], -1)
        full_mask = full_mask.to(device)
        prompt_ids = padded["input_ids"].to(device)
        step_ids = prompt_ids
        step_pos = (full_mask[:, :width].cumsum(-1) - 1).clamp(min=0)
        eos_ids = torch.tensor([] if params.ignore_eos else self.eos_token_ids, dtype=torch.long, device=device)
        end_ids = torch.cat([eos_ids, torch.tensor(list(params.stop_token_ids), dtype=torch.long, device=device)])
        strings = StopStrings(self.decode, params.stop_strings, batch) if params.stop_strings else None

        cache = DynamicCache()
        tokens = torch.full((batch, steps), self.pad_token_id, dtype=torch.long, device=device)
        logprobs = torch.zeros((batch, steps), device=device)
        done = torch.zeros(batch, dtype=torch.bool, device=device)
        string_ends = torch.zeros((batch, steps), dtype=torch.bool, device=device) if strings else None
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
            logits = out.logits[:, -1, :].float()
            if t == 0:  # the vocabulary size is known from the first logits
                vocab = logits.size(-1)
                is_eos, is_end = token_mask(eos_ids, vocab), token_mask(end_ids, vocab)
                seen = prompt_seen_mask(prompt_ids, full_mask[:, :width], vocab) \
                    if params.repetition_penalty != 1.0 else None
            too_early = t < params.min_new_tokens and end_ids.numel() > 0  # EOS/stop not yet allowed
            chosen, logp = self._next_token(logits, params, seen, is_end if too_early else None, generator)
            chosen = chosen.masked_fill(done, self.pad_token_id)  # finished rows emit padding
            tokens[:, t] = chosen
            logprobs[:, t] = logp.gather(-1, chosen[:, None]).squeeze(-1)
            if seen is not None:
                seen.scatter_(1, chosen[:, None], True)
            done |= is_end[chosen]  # an EOS or stop token ends its row (kept in the response)
            finished = None
            if strings is not None and t + 1 >= params.min_new_tokens:
                hit, finished = strings.completed(tokens[:, : t + 1], ~done)
                string_ends[:, t] = hit
                done |= hit
            if finished is None and (t + 1) % self.check_every == 0:
                finished = bool(done.all())  # a host sync on an accelerator
            if finished:
                break
            step_ids = chosen[:, None]
            step_pos = step_pos[:, -1:] + 1

        ends = is_end[tokens] if string_ends is None else is_end[tokens] | string_ends
        lengths, reasons = first_ends(ends, tokens, is_eos)
        # to the host once per tensor
        tokens_h, logprobs_h = tokens.tolist(), logprobs.tolist()
        lengths_h, reasons_h = lengths.tolist(), reasons.tolist()
        return [
            Generation(
                prompt_index=p,
                sample_index=s,
                token_ids=tokens_h[row][: lengths_h[row]],
                logprobs=logprobs_h[row][: lengths_h[row]],
                stop_reason=REASONS[reasons_h[row]],
            )
            for row, (p, s) in enumerate(index)
        ]

    @staticmethod
    def _next_token(
        logits: Tensor,
        params: SamplingParams,
        seen: Tensor | None,
        banned: Tensor | None,
        generator: torch.Generator,
    ) -> tuple[Tensor, Tensor]:
        """The chosen token per row and the log-probs reported (``Generation``'s documented ones).

        What is sampled from: the logits penalised (repetition), EOS/stop masked (before
        min_new_tokens: the ``banned`` [vocab] mask), scaled by the temperature, then filtered
        (top-k / top-p / min-p).
        """
        processed = logits
        if seen is not None:
            processed = apply_repetition_penalty(processed, seen, params.repetition_penalty)
        if banned is not None:
            processed = processed.masked_fill(banned, float("-inf"))
        if params.temperature == 0.0:
            return processed.argmax(-1), logits.log_softmax(-1)
        logp = (logits / params.temperature).log_softmax(-1)
        if params.top_k > 0 or params.top_p < 1.0 or params.min_p > 0.0:
            filtered = filter_logits(processed / params.temperature, params.top_k, params.top_p, params.min_p)
            probs = filtered.softmax(-1)
        elif processed is logits:
            probs = logp.exp()  # nothing changed the distribution: reuse the log-softmax
        else:
            probs = (processed / params.temperature).softmax(-1)
        return sample(probs, generator), logp
