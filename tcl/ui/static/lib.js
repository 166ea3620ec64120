// tcl ui: what every view shares: the API call, escaping, timers that end with the view,
// and how times and durations are written.
// Every string from the server goes through esc() before it meets innerHTML; log lines are
// set with textContent.

export const RUN_STATES = ["pending", "queued", "provisioning", "running", "succeeded", "failed",
  "terminated", "waiting_retry"];
export const ENTRY_STATES = ["queued", "claimed", "running", "done", "failed", "cancelled"];
export const FINAL = new Set(["succeeded", "failed", "terminated"]);

export const $ = (sel, root = document) => root.querySelector(sel);
const ESC = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
export const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ESC[c]);
export const enc = (s) => esc(encodeURIComponent(String(s)));

// the page's state: gen is bumped on each route change (late answers of the old view are
// dropped), cleanups end the old view's timers and sockets
export const page = { gen: 0, cleanups: [], info: { version: "", allow_actions: false } };
export const main = () => $("#main");

export async function api(path, opts = {}) {
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

export function banner(text) { $("#banner").textContent = text; }

export function every(ms, fn) {
  // fn runs again ms after it finished (never two at once); stops with the view
  let timer = null;
  let stopped = false;
  const tick = async () => {
    try { await fn(); } catch (e) { console.warn(e); }
    if (!stopped) timer = setTimeout(tick, ms);
  };
  timer = setTimeout(tick, ms);
  page.cleanups.push(() => { stopped = true; clearTimeout(timer); });
}

export function debounce(fn, ms) {
  let t = null;
  return (...args) => { clearTimeout(t); t = setTimeout(() => fn(...args), ms); };
}

export function setReady(g) { if (g === page.gen) document.body.dataset.ready = "1"; }

export function fail(g, e) {
  if (g !== page.gen) return;
  for (const el of main().querySelectorAll(".loading")) el.hidden = true;
  main().insertAdjacentHTML("afterbegin", `<p class="error">${esc(e.message || e)}</p>`);
  setReady(g);
}

export function age(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  if (s >= 86400) return `${Math.floor(s / 86400)}d`;
  if (s >= 3600) return `${Math.floor(s / 3600)}h`;
  if (s >= 60) return `${Math.floor(s / 60)}m`;
  return `${s}s`;
}

export function duration(seconds) {
  if (seconds == null) return "–";
  const s = Math.round(seconds);
  if (s >= 86400) return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
  if (s >= 3600) return `${Math.floor(s / 3600)}h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
  return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, "0")}s`;
}

export function when(ts) { return ts ? new Date(ts * 1000).toLocaleString() : ""; }

export const count = (n) => Number(n).toLocaleString("en-US");

// where a run's nodes ran: "gpu-a GPU 0,1" per node (the host alone when none is known)
export function nodesHtml(r) {
  if (!r.nodes.length) return esc(r.host || "–");
  const unit = /^(v\d|tpu)/i.test(r.chip || "") ? "chip" : "GPU";
  return r.nodes.map((n) => `<span class="node">${esc(n.host)}</span>`
    + (n.accelerators.length ? ` <span class="accs">${unit} ${esc(n.accelerators.join(","))}</span>` : ""))
    .join("<br>");
}

export function nodesTitle(r) {
  return r.nodes.map((n) => `${n.host} task ${n.task}${n.accelerators.length ? " accelerators " + n.accelerators.join(",") : ""}`).join("\n");
}
