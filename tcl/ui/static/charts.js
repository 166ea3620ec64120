// A run's metric charts: one uPlot chart per metric name, one series per (run, kind); uPlot
// is vendored beside this file (loaded as a classic script: window.uPlot). The charts are
// kept in window.tclCharts for the tests to read.
const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777",
  "#65a30d", "#475569", "#ea580c"];

window.tclCharts = {};

export function destroyCharts() {
  for (const [name, chart] of Object.entries(window.tclCharts)) {
    chart.destroy();
    delete window.tclCharts[name];
  }
}

// One uPlot chart per metric name; one series per (run, kind): "train loss", "val loss".
// A "val_" name joins its train twin's chart (tcl.jobs logs loss and val_loss): train vs val.
const chartOf = (name) => (name.startsWith("val_") && name.length > 4 ? name.slice(4) : name);
export class Charts {
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
    window.tclCharts[name] = new window.uPlot(opts, data, div);
  }
}
