// Config editor: live checks against the server (the schema and validation live in Python only),
// inline errors by field path, derived values, and the two-way YAML tab / file import.

const editor = document.getElementById("editor");
const checkUrl = editor.dataset.checkUrl;
const modeInput = document.getElementById("editor-mode");
const yamlArea = document.getElementById("config-yaml");
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

function showIssues(payload) {
  editor.querySelectorAll("[data-errors-for]").forEach((list) => { list.innerHTML = ""; list.hidden = true; });
  editor.querySelectorAll(".field.has-error").forEach((el) => el.classList.remove("has-error"));
  for (const issue of payload.errors) {
    const found = errorTarget(issue.field);
    if (!found) continue;
    const text = found.exact ? issue.message : `${issue.field}: ${issue.message}`;
    found.target.insertAdjacentHTML("beforeend", `<li>${escapeHtml(text)}</li>`);
    found.target.hidden = false;
    found.target.closest(".field")?.classList.add("has-error");
    for (let details = found.target.closest("details"); details; details = details.parentElement.closest("details")) {
      details.open = true;
    }
  }
  const list = (items) => items.map((i) => `<li><code>${escapeHtml(i.field)}</code> ${escapeHtml(i.message)}</li>`).join("");
  document.getElementById("all-errors").innerHTML = list(payload.errors);
  document.getElementById("all-warnings").innerHTML = list(payload.warnings);
  document.getElementById("check-state").textContent = payload.ok ? "valid" : `${payload.errors.length} error(s)`;
  document.getElementById("source-format-detected").textContent = payload.source_format;
  const derived = Object.entries(payload.derived || {})
    .map(([key, value]) => `<dt>${escapeHtml(key)}</dt><dd>${escapeHtml(typeof value === "object" ? JSON.stringify(value) : String(value))}</dd>`)
    .join("");
  document.getElementById("derived").innerHTML = derived;
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

async function applyYaml() {
  clearTimeout(pending);
  const payload = await check({ editor_mode: "yaml", render_form: "1" }, true);
  if (!payload) return;
  if (payload.form_html) {
    document.getElementById("config-form").outerHTML = payload.form_html;
  }
  showIssues(payload);
}

function selectTab(name) {
  modeInput.value = name;
  document.querySelectorAll("[data-tab]").forEach((tab) => tab.setAttribute("aria-selected", String(tab.dataset.tab === name)));
  document.querySelectorAll("[data-panel]").forEach((panel) => { panel.hidden = panel.dataset.panel !== name; });
}

document.querySelectorAll("[data-tab]").forEach((tab) => tab.addEventListener("click", async () => {
  if (tab.dataset.tab === "yaml" && modeInput.value === "form") {
    clearTimeout(pending);
    const payload = await check({}, true);
    if (payload && payload.yaml) yamlArea.value = payload.yaml;
  }
  if (tab.dataset.tab === "form" && modeInput.value === "yaml") await applyYaml();
  selectTab(tab.dataset.tab);
}));

document.getElementById("apply-yaml").addEventListener("click", async () => {
  await applyYaml();
  selectTab("form");
});

document.getElementById("config-file").addEventListener("change", async (event) => {
  const file = event.target.files[0];
  if (!file) return;
  yamlArea.value = await file.text();
  const payload = await check({ editor_mode: "yaml" });
  if (payload) showIssues(payload);
});

editor.addEventListener("change", (event) => {
  const include = event.target.dataset?.include;
  if (include !== undefined) {
    const body = editor.querySelector(`[data-body-of="${CSS.escape(include)}"]`);
    if (body) body.hidden = !event.target.checked;
  }
  if (event.target.closest("#config-form")) scheduleCheck();
});
editor.addEventListener("input", (event) => {
  if (event.target.closest("#config-form")) scheduleCheck();
});
yamlArea.addEventListener("input", () => {
  clearTimeout(pending);
  pending = setTimeout(async () => {
    const payload = await check({ editor_mode: "yaml" });
    if (payload) showIssues(payload);
  }, 400);
});

liveCheck();
