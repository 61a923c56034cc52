// Simple run status page: polls the run's status as JSON until it is finished.
const box = document.getElementById("run-status");
const finished = new Set(["succeeded", "failed", "cancelled"]);

async function refresh() {
  const response = await fetch(box.dataset.url, { headers: { Accept: "application/json" }, credentials: "same-origin" });
  if (!response.ok) return;
  const run = await response.json();
  for (const element of box.querySelectorAll("[data-field]")) {
    const value = run[element.dataset.field];
    element.textContent = value === null || value === undefined ? "?" : String(value);
    if (element.dataset.field === "status") element.className = `status status-${run.status}`;
  }
  if (!finished.has(run.status)) setTimeout(refresh, 1000);
}

setTimeout(refresh, 1000);
