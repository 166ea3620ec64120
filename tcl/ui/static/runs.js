// The runs page: a summary bar (runs per state; a click filters), then the table, running and
// failed runs first (the server orders them), then the rest newest first.
import {
  $, RUN_STATES, age, api, count, debounce, duration, enc, esc, every, main, nodesHtml,
  nodesTitle, page, setReady, when,
} from "./lib.js";

// the summary's order: what runs now, what waits, what ended
const SUMMARY = ["running", "provisioning", "queued", "waiting_retry", "pending", "failed",
  "terminated", "succeeded"];
const ALWAYS = new Set(["running", "failed"]);
const WAITING = new Set(["pending", "queued", "waiting_retry"]);

function haystack(r) {
  return `${r.run_id} ${r.name} ${r.command} ${r.host || ""} ${r.nodes.map((n) => n.host).join(" ")}`.toLowerCase();
}

// the last column: a failed run's last error line, or why a waiting run waits
function errorCell(r) {
  if (r.error) return `<td class="last-error msg" title="${esc(r.error)}">${esc(r.error)}</td>`;
  if (WAITING.has(r.state) && r.message) return `<td class="last-error msg reason" title="${esc(r.message)}">${esc(r.message)}</td>`;
  return '<td class="last-error msg"></td>';
}

function row(r) {
  const stop = page.info.allow_actions && r.live
    ? `<button class="stop" data-run-id="${esc(r.run_id)}">stop</button>` : "";
  const chips = r.chips ? `${r.chips}${r.chip ? " × " + esc(r.chip) : ""}` : "";
  return `<tr data-run-id="${esc(r.run_id)}" data-state="${esc(r.state)}">`
    + `<td class="state st-${esc(r.state)}">${esc(r.state)}</td>`
    + `<td class="id"><a href="#/runs/${enc(r.run_id)}">${esc(r.run_id)}</a></td>`
    + `<td class="name">${esc(r.name)}</td>`
    + `<td class="nodes" title="${esc(nodesTitle(r))}">${nodesHtml(r)}</td><td class="chips">${chips}</td>`
    + `<td class="duration">${duration(r.duration_s)}</td>`
    + `<td class="age" title="${esc(when(r.created_at))}">${age(r.age_s)}</td>`
    + `<td class="cause">${esc(r.cause)}</td>${errorCell(r)}`
    + `<td class="cmd" title="${esc(r.command)}">${esc(r.command)}</td>`
    + `<td>${stop}</td></tr>`;
}

function sig(r) {
  return [r.state, r.host, r.message, r.name, r.chips, age(r.age_s), duration(r.duration_s),
    r.cause, r.error, JSON.stringify(r.nodes)].join("\u0001");
}

function summaryHtml(counts, total, selected) {
  const parts = SUMMARY.filter((s) => ALWAYS.has(s) || counts[s]).map((s) => {
    const n = counts[s] || 0;
    const on = selected === s ? " active" : "";
    return `<button class="sum st-${s}${on}" data-state="${s}" data-count="${n}" title="show only the ${s} runs"><b>${count(n)}</b> ${s.replace("_", " ")}</button>`;
  });
  return `${parts.join("")}<span class="sum-total">${count(total)} run${total === 1 ? "" : "s"}</span>`;
}

export async function runsView(g) {
  main().innerHTML = `<div id="runs-summary" class="summary"><span class="loading">loading runs…</span></div>
      <div class="toolbar">
        <input id="runs-search" type="search" placeholder="filter: id, name, command, host" autocomplete="off">
        <select id="runs-state"><option value="">all states</option>${RUN_STATES.map((s) => `<option value="${s}">${s}</option>`).join("")}</select>
        <span id="runs-count"></span></div>
      <table id="runs"><thead><tr><th>state</th><th>run</th><th>name</th><th>node / GPU</th>
        <th>chips</th><th>duration</th><th>age</th><th>cause</th><th>last error</th><th>command</th><th></th></tr></thead>
        <tbody></tbody></table>`;
  const tbody = $("#runs tbody");
  const search = $("#runs-search");
  const stateSel = $("#runs-state");
  const counter = $("#runs-count");
  const summary = $("#runs-summary");
  const rows = new Map(); // run id -> {tr, sig, hay, state}
  let total = 0;
  let counts = {};

  function applyFilter() {
    const q = search.value.trim().toLowerCase();
    const st = stateSel.value;
    let shown = 0;
    for (const r of rows.values()) {
      const hide = Boolean((st && r.state !== st) || (q && !r.hay.includes(q)));
      if (r.tr.hidden !== hide) r.tr.hidden = hide;
      if (!hide) shown += 1;
    }
    counter.textContent = `${shown}/${total}`;
    summary.innerHTML = summaryHtml(counts, total, st);
  }

  function reorder(ids) {
    // the server's order (a run that ended moves from the top to its place among the rest)
    let i = 0;
    let same = tbody.rows.length === ids.length;
    for (const tr of tbody.rows) {
      if (!same) break;
      same = tr.dataset.runId === ids[i];
      i += 1;
    }
    if (same) return;
    const frag = document.createDocumentFragment();
    for (const id of ids) frag.appendChild(rows.get(id).tr);
    tbody.appendChild(frag);
  }

  async function load() {
    const data = await api("/api/runs?limit=10000&order=attention");
    if (g !== page.gen) return;
    total = data.total;
    counts = data.counts;
    if (!rows.size) { // the first load: one parse for all the rows
      tbody.innerHTML = data.runs.map(row).join("");
      data.runs.forEach((r, i) => rows.set(r.run_id, { tr: tbody.rows[i], sig: sig(r), hay: haystack(r), state: r.state }));
    }
    const seen = new Set();
    const tpl = document.createElement("template");
    for (const r of data.runs) {
      seen.add(r.run_id);
      const s = sig(r);
      const old = rows.get(r.run_id);
      if (old && old.sig === s) continue;
      tpl.innerHTML = row(r);
      const tr = tpl.content.firstElementChild;
      if (old) old.tr.replaceWith(tr);
      rows.set(r.run_id, { tr, sig: s, hay: haystack(r), state: r.state });
    }
    for (const [id, r] of rows) {
      if (!seen.has(id)) { r.tr.remove(); rows.delete(id); }
    }
    reorder(data.runs.map((r) => r.run_id));
    applyFilter();
  }

  search.addEventListener("input", debounce(applyFilter, 150));
  stateSel.addEventListener("change", applyFilter);
  summary.addEventListener("click", (ev) => {
    const btn = ev.target.closest("button.sum");
    if (!btn) return;
    stateSel.value = stateSel.value === btn.dataset.state ? "" : btn.dataset.state;
    applyFilter();
  });
  tbody.addEventListener("click", async (ev) => {
    const btn = ev.target.closest("button.stop");
    if (!btn) return;
    btn.disabled = true;
    btn.textContent = "stopping…";
    try {
      await api(`/api/runs/${encodeURIComponent(btn.dataset.runId)}/stop`, { method: "POST" });
      await load();
    } catch (e) { btn.textContent = "stop failed"; btn.title = e.message; }
  });
  await load();
  setReady(g);
  every(2000, load);
}
