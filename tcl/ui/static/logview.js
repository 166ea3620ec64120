// A run's log box: its lines as they arrive on the log socket (coloured by level), a tab per
// node, and, while it holds no line, why: loading, "no output yet" (a running job may be
// compiling), or "no output".
import { $, FINAL, duration, page } from "./lib.js";
import { LevelReader } from "./loglevel.js";

const MAX_LOG_LINES = 50000;

// what an empty log box says, once what is kept has been read
function emptyText(phase, run) {
  if (phase === "loading") return "loading log…";
  if (phase === "ended" || (run && FINAL.has(run.state) && phase === "caught_up")) {
    return phase === "ended" ? "no output: the run printed nothing"
      : "no output kept here; asking its host for the rest…";
  }
  if (!run) return "no output yet";
  if (run.state === "running") {
    const since = run.duration_s != null ? ` for ${duration(run.duration_s)}` : "";
    return `compiling… / no output yet: running${since} `
      + "(a JAX job prints nothing until its first step is compiled)";
  }
  if (run.state === "provisioning") return "no output yet: starting on its host…";
  return `no output yet: ${run.state.replace("_", " ")}${run.message ? ` (${run.message})` : ""}`;
}

export class LogBox {
  // root holds #node-tabs, #log-empty and #run-logs; onEnd(state): the run ended
  constructor(root, runId, onEnd) {
    this.logs = $("#run-logs", root);
    this.empty = $("#log-empty", root);
    this.tabs = $("#node-tabs", root);
    this.runId = runId;
    this.onEnd = onEnd;
    this.levels = new LevelReader();
    this.nodeFilter = "all";
    this.nodes = 1;
    this.pending = [];
    this.flushTimer = null;
    this.lastSeq = 0;
    this.lines = 0; // the job's lines shown (tcl's own notes aside)
    this.phase = "loading"; // then "caught_up" (what is kept was sent), then "ended"
    this.run = null; // the run's item, from its detail
    this.ws = null;
    this.tabs.addEventListener("click", (ev) => this.pickTab(ev));
    this.showEmpty();
  }

  setRun(run) { this.run = run; this.showEmpty(); }

  showEmpty() {
    const none = !this.lines;
    this.empty.hidden = !none;
    if (!none) return;
    this.empty.textContent = emptyText(this.phase, this.run);
    this.empty.classList.toggle("loading", this.phase === "loading");
  }

  setNodes(n) {
    if (n <= this.nodes && this.tabs.childElementCount) return;
    this.nodes = Math.max(this.nodes, n);
    if (this.nodes < 2) return;
    const tabs = ["all", ...Array.from({ length: this.nodes }, (_, i) => String(i))];
    this.tabs.innerHTML = tabs.map((t) => `<button class="node-tab${t === this.nodeFilter ? " active" : ""}" data-node="${t}">${t === "all" ? "all" : "node " + t}</button>`).join("");
  }

  pickTab(ev) {
    const tab = ev.target.closest("button.node-tab");
    if (!tab) return;
    this.nodeFilter = tab.dataset.node;
    for (const b of this.tabs.querySelectorAll("button.node-tab")) b.classList.toggle("active", b === tab);
    for (const line of this.logs.children) line.hidden = this.nodeFilter !== "all" && line.dataset.node !== this.nodeFilter;
  }

  flush() {
    this.flushTimer = null;
    if (!this.pending.length) return;
    const logs = this.logs;
    const atBottom = logs.scrollHeight - logs.scrollTop - logs.clientHeight < 40;
    const frag = document.createDocumentFragment();
    for (const [node, text, cls] of this.pending) {
      if (cls !== "log-note") this.lines += 1;
      const div = document.createElement("div");
      div.className = cls;
      div.dataset.node = String(node);
      div.textContent = text;
      if (this.nodeFilter !== "all" && String(node) !== this.nodeFilter) div.hidden = true;
      frag.appendChild(div);
    }
    this.pending = [];
    logs.appendChild(frag);
    let extra = logs.childElementCount - MAX_LOG_LINES;
    while (extra-- > 0) logs.firstElementChild.remove();
    if (atBottom) logs.scrollTop = logs.scrollHeight;
    this.showEmpty();
  }

  add(node, text, cls) {
    this.pending.push([node, text, cls]);
    if (this.flushTimer === null) this.flushTimer = setTimeout(() => this.flush(), 30);
  }

  note(text) { this.add(-1, `[tcl] ${text}`, "log-note"); }

  onMessage(m) {
    if (m.caught_up !== undefined) { this.phase = "caught_up"; this.showEmpty(); return; }
    if (m.end !== undefined) {
      this.phase = "ended";
      this.showEmpty();
      this.onEnd(m.end);
      return;
    }
    if (m.reconnecting !== undefined) { this.note(`connection lost (${m.reconnecting}); reconnecting…`); return; }
    if (m.error !== undefined) { this.note(m.error); return; }
    if (m.seq) this.lastSeq = Math.max(this.lastSeq, m.seq);
    if (m.nodes > this.nodes) this.setNodes(m.nodes);
    if (m.kind === "log" && m.data != null) {
      const lines = m.data.split("\n");
      if (lines.length > 1 && lines[lines.length - 1] === "") lines.pop();
      for (const line of lines) {
        const level = this.levels.level(m.node, line);
        this.add(m.node, line, level ? `log-line lvl-${level}` : "log-line");
      }
    } else if (m.kind === "state" && m.state && this.nodes < 2 && FINAL.has(m.state)) {
      this.onEnd(m.state);
    }
  }

  connect(g) {
    if (g !== page.gen || this.phase === "ended") return;
    const proto = location.protocol === "https:" ? "wss" : "ws";
    const rid = encodeURIComponent(this.runId);
    const ws = new WebSocket(`${proto}://${location.host}/api/runs/${rid}/logs?after=${this.lastSeq}`);
    this.ws = ws;
    ws.onmessage = (ev) => { if (g === page.gen) this.onMessage(JSON.parse(ev.data)); };
    ws.onclose = () => { if (g === page.gen && this.phase !== "ended") setTimeout(() => this.connect(g), 3000); };
  }

  close() {
    if (this.ws) { this.ws.onclose = null; this.ws.close(); }
    clearTimeout(this.flushTimer);
  }
}
