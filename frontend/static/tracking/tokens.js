// A sample's response token by token, each coloured by one of its per-token numbers: the engine's log-prob,
// the advantage, or the mismatch |trainer - engine| of the two log-probs (from the server: one definition).
// Tokens the loss does not train (an agentic trajectory's observations) are greyed.
import { escapeHtml, roundNumber } from "./live.js";

export const MISMATCH_FULL = 0.5; // a token whose log-probs differ by this much or more is fully red

export function colour(value, mode) {
  if (value === null || value === undefined) return "transparent";
  if (mode === "logprob") {
    const p = Math.exp(Math.min(0, value)); // probability: green when likely, red when unlikely
    return `hsla(${Math.round(120 * p)}, 75%, 55%, 0.35)`;
  }
  if (mode === "mismatch") {
    if (value < 1e-4) return "transparent"; // the same numbers: nothing to see
    return `rgba(198, 40, 40, ${(0.12 + 0.68 * Math.min(1, value / MISMATCH_FULL)).toFixed(3)})`;
  }
  const a = Math.max(-1, Math.min(1, value));
  return a >= 0 ? `rgba(46, 125, 50, ${0.15 + 0.5 * a})` : `rgba(198, 40, 40, ${0.15 - 0.5 * a})`;
}

function tokenTitle(s, i, mode) {
  if (mode === "mismatch") {
    return `trainer ${roundNumber(s.token_logprobs_trainer?.[i])} · engine ${roundNumber(s.token_logprobs?.[i])} · `
      + `|Δ| ${roundNumber(s.token_logprob_mismatch?.[i])}`;
  }
  const values = mode === "logprob" ? s.token_logprobs : s.token_advantages;
  return `${mode} ${values?.[i] ?? "—"}`;
}

export function tokensHtml(s, mode) {
  if (!Array.isArray(s.tokens) || !s.tokens.length) return `<div class="response">${escapeHtml(s.response)}</div>`;
  const values = { logprob: s.token_logprobs, advantage: s.token_advantages, mismatch: s.token_logprob_mismatch }[mode];
  const mask = Array.isArray(s.token_mask) ? s.token_mask : null; // aligned with tokens, like the values
  return `<div class="response tokens">${s.tokens
    .map((t, i) => {
      if (mask && !mask[i]) return `<span class="masked" title="not trained: the environment's text">${escapeHtml(t)}</span>`;
      return `<span title="${escapeHtml(tokenTitle(s, i, mode))}" style="background:${colour(values?.[i], mode)}">${escapeHtml(t)}</span>`;
    })
    .join("")}</div>`;
}
