// Tiny DOM helpers. Every string goes in as a text node (never innerHTML), so names from traces
// that contain markup are shown literally.

export type Child = Node | string | number | null | undefined | false | Child[];
export type Attrs = Record<string, string | number | boolean | EventListener | null | undefined>;

/** Creates an element; `on*` attributes become listeners, strings become text nodes. */
export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs?: Attrs | null, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  if (attrs) setAttrs(el, attrs);
  append(el, children);
  return el;
}

const SVGNS = "http://www.w3.org/2000/svg";

/** Creates an SVG element with attributes and children (strings become text nodes). */
export function s(tag: string, attrs?: Attrs | null, ...children: Child[]): SVGElement {
  const el = document.createElementNS(SVGNS, tag) as SVGElement;
  if (attrs) setAttrs(el, attrs);
  append(el, children);
  return el;
}

function setAttrs(el: Element, attrs: Attrs): void {
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v as EventListener);
    else if (k === "text") el.textContent = String(v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
}

/** Appends children (nested arrays flattened, falsy skipped, primitives as text). */
export function append(el: Node, children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

/** Replaces all children of `el`. */
export function mount(el: Element, ...children: Child[]): void {
  el.replaceChildren();
  append(el, children);
}

/** Formats microseconds with a readable unit. */
export function fmtUs(us: number | null | undefined): string {
  if (us === null || us === undefined || !isFinite(us)) return "–";
  const a = Math.abs(us);
  if (a >= 1e6) return (us / 1e6).toFixed(a >= 1e7 ? 1 : 2) + " s";
  if (a >= 1e3) return (us / 1e3).toFixed(a >= 1e4 ? 1 : 2) + " ms";
  if (a >= 1) return us.toFixed(a >= 100 ? 0 : a >= 10 ? 1 : 2) + " µs";
  if (a === 0) return "0";
  return (us * 1e3).toFixed(0) + " ns";
}

/** Formats a byte count with a binary unit. */
export function fmtBytes(b: number | null | undefined): string {
  if (b === null || b === undefined || !isFinite(b)) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = b, i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i === 0 ? v.toFixed(0) : v.toFixed(Math.abs(v) >= 100 ? 0 : 2)) + " " + units[i];
}

/** Formats a 0..1 fraction as a percentage. */
export function fmtPct(f: number | null | undefined): string {
  if (f === null || f === undefined || !isFinite(f)) return "–";
  return (f * 100).toFixed(f * 100 >= 10 ? 1 : 2) + " %";
}

/** Formats a generic number compactly. */
export function fmtNum(v: unknown): string {
  if (typeof v === "number") {
    if (!isFinite(v)) return "–";
    if (Number.isInteger(v)) return v.toLocaleString("en-US");
    return Math.abs(v) >= 100 ? v.toFixed(1) : Math.abs(v) >= 1 ? v.toFixed(2) : v.toPrecision(3);
  }
  if (v === null || v === undefined) return "–";
  if (typeof v === "boolean") return v ? "yes" : "no";
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}

/** A stable colour for a name (hash to hue), used across charts and the timeline. */
export function colorFor(name: string, light = true): string {
  let hsh = 2166136261;
  for (let i = 0; i < name.length; i++) { hsh ^= name.charCodeAt(i); hsh = Math.imul(hsh, 16777619); }
  const hue = (hsh >>> 0) % 360;
  return light ? `hsl(${hue},55%,62%)` : `hsl(${hue},45%,45%)`;
}

export const PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac", "#86bcb6", "#d37295"];

/** Arrow keys (Left/Right, Home/End) move between the `[role=tab]` buttons of a tab list and open the one moved to
 * (a click on it), as the ARIA tabs pattern has it; `rove` gives the selected tab the list's one tab stop. */
export function arrowTabs(list: HTMLElement): void {
  list.addEventListener("keydown", (e: KeyboardEvent) => {
    const tabs = [...list.querySelectorAll<HTMLElement>("[role=tab]")].filter((t) => !(t as HTMLButtonElement).disabled);
    const cur = tabs.indexOf(document.activeElement as HTMLElement);
    if (cur < 0 || !tabs.length) return;
    const n = tabs.length;
    const k = e.key === "ArrowRight" ? (cur + 1) % n : e.key === "ArrowLeft" ? (cur - 1 + n) % n : e.key === "Home" ? 0 : e.key === "End" ? n - 1 : -1;
    if (k < 0) return;
    e.preventDefault();
    tabs[k].focus();
    tabs[k].click();
    rove(list);
  });
}

/** The selected tab is the list's tab stop (tabindex 0), the others are reached by arrow keys (tabindex -1). */
export function rove(list: HTMLElement): void {
  for (const t of list.querySelectorAll<HTMLElement>("[role=tab]")) t.tabIndex = t.getAttribute("aria-selected") === "true" ? 0 : -1;
}
