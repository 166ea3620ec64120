// tcl ui: the dashboard page. Plain ES modules (no build step); uPlot is vendored beside them.
// Hash routes: #/runs, #/runs/<id>, #/matrices, #/matrices/<id>, #/hosts; one module a view:
// runs.js, run.js (+ logview.js, loglevel.js, charts.js), matrices.js (+ matrixgrid.js),
// hosts.js; lib.js holds what they share.
import { destroyCharts } from "./charts.js";
import { hostsView } from "./hosts.js";
import { api, banner, fail, main, page } from "./lib.js";
import { matricesView, matrixView } from "./matrices.js";
import { runView } from "./run.js";
import { runsView } from "./runs.js";

const VIEWS = { runs: runsView, run: runView, matrices: matricesView, matrix: matrixView, hosts: hostsView };
const NAV = { run: "runs", matrix: "matrices" }; // a view's tab in the header

function route() {
  page.gen += 1;
  for (const c of page.cleanups.splice(0)) { try { c(); } catch (e) { console.warn(e); } }
  destroyCharts();
  document.body.dataset.ready = "0";
  main().textContent = "";
  const [area, ...rest] = (location.hash.replace(/^#\/?/, "") || "runs").split("/");
  const id = rest.length ? decodeURIComponent(rest.join("/")) : null;
  let view = "runs";
  if (area === "runs" && id) view = "run";
  else if (area === "matrices") view = id ? "matrix" : "matrices";
  else if (area === "hosts") view = "hosts";
  document.body.dataset.view = view;
  for (const a of document.querySelectorAll("nav a")) {
    a.classList.toggle("active", a.id === `nav-${NAV[view] || view}`);
  }
  const g = page.gen;
  VIEWS[view](g, id).catch((e) => fail(g, e));
}

async function start() {
  if (location.search.includes("token=")) {
    // the cookie holds it now: keep it out of the address bar and the history
    history.replaceState(null, "", "/" + location.hash);
  }
  try {
    page.info = await api("/api/info");
    banner(`tcl ${page.info.version} · ${page.info.allow_actions ? "actions allowed" : "read-only"}`);
  } catch (e) { banner(e.message); }
  window.addEventListener("hashchange", route);
  route();
}

start();
