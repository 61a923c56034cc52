// History: the ticked runs go to the compare page as ?runs=1,2,3.
const form = document.getElementById("compare-form");
form.addEventListener("submit", (event) => {
  const ids = [...form.querySelectorAll("tbody input[type=checkbox]:checked")].map((c) => c.value);
  if (ids.length === 0) {
    event.preventDefault();
    return;
  }
  document.getElementById("compare-runs").value = ids.join(",");
});
