// Export of a table: CSV download and copy (tab-separated) of the rows as shown after filter and
// sort, with raw values (numbers unformatted).
import { h } from "./dom";

/** One cell as plain text: numbers as they are, objects as JSON, nothing as "". */
export function rawCell(v: unknown): string {
  if (v === null || v === undefined) return "";
  if (typeof v === "number") return isFinite(v) ? String(v) : "";
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}

/** RFC 4180 CSV text (CRLF rows, quotes doubled; cells that spreadsheets would run as formulas get a leading '). */
export function toCSV(header: string[], rows: unknown[][]): string {
  const q = (v: unknown) => {
    let t = rawCell(v);
    if (typeof v === "string" && /^[=+\-@\t\r]/.test(t)) t = "'" + t;
    return /[",\r\n]/.test(t) ? `"${t.replace(/"/g, '""')}"` : t;
  };
  return [header, ...rows].map((r) => r.map(q).join(",")).join("\r\n") + "\r\n";
}

/** Tab-separated text for the clipboard (pastes into spreadsheets as cells). */
export function toTSV(header: string[], rows: unknown[][]): string {
  const c = (v: unknown) => rawCell(v).replace(/[\t\r\n]+/g, " ");
  return [header, ...rows].map((r) => r.map(c).join("\t")).join("\n") + "\n";
}

/** A file name from a caption: letters, digits, dots and dashes only. */
export function fileName(base: string): string {
  return (base.toLowerCase().replace(/[^a-z0-9.]+/g, "-").replace(/^-+|-+$/g, "").slice(0, 80) || "table") + ".csv";
}

/** "⤓ CSV" and "Copy" buttons over whatever `get` returns when clicked. */
export function exportButtons(name: () => string, get: () => { header: string[]; rows: unknown[][] }): HTMLElement {
  const msg = h("span", { class: "muted export-msg" });
  const csv = h("button", { type: "button", class: "btn small export-csv", title: "download the rows shown (after filter and sort) as CSV" }, "⤓ CSV");
  const copy = h("button", { type: "button", class: "btn small export-copy", title: "copy the rows shown (tab-separated, pastes into a spreadsheet)" }, "Copy");
  csv.addEventListener("click", () => {
    const { header, rows } = get();
    const a = h("a", { href: URL.createObjectURL(new Blob([toCSV(header, rows)], { type: "text/csv" })), download: fileName(name()) });
    document.body.appendChild(a); a.click(); a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 10000);
  });
  copy.addEventListener("click", () => {
    const { header, rows } = get();
    const text = toTSV(header, rows);
    const done = (ok: boolean) => { msg.textContent = ok ? ` copied ${rows.length} ${rows.length === 1 ? "row" : "rows"}` : " copy was refused by the browser"; setTimeout(() => { msg.textContent = ""; }, 4000); };
    if (navigator.clipboard?.writeText) navigator.clipboard.writeText(text).then(() => done(true), () => done(fallbackCopy(text)));
    else done(fallbackCopy(text));
  });
  return h("span", { class: "export" }, csv, copy, msg);
}

/** Copies through a hidden textarea when the async clipboard is not available (plain http). */
function fallbackCopy(text: string): boolean {
  const ta = h("textarea", { style: "position:fixed;left:-9999px;top:0" }) as HTMLTextAreaElement;
  ta.value = text;
  document.body.appendChild(ta); ta.select();
  let ok = false;
  try { ok = document.execCommand("copy"); } catch { ok = false; }
  ta.remove();
  return ok;
}
