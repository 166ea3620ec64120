// The hosts page: what each configured host offers now (each asked with a time limit).
import { $, api, esc, every, main, page, setReady } from "./lib.js";

export async function hostsView(g) {
  main().innerHTML = `<p class="note loading">asking each host what it offers (each gets a few seconds)…</p>
      <table id="hosts"><thead><tr><th>host</th><th>type</th><th>address</th><th>status</th>
        <th>free</th><th>busy</th><th>accelerators</th><th>detail</th></tr></thead><tbody></tbody></table>`;
  async function load() {
    const data = await api("/api/hosts");
    if (g !== page.gen) return;
    const note = $("p.note", main());
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
