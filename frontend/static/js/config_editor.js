// Config editor: live checks against the server (the schema and validation live in Python only),
// inline errors by field path, derived values, the memory-fit estimate, the basic view (the schema's
// `common` fields) and the full form, and the two-way YAML tab / file import. Errors of a refused save
// are rendered by the server in #save-errors and stay until the next save: live checks never touch them.

const editor = document.getElementById("editor");
const checkUrl = editor.dataset.checkUrl;
const modeInput = document.getElementById("editor-mode");
const viewInput = document.getElementById("form-view");
const importedInput = document.getElementById("imported-source");
const formPanel = document.querySelector('[data-panel="form"]');
const yamlArea = document.getElementById("config-yaml");
const GIB = 1024 ** 3;
let pending = null;
let sequence = 0;

function formBody(extra = {}) {
  const body = new FormData(editor);
  for (const [key, value] of Object.entries(extra)) body.set(key, value);
  return body;
}

// Live checks may overlap; only the newest one's answer is shown. Explicit actions (tab switch,
// "apply") pass force so that their answer is always used.
async function check(extra = {}, force = false) {
  const mine = ++sequence;
  const response = await fetch(checkUrl, {
    method: "POST",
    body: formBody(extra),
    headers: { "X-Requested-With": "fetch" },
    credentials: "same-origin",
  });
  const payload = await response.json();
  if (!force && mine !== sequence) return null; // a newer check is on its way
  return payload;
}

function escapeHtml(text) {
  const div = document.createElement("div");
  div.textContent = text;
  return div.innerHTML;
}

// The closest element that shows errors for `path` (a field, else its nearest enclosing section).
function errorTarget(path) {
  let current = path;
  while (true) {
    const target = editor.querySelector(`[data-errors-for="${CSS.escape(current)}"]`);
    if (target) return { target, exact: current === path };
    if (!current) return null;
    current = current.includes(".") ? current.slice(0, current.lastIndexOf(".")) : "";
  }
}

function formatGib(bytes) {
  return bytes === undefined ? "—" : (bytes / GIB).toFixed(bytes >= 10 * GIB ? 1 : 2);
}

function showMemory(memory) {
  const box = document.getElementById("memory-table");
  const warnings = document.getElementById("memory-warnings");
  if (!memory) {
    box.innerHTML = `<p class="meta">Shown once the config is valid.</p>`;
    warnings.innerHTML = "";
    return;
  }
  const parts = ["weights", "gradients", "optimizer", "activations", "kv_cache"];
  const rows = memory.roles.map((r) => {
    const state = r.fits === null ? "unknown" : r.fits ? "fits" : "does not fit";
    const cells = parts.map((p) => `<td>${formatGib(r.parts[p])}</td>`).join("");
    return `<tr class="memory-${state.replace(/ /g, "-")}" data-role="${escapeHtml(r.role)}"
      title="${escapeHtml([r.model, ...r.notes].join(" · "))}"><th>${escapeHtml(r.role)}<br><span class="meta">${escapeHtml(r.strategy)} ×${r.workers}</span></th>
      ${cells}<td><b>${r.fits === null ? "?" : formatGib(r.total)}</b></td><td>${state}</td></tr>`;
  }).join("");
  box.innerHTML = `<table class="memory-table"><thead><tr><th>role</th><th>weights</th><th>grads</th><th>optim</th>
    <th>activ.</th><th>KV</th><th>GiB</th><th></th></tr></thead><tbody>${rows}</tbody></table>
    <p class="meta">Per device of ${formatGib(memory.device_bytes)} GiB. Model sizes: ${Object.entries(memory.models)
      .map(([path, source]) => `${escapeHtml(path)} (${escapeHtml(source)})`).join(", ") || "none"}.</p>`;
  warnings.innerHTML = memory.warnings.map((w) => `<li>${escapeHtml(w)}</li>`).join("");
}

function showIssues(payload) {
  editor.querySelectorAll("[data-errors-for]").forEach((list) => { list.innerHTML = ""; list.hidden = true; });
  editor.querySelectorAll(".field.has-error, details.has-error").forEach((el) => el.classList.remove("has-error"));
  for (const issue of payload.errors) {
    const found = errorTarget(issue.field);
    if (!found) continue;
    const text = found.exact ? issue.message : `${issue.field}: ${issue.message}`;
    found.target.insertAdjacentHTML("beforeend", `<li>${escapeHtml(text)}</li>`);
    found.target.hidden = false;
    found.target.closest(".field")?.classList.add("has-error");
    for (let details = found.target.closest("details"); details; details = details.parentElement.closest("details")) {
      details.open = true;
      details.classList.add("has-error"); // shown in the basic view too
    }
  }
  const list = (items) => items.map((i) => `<li><code>${escapeHtml(i.field)}</code> ${escapeHtml(i.message)}</li>`).join("");
  // Only the config's errors stop the launch (the server refuses to save or launch it); the machine check's
  // findings do not: the launch goes ahead, and the run fails when its trainer starts on such a machine.
  document.getElementById("errors-heading").hidden = !payload.errors.length;
  document.getElementById("all-errors").innerHTML = list(payload.errors);
  document.getElementById("all-warnings").innerHTML = list(payload.warnings);
  // The launch's preflight (packages, CUDA devices, model and data paths), as warnings: the web server ran it.
  const findings = payload.preflight || [];
  document.getElementById("preflight").hidden = !findings.length;
  document.getElementById("preflight-count").textContent = `${findings.length} finding${findings.length === 1 ? "" : "s"}`;
  document.getElementById("preflight-where").textContent = payload.preflight_where
    ? `Machine check (${payload.preflight_where}): the launch goes ahead, and the run stops when its trainer finds these.` : "";
  document.getElementById("preflight-findings").innerHTML = list(findings);
  const machine = findings.length ? `, but ${findings.length} machine-check finding${findings.length === 1 ? "" : "s"}` : "";
  document.getElementById("check-state").textContent = payload.ok ? `valid${machine}` : `${payload.errors.length} error(s)`;
  document.getElementById("source-format-detected").textContent = payload.source_format;
  const derived = Object.entries(payload.derived || {})
    .map(([key, value]) => `<dt>${escapeHtml(key)}</dt><dd>${escapeHtml(typeof value === "object" ? JSON.stringify(value) : String(value))}</dd>`)
    .join("");
  document.getElementById("derived").innerHTML = derived;
  showMemory(payload.memory);
}

async function liveCheck() {
  const payload = await check();
  if (!payload) return;
  showIssues(payload);
  if (modeInput.value === "form" && payload.yaml) yamlArea.value = payload.yaml;
}

function scheduleCheck() {
  clearTimeout(pending);
  pending = setTimeout(liveCheck, 250);
}

// A foreign file (verl, SkyRL, RLinf, or a ROLL file as written) that fills the form is kept: saving from
// the form stores it beside the native config.
function rememberImport(payload, text) {
  const foreign = payload.source_format && payload.source_format !== "roll";
  importedInput.value = foreign ? text : "";
  document.getElementById("imported-note").hidden = !foreign;
}

async function applyYaml() {
  clearTimeout(pending);
  const text = yamlArea.value;
  const payload = await check({ editor_mode: "yaml", render_form: "1" }, true);
  if (!payload) return;
  if (payload.form_html) {
    document.getElementById("config-form").outerHTML = payload.form_html;
  }
  rememberImport(payload, text);
  showIssues(payload);
  setView(viewInput.value);
}

// Basic view: only the fields the schema marks `common` (and any field with an error); every other input
// stays in the form with its value, so saving from either view saves the whole config.
function setView(view) {
  viewInput.value = view;
  formPanel.classList.toggle("basic", view === "basic");
  if (view === "basic") formPanel.querySelectorAll("details[data-common]").forEach((d) => { d.open = true; });
}

function selectTab(name, view) {
  modeInput.value = name;
  if (name === "form" && view) setView(view);
  document.querySelectorAll("[data-tab]").forEach((tab) => {
    const selected = tab.dataset.tab === name && (name !== "form" || tab.dataset.view === viewInput.value);
    tab.setAttribute("aria-selected", String(selected));
  });
  document.querySelectorAll("[data-panel]").forEach((panel) => { panel.hidden = panel.dataset.panel !== name; });
}

document.querySelectorAll("[data-tab]").forEach((tab) => tab.addEventListener("click", async () => {
  if (tab.dataset.tab === "yaml" && modeInput.value === "form") {
    clearTimeout(pending);
    const payload = await check({}, true);
    if (payload && payload.yaml) yamlArea.value = payload.yaml;
  }
  if (tab.dataset.tab === "form" && modeInput.value === "yaml") await applyYaml();
  selectTab(tab.dataset.tab, tab.dataset.view);
}));
document.querySelector("[data-show-view]").addEventListener("click", (event) => selectTab("form", event.target.dataset.showView));

document.getElementById("apply-yaml").addEventListener("click", async () => {
  await applyYaml();
  selectTab("form");
});

document.getElementById("config-file").addEventListener("change", async (event) => {
  const file = event.target.files[0];
  if (!file) return;
  const text = await file.text();
  yamlArea.value = text;
  const payload = await check({ editor_mode: "yaml" });
  if (payload) {
    rememberImport(payload, text);
    showIssues(payload);
  }
});

editor.addEventListener("change", (event) => {
  const include = event.target.dataset?.include;
  if (include !== undefined) {
    const body = editor.querySelector(`[data-body-of="${CSS.escape(include)}"]`);
    if (body) body.hidden = !event.target.checked;
  }
  if (event.target.closest("#config-form, #memory")) scheduleCheck();
});
editor.addEventListener("input", (event) => {
  if (event.target.closest("#config-form, #memory")) scheduleCheck();
});
yamlArea.addEventListener("input", () => {
  clearTimeout(pending);
  pending = setTimeout(async () => {
    const payload = await check({ editor_mode: "yaml" });
    if (payload) showIssues(payload);
  }, 400);
});

setView(viewInput.value);
liveCheck();
