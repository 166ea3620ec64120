// The matrices (sweeps) page, and one matrix: its progress, its entries (matrixgrid.js),
// its failures, requeueing them.
import {
  $, ENTRY_STATES, api, count, duration, enc, esc, every, main, page, setReady, when,
} from "./lib.js";
import { MatrixGrid } from "./matrixgrid.js";

function countsText(c) {
  return ENTRY_STATES.filter((s) => c[s]).map((s) => `<span class="st-${s}">${s} ${count(c[s])}</span>`).join(" ");
}

export async function matricesView(g) {
  main().innerHTML = `<table id="matrices"><thead><tr><th>matrix</th><th>entries</th>
      ${ENTRY_STATES.map((s) => `<th>${s}</th>`).join("")}<th>created</th></tr></thead><tbody></tbody></table>`;
  async function load() {
    const ms = await api("/api/matrices");
    if (g !== page.gen) return;
    const html = ms.map((m) => `<tr data-matrix-id="${esc(m.id)}"><td><a href="#/matrices/${enc(m.id)}">${esc(m.name)}</a></td>`
      + `<td>${esc(m.total)}</td>${ENTRY_STATES.map((s) => `<td class="st-${s}">${esc(m.counts[s] || 0)}</td>`).join("")}`
      + `<td>${esc(when(m.created_at))}</td></tr>`).join("");
    const tbody = $("#matrices tbody");
    if (tbody.innerHTML !== html) tbody.innerHTML = html;
    if (!ms.length && !$("#matrices-empty")) main().insertAdjacentHTML("beforeend", '<p id="matrices-empty" class="empty">no matrices (tcl matrix add makes one)</p>');
  }
  await load();
  setReady(g);
  every(3000, load);
}

export async function matrixView(g, id) {
  const mid = encodeURIComponent(id);
  main().innerHTML = `<div class="run-head"><h2>${esc(id)}</h2><span id="matrix-actions"></span></div>
      <div class="meta"><span id="matrix-counts"><span class="loading">loading matrix…</span></span>
        · <span>ETA <span id="matrix-eta"></span></span> · <span id="matrix-rate"></span></div>
      <div class="toolbar"><label>group by <select id="matrix-group"><option value="">none</option></select></label>
        <span id="matrix-legend">${ENTRY_STATES.map((s) => `<span class="cell-key st-bg-${s}"></span>${s}`).join(" ")}
        · one square per entry, in the order added: hover for its fields, click for its run</span></div>
      <div id="matrix-grid"></div>
      <section><h3>Entries</h3><div class="scroll"><table id="matrix-entries"></table></div></section>
      <section><h3>Failures</h3><table id="matrix-failures"><tbody></tbody></table></section>`;
  if (page.info.allow_actions) {
    $("#matrix-actions").innerHTML = '<button id="requeue-failed">requeue failed</button> <span id="requeue-note"></span>';
    $("#requeue-failed").addEventListener("click", async () => {
      const btn = $("#requeue-failed");
      btn.disabled = true;
      try {
        const res = await api(`/api/matrices/${mid}/requeue`, { method: "POST" });
        $("#requeue-note").textContent = `queued ${res.requeued} again; ${res.scheduler}`;
        await load();
      } catch (e) { $("#requeue-note").textContent = e.message; }
      btn.disabled = false;
    });
  }
  const grid = new MatrixGrid($("#matrix-grid"), $("#matrix-entries"));
  const groupSel = $("#matrix-group");
  let last = null;

  async function load() {
    const m = await api(`/api/matrices/${mid}`);
    if (g !== page.gen) return;
    last = m;
    $("#matrix-counts").innerHTML = `${esc(count(m.total))} entries: ${countsText(m.counts)}`;
    $("#matrix-eta").textContent = m.eta_s == null ? "–" : duration(m.eta_s);
    $("#matrix-rate").textContent = `${m.runs_per_hour.toFixed(1)} runs/h`;
    const options = ["", ...m.fields];
    if ([...groupSel.options].map((o) => o.value).join("\u0001") !== options.join("\u0001")) {
      groupSel.innerHTML = options.map((f) => `<option value="${esc(f)}">${f ? esc(f) : "none"}</option>`).join("");
      groupSel.value = grid.by;
    }
    grid.render(m);
    const failures = m.failures.map((f) => `<tr><td>${f.run_id ? `<a href="#/runs/${enc(f.run_id)}">${esc(f.job_id)}</a>` : esc(f.job_id)}</td>`
      + `<td class="msg">${esc(f.error)}</td></tr>`).join("");
    const tbody = $("#matrix-failures tbody");
    if (tbody.innerHTML !== failures) tbody.innerHTML = failures;
  }

  groupSel.addEventListener("change", () => {
    grid.by = groupSel.value;
    if (last) grid.render(last);
  });
  $("#matrix-grid").addEventListener("click", (ev) => {
    const cell = ev.target.closest("div.cell");
    if (cell && cell.dataset.runId) location.hash = `#/runs/${encodeURIComponent(cell.dataset.runId)}`;
  });
  await load();
  setReady(g);
  every(2000, load);
}
