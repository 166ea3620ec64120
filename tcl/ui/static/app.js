// tcl ui: the dashboard page. Plain ES (no build step); uPlot is vendored beside it.
// Hash routes: #/runs, #/runs/<id>, #/matrices, #/matrices/<id>, #/hosts.
// Every string from the server goes through esc() before it meets innerHTML; log lines are
// set with textContent.
"use strict";
(() => {
  const RUN_STATES = ["pending", "queued", "provisioning", "running", "succeeded", "failed",
    "terminated", "waiting_retry"];
  const ENTRY_STATES = ["queued", "claimed", "running", "done", "failed", "cancelled"];
  const FINAL = new Set(["succeeded", "failed", "terminated"]);
  const MAX_LOG_LINES = 50000;
  const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777",
    "#65a30d", "#475569", "#ea580c"];
  const $ = (sel, root = document) => root.querySelector(sel);
  const main = $("#main");
  const ESC = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
  const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ESC[c]);
  const enc = (s) => esc(encodeURIComponent(String(s)));

  let info = { version: "", allow_actions: false };
  let gen = 0; // bumped on each route change: late answers of the old view are dropped
  let cleanups = [];
  window.tclCharts = {};

  // ---- plumbing ---------------------------------------------------------------------------

  async function api(path, opts = {}) {
    // X-Tcl-UI: the server refuses a state change without it (another origin's page, which
    // shares the token cookie when it is on another loopback port, cannot add a header)
    const headers = { "X-Tcl-UI": "1", ...(opts.headers || {}) };
    const r = await fetch(path, { credentials: "same-origin", ...opts, headers });
    if (!r.ok) {
      let detail = r.statusText;
      try { detail = (await r.json()).detail || detail; } catch (_) { /* not JSON */ }
      if (r.status === 401) banner("the token is missing: open the URL that `tcl ui` printed");
      const err = new Error(`${r.status}: ${detail}`);
      err.status = r.status;
      throw err;
    }
    return r.json();
  }

  function banner(text) { $("#banner").textContent = text; }

  function every(ms, fn) {
    // fn runs again ms after it finished (never two at once); stops with the view
    let timer = null;
    let stopped = false;
    const tick = async () => {
      try { await fn(); } catch (e) { console.warn(e); }
      if (!stopped) timer = setTimeout(tick, ms);
    };
    timer = setTimeout(tick, ms);
    cleanups.push(() => { stopped = true; clearTimeout(timer); });
  }

  function debounce(fn, ms) {
    let t = null;
    return (...args) => { clearTimeout(t); t = setTimeout(() => fn(...args), ms); };
  }

  function setReady(g) { if (g === gen) document.body.dataset.ready = "1"; }

  function fail(g, e) {
    if (g !== gen) return;
    main.insertAdjacentHTML("afterbegin", `<p class="error">${esc(e.message || e)}</p>`);
    setReady(g);
  }

  function age(seconds) {
    const s = Math.max(0, Math.floor(seconds));
    if (s >= 86400) return `${Math.floor(s / 86400)}d`;
    if (s >= 3600) return `${Math.floor(s / 3600)}h`;
    if (s >= 60) return `${Math.floor(s / 60)}m`;
    return `${s}s`;
  }

  function duration(seconds) {
    if (seconds == null) return "–";
    const s = Math.round(seconds);
    if (s >= 86400) return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
    if (s >= 3600) return `${Math.floor(s / 3600)}h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
    return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, "0")}s`;
  }

  function when(ts) { return ts ? new Date(ts * 1000).toLocaleString() : ""; }

  // ---- router -----------------------------------------------------------------------------

  function route() {
    gen += 1;
    for (const c of cleanups.splice(0)) { try { c(); } catch (e) { console.warn(e); } }
    for (const [name, chart] of Object.entries(window.tclCharts)) {
      chart.destroy();
      delete window.tclCharts[name];
    }
    document.body.dataset.ready = "0";
    main.textContent = "";
    const parts = (location.hash.replace(/^#\/?/, "") || "runs").split("/");
    const [area, ...rest] = parts;
    const id = rest.length ? decodeURIComponent(rest.join("/")) : null;
    let view = "runs";
    if (area === "runs" && id) view = "run";
    else if (area === "matrices") view = id ? "matrix" : "matrices";
    else if (area === "hosts") view = "hosts";
    document.body.dataset.view = view;
    for (const a of document.querySelectorAll("nav a")) {
      a.classList.toggle("active", a.id === `nav-${view === "run" ? "runs" : view === "matrix" ? "matrices" : view}`);
    }
    const g = gen;
    const views = { runs: runsView, run: runView, matrices: matricesView, matrix: matrixView, hosts: hostsView };
    views[view](g, id).catch((e) => fail(g, e));
  }

  // ---- runs -------------------------------------------------------------------------------

  function runHaystack(r) {
    return `${r.run_id} ${r.name} ${r.command} ${r.host || ""}`.toLowerCase();
  }

  function runRow(r) {
    const stop = info.allow_actions && r.live
      ? `<button class="stop" data-run-id="${esc(r.run_id)}">stop</button>` : "";
    const chips = r.chips ? `${r.chips}${r.chip ? " × " + esc(r.chip) : ""}` : "";
    return `<tr data-run-id="${esc(r.run_id)}" data-state="${esc(r.state)}">`
      + `<td class="state st-${esc(r.state)}">${esc(r.state)}</td>`
      + `<td class="id"><a href="#/runs/${enc(r.run_id)}">${esc(r.run_id)}</a></td>`
      + `<td>${esc(r.name)}</td><td>${esc(r.host || "")}</td><td>${chips}</td>`
      + `<td class="cmd" title="${esc(r.command)}">${esc(r.command)}</td>`
      + `<td class="age" title="${esc(when(r.created_at))}">${age(r.age_s)}</td>`
      + `<td class="msg" title="${esc(r.message)}">${esc(r.message)}${r.exit_code != null && !r.message ? "exit " + esc(r.exit_code) : ""}</td>`
      + `<td>${stop}</td></tr>`;
  }

  function runSig(r) {
    return [r.state, r.host, r.message, r.exit_code, r.name, r.chips, age(r.age_s)].join("\u0001");
  }

  async function runsView(g) {
    main.innerHTML = `<div class="toolbar">
        <input id="runs-search" type="search" placeholder="filter: id, name, command, host" autocomplete="off">
        <select id="runs-state"><option value="">all states</option>${RUN_STATES.map((s) => `<option value="${s}">${s}</option>`).join("")}</select>
        <span id="runs-count"></span></div>
      <table id="runs"><thead><tr><th>state</th><th>run</th><th>name</th><th>host</th><th>chips</th>
        <th>command</th><th>age</th><th>message</th><th></th></tr></thead><tbody></tbody></table>`;
    const tbody = $("#runs tbody");
    const search = $("#runs-search");
    const stateSel = $("#runs-state");
    const count = $("#runs-count");
    const rows = new Map(); // run id -> {tr, sig, hay, state}
    let total = 0;

    function index() {
      for (const tr of tbody.rows) {
        const row = rows.get(tr.dataset.runId);
        if (row) row.tr = tr;
      }
    }

    function applyFilter() {
      const q = search.value.trim().toLowerCase();
      const st = stateSel.value;
      let shown = 0;
      for (const row of rows.values()) {
        const hide = (st && row.state !== st) || (q && !row.hay.includes(q));
        if (row.tr.hidden !== Boolean(hide)) row.tr.hidden = Boolean(hide);
        if (!hide) shown += 1;
      }
      count.textContent = `${shown}/${total}`;
    }

    async function load(first) {
      const data = await api("/api/runs?limit=10000");
      if (g !== gen) return;
      total = data.total;
      if (first) {
        tbody.innerHTML = data.runs.map(runRow).join("");
        for (const r of data.runs) rows.set(r.run_id, { tr: null, sig: runSig(r), hay: runHaystack(r), state: r.state });
        index();
      } else {
        const seen = new Set();
        let next = null; // the row after this one (runs come newest first)
        for (let i = data.runs.length - 1; i >= 0; i -= 1) {
          const r = data.runs[i];
          seen.add(r.run_id);
          const sig = runSig(r);
          let row = rows.get(r.run_id);
          if (!row || row.sig !== sig) {
            const tpl = document.createElement("template");
            tpl.innerHTML = runRow(r);
            const tr = tpl.content.firstElementChild;
            if (row) row.tr.replaceWith(tr);
            else tbody.insertBefore(tr, next);
            row = { tr, sig, hay: runHaystack(r), state: r.state };
            rows.set(r.run_id, row);
          }
          next = row.tr;
        }
        for (const [id, row] of rows) {
          if (!seen.has(id)) { row.tr.remove(); rows.delete(id); }
        }
      }
      applyFilter();
    }

    search.addEventListener("input", debounce(applyFilter, 150));
    stateSel.addEventListener("change", applyFilter);
    tbody.addEventListener("click", async (ev) => {
      const btn = ev.target.closest("button.stop");
      if (!btn) return;
      btn.disabled = true;
      btn.textContent = "stopping…";
      try {
        await api(`/api/runs/${encodeURIComponent(btn.dataset.runId)}/stop`, { method: "POST" });
        await load(false);
      } catch (e) { btn.textContent = "stop failed"; btn.title = e.message; }
    });
    await load(true);
    setReady(g);
    every(2000, () => load(false));
  }

  // ---- one run ----------------------------------------------------------------------------

  async function runView(g, runId) {
    const rid = encodeURIComponent(runId);
    main.innerHTML = `<div class="run-head"><h2><span id="run-title">${esc(runId)}</span>
        <span id="run-state" class="state"></span></h2><span id="run-actions"></span></div>
      <div id="run-meta" class="meta"></div>
      <section><h3>Metrics</h3>
        <div class="toolbar"><label><input type="checkbox" id="log-scale"> log scale</label>
          <input id="overlay-run" placeholder="overlay another run (id)" autocomplete="off">
          <button id="overlay-add">overlay</button> <span id="overlay-note"></span></div>
        <div id="charts"><p class="empty">no metrics yet (a job prints TCL_METRIC {json} lines)</p></div></section>
      <section><h3>Logs</h3><div id="node-tabs"></div><div id="run-logs"></div></section>
      <section><h3>Attempts</h3><table id="attempts"><thead><tr><th>attempt</th><th>host</th>
        <th>backend</th><th>state</th><th>ended by</th><th>created</th></tr></thead><tbody></tbody></table></section>
      <section><h3>Request</h3><pre id="run-spec"></pre></section>`;
    const stateEl = $("#run-state");
    let live = true;
    let nodes = 1;

    function showState(state) {
      stateEl.textContent = state;
      stateEl.className = `state st-${state}`;
      live = !FINAL.has(state);
      const btn = $("#stop-run");
      if (info.allow_actions && live && !btn) {
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
        if (g === gen) showState(res.run.state);
      } catch (e) { btn.disabled = false; btn.textContent = "stop"; banner(e.message); }
    }

    function renderDetail(d) {
      showState(d.run.state);
      const r = d.run;
      $("#run-meta").innerHTML = `<span>${esc(r.name)}</span> · <span>${esc(r.host || "not placed")}</span>`
        + (r.backend ? ` · <span>${esc(r.backend)}</span>` : "") + ` · <code>${esc(r.command)}</code>`
        + (r.message ? ` · <span class="msg">${esc(r.message)}</span>` : "");
      $("#attempts tbody").innerHTML = d.attempts.map((a) => `<tr data-attempt="${esc(a.attempt)}">`
        + `<td>${esc(a.attempt)}</td><td>${esc(a.host)}</td><td>${esc(a.backend)}</td>`
        + `<td class="state st-${esc(a.state)}">${esc(a.state)}</td><td class="cause">${esc(a.cause || "")}</td>`
        + `<td>${esc(when(a.created_at))}</td></tr>`).join("");
      const spec = JSON.stringify(d.request, null, 2);
      if ($("#run-spec").textContent !== spec) $("#run-spec").textContent = spec;
      setNodes(d.nodes);
    }

    // logs
    const logs = $("#run-logs");
    let nodeFilter = "all";
    let pending = [];
    let flushTimer = null;
    let lastSeq = 0;
    let ended = false;
    let ws = null;

    function setNodes(n) {
      if (n <= nodes && $("#node-tabs").childElementCount) return;
      nodes = Math.max(nodes, n);
      if (nodes < 2) return;
      const tabs = ["all", ...Array.from({ length: nodes }, (_, i) => String(i))];
      $("#node-tabs").innerHTML = tabs.map((t) => `<button class="node-tab${t === nodeFilter ? " active" : ""}" data-node="${t}">${t === "all" ? "all" : "node " + t}</button>`).join("");
    }

    $("#node-tabs").addEventListener("click", (ev) => {
      const tab = ev.target.closest("button.node-tab");
      if (!tab) return;
      nodeFilter = tab.dataset.node;
      for (const b of document.querySelectorAll("button.node-tab")) b.classList.toggle("active", b === tab);
      for (const line of logs.children) line.hidden = nodeFilter !== "all" && line.dataset.node !== nodeFilter;
    });

    function flush() {
      flushTimer = null;
      if (!pending.length) return;
      const atBottom = logs.scrollHeight - logs.scrollTop - logs.clientHeight < 40;
      const frag = document.createDocumentFragment();
      for (const [node, text, cls] of pending) {
        const div = document.createElement("div");
        div.className = cls;
        div.dataset.node = String(node);
        div.textContent = text;
        if (nodeFilter !== "all" && String(node) !== nodeFilter) div.hidden = true;
        frag.appendChild(div);
      }
      pending = [];
      logs.appendChild(frag);
      let extra = logs.childElementCount - MAX_LOG_LINES;
      while (extra-- > 0) logs.firstElementChild.remove();
      if (atBottom) logs.scrollTop = logs.scrollHeight;
    }

    function addLine(node, text, cls) {
      pending.push([node, text, cls]);
      if (flushTimer === null) flushTimer = setTimeout(flush, 30);
    }

    function onMessage(m) {
      if (m.end !== undefined) {
        ended = true;
        showState(m.end);
        return;
      }
      if (m.reconnecting !== undefined) { addLine(-1, `[tcl] connection lost (${m.reconnecting}); reconnecting…`, "log-note"); return; }
      if (m.error !== undefined) { addLine(-1, `[tcl] ${m.error}`, "log-note"); return; }
      if (m.seq) lastSeq = Math.max(lastSeq, m.seq);
      if (m.nodes > nodes) setNodes(m.nodes);
      if (m.kind === "log" && m.data != null) {
        const lines = m.data.split("\n");
        if (lines.length > 1 && lines[lines.length - 1] === "") lines.pop();
        const cls = m.stream === "stderr" ? "log-line stderr" : "log-line";
        for (const line of lines) addLine(m.node, line, cls);
      } else if (m.kind === "state" && m.state && nodes < 2 && FINAL.has(m.state)) {
        showState(m.state);
      }
    }

    function connect() {
      if (g !== gen || ended) return;
      const proto = location.protocol === "https:" ? "wss" : "ws";
      ws = new WebSocket(`${proto}://${location.host}/api/runs/${rid}/logs?after=${lastSeq}`);
      ws.onmessage = (ev) => { if (g === gen) onMessage(JSON.parse(ev.data)); };
      ws.onclose = () => { if (g === gen && !ended) setTimeout(connect, 3000); };
    }
    cleanups.push(() => { if (ws) { ws.onclose = null; ws.close(); } clearTimeout(flushTimer); });

    // metrics
    const charts = new Charts($("#charts"), () => $("#log-scale").checked);
    const sources = [{ run: runId, label: "", after: 0 }];

    async function pollMetrics() {
      let changed = false;
      for (const src of sources) {
        for (let i = 0; i < 50; i += 1) { // pages of a long history, then the next poll
          const page = await api(`/api/runs/${encodeURIComponent(src.run)}/metrics?after=${src.after}`);
          if (g !== gen) return;
          if (page.points.length) { charts.add(src.label, page.points); changed = true; }
          src.after = page.next;
          if (!page.more) break;
        }
      }
      if (changed) charts.render();
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

    renderDetail(await api(`/api/runs/${rid}`));
    if (g !== gen) return;
    await pollMetrics();
    setReady(g);
    connect();
    every(1000, pollMetrics);
    every(2000, async () => {
      const d = await api(`/api/runs/${rid}`);
      if (g === gen) renderDetail(d);
    });
  }

  // One uPlot chart per metric name; one series per (run, kind): "train loss", "val loss".
  // A "val_" name joins its train twin's chart (tcl.jobs logs loss and val_loss): train vs val.
  const chartOf = (name) => (name.startsWith("val_") && name.length > 4 ? name.slice(4) : name);
  class Charts {
    constructor(box, logScale) {
      this.box = box;
      this.logScale = logScale;
      this.metrics = new Map(); // name -> Map(seriesLabel -> Map(x -> y))
      this.dirty = new Set();
    }

    add(runLabel, points) {
      for (const p of points) {
        const x = p.step != null ? p.step : p.seq;
        for (const [metric, v] of Object.entries(p.values)) {
          const name = chartOf(metric);
          if (!this.metrics.has(name)) this.metrics.set(name, new Map());
          const series = this.metrics.get(name);
          const label = [runLabel, p.kind || "", metric].filter(Boolean).join(" ");
          if (!series.has(label)) series.set(label, new Map());
          series.get(label).set(x, v);
          this.dirty.add(name);
        }
      }
    }

    data(name) {
      const series = this.metrics.get(name);
      const xs = new Set();
      for (const pts of series.values()) for (const x of pts.keys()) xs.add(x);
      const xsorted = [...xs].sort((a, b) => a - b);
      const log = this.logScale();
      let n = 0;
      const ys = [...series.values()].map((pts) => xsorted.map((x) => {
        let v = pts.has(x) ? pts.get(x) : null;
        if (v != null && (!Number.isFinite(v) || (log && v <= 0))) v = null;
        if (v != null) n += 1;
        return v;
      }));
      return { data: [xsorted, ...ys], labels: [...series.keys()], n };
    }

    render(all = false) {
      const empty = this.box.querySelector("p.empty");
      if (empty && this.metrics.size) empty.remove();
      const names = all ? [...this.metrics.keys()] : [...this.dirty];
      this.dirty.clear();
      for (const name of names.sort()) this.draw(name, all);
    }

    draw(name, rebuild) {
      const { data, labels, n } = this.data(name);
      let div = [...this.box.querySelectorAll("div.chart")].find((d) => d.dataset.metric === name);
      if (!div) {
        div = document.createElement("div");
        div.className = "chart";
        div.dataset.metric = name;
        const after = [...this.box.querySelectorAll("div.chart")].find((d) => d.dataset.metric > name);
        this.box.insertBefore(div, after || null);
      }
      div.dataset.points = String(n);
      let chart = window.tclCharts[name];
      if (chart && (rebuild || chart.series.length !== labels.length + 1)) {
        chart.destroy();
        chart = null;
      }
      if (chart) { chart.setData(data); return; }
      div.textContent = "";
      const width = Math.max(320, Math.min(this.box.clientWidth || 640, 900) - 8);
      const opts = {
        title: name, width, height: 240,
        scales: { x: { time: false }, y: { distr: this.logScale() ? 3 : 1 } },
        series: [{ label: "step" }, ...labels.map((label, i) => ({
          label, stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: true,
        }))],
        axes: [{}, { size: 64 }],  // room for labels like 40,000
        legend: { live: true },
      };
      window.tclCharts[name] = new uPlot(opts, data, div);
    }
  }

  // ---- matrices ---------------------------------------------------------------------------

  function countsText(c) {
    return ENTRY_STATES.filter((s) => c[s]).map((s) => `<span class="st-${s}">${s} ${esc(c[s])}</span>`).join(" ");
  }

  async function matricesView(g) {
    main.innerHTML = `<table id="matrices"><thead><tr><th>matrix</th><th>entries</th>
      ${ENTRY_STATES.map((s) => `<th>${s}</th>`).join("")}<th>created</th></tr></thead><tbody></tbody></table>`;
    async function load() {
      const ms = await api("/api/matrices");
      if (g !== gen) return;
      const html = ms.map((m) => `<tr data-matrix-id="${esc(m.id)}"><td><a href="#/matrices/${enc(m.id)}">${esc(m.name)}</a></td>`
        + `<td>${esc(m.total)}</td>${ENTRY_STATES.map((s) => `<td class="st-${s}">${esc(m.counts[s] || 0)}</td>`).join("")}`
        + `<td>${esc(when(m.created_at))}</td></tr>`).join("");
      const tbody = $("#matrices tbody");
      if (tbody.innerHTML !== html) tbody.innerHTML = html;
      if (!ms.length && !$("#matrices-empty")) main.insertAdjacentHTML("beforeend", '<p id="matrices-empty" class="empty">no matrices (tcl matrix add makes one)</p>');
    }
    await load();
    setReady(g);
    every(3000, load);
  }

  function cellTitle(e) {
    const params = Object.entries(e.params).map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`).join(" ");
    return `${e.job_id}: ${params} — ${e.state}${e.error ? " — " + e.error : ""}`;
  }

  async function matrixView(g, id) {
    const mid = encodeURIComponent(id);
    main.innerHTML = `<div class="run-head"><h2>${esc(id)}</h2><span id="matrix-actions"></span></div>
      <div class="meta"><span id="matrix-counts"></span> · <span>ETA <span id="matrix-eta"></span></span>
        · <span id="matrix-rate"></span></div>
      <div id="matrix-legend">${ENTRY_STATES.map((s) => `<span class="cell-key st-bg-${s}"></span>${s}`).join(" ")}</div>
      <div id="matrix-grid"></div>
      <section><h3>Failures</h3><table id="matrix-failures"><tbody></tbody></table></section>`;
    if (info.allow_actions) {
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
    const grid = $("#matrix-grid");
    let cells = [];
    const cellState = [];

    async function load() {
      const m = await api(`/api/matrices/${mid}`);
      if (g !== gen) return;
      $("#matrix-counts").innerHTML = `${esc(m.total)} entries: ${countsText(m.counts)}`;
      $("#matrix-eta").textContent = m.eta_s == null ? "–" : duration(m.eta_s);
      $("#matrix-rate").textContent = `${m.runs_per_hour.toFixed(1)} runs/h`;
      if (cells.length !== m.entries.length) {
        grid.innerHTML = m.entries.map((e) => `<div class="cell st-bg-${esc(e.state)}" data-index="${esc(e.index)}" data-state="${esc(e.state)}"`
          + ` data-run-id="${esc(e.run_id || "")}" title="${esc(cellTitle(e))}"></div>`).join("");
        cells = Array.from(grid.children);
        m.entries.forEach((e, i) => { cellState[i] = `${e.state}|${cellTitle(e)}|${e.run_id}`; });
      } else {
        m.entries.forEach((e, i) => {
          const sig = `${e.state}|${cellTitle(e)}|${e.run_id}`;
          if (cellState[i] === sig) return;
          cellState[i] = sig;
          const c = cells[i];
          c.dataset.state = e.state;
          c.dataset.runId = e.run_id || "";
          c.className = `cell st-bg-${e.state}`;
          c.title = cellTitle(e);
        });
      }
      const failures = m.failures.map((f) => `<tr><td>${f.run_id ? `<a href="#/runs/${enc(f.run_id)}">${esc(f.job_id)}</a>` : esc(f.job_id)}</td>`
        + `<td class="msg">${esc(f.error)}</td></tr>`).join("");
      const tbody = $("#matrix-failures tbody");
      if (tbody.innerHTML !== failures) tbody.innerHTML = failures;
    }

    grid.addEventListener("click", (ev) => {
      const cell = ev.target.closest("div.cell");
      if (cell && cell.dataset.runId) location.hash = `#/runs/${encodeURIComponent(cell.dataset.runId)}`;
    });
    await load();
    setReady(g);
    every(2000, load);
  }

  // ---- hosts ------------------------------------------------------------------------------

  async function hostsView(g) {
    main.innerHTML = `<p class="note">asking each host what it offers (each gets a few seconds)…</p>
      <table id="hosts"><thead><tr><th>host</th><th>type</th><th>address</th><th>status</th>
        <th>free</th><th>busy</th><th>accelerators</th><th>detail</th></tr></thead><tbody></tbody></table>`;
    async function load() {
      const data = await api("/api/hosts");
      if (g !== gen) return;
      const note = $("p.note", main);
      if (note) note.remove();
      $("#hosts tbody").innerHTML = data.hosts.map((h) => {
        const status = h.reachable === false ? "unreachable" : h.reachable ? "ok" : "unknown";
        const accs = h.accelerators.map((a) => `<span class="acc ${a.free ? "free" : "busy"}" title="${esc(a.chip)} #${esc(a.index)}${a.task_id ? " — " + esc(a.task_id) : ""}">${esc(a.chip)}</span>`).join("");
        return `<tr data-host="${esc(h.name)}" data-reachable="${esc(status)}"><td>${esc(h.name)}</td><td>${esc(h.type)}</td>`
          + `<td>${esc(h.address)}</td><td class="${status === "ok" ? "ok" : "error"}">${status}</td>`
          + `<td class="free">${esc(h.free)}</td><td class="busy">${esc(h.busy)}</td><td>${accs}</td>`
          + `<td class="${h.reachable === false ? "error" : "detail"}">${esc(h.detail)}</td></tr>`;
      }).join("");
    }
    await load();
    setReady(g);
    every(15000, load);
  }

  // ---- start ------------------------------------------------------------------------------

  async function start() {
    if (location.search.includes("token=")) {
      // the cookie holds it now: keep it out of the address bar and the history
      history.replaceState(null, "", "/" + location.hash);
    }
    try {
      info = await api("/api/info");
      banner(`tcl ${info.version} · ${info.allow_actions ? "actions allowed" : "read-only"}`);
    } catch (e) { banner(e.message); }
    window.addEventListener("hashchange", route);
    route();
  }

  start();
})();
