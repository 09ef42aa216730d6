// Hand-written SVG charts: stacked bars, pie, and a zoomable line chart (a few KB instead of a
// chart library). Labels are text nodes; tooltips are SVG <title> text.
import { s, h, mount, PALETTE, fmtNum } from "./dom";

export interface Series { name: string; values: number[]; color?: string }

const W0 = 640, H = 260, PAD = { l: 64, r: 12, t: 12, b: 36 };

/** Builds an SVG at the width its box has (one SVG unit = one CSS pixel, so 11 px text stays 11 px
 * on any screen) and again when the box is resized. */
function responsive(build: (w: number) => SVGElement, initial = W0): HTMLElement {
  const holder = h("div", { class: "chart-holder" });
  let cur = 0;
  const draw = (w: number) => {
    w = Math.max(260, Math.round(w));
    if (Math.abs(w - cur) < 2) return;
    cur = w;
    mount(holder, build(w));
  };
  draw(initial);
  if (typeof ResizeObserver !== "undefined") new ResizeObserver(() => { if (holder.clientWidth) draw(holder.clientWidth); }).observe(holder);
  return holder;
}

function niceMax(v: number): number {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

/** The top of an axis of 4 ticks for values up to `v`, each tick a round number of the unit its labels use:
 * `base` 1024 for bytes (ticks at 1, 2, 3, 4 GiB, not 1.16, 2.33, 3.49 GiB), else 1. */
export function niceTop(v: number, base = 1): number {
  if (!(v > 0)) return 1;
  const unit = base > 1 ? Math.pow(base, Math.max(0, Math.floor(Math.log(v) / Math.log(base)))) : 1;
  const step = v / unit / 4;
  const p = Math.pow(10, Math.floor(Math.log10(step)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p * (1 + 1e-9) >= step) return 4 * m * p * unit;
  return 40 * p * unit;
}

/** A label cut to `n` characters. */
const short = (t: string, n: number) => (t.length > n ? t.slice(0, n - 1) + "…" : t);

/** Every how many bars an axis label fits without overlapping its neighbours (11 px text). */
export function labelStride(labels: string[], slotW: number): number {
  const widest = Math.max(1, ...labels.map((l) => l.length)) * 6.6 + 6;
  return Math.max(1, Math.ceil(widest / Math.max(1e-6, slotW)));
}

function legend(items: { name: string; color: string }[]): HTMLElement {
  return h("div", { class: "legend" }, items.map((it) =>
    h("span", { class: "legend-item" }, h("span", { class: "swatch", style: `background:${it.color}` }), it.name)));
}

/** Stacked vertical bars: one bar per category, one stack segment per series. */
export function stackedBars(categories: string[], series: Series[], fmt: (v: number) => string, opts: { title?: string } = {}): HTMLElement {
  const totals = categories.map((_, i) => series.reduce((a, se) => a + (se.values[i] || 0), 0));
  const ymax = niceMax(Math.max(0, ...totals));
  const colors = series.map((se, i) => se.color || PALETTE[i % PALETTE.length]);
  const build = (W: number) => {
  const iw = W - PAD.l - PAD.r, ih = H - PAD.t - PAD.b;
  const bw = categories.length ? iw / categories.length : iw;
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: "chart", role: "img" });
  for (let k = 0; k <= 4; k++) {
    const y = PAD.t + ih - (ih * k) / 4;
    svg.appendChild(s("line", { x1: PAD.l, x2: W - PAD.r, y1: y, y2: y, class: "grid" }));
    svg.appendChild(s("text", { x: PAD.l - 6, y: y + 4, "text-anchor": "end", class: "axis" }, fmt((ymax * k) / 4)));
  }
  const stride = labelStride(categories.map((c) => short(c, 12)), bw);
  categories.forEach((cat, i) => {
    let acc = 0;
    const x = PAD.l + i * bw + bw * 0.15, w = Math.max(1, bw * 0.7);
    series.forEach((se, j) => {
      const v = se.values[i] || 0;
      if (v <= 0) return;
      const y0 = PAD.t + ih - (ih * (acc + v)) / ymax, hh = (ih * v) / ymax;
      acc += v;
      const pct = totals[i] ? ` (${((v / totals[i]) * 100).toFixed(1)} %)` : "";
      svg.appendChild(s("rect", { x, y: y0, width: w, height: Math.max(0.5, hh), fill: colors[j], class: "bar" },
        s("title", null, `${cat}\n${se.name}: ${fmt(v)}${pct}\nTotal: ${fmt(totals[i])}`)));
    });
    if (i % stride === 0) svg.appendChild(s("text", { x: x + w / 2, y: H - PAD.b + 14, "text-anchor": "middle", class: "axis xlabel" }, short(cat, 12)));
  });
  return svg;
  };
  return h("figure", { class: "chart-box" }, opts.title ? h("figcaption", null, opts.title) : null, responsive(build),
    legend(series.map((se, i) => ({ name: se.name, color: colors[i] }))));
}

/** Twenty colours apart (Tableau 20's order: the strong ones first) for the names of a view's pies. */
const NAME_PALETTE = [...PALETTE.slice(0, 9), "#79706e", "#a0cbe8", "#ffbe7d", "#ff9d9a", "#86bcb6", "#8cd17d", "#f1ce63", "#d4a6c8", "#fabfd2", "#d7b5a6", "#bab0ac"];

/** One colour per name across the pies of a view, in the order the names are first asked for: a name in two
 * pies has one colour, and up to 20 names have 20 colours (the pies' legends used to colour by place, so the two
 * pies of a view had legends that looked alike while they named different things). */
export function nameColors(): (name: string) => string {
  const at = new Map<string, string>();
  return (name) => {
    let c = at.get(name);
    if (c === undefined) { c = NAME_PALETTE[at.size % NAME_PALETTE.length]; at.set(name, c); }
    return c;
  };
}

/** Legend texts of at most `max` characters that read apart: a long name keeps its start and, where it shares
 * a long start with another of `names` (C++ kernel names: "void at::native::vectorized_elementwise_kernel<4,
 * at::native::..."), the part where it differs from it ("void at::nat…CUDAFunctor_add<float>, at::d…"); the full
 * names stay in the items' titles. */
export function legendNames(names: string[], max = 40): string[] {
  const lcp = (a: string, b: string) => { let i = 0; while (i < a.length && i < b.length && a[i] === b[i]) i++; return i; };
  return names.map((n, i) => {
    if (n.length <= max) return n;
    let p = 0;
    names.forEach((o, j) => { if (j !== i) p = Math.max(p, lcp(n, o)); });
    if (p + 12 <= max - 1) return n.slice(0, max - 1) + "…";
    const head = 12, from = Math.max(head, p - 8), room = max - head - 2;
    const mid = n.slice(from, from + room);
    return n.slice(0, head) + "…" + mid + (from + room < n.length ? "…" : "");
  });
}

/** A pie (donut) of named values; slices under 1 % are merged into "others". `colorOf`: the view's colour per
 * name (`nameColors`), shared by its pies; else colours by place. */
export function pie(items: { name: string; value: number; color?: string }[], fmt: (v: number) => string,
  opts: { title?: string; top?: number; colorOf?: (name: string) => string } = {}): HTMLElement {
  const top = opts.top ?? 10;
  const pos = items.filter((i) => i.value > 0);
  const total = pos.reduce((a, i) => a + i.value, 0);
  let shown = pos.slice(0, top);
  const rest = pos.slice(top).reduce((a, i) => a + i.value, 0);
  if (rest > 0) shown = shown.concat([{ name: "others", value: rest, color: "#8c8c8c" }]);
  const R = 90, cx = 100, cy = 100;
  const svg = s("svg", { viewBox: "0 0 200 200", class: "pie", role: "img" });
  let a0 = -Math.PI / 2;
  const colors = shown.map((it, i) => it.color ?? (opts.colorOf ? opts.colorOf(it.name) : PALETTE[i % PALETTE.length]));
  if (!total) svg.appendChild(s("text", { x: cx, y: cy, "text-anchor": "middle", class: "axis" }, "no data"));
  shown.forEach((it, i) => {
    const frac = it.value / total;
    const label = `${it.name}\n${fmt(it.value)} (${(frac * 100).toFixed(1)} %)`;
    if (frac >= 0.9999) {
      svg.appendChild(s("circle", { cx, cy, r: R, fill: colors[i], class: "slice" }, s("title", null, label)));
      return;
    }
    const a1 = a0 + frac * 2 * Math.PI;
    const large = a1 - a0 > Math.PI ? 1 : 0;
    const d = `M${cx},${cy} L${cx + R * Math.cos(a0)},${cy + R * Math.sin(a0)} A${R},${R} 0 ${large} 1 ${cx + R * Math.cos(a1)},${cy + R * Math.sin(a1)} Z`;
    svg.appendChild(s("path", { d, fill: colors[i], class: "slice" }, s("title", null, label)));
    a0 = a1;
  });
  svg.appendChild(s("circle", { cx, cy, r: R * 0.45, class: "pie-hole" }));
  const texts = legendNames(shown.map((it) => it.name));
  const leg = h("div", { class: "legend legend-col" }, shown.map((it, i) =>
    h("span", { class: "legend-item", title: it.name }, h("span", { class: "swatch", style: `background:${colors[i]}` }),
      h("span", { class: "legend-name" }, texts[i]), h("span", { class: "legend-val" }, total ? ` ${((it.value / total) * 100).toFixed(1)} %` : ""))));
  return h("figure", { class: "chart-box pie-box" }, opts.title ? h("figcaption", null, opts.title) : null, h("div", { class: "pie-row" }, svg, leg));
}

export interface LineSeries { name: string; x: number[]; y: number[]; color?: string }

/** A line chart; drag selects an x-range (calls onSelect), double-click resets. Marks each series' peak. */
export function lineChart(series: LineSeries[], fmtX: (v: number) => string, fmtY: (v: number) => string,
  opts: { title?: string; onSelect?: (x0: number, x1: number) => void; onReset?: () => void; range?: [number, number] | null; yBase?: number } = {}): HTMLElement {
  let xmin = Infinity, xmax = -Infinity, ymaxRaw = 0;
  for (const se of series) for (let i = 0; i < se.x.length; i++) {
    if (opts.range && (se.x[i] < opts.range[0] || se.x[i] > opts.range[1])) continue;
    xmin = Math.min(xmin, se.x[i]); xmax = Math.max(xmax, se.x[i]); ymaxRaw = Math.max(ymaxRaw, se.y[i]);
  }
  if (opts.range) { xmin = opts.range[0]; xmax = opts.range[1]; }
  if (!isFinite(xmin)) { xmin = 0; xmax = 1; }
  if (xmax === xmin) xmax = xmin + 1;
  const ymax = opts.yBase ? niceTop(ymaxRaw, opts.yBase) : niceMax(ymaxRaw);
  const colors = series.map((se, i) => se.color || PALETTE[i % PALETTE.length]);
  const H = 300;
  const build = (W: number) => {
  const iw = W - PAD.l - PAD.r, ih = H - PAD.t - PAD.b;
  const X = (v: number) => PAD.l + ((v - xmin) / (xmax - xmin)) * iw;
  const Y = (v: number) => PAD.t + ih - (v / ymax) * ih;
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: "chart line-chart", role: "img" });
  for (let k = 0; k <= 4; k++) {
    const y = PAD.t + ih - (ih * k) / 4;
    svg.appendChild(s("line", { x1: PAD.l, x2: W - PAD.r, y1: y, y2: y, class: "grid" }));
    svg.appendChild(s("text", { x: PAD.l - 6, y: y + 4, "text-anchor": "end", class: "axis" }, fmtY((ymax * k) / 4)));
    const xv = xmin + ((xmax - xmin) * k) / 4;
    svg.appendChild(s("text", { x: X(xv), y: H - PAD.b + 16, "text-anchor": k === 0 ? "start" : k === 4 ? "end" : "middle", class: "axis" }, fmtX(xv)));
  }
  series.forEach((se, j) => {
    const pts: string[] = [];
    let peak = -1;
    for (let i = 0; i < se.x.length; i++) {
      if (se.x[i] < xmin || se.x[i] > xmax) continue;
      // step curve: memory holds its value until the next event
      if (pts.length) pts.push(`${X(se.x[i]).toFixed(1)},${Y(se.y[i - 1] ?? 0).toFixed(1)}`);
      pts.push(`${X(se.x[i]).toFixed(1)},${Y(se.y[i]).toFixed(1)}`);
      if (peak < 0 || se.y[i] > se.y[peak]) peak = i;
    }
    svg.appendChild(s("polyline", { points: pts.join(" "), fill: "none", stroke: colors[j], "stroke-width": 1.5, class: "series" }));
    if (peak >= 0 && se.y[peak] > 0) {
      const px = X(se.x[peak]), py = Y(se.y[peak]);
      svg.appendChild(s("circle", { cx: px, cy: py, r: 4, fill: colors[j], class: "peak" }, s("title", null, `${se.name} peak: ${fmtY(se.y[peak])} at ${fmtX(se.x[peak])}`)));
      svg.appendChild(s("text", { x: Math.min(px + 6, W - PAD.r - 90), y: Math.max(py - 6, PAD.t + 10), class: "peak-label" }, `peak ${fmtY(se.y[peak])}`));
    }
  });
  const sel = s("rect", { x: 0, y: PAD.t, width: 0, height: ih, class: "selection", visibility: "hidden" });
  svg.appendChild(sel);
  const toX = (ev: MouseEvent) => {
    const r = (svg as unknown as SVGSVGElement).getBoundingClientRect();
    const px = ((ev.clientX - r.left) / r.width) * W;
    return Math.min(W - PAD.r, Math.max(PAD.l, px));
  };
  let start: number | null = null;
  svg.addEventListener("mousedown", (ev) => { start = toX(ev as MouseEvent); sel.setAttribute("visibility", "visible"); sel.setAttribute("x", String(start)); sel.setAttribute("width", "0"); ev.preventDefault(); });
  svg.addEventListener("mousemove", (ev) => { if (start === null) return; const x = toX(ev as MouseEvent); sel.setAttribute("x", String(Math.min(x, start))); sel.setAttribute("width", String(Math.abs(x - start))); });
  const finish = (ev: Event) => {
    if (start === null) return;
    const x = toX(ev as MouseEvent), a = Math.min(x, start), b = Math.max(x, start);
    start = null;
    if (b - a < 3) { sel.setAttribute("visibility", "hidden"); return; }
    const inv = (px: number) => xmin + ((px - PAD.l) / iw) * (xmax - xmin);
    opts.onSelect?.(inv(a), inv(b));
  };
  svg.addEventListener("mouseup", finish);
  svg.addEventListener("mouseleave", finish);
  svg.addEventListener("dblclick", () => opts.onReset?.());
  return svg;
  };
  return h("figure", { class: "chart-box" }, opts.title ? h("figcaption", null, opts.title) : null, responsive(build, 1000),
    legend(series.map((se, i) => ({ name: se.name, color: colors[i] }))));
}

export { fmtNum };

/** Grouped vertical bars: per category, one bar per series side by side (e.g. base vs exp). */
export function groupedBars(categories: string[], series: Series[], fmt: (v: number) => string, opts: { title?: string } = {}): HTMLElement {
  const ymax = niceMax(Math.max(0, ...series.flatMap((se) => se.values)));
  const colors = series.map((se, i) => se.color || PALETTE[i % PALETTE.length]);
  const build = (W: number) => {
  const iw = W - PAD.l - PAD.r, ih = H - PAD.t - PAD.b;
  const gw = categories.length ? iw / categories.length : iw, bw = (gw * 0.8) / Math.max(1, series.length);
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: "chart", role: "img" });
  for (let k = 0; k <= 4; k++) {
    const y = PAD.t + ih - (ih * k) / 4;
    svg.appendChild(s("line", { x1: PAD.l, x2: W - PAD.r, y1: y, y2: y, class: "grid" }));
    svg.appendChild(s("text", { x: PAD.l - 6, y: y + 4, "text-anchor": "end", class: "axis" }, fmt((ymax * k) / 4)));
  }
  const stride = labelStride(categories.map((c) => short(c, 14)), gw);
  categories.forEach((cat, i) => {
    series.forEach((se, j) => {
      const v = Math.max(0, se.values[i] || 0), hh = (ih * v) / ymax;
      svg.appendChild(s("rect", { x: PAD.l + i * gw + gw * 0.1 + j * bw, y: PAD.t + ih - hh, width: Math.max(1, bw - 1), height: Math.max(0.5, hh), fill: colors[j], class: "bar" },
        s("title", null, `${cat}\n${se.name}: ${fmt(se.values[i] || 0)}`)));
    });
    if (i % stride === 0) svg.appendChild(s("text", { x: PAD.l + i * gw + gw / 2, y: H - PAD.b + 14, "text-anchor": "middle", class: "axis xlabel" }, short(cat, 14)));
  });
  return svg;
  };
  return h("figure", { class: "chart-box" }, opts.title ? h("figcaption", null, opts.title) : null, responsive(build),
    legend(series.map((se, i) => ({ name: se.name, color: colors[i] }))));
}

// ---------------------------------------------------------------- many categories (additive helpers)
const CHAR_W = 6.6; // approximate width of one 11 px axis character, in viewBox units

/** Every k-th label is drawn so that labels `labelW` wide never overlap on slots `slotW` apart. */
export function strideFor(count: number, slotW: number, labelW: number): number {
  if (count <= 0 || slotW <= 0) return 1;
  return Math.max(1, Math.ceil((labelW + 6) / slotW));
}

function shortLabel(cat: string, max: number): string {
  return cat.length > max ? cat.slice(0, max - 1) + "…" : cat;
}

/** Stacked bars for many categories (e.g. 256 workers): labels thinned so they never overlap. */
export function stackedBarsMany(categories: string[], series: Series[], fmt: (v: number) => string,
  opts: { title?: string; label?: (cat: string) => string; id?: string; highlight?: string } = {}): HTMLElement {
  const totals = categories.map((_, i) => series.reduce((a, se) => a + (se.values[i] || 0), 0));
  const ymax = niceMax(Math.max(0, ...totals));
  const colors = series.map((se, i) => se.color || PALETTE[i % PALETTE.length]);
  const labels = categories.map((c) => shortLabel(opts.label ? opts.label(c) : c, 14));
  const build = (W2: number) => { // drawn at its box's width, as stackedBars: text stays 11 px
  const H2 = H;
  const iw = W2 - PAD.l - PAD.r, ih = H2 - PAD.t - PAD.b;
  const bw = categories.length ? iw / categories.length : iw;
  const svg = s("svg", { viewBox: `0 0 ${W2} ${H2}`, width: W2, height: H2, class: "chart many", role: "img" });
  for (let k = 0; k <= 4; k++) {
    const y = PAD.t + ih - (ih * k) / 4;
    svg.appendChild(s("line", { x1: PAD.l, x2: W2 - PAD.r, y1: y, y2: y, class: "grid" }));
    svg.appendChild(s("text", { x: PAD.l - 6, y: y + 4, "text-anchor": "end", class: "axis" }, fmt((ymax * k) / 4)));
  }
  const stride = strideFor(categories.length, bw, Math.max(0, ...labels.map((l) => l.length)) * CHAR_W);
  categories.forEach((cat, i) => {
    let acc = 0;
    const x = PAD.l + i * bw + (bw > 4 ? bw * 0.15 : 0), w = Math.max(0.6, bw > 4 ? bw * 0.7 : bw - 0.2);
    const g = s("g", { class: "bar-group" + (cat === opts.highlight ? " hl" : ""), "data-cat": cat });
    series.forEach((se, j) => {
      const v = se.values[i] || 0;
      if (v <= 0) return;
      const y0 = PAD.t + ih - (ih * (acc + v)) / ymax, hh = (ih * v) / ymax;
      acc += v;
      g.appendChild(s("rect", { x, y: y0, width: w, height: Math.max(0.5, hh), fill: colors[j], class: "bar" },
        s("title", null, `${cat}\n${se.name}: ${fmt(v)}\nTotal: ${fmt(totals[i])}`)));
    });
    svg.appendChild(g);
    if (i % stride === 0) svg.appendChild(s("text", { x: PAD.l + i * bw + bw / 2, y: H2 - PAD.b + 14, "text-anchor": "middle", class: "axis xlabel" }, labels[i]));
  });
  return svg;
  };
  return h("figure", { class: "chart-box", id: opts.id ?? null }, opts.title ? h("figcaption", null, opts.title) : null, responsive(build),
    legend(series.map((se, i) => ({ name: se.name, color: colors[i] }))));
}

/** A sequential colour (light yellow → dark blue) for t in [0, 1]. */
export function heatColor(t: number): string {
  const stops = [[255, 247, 188], [254, 196, 79], [236, 112, 20], [153, 52, 4], [37, 52, 148]];
  const x = Math.min(1, Math.max(0, t)) * (stops.length - 1), i = Math.min(stops.length - 2, Math.floor(x)), f = x - i;
  const c = stops[i].map((v, k) => Math.round(v + (stops[i + 1][k] - v) * f));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

/** A rows × columns heatmap (NaN: no value) with a colour-scale legend; onCell(row, col) on click. */
export function heatmap(rows: string[], cols: string[], values: number[][], fmt: (v: number) => string,
  opts: { title?: string; id?: string; colLabel?: (c: string) => string; rowLabel?: (r: string) => string;
    onCell?: (r: number, c: number) => void; selected?: [number, number] | null; caption?: string;
    cellTitle?: (r: number, c: number, text: string) => string } = {}): HTMLElement {
  const rowLabels = rows.map((r) => shortLabel(opts.rowLabel ? opts.rowLabel(r) : r, 10));
  const colLabels = cols.map((c) => shortLabel(opts.colLabel ? opts.colLabel(c) : c, 10));
  const padL = Math.max(40, 10 + Math.max(0, ...rowLabels.map((l) => l.length)) * CHAR_W);
  let lo = Infinity, hi = -Infinity;
  for (const row of values) for (const v of row) if (isFinite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
  if (!isFinite(lo)) { lo = 0; hi = 1; }
  const span = hi > lo ? hi - lo : 1;
  const build = (W2: number) => { // drawn at its box's width: text stays 11 px on any screen
  const padT = 8, padB = 34, padR = 12;
  const iw = W2 - padL - padR;
  const cw = cols.length ? iw / cols.length : iw;
  const ch = Math.max(8, Math.min(28, 360 / Math.max(1, rows.length)));
  const H2 = padT + ch * rows.length + padB;
  const svg = s("svg", { viewBox: `0 0 ${W2} ${H2}`, width: W2, height: H2, class: "chart heatmap", role: "img" });
  const yStride = strideFor(rows.length, ch, 12);
  rows.forEach((r, i) => {
    const y = padT + i * ch;
    if (i % yStride === 0) svg.appendChild(s("text", { x: padL - 6, y: y + ch / 2 + 4, "text-anchor": "end", class: "axis ylabel" }, rowLabels[i]));
    cols.forEach((c, j) => {
      const v = values[i]?.[j];
      const ok = typeof v === "number" && isFinite(v);
      const sel = opts.selected && opts.selected[0] === i && opts.selected[1] === j;
      const cell = s("rect", { x: padL + j * cw, y, width: Math.max(0.5, cw - (cw > 3 ? 1 : 0)), height: ch - 1,
        fill: ok ? heatColor((v - lo) / span) : "var(--line)", class: "cell" + (sel ? " selected" : ""),
        "data-row": r, "data-col": c }, s("title", null, opts.cellTitle ? opts.cellTitle(i, j, ok ? fmt(v) : "no data")
          : `${c} · step ${r}\n${ok ? fmt(v) : "no data"}`));
      if (opts.onCell) cell.addEventListener("click", () => opts.onCell!(i, j));
      svg.appendChild(cell);
    });
  });
  const xStride = strideFor(cols.length, cw, Math.max(0, ...colLabels.map((l) => l.length)) * CHAR_W);
  cols.forEach((_, j) => {
    if (j % xStride === 0) svg.appendChild(s("text", { x: padL + j * cw + cw / 2, y: H2 - padB + 14, "text-anchor": "middle", class: "axis xlabel" }, colLabels[j]));
  });
  return svg;
  };
  // the colour scale: a gradient bar from the lowest to the highest value
  const stops = [0, 0.25, 0.5, 0.75, 1];
  const scale = h("div", { class: "heat-scale", "aria-label": "colour scale" },
    h("span", { class: "heat-lo" }, fmt(lo)),
    h("span", { class: "heat-bar", style: `background:linear-gradient(to right,${stops.map((t) => heatColor(t)).join(",")})` }),
    h("span", { class: "heat-hi" }, fmt(hi)),
    opts.caption ? h("span", { class: "muted heat-caption" }, opts.caption) : null);
  return h("figure", { class: "chart-box", id: opts.id ?? null }, opts.title ? h("figcaption", null, opts.title) : null, responsive(build, 1000), scale);
}

// ---------------------------------------------------------------- lanes (a schedule over time)
export interface LaneBox { lane: number; start: number; end: number; color: string; label?: string; title: string; attrs?: Record<string, string | number> }

/** Boxes on horizontal lanes over a time axis (e.g. a pipeline's stages × micro-batches): each lane's
 * background is drawn in `gapColor`, so the time no box covers (its gaps) stays visible. */
export function laneChart(lanes: string[], boxes: LaneBox[], fmtX: (v: number) => string,
  opts: { title?: string; id?: string; xmax?: number; gapColor?: string; gapName?: string; legend?: { name: string; color: string }[] } = {}): HTMLElement {
  const xmax = opts.xmax ?? Math.max(1, ...boxes.map((b) => b.end));
  const laneLabels = lanes.map((l) => shortLabel(l, 18));
  const padL = Math.max(48, 10 + Math.max(0, ...laneLabels.map((l) => l.length)) * CHAR_W), padR = 12, padT = 6, padB = 26;
  const lh = 26;
  const build = (W2: number) => {
    const iw = W2 - padL - padR, H2 = padT + lh * lanes.length + padB;
    const X = (v: number) => padL + (Math.min(xmax, Math.max(0, v)) / xmax) * iw;
    const svg = s("svg", { viewBox: `0 0 ${W2} ${H2}`, width: W2, height: H2, class: "chart lanes", role: "img" });
    lanes.forEach((_, i) => {
      const y = padT + i * lh;
      const g = s("g", { class: "lane", "data-lane": i });
      g.appendChild(s("rect", { x: padL, y: y + 2, width: iw, height: lh - 4, fill: opts.gapColor ?? "var(--track)", class: "lane-gap" },
        s("title", null, `${lanes[i]}: ${opts.gapName ?? "idle"} where no box is drawn`)));
      svg.appendChild(s("text", { x: padL - 6, y: y + lh / 2 + 4, "text-anchor": "end", class: "axis ylabel" }, laneLabels[i]));
      for (const b of boxes) {
        if (b.lane !== i) continue;
        const x0 = X(b.start), w = Math.max(0.5, X(b.end) - x0);
        g.appendChild(s("rect", { x: x0, y: y + 2, width: w, height: lh - 4, fill: b.color, class: "lane-box", ...(b.attrs ?? {}) }, s("title", null, b.title)));
        if (b.label && w >= b.label.length * CHAR_W + 4) {
          g.appendChild(s("text", { x: x0 + w / 2, y: y + lh / 2 + 4, "text-anchor": "middle", class: "lane-label" }, b.label));
        }
      }
      svg.appendChild(g);
    });
    for (let k = 0; k <= 4; k++) {
      const xv = (xmax * k) / 4;
      svg.appendChild(s("text", { x: X(xv), y: H2 - padB + 16, "text-anchor": k === 0 ? "start" : k === 4 ? "end" : "middle", class: "axis" }, fmtX(xv)));
    }
    return svg;
  };
  return h("figure", { class: "chart-box", id: opts.id ?? null }, opts.title ? h("figcaption", null, opts.title) : null, responsive(build, 1000),
    opts.legend ? legend(opts.legend) : null);
}

// ---------------------------------------------------------------- one value per category, in order (runs over time)
/** A line through one value per category (e.g. a job's runs in time order): a point each, `marked` ones in the
 * alarm colour, the `highlight`-th ringed and labelled, and a dashed `guide` line (e.g. a threshold) where it has a
 * value. Null values leave a gap. `onPick(i)` on a point's click. */
export function pointLine(categories: string[], values: (number | null)[], fmt: (v: number) => string,
  opts: { title?: string; id?: string; name?: string; guide?: (number | null)[]; guideName?: string; marked?: boolean[];
    highlight?: number; highlightLabel?: string; onPick?: (i: number) => void } = {}): HTMLElement {
  const finite = (v: number | null | undefined): v is number => typeof v === "number" && isFinite(v);
  const ymax = niceMax(Math.max(0, ...values.filter(finite), ...(opts.guide ?? []).filter(finite)));
  const labels = categories.map((c) => shortLabel(c, 14));
  const build = (W2: number) => {
    const iw = W2 - PAD.l - PAD.r, ih = H - PAD.t - PAD.b;
    const slot = categories.length ? iw / categories.length : iw;
    const X = (i: number) => PAD.l + slot * (i + 0.5);
    const Y = (v: number) => PAD.t + ih - (v / ymax) * ih;
    const svg = s("svg", { viewBox: `0 0 ${W2} ${H}`, width: W2, height: H, class: "chart point-line", role: "img" });
    for (let k = 0; k <= 4; k++) {
      const y = PAD.t + ih - (ih * k) / 4;
      svg.appendChild(s("line", { x1: PAD.l, x2: W2 - PAD.r, y1: y, y2: y, class: "grid" }));
      svg.appendChild(s("text", { x: PAD.l - 6, y: y + 4, "text-anchor": "end", class: "axis" }, fmt((ymax * k) / 4)));
    }
    // a polyline per run of consecutive values (a null breaks the line)
    const path = (vs: (number | null)[], cls: string) => {
      let pts: string[] = [];
      const flush = () => { if (pts.length > 1) svg.appendChild(s("polyline", { points: pts.join(" "), class: cls })); pts = []; };
      vs.forEach((v, i) => { if (finite(v)) pts.push(`${X(i).toFixed(1)},${Y(v).toFixed(1)}`); else flush(); });
      flush();
    };
    if (opts.guide) path(opts.guide, "guide-line");
    path(values, "value-line");
    values.forEach((v, i) => {
      if (!finite(v)) return;
      const hl = i === opts.highlight;
      const pt = s("circle", { cx: X(i), cy: Y(v), r: hl ? 6 : 3.5, class: "pt" + (opts.marked?.[i] ? " marked" : "") + (hl ? " hl" : ""),
        "data-i": i, "data-cat": categories[i] },
      s("title", null, `${categories[i]}\n${opts.name ?? "value"}: ${fmt(v)}` + (finite(opts.guide?.[i]) ? `\n${opts.guideName ?? "guide"}: ${fmt(opts.guide![i] as number)}` : "")));
      if (opts.onPick) pt.addEventListener("click", () => opts.onPick!(i));
      svg.appendChild(pt);
      if (hl && opts.highlightLabel) {
        const right = X(i) > PAD.l + iw * 0.6;
        svg.appendChild(s("text", { x: right ? X(i) - 10 : X(i) + 10, y: Math.max(Y(v) - 10, PAD.t + 10), "text-anchor": right ? "end" : "start", class: "peak-label" }, opts.highlightLabel));
      }
    });
    const stride = labelStride(labels, slot);
    labels.forEach((l, i) => { if (i % stride === 0) svg.appendChild(s("text", { x: X(i), y: H - PAD.b + 14, "text-anchor": "middle", class: "axis xlabel" }, l)); });
    return svg;
  };
  const items = [{ name: opts.name ?? "value", color: "var(--accent2)" }];
  if (opts.guide) items.push({ name: opts.guideName ?? "guide", color: "var(--muted)" });
  if (opts.marked?.some(Boolean)) items.push({ name: "above it", color: "#d93025" });
  return h("figure", { class: "chart-box", id: opts.id ?? null }, opts.title ? h("figcaption", null, opts.title) : null, responsive(build, 1000), legend(items));
}
