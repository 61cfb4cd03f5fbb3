"""The report page's script, inlined into the HTML file: draws the laid-out graph, zoom/pan, details, charts.

Plain browser JavaScript, no libraries. It reads the data from the page's `<script id="data">` block
(see data.py); the layout is computed in Python (layout.py), so the script only draws it.
"""

JS = r"""
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const SVG = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);
const BACKEND_COLORS = ["#7aa6e8", "#f0a35e", "#86c98a", "#c792ea", "#e8d36b", "#e87a8f"];
const backends = [...new Set(D.kernels.map((k) => k.label))];
let colorBy = "kernel";
let selected = -1;

function esc(s) {
  return String(s).replace(/[&<>"]/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
}
function ms(x) { return x === null || x === undefined ? "-" : x.toFixed(4) + " ms"; }
function kernelColor(k) {
  if (k < 0) return "#e4e6eb";
  if (colorBy === "backend") return BACKEND_COLORS[backends.indexOf(D.kernels[k].label) % BACKEND_COLORS.length];
  const hue = (k * 137.508) % 360;
  return "hsl(" + hue.toFixed(1) + ", 62%, " + (k % 2 ? 72 : 80) + "%)";
}
function el(name, attrs, parent) {
  const e = document.createElementNS(SVG, name);
  for (const [a, v] of Object.entries(attrs)) e.setAttribute(a, v);
  if (parent) parent.appendChild(e);
  return e;
}
function prim(i) {
  const p = {};
  D.primFields.forEach((f, k) => { p[f] = D.prims[i][k]; });
  return p;
}

// ---- graph drawing -------------------------------------------------------------------------
const svg = $("svg");
const view = el("g", {id: "viewport"}, svg);
const edgeLayer = el("g", {}, view);
const nodeLayer = el("g", {}, view);
const boxById = {};
const primNodes = [];
const recomputed = new Set(D.recomputed);

function edgePath(pts) {
  let d = "M" + pts[0] + "," + pts[1];
  for (let k = 2; k < pts.length; k += 2) {
    const x0 = pts[k - 2], y0 = pts[k - 1], x1 = pts[k], y1 = pts[k + 1], my = (y0 + y1) / 2;
    d += "C" + x0 + "," + my + " " + x1 + "," + my + " " + x1 + "," + y1;
  }
  return d;
}
const edgeEls = D.edges.map(([src, dst, value, pts]) => {
  const e = el("path", {class: "edge", d: edgePath(pts)}, edgeLayer);
  e.dataset.src = src; e.dataset.dst = dst;
  return e;
});
for (const [id, kind, label, x, y, w, h, ref] of D.boxes) {
  const g = el("g", {class: "node " + kind, transform: "translate(" + (x - w / 2) + "," + (y - h / 2) + ")"}, nodeLayer);
  const r = el("rect", {width: w, height: h, rx: kind === "prim" ? 3 : kind === "weight" ? 1 : 11}, g);
  const title = el("title", {}, g);
  boxById[id] = {x, y, w, h, g};
  if (kind === "prim") {
    const p = prim(ref);
    g.dataset.i = ref;
    if (recomputed.has(ref)) {
      g.classList.add("recomp");
      el("text", {x: w - 2, y: -2, "text-anchor": "end", class: "badge"}, g).textContent = "x" + p.kernels.length;
    }
    el("text", {x: w / 2, y: h / 2 + 4, "text-anchor": "middle"}, g).textContent = label;
    title.textContent = p.output + " = " + p.op + "  " + p.type + "\nONNX node: " + (p.origin || "-") +
      "\nkernel " + p.kernels.map((k) => D.kernels[k].id).join(", ");
    primNodes[ref] = g;
    g.addEventListener("click", (ev) => { ev.stopPropagation(); selectPrim(ref); });
  } else {
    if (label) el("text", {x: w / 2, y: h / 2 + 4, "text-anchor": "middle"}, g).textContent = label;
    title.textContent = (kind === "weight" ? "weight " : kind === "input" ? "graph input " : "graph output ") + ref;
  }
}
function paint() {
  D.prims.forEach((_, i) => {
    const ks = D.prims[i][5];
    primNodes[i].querySelector("rect").style.fill = kernelColor(ks.length ? ks[0] : -1);
  });
  document.querySelectorAll("#bars rect").forEach((r, k) => { r.style.fill = kernelColor(k); });
  drawLegend();
}

// ---- zoom and pan --------------------------------------------------------------------------
let tx = 0, ty = 0, scale = 1;
function apply() {
  view.setAttribute("transform", "translate(" + tx + "," + ty + ") scale(" + scale + ")");
  svg.classList.toggle("far", scale < 0.45);
}
function fit(x0, y0, x1, y1, maxScale) {
  const box = svg.getBoundingClientRect();
  const s = Math.min(box.width / (x1 - x0 + 40), box.height / (y1 - y0 + 40), maxScale);
  scale = s;
  tx = box.width / 2 - s * (x0 + x1) / 2;
  ty = box.height / 2 - s * (y0 + y1) / 2;
  apply();
}
function fitAll() { fit(0, 0, D.size[0], D.size[1], 2); }
function fitTop() {
  const box = svg.getBoundingClientRect();
  scale = Math.min(0.85, box.width / (D.size[0] + 40));
  tx = (box.width - scale * D.size[0]) / 2; ty = 10;
  apply();
}
function zoomAt(factor, cx, cy) {
  const s = Math.max(0.01, Math.min(8, scale * factor));
  tx = cx - (cx - tx) * s / scale; ty = cy - (cy - ty) * s / scale; scale = s;
  apply();
}
svg.addEventListener("wheel", (ev) => {
  ev.preventDefault();
  const r = svg.getBoundingClientRect();
  zoomAt(Math.exp(-ev.deltaY * 0.0015), ev.clientX - r.left, ev.clientY - r.top);
}, {passive: false});
let drag = null;
svg.addEventListener("pointerdown", (ev) => {
  if (ev.target.closest(".node")) return;
  drag = {x: ev.clientX, y: ev.clientY, tx, ty, moved: false};
  $("graph").classList.add("panning");
});
window.addEventListener("pointermove", (ev) => {
  if (!drag) return;
  tx = drag.tx + ev.clientX - drag.x; ty = drag.ty + ev.clientY - drag.y;
  drag.moved = drag.moved || Math.abs(ev.clientX - drag.x) + Math.abs(ev.clientY - drag.y) > 3;
  apply();
});
window.addEventListener("pointerup", () => {
  if (drag && !drag.moved) select(-1);
  drag = null; $("graph").classList.remove("panning");
});
function zoomToKernel(k) {
  let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
  for (const i of D.kernels[k].nodes) {
    const b = boxById["p" + i];
    x0 = Math.min(x0, b.x - b.w / 2); x1 = Math.max(x1, b.x + b.w / 2);
    y0 = Math.min(y0, b.y - b.h / 2); y1 = Math.max(y1, b.y + b.h / 2);
  }
  if (x0 < Infinity) fit(x0 - 60, y0 - 60, x1 + 60, y1 + 60, 1.5);
}

// ---- selection and details -----------------------------------------------------------------
function select(k, focusPrim) {
  selected = k;
  document.querySelectorAll(".node.sel, .edge.sel, #bars rect.sel").forEach((e) => e.classList.remove("sel"));
  svg.classList.toggle("dim", k >= 0);
  if (k < 0) { $("details").innerHTML = '<p class="muted">Click a primitive or a bar to see its kernel.</p>'; return; }
  const members = new Set(D.kernels[k].nodes.map((i) => "p" + i));
  members.forEach((id) => boxById[id].g.classList.add("sel"));
  edgeEls.forEach((e) => {
    if (members.has(e.dataset.dst) && (members.has(e.dataset.src) || e.dataset.src.startsWith("w:"))) {
      e.classList.add("sel");
      boxById[e.dataset.src].g.classList.add("sel");
    }
  });
  const bar = document.querySelectorAll("#bars rect")[k];
  if (bar) bar.classList.add("sel");
  $("details").innerHTML = kernelHtml(k, focusPrim);
}
function selectPrim(i) { const ks = D.prims[i][5]; select(ks.length ? ks[0] : -1, i); }

// A whole-model kernel has hundreds of ONNX nodes and primitives: the panel shows the head of each
// list and folds the rest, so the summary below stays in reach.
const LIST_HEAD = 12, PRIM_ROWS = 40;
function folded(items, sep, head) {
  if (items.length <= head) return items.join(sep);
  return items.slice(0, head).join(sep) + "<details><summary>" + (items.length - head) + " more</summary>" +
    items.slice(head).join(sep) + "</details>";
}

function slotText(k) {
  const [stage, lane, start, dur, threads] = D.schedule.slots[k];
  const beside = D.schedule.slots.filter((x) => x[0] === stage && x[1] !== lane).length;
  return threads + " of " + D.threads + " thread(s), stage " + (stage + 1) +
    (beside ? ", lane " + (lane + 1) + ", beside " + beside + " kernel(s)" : ", alone") + "; " + ms(dur) + " in the plan";
}
function kernelHtml(k, focusPrim) {
  const K = D.kernels[k];
  let h = "";
  if (focusPrim !== undefined) {
    const p = prim(focusPrim);
    h += '<p class="mono">#' + focusPrim + " " + esc(p.output) + " = " + esc(p.op) + "(" + esc(p.inputs.join(", ")) +
      ")<br>" + esc(p.type) + (p.attrs ? " [" + esc(p.attrs) + "]" : "") + "</p>";
    if (p.kernels.length > 1) {
      h += '<p><b style="color:#d0021b">Recomputed</b> by ' + p.kernels.map((j) =>
        '<a href="#" data-k="' + j + '">' + D.kernels[j].id + "</a>").join(", ") + "</p>";
    }
  }
  h += '<table class="kv">' +
    "<tr><td>kernel</td><td><span class=\"swatch\" style=\"background:" + kernelColor(k) + '"></span> <b>' +
    K.id + "</b> (" + (k + 1) + " of " + D.kernels.length + " in execution order)</td></tr>" +
    "<tr><td>backend</td><td>" + esc(K.label) + "</td></tr>" +
    "<tr><td>profiled time</td><td>" + ms(K.ms) + " (" + (100 * K.ms / D.totalMs).toFixed(1) + "% of plan)</td></tr>" +
    "<tr><td>primitives</td><td>" + K.nodes.length + " (time counted as " + esc(K.cls) + ")</td></tr>" +
    (D.schedule ? "<tr><td>schedule</td><td>" + slotText(k) + "</td></tr>" : "") +
    "<tr><td>ONNX nodes</td><td class=\"mono\">" + (folded(K.origins.map(esc), "<br>", LIST_HEAD) || "-") +
    "</td></tr>" +
    "<tr><td>reads / writes</td><td class=\"mono\">" + esc(K.inputs.join(", ")) + " &rarr; " +
    esc(K.outputs.join(", ")) + "</td></tr></table>";
  if (!K.region) {
    const rows = K.nodes.map((i) => {
      const p = prim(i);
      return "<tr><td>" + i + "</td><td>" + esc(p.op) + (p.kernels.length > 1 ? ' <b style="color:#d0021b">x' +
        p.kernels.length + "</b>" : "") + "</td><td>" + esc(p.output) + "</td><td>" + esc(p.type) + "</td></tr>";
    });
    h += '<table class="mono"><tr><th>#</th><th>op</th><th>output</th><th>type</th></tr>' +
      rows.slice(0, PRIM_ROWS).join("") + "</table>";
    if (rows.length > PRIM_ROWS) {
      h += "<details><summary>" + (rows.length - PRIM_ROWS) + ' more primitives</summary><table class="mono">' +
        rows.slice(PRIM_ROWS).join("") + "</table></details>";
    }
  }
  h += "<h3 style=\"margin-top:8px\">Candidates it beat</h3>";
  if (!K.rivals) return h + '<p class="muted">' + esc(D.db) + "</p>";
  const counts = Object.entries(K.rival_counts).map(([o, n]) => n + " " + o).join(", ");
  h += '<p class="muted">Candidates sharing its primitives, per backend: ' + (counts || "none") + ".</p>";
  if (D.db.includes("no profile records")) h += '<p class="verdict-rejected">' + esc(D.db) + "</p>";
  h += K.rivals.map((r) => '<div class="rival"><div><span class="mono" title="primitives ' + esc(r.nodes.join(",")) +
    '">' + esc(r.ops.join(" ")) + '</span> <span class="muted">on ' + esc(r.backend) + "</span> <b>" + ms(r.ms) +
    '</b></div><div class="verdict-' + r.outcome + '">' + esc(r.reason) + "</div></div>").join("");
  return h;
}
$("details").addEventListener("click", (ev) => {
  const a = ev.target.closest("a[data-k]");
  if (a) { ev.preventDefault(); select(+a.dataset.k); zoomToKernel(+a.dataset.k); }
});

// ---- kernel time chart ---------------------------------------------------------------------
function drawBars() {
  if (D.schedule) { drawLanes(); return; }
  const host = $("bars");
  const W = host.clientWidth || 600, H = host.clientHeight || 120;
  host.innerHTML = "";
  const s = el("svg", {width: W, height: H}, host);
  const n = D.kernels.length, maxMs = Math.max(...D.kernels.map((k) => k.ms), 1e-9);
  const bw = (W - 50) / Math.max(n, 1);
  el("text", {x: 0, y: 10, "font-size": 10, fill: "#5a6478"}, s).textContent = maxMs.toFixed(3) + " ms";
  el("line", {x1: 46, x2: W, y1: H - 14, y2: H - 14, stroke: "#b8bfcc"}, s);
  D.kernels.forEach((K, k) => {
    const h = Math.max(1, (H - 24) * K.ms / maxMs);
    const r = el("rect", {x: 48 + k * bw, y: H - 14 - h, width: Math.max(bw - (bw > 4 ? 1 : 0), 0.5), height: h}, s);
    el("title", {}, r).textContent = K.id + " " + K.label + " " + ms(K.ms) + " (" + K.nodes.length + " primitives)";
    r.addEventListener("click", () => { select(k); zoomToKernel(k); });
  });
  el("text", {x: 48, y: H - 2, "font-size": 10, fill: "#5a6478"}, s).textContent = "k0";
  el("text", {x: W, y: H - 2, "font-size": 10, fill: "#5a6478", "text-anchor": "end"}, s).textContent =
    "k" + (n - 1) + "  (execution order; total " + ms(D.totalMs) + ")";
  document.querySelectorAll("#bars rect").forEach((r, k) => { r.style.fill = kernelColor(k); });
  if (selected >= 0) document.querySelectorAll("#bars rect")[selected].classList.add("sel");
}

// The schedule as lanes over time: one row per lane, each kernel a bar from its start for its time
// (in-plan times the schedule was built from); rects are made in kernel order, as the bar chart's.
function drawLanes() {
  const host = $("bars");
  $("chart").querySelector("h3").textContent =
    "Schedule: kernels over time, a row per lane (click a bar; hover for its threads)";
  const W = host.clientWidth || 600, H = host.clientHeight || 120;
  host.innerHTML = "";
  const s = el("svg", {width: W, height: H}, host);
  const lanes = D.schedule.lanes, slots = D.schedule.slots;
  const end = Math.max(...slots.map((x) => x[2] + x[3]), 1e-9);
  const rowH = (H - 18) / lanes, x0 = 48, scale = (W - x0 - 4) / end;
  for (let j = 0; j < lanes; j++) {
    el("text", {x: 0, y: 4 + rowH * (j + 0.6), "font-size": 10, fill: "#5a6478"}, s).textContent = "lane " + (j + 1);
  }
  D.kernels.forEach((K, k) => {
    const [stage, lane, start, dur, threads] = slots[k];
    const r = el("rect", {x: x0 + start * scale, y: 2 + lane * rowH, width: Math.max(dur * scale - 0.5, 0.5),
                          height: rowH - 4}, s);
    el("title", {}, r).textContent = K.id + " " + K.label + " on " + threads + " thread(s), stage " + (stage + 1) +
      ", " + ms(dur);
    r.addEventListener("click", () => { select(k); zoomToKernel(k); });
  });
  el("line", {x1: x0, x2: W, y1: H - 14, y2: H - 14, stroke: "#b8bfcc"}, s);
  el("text", {x: x0, y: H - 2, "font-size": 10, fill: "#5a6478"}, s).textContent = "0";
  el("text", {x: W, y: H - 2, "font-size": 10, fill: "#5a6478", "text-anchor": "end"}, s).textContent =
    ms(end) + " (" + D.schedule.stages + " stages; " + D.schedule.concurrent + " kernels side by side)";
  document.querySelectorAll("#bars rect").forEach((r, k) => { r.style.fill = kernelColor(k); });
  if (selected >= 0) document.querySelectorAll("#bars rect")[selected].classList.add("sel");
}

// ---- side panels ---------------------------------------------------------------------------
function breakdownHtml(rows, note) {
  const max = Math.max(...rows.map((r) => r[1]), 1e-9);
  return "<table>" + rows.map(([name, v, extra]) => "<tr><td>" + esc(name) + '</td><td style="width:35%"><div class="hbar" ' +
    'style="width:' + (100 * v / max).toFixed(1) + '%"></div></td><td class="num">' + ms(v) + '</td><td class="num muted">' +
    (100 * v / D.totalMs).toFixed(1) + "%</td><td class=\"muted\">" + extra + "</td></tr>").join("") + "</table>" +
    (note ? '<p class="muted">' + note + "</p>" : "");
}
function fmt(v, digits) {
  if (v === null || v === undefined) return "-";
  if (typeof v !== "number") return esc(v);
  return Math.abs(v) >= 1e4 || (v !== 0 && Math.abs(v) < 1e-3) ? v.toExponential(2) : v.toFixed(digits);
}
function summaryHtml() {
  const S = D.summary, rows = [];
  const add = (name, value) => { if (value !== undefined) rows.push([name, value]); };
  add("primitives", S.primitives);
  add("candidates", S.candidates === undefined ? undefined : S.candidates + " (" + S.unique_candidates + " unique keys)");
  add("profiled", S.profiled_new === undefined ? undefined : S.profiled_new + " new, " + S.profiled_cached + " cached");
  add("kernels", D.kernels.length + " (" + backends.map((b) => b + " " + D.kernels.filter((k) => k.label === b).length).join(", ") + ")");
  if (S.measured_ms !== undefined) add("measured", ms(S.measured_ms) + " per run, end to end");
  add("predicted", ms(D.totalMs) + " (sum of kernel profiles)");
  if (S.why) add("why this plan", esc(S.why));
  if (S.solve_seconds !== undefined) add("solver", fmt(S.solve_seconds, 3) + " s, " +
    (S.optimal && !S.gap ? "proven optimal" : "gap " + fmt(S.gap, 2) + ", NOT proven optimal"));
  add("check error", S.max_rel_error === undefined ? undefined : fmt(S.max_rel_error, 2) + " max relative vs onnxruntime");
  const stages = ["load", "fission", "candidates", "calibrate", "profile", "select", "check", "optimize"]
    .filter((s) => S[s + "_seconds"] !== undefined).map((s) => s + " " + fmt(S[s + "_seconds"], 2) + " s");
  add("stage times", stages.join(", "));
  add("plan", esc(D.plan) + ", korch " + esc(D.version) + ", " + D.threads + " thread(s)");
  let h = '<table class="kv">' + rows.map(([k, v]) => "<tr><td>" + k + "</td><td>" + v + "</td></tr>").join("") + "</table>";
  if (D.bench) {
    const sys = D.bench.systems, base = sys.korch ? sys.korch.median_ms : null;
    h += "<h3 style=\"margin-top:8px\">Benchmark (bench.json)</h3><table><tr><th>system</th><th>median</th><th>p10-p90</th>" +
      "<th>korch speedup</th></tr>" + Object.entries(sys).map(([name, s]) => "<tr><td>" + esc(name) + '</td><td class="num">' +
      ms(s.median_ms) + '</td><td class="num muted">' + fmt(s.p10_ms, 3) + "-" + fmt(s.p90_ms, 3) + '</td><td class="num">' +
      (base && name !== "korch" ? "<b>" + (s.median_ms / base).toFixed(2) + "x</b>" : "") + "</td></tr>").join("") + "</table>";
  } else {
    h += '<p class="muted">Not benchmarked: <span class="mono">korch bench MODEL --plan ' + esc(D.plan) +
      "</span> writes bench.json into the plan.</p>";
  }
  return h;
}
function drawLegend() {
  let h = '<span><i style="background:#fff;border:2px solid #1d2433;border-radius:5px"></i>input</span>' +
    '<span><i style="background:#1d2433;border-radius:5px"></i>output</span>' +
    '<span><i style="background:#8c93a3;width:9px;height:9px"></i>weight</span>' +
    '<span><i style="background:#fff;border:2px dashed #d0021b"></i>recomputed</span>';
  if (colorBy === "backend") h += backends.map((b, k) => '<span><i style="background:' +
    BACKEND_COLORS[k % BACKEND_COLORS.length] + '"></i>' + esc(b) + "</span>").join("");
  else h += "<span>fill = kernel</span>";
  $("legend").innerHTML = h;
}
function search(text) {
  text = text.trim();
  if (!text) return;
  const k = D.kernels.findIndex((K) => K.id === text);
  if (k >= 0) { select(k); zoomToKernel(k); return; }
  const i = D.prims.findIndex((p) => p[1] === text || p[3] === text) >= 0 ?
    D.prims.findIndex((p) => p[1] === text || p[3] === text) :
    D.prims.findIndex((p) => p[1].includes(text) || p[3].includes(text) || p[0] === text);
  if (i < 0) { $("details").innerHTML = '<p class="muted">No primitive, ONNX node or kernel matches ' + esc(text) + "</p>"; return; }
  selectPrim(i);
  const b = boxById["p" + i];
  fit(b.x - 150, b.y - 150, b.x + 150, b.y + 150, 1.5);
}

$("summary").innerHTML = summaryHtml();
const B = D.breakdown;
$("per-backend").innerHTML = breakdownHtml(Object.entries(B.backend).map(([b, v]) => [b, v.ms, v.kernels + " kernels"]));
$("per-class").innerHTML = breakdownHtml(Object.entries(B["class"]).map(([c, v]) => [c, v.ms,
  v.kernels + " kernels, " + v.primitives + " primitives"]),
  "A kernel's time counts for the costliest class it holds (linear, then opaque ONNX nodes, reduce, " +
  "elementwise, layout).");
$("fit").addEventListener("click", fitAll);
$("top").addEventListener("click", fitTop);
$("zin").addEventListener("click", () => { const r = svg.getBoundingClientRect(); zoomAt(1.4, r.width / 2, r.height / 2); });
$("zout").addEventListener("click", () => { const r = svg.getBoundingClientRect(); zoomAt(1 / 1.4, r.width / 2, r.height / 2); });
$("colorby").addEventListener("change", (ev) => { colorBy = ev.target.value; paint(); if (selected >= 0) select(selected); });
$("find").addEventListener("keydown", (ev) => { if (ev.key === "Enter") search(ev.target.value); });
window.addEventListener("resize", drawBars);
drawBars();
paint();
fitTop();
select(-1);
document.body.dataset.ready = "1";
"""
