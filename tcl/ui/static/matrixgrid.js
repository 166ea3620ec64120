// A matrix's entries: a grid (one square per entry, coloured by state, grouped by one
// manifest field, each group labelled with its value and counts; a square is labelled with its
// fields where there is room, and always in its tooltip), and a table with a column per field.
import { ENTRY_STATES, count, enc, esc } from "./lib.js";

const LABELLED_MAX = 120; // up to this many entries, each square shows its fields as text

export function fmt(v) {
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : String(Number(v.toPrecision(6)));
  return typeof v === "string" ? v : JSON.stringify(v);
}

function fieldsText(e, skip) {
  return Object.entries(e.params).filter(([k]) => k !== skip).map(([k, v]) => `${k}=${fmt(v)}`).join(" ");
}

export function cellTitle(e) {
  return `${e.job_id}: ${fieldsText(e, null)} — ${e.state}${e.error ? " — " + e.error : ""}`;
}

function countsHtml(c) {
  return ENTRY_STATES.filter((s) => c[s]).map((s) => `<span class="st-${s}">${s} ${count(c[s])}</span>`).join(" · ");
}

export class MatrixGrid {
  constructor(grid, table) {
    this.grid = grid;
    this.table = table;
    this.by = ""; // the field entries are grouped by ("" none)
    this.key = null; // what was drawn: entry count, fields, grouping
    this.sigs = [];
    this.cells = new Map(); // entry index -> its square
    this.rows = new Map(); // entry index -> its table row
  }

  cell(e, labelled) {
    const title = esc(cellTitle(e));
    const text = labelled ? esc(fieldsText(e, this.by) || e.job_id) : "";
    return `<div class="cell${labelled ? " labelled" : ""} st-bg-${esc(e.state)}" data-index="${esc(e.index)}" data-state="${esc(e.state)}"`
      + ` data-run-id="${esc(e.run_id || "")}" title="${title}" aria-label="${title}">${text}</div>`;
  }

  row(e, fields) {
    const run = e.run_id ? `<a href="#/runs/${enc(e.run_id)}">${esc(e.run_id)}</a>` : "";
    return `<tr data-index="${esc(e.index)}"><td>${esc(e.index)}</td><td>${esc(e.job_id)}</td>`
      + `<td class="state st-${esc(e.state)}">${esc(e.state)}</td>`
      + fields.map((f) => `<td>${esc(f in e.params ? fmt(e.params[f]) : "")}</td>`).join("")
      + `<td class="id">${run}</td><td class="msg" title="${esc(e.error)}">${esc(e.error)}</td></tr>`;
  }

  groups(m) {
    const out = new Map(); // value -> entries, first seen first
    for (const e of m.entries) {
      const v = this.by ? fmt(e.params[this.by] ?? "–") : "";
      if (!out.has(v)) out.set(v, []);
      out.get(v).push(e);
    }
    return out;
  }

  groupLabel(v, entries) {
    const c = {};
    for (const e of entries) c[e.state] = (c[e.state] || 0) + 1;
    const name = this.by ? `${esc(this.by)} = ${esc(v)}` : "all entries";
    return `<span class="group-name">${name}</span> <span class="group-count">${count(entries.length)} entries: ${countsHtml(c)}</span>`;
  }

  render(m) {
    const key = `${m.entries.length}|${m.fields.join(",")}|${this.by}`;
    if (key !== this.key) { this.draw(m); this.key = key; return; }
    const tpl = document.createElement("template");
    for (const e of m.entries) {
      const sig = `${e.state}|${e.run_id}|${e.error}`;
      if (this.sigs[e.index] === sig) continue;
      this.sigs[e.index] = sig;
      const labelled = m.entries.length <= LABELLED_MAX;
      tpl.innerHTML = this.cell(e, labelled);
      const cell = tpl.content.firstElementChild;
      this.cells.get(e.index).replaceWith(cell);
      this.cells.set(e.index, cell);
      tpl.innerHTML = `<table><tbody>${this.row(e, m.fields)}</tbody></table>`;
      const tr = tpl.content.querySelector("tr");
      this.rows.get(e.index).replaceWith(tr);
      this.rows.set(e.index, tr);
    }
    for (const [v, entries] of this.groups(m)) {
      const group = [...this.grid.children].find((d) => d.dataset.group === v);
      const label = group && group.querySelector(".group-label");
      const html = this.groupLabel(v, entries);
      if (label && label.innerHTML !== html) label.innerHTML = html;
    }
  }

  draw(m) {
    const labelled = m.entries.length <= LABELLED_MAX;
    const groups = this.groups(m);
    this.grid.innerHTML = [...groups].map(([v, entries]) => `<div class="group" data-group="${esc(v)}">`
      + `<div class="group-label">${this.groupLabel(v, entries)}</div>`
      + `<div class="cells">${entries.map((e) => this.cell(e, labelled)).join("")}</div></div>`).join("");
    this.table.innerHTML = `<thead><tr><th>#</th><th>job</th><th>state</th>${m.fields.map((f) => `<th>${esc(f)}</th>`).join("")}`
      + `<th>run</th><th>error</th></tr></thead><tbody>${[...groups.values()].flat().map((e) => this.row(e, m.fields)).join("")}</tbody>`;
    this.cells = new Map([...this.grid.querySelectorAll(".cell")].map((c) => [Number(c.dataset.index), c]));
    this.rows = new Map([...this.table.tBodies[0].rows].map((r) => [Number(r.dataset.index), r]));
    this.sigs = [];
    for (const e of m.entries) this.sigs[e.index] = `${e.state}|${e.run_id}|${e.error}`;
  }
}
