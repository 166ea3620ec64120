// One run's page: its state and outcome (duration, nodes, cause, last error), its metric
// charts, its log (logview.js), its attempts and what was submitted. It says "loading" until
// the run's detail comes, and the log box says why it is empty.
import { Charts } from "./charts.js";
import {
  $, FINAL, api, banner, duration, esc, every, main, nodesHtml, page, setReady, when,
} from "./lib.js";
import { LogBox } from "./logview.js";

const NO_METRICS = "no metrics yet (a job prints TCL_METRIC {json} lines)";

// an attempt's time to first step: a bar of its parts (waited, runner, env, job, JAX, state,
// compile, first step), each as wide as its share, named in its tooltip
function startBar(a) {
  if (!a.start.length) return "";
  const total = a.start.reduce((t, g) => t + g.seconds, 0) || 1;
  const segs = a.start.map((g) => `<span class="seg seg-${esc(g.phase)}" data-phase="${esc(g.phase)}"`
    + ` style="width:${(100 * g.seconds / total).toFixed(1)}%" title="${esc(g.phase)}: ${g.seconds.toFixed(2)} s"></span>`).join("");
  const label = a.to_first_step_s == null ? "no step yet" : `${a.to_first_step_s.toFixed(1)} s`;
  return `<span class="start-bar">${segs}</span> <span class="start-total">${esc(label)}</span>`;
}

function metaHtml(r, goodput) {
  const placed = r.nodes.length || r.host;
  const parts = [`<span>${esc(r.name)}</span>`, placed ? `<span class="nodes">${nodesHtml(r)}</span>` : "not placed"];
  if (r.backend) parts.push(`<span>${esc(r.backend)}</span>`);
  if (r.duration_s != null) parts.push(`<span title="from its first attempt's start">${r.live ? "running for" : "took"} ${duration(r.duration_s)}</span>`);
  if (r.cause) parts.push(`<span class="cause st-${esc(r.state)}">${esc(r.cause)}</span>`);
  if (goodput != null) parts.push(`<span id="goodput" title="its wall time spent stepping, after each attempt's first step">goodput ${(100 * goodput).toFixed(1)}%</span>`);
  const tone = r.state === "failed" ? "error" : "reason";
  if (r.error) parts.push(`<span class="msg ${tone}" title="${esc(r.error)}">${esc(r.error)}</span>`);
  else if (r.live && r.message) parts.push(`<span class="msg reason">${esc(r.message)}</span>`);
  parts.push(`<code>${esc(r.command)}</code>`);
  return parts.join(" · ");
}

function attemptRow(a) {
  const nodes = a.nodes.map((n) => `${n.host}${n.accelerators.length ? " [" + n.accelerators.join(",") + "]" : ""}`).join(", ");
  return `<tr data-attempt="${esc(a.attempt)}"><td>${esc(a.attempt)}</td><td>${esc(a.host)}</td>`
    + `<td>${esc(a.backend)}</td><td class="nodes">${esc(nodes)}</td>`
    + `<td class="state st-${esc(a.state)}">${esc(a.state)}</td><td class="cause">${esc(a.cause || "")}</td>`
    + `<td>${esc(a.pid ?? "")}</td><td>${esc(a.duration_s == null ? "" : duration(a.duration_s))}</td>`
    + `<td>${esc(when(a.created_at))}</td><td class="start">${startBar(a)}</td></tr>`;
}

export async function runView(g, runId) {
  const rid = encodeURIComponent(runId);
  main().innerHTML = `<div class="run-head"><h2><span id="run-title">${esc(runId)}</span>
        <span id="run-state" class="state"></span></h2><span id="run-actions"></span></div>
      <div id="run-meta" class="meta"><span id="run-loading" class="loading">loading run…</span></div>
      <section><h3>Metrics</h3>
        <div class="toolbar"><label><input type="checkbox" id="log-scale"> log scale</label>
          <input id="overlay-run" placeholder="overlay another run (id)" autocomplete="off">
          <button id="overlay-add">overlay</button> <span id="overlay-note"></span></div>
        <div id="charts"><p class="empty loading">loading metrics…</p></div></section>
      <section><h3>Logs</h3><div id="node-tabs"></div>
        <div id="log-box"><p id="log-empty" class="log-empty"></p><div id="run-logs"></div></div></section>
      <section><h3>Attempts</h3><table id="attempts"><thead><tr><th>attempt</th><th>host</th>
        <th>backend</th><th>nodes [accelerators]</th><th>state</th><th>ended by</th><th>pid</th><th>ran</th><th>created</th><th>to first step</th></tr></thead><tbody></tbody></table></section>
      <section><h3>Request</h3><pre id="run-spec"></pre></section>`;
  const stateEl = $("#run-state");

  function showState(state) {
    stateEl.textContent = state;
    stateEl.className = `state st-${state}`;
    const live = !FINAL.has(state);
    const btn = $("#stop-run");
    if (page.info.allow_actions && live && !btn) {
      $("#run-actions").innerHTML = '<button id="stop-run">stop</button>';
      $("#stop-run").addEventListener("click", stopRun);
    } else if (btn && !live) {
      btn.remove();
    }
  }

  async function stopRun() {
    const btn = $("#stop-run");
    btn.disabled = true;
    btn.textContent = "stopping…";
    try {
      const res = await api(`/api/runs/${rid}/stop`, { method: "POST" });
      if (g === page.gen) showState(res.run.state);
    } catch (e) { btn.disabled = false; btn.textContent = "stop"; banner(e.message); }
  }

  const logs = new LogBox(main(), runId, showState);
  page.cleanups.push(() => logs.close());

  function renderDetail(d) {
    showState(d.run.state);
    $("#run-meta").innerHTML = metaHtml(d.run, d.goodput);
    $("#attempts tbody").innerHTML = d.attempts.map(attemptRow).join("");
    const spec = JSON.stringify(d.request, null, 2);
    if ($("#run-spec").textContent !== spec) $("#run-spec").textContent = spec;
    logs.setNodes(d.nodes);
    logs.setRun(d.run);
  }

  // metrics
  const charts = new Charts($("#charts"), () => $("#log-scale").checked);
  const sources = [{ run: runId, label: "", after: 0 }];

  async function pollMetrics() {
    let changed = false;
    for (const src of sources) {
      for (let i = 0; i < 50; i += 1) { // pages of a long history, then the next poll
        const pg = await api(`/api/runs/${encodeURIComponent(src.run)}/metrics?after=${src.after}`);
        if (g !== page.gen) return;
        if (pg.points.length) { charts.add(src.label, pg.points); changed = true; }
        src.after = pg.next;
        if (!pg.more) break;
      }
    }
    if (changed) charts.render();
    const empty = $("#charts p.empty");
    if (empty) { empty.textContent = NO_METRICS; empty.classList.remove("loading"); }
  }

  $("#log-scale").addEventListener("change", () => charts.render(true));
  $("#overlay-add").addEventListener("click", async () => {
    const other = $("#overlay-run").value.trim();
    const note = $("#overlay-note");
    if (!other || sources.some((s) => s.run === other)) return;
    try {
      await api(`/api/runs/${encodeURIComponent(other)}`);
      sources.push({ run: other, label: other, after: 0 });
      note.textContent = `overlaid: ${sources.slice(1).map((s) => s.run).join(", ")}`;
      $("#overlay-run").value = "";
      await pollMetrics();
    } catch (e) { note.textContent = e.message; }
  });

  logs.connect(g); // the log comes while the rest loads
  renderDetail(await api(`/api/runs/${rid}`));
  if (g !== page.gen) return;
  await pollMetrics();
  setReady(g);
  every(1000, pollMetrics);
  every(2000, async () => {
    const d = await api(`/api/runs/${rid}`);
    if (g === page.gen) renderDetail(d);
  });
}
