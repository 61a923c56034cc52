// Terminal colour codes (SGR: ESC [ … m) of a log line as HTML spans; text is escaped, every other escape
// sequence is dropped (the server already removes them; this is the page's own guard).

import { escapeHtml } from "./live.js";

const SGR = /\x1b\[([0-9;]*)m/g;
const OTHER_ESCAPES = /\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])/g;

function classes(state) {
  const names = [];
  if (state.bold) names.push("ansi-bold");
  if (state.dim) names.push("ansi-dim");
  if (state.fg !== null) names.push(`ansi-fg-${state.fg}`);
  if (state.bg !== null) names.push(`ansi-bg-${state.bg}`);
  return names.join(" ");
}

function apply(state, codes) {
  const list = codes === "" ? [0] : codes.split(";").map(Number);
  for (const code of list) {
    if (code === 0) Object.assign(state, { bold: false, dim: false, fg: null, bg: null });
    else if (code === 1) state.bold = true;
    else if (code === 2) state.dim = true;
    else if (code === 22) Object.assign(state, { bold: false, dim: false });
    else if ((code >= 30 && code <= 37) || (code >= 90 && code <= 97)) state.fg = code;
    else if (code === 39) state.fg = null;
    else if ((code >= 40 && code <= 47) || (code >= 100 && code <= 107)) state.bg = code;
    else if (code === 49) state.bg = null;
  }
}

export function ansiToHtml(line) {
  const state = { bold: false, dim: false, fg: null, bg: null };
  let out = "";
  let last = 0;
  const clean = (text) => escapeHtml(text.replace(OTHER_ESCAPES, ""));
  const emit = (text) => {
    if (!text) return;
    const names = classes(state);
    out += names ? `<span class="${names}">${clean(text)}</span>` : clean(text);
  };
  for (const match of line.matchAll(SGR)) {
    emit(line.slice(last, match.index));
    apply(state, match[1]);
    last = match.index + match[0].length;
  }
  emit(line.slice(last));
  return out;
}
