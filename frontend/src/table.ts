// A small data table: click a header to sort, type to filter by name, pages of 50 rows, row click.
import { h, mount, fmtNum, fmtBytes } from "./dom";
import { exportButtons } from "./export";

export interface Column<R = any> {
  key: string;
  label: string;
  fmt?: (v: any, row: R) => string;
  numeric?: boolean;
  title?: string;
  /** Hidden at first on narrow screens (the Columns menu shows it; exports always have it). */
  optional?: boolean;
  /** Text shown whole, wrapped over lines (explanations), instead of cut to one line. */
  wrap?: boolean;
}

export interface TableOpts<R> {
  filterKeys?: string[];
  pageSize?: number;
  onRowClick?: (row: R, tr: HTMLTableRowElement) => void;
  rowClass?: (row: R) => string;
  sortKey?: string;
  sortDesc?: boolean;
  caption?: string;
  /** Buttons or links shown in a last column of each row (not exported). */
  actions?: (row: R) => Node | null;
  /** The CSV file's name (default: the caption). */
  exportName?: string;
}

/** From this window width on, tables start with their optional columns shown. */
export const WIDE_PX = 1600;

/** Builds the table element; the rows are kept in memory, only one page is in the DOM. */
export function dataTable<R extends Record<string, any>>(columns: Column<R>[], rows: R[], opts: TableOpts<R> = {}): HTMLElement {
  const pageSize = opts.pageSize ?? 50;
  let sortKey = opts.sortKey ?? null, desc = opts.sortDesc ?? true, filter = "", page = 0;
  const filterKeys = opts.filterKeys ?? ["name"];
  const body = h("tbody");
  const info = h("span", { class: "table-info" });
  const prev = h("button", { class: "btn small", type: "button", onclick: () => { page--; draw(); } }, "‹ prev");
  const next = h("button", { class: "btn small", type: "button", onclick: () => { page++; draw(); } }, "next ›");
  const input = h("input", { type: "search", class: "filter", placeholder: "Filter by name…", "aria-label": "filter rows" }) as HTMLInputElement;
  input.addEventListener("input", () => { filter = input.value.toLowerCase(); page = 0; draw(); });
  const heads = columns.map((c) => {
    // sortable by keyboard too: each header is a tab stop, Enter or Space sorts (focus stays on it), aria-sort
    // tells assistive technology the order
    const th = h("th", { class: c.numeric ? "num sortable" : "sortable", title: c.title ?? "click to sort", "data-key": c.key, tabindex: 0, "aria-sort": "none" }, c.label);
    const sortBy = () => { if (sortKey === c.key) desc = !desc; else { sortKey = c.key; desc = !!c.numeric; } page = 0; draw(); };
    th.addEventListener("click", sortBy);
    th.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sortBy(); th.focus(); } });
    return th;
  });
  // narrow screens start without the optional columns; the Columns menu brings them back
  const off = new Set(window.innerWidth < WIDE_PX ? columns.filter((c) => c.optional).map((c) => c.key) : []);
  const headRow = h("tr");
  const colsMenu = columns.some((c) => c.optional) ? h("details", { class: "cols" }, h("summary", null, "Columns"),
    h("div", { class: "cols-list" }, columns.map((c) => {
      const cb = h("input", { type: "checkbox", "data-key": c.key, checked: !off.has(c.key) }) as HTMLInputElement;
      cb.addEventListener("change", () => { if (cb.checked) off.delete(c.key); else off.add(c.key); draw(); });
      return h("label", null, cb, " ", c.label);
    }))) : null;
  const table = h("table", { class: "data-table" }, h("thead", null, headRow), body);

  function view(): R[] {
    let out = rows;
    if (filter) out = out.filter((r) => filterKeys.some((k) => String(r[k] ?? "").toLowerCase().includes(filter)));
    if (sortKey) {
      const k = sortKey, sgn = desc ? -1 : 1;
      out = out.slice().sort((a, b) => {
        const x = a[k], y = b[k];
        if (typeof x === "number" && typeof y === "number") return (x - y) * sgn || String(a.name ?? "").localeCompare(String(b.name ?? ""));
        // text in natural order: step "10" after step "2", "rank 10" after "rank 9" (digits compare as numbers)
        return String(x ?? "").localeCompare(String(y ?? ""), undefined, { numeric: true }) * sgn;
      });
    }
    return out;
  }
  function draw(): void {
    const shownCols = columns.filter((c) => !off.has(c.key));
    mount(headRow, heads.filter((_, i) => !off.has(columns[i].key)), opts.actions ? h("th", { class: "actions" }, "") : null);
    const v = view();
    const pages = Math.max(1, Math.ceil(v.length / pageSize));
    page = Math.min(Math.max(0, page), pages - 1);
    const slice = v.slice(page * pageSize, (page + 1) * pageSize);
    mount(body, slice.map((r) => {
      const tr = h("tr", { class: opts.rowClass ? opts.rowClass(r) : "" }, shownCols.map((c, i) => cell(c, r, i === 0)),
        opts.actions ? h("td", { class: "actions" }, opts.actions(r)) : null);
      if (opts.onRowClick) { tr.classList.add("clickable"); tr.addEventListener("click", () => opts.onRowClick!(r, tr)); }
      return tr;
    }));
    if (!slice.length) mount(body, h("tr", null, h("td", { colspan: shownCols.length + (opts.actions ? 1 : 0), class: "empty" }, rows.length ? "No row matches the filter." : "No data.")));
    heads.forEach((th, i) => {
      const on = columns[i].key === sortKey;
      th.dataset.sort = on ? (desc ? "desc" : "asc") : "";
      th.setAttribute("aria-sort", on ? (desc ? "descending" : "ascending") : "none");
    });
    info.textContent = `${v.length.toLocaleString("en-US")} ${v.length === 1 ? "row" : "rows"}` + (pages > 1 ? ` · page ${page + 1}/${pages}` : "");
    prev.disabled = page <= 0; next.disabled = page >= pages - 1;
  }
  draw();
  return h("div", { class: "table-box" }, opts.caption ? h("h3", null, opts.caption) : null,
    h("div", { class: "table-tools" }, input, info, prev, next, colsMenu,
      exportButtons(() => opts.exportName ?? opts.caption ?? "table", () => ({ header: columns.map((c) => c.key), rows: view().map((r) => columns.map((c) => r[c.key])) }))), h("div", { class: "table-scroll" }, table));
}

/** One cell: numbers as they are; text on one line, cut with an ellipsis, the whole of it on hover. */
function cell<R extends Record<string, any>>(c: Column<R>, r: R, first: boolean): HTMLTableCellElement {
  const text = c.fmt ? c.fmt(r[c.key], r) : fmtNum(r[c.key]);
  if (c.numeric) return h("td", { class: "num" }, text);
  if (c.wrap) return h("td", { class: "txt wrap" }, text);
  return h("td", { class: "txt" }, h("span", { class: first ? "clip first" : "clip", title: text }, text));
}

/** Renders any JSON value readably (objects as key/value lists, arrays of objects as tables). */
export function genericValue(v: any, depth = 0): HTMLElement | string {
  if (v === null || v === undefined) return "–";
  if (Array.isArray(v)) {
    if (v.length && v.length <= 10 && v.every((x) => x && typeof x === "object" && !Array.isArray(x))) {
      // a short list: a plain table without tools
      const keys = Array.from(new Set(v.flatMap((x) => Object.keys(x)))).slice(0, 12);
      return h("table", { class: "data-table mini" }, h("thead", null, h("tr", null, keys.map((k) => h("th", null, k.replace(/_/g, " "))))),
        h("tbody", null, v.map((x) => h("tr", null, keys.map((k) => h("td", { class: typeof x[k] === "number" ? "num" : "" },
          typeof x[k] === "number" && /bytes/.test(k) ? fmtBytes(x[k]) : typeof x[k] === "object" && x[k] !== null ? JSON.stringify(x[k]) : fmtNum(x[k])))))));
    }
    if (v.length && v.every((x) => x && typeof x === "object" && !Array.isArray(x))) {
      const keys = Array.from(new Set(v.flatMap((x) => Object.keys(x)))).slice(0, 12);
      return dataTable(keys.map((k) => ({ key: k, label: k, numeric: typeof v[0][k] === "number" })), v, { filterKeys: keys.filter((k) => typeof v[0][k] === "string"), pageSize: 20 });
    }
    return h("span", null, v.map((x) => fmtNum(x)).join(", "));
  }
  if (typeof v === "object") {
    if (depth > 3) return JSON.stringify(v);
    return h("dl", { class: "kv" }, Object.entries(v).map(([k, x]) => [h("dt", null, k), h("dd", null, genericValue(x, depth + 1))]));
  }
  // raw integers (ids, addresses, pids) read better without thousands separators
  return typeof v === "number" && Number.isInteger(v) ? String(v) : fmtNum(v);
}
