// Job diff: job B (the compared run, every rank) against job A (the baseline run) from /jobdiff:
// the step delta, the ranked lines, and per-rank / per-group / per-kernel drill-down tables.
import { h, fmtNum } from "../dom";
import { url } from "../api";
import { dataTable, Column } from "../table";

/** The two runs and spans compared: `run`/`span` is job A (baseline), `exp_run`/`exp_span` job B. */
export interface JobPair { run: string; span: string; exp_run: string; exp_span: string }

const ms = (v: any) => (typeof v === "number" ? `${fmtNum(Math.round(v * 100) / 100)} ms` : "–");
const sms = (v: any) => {
  if (typeof v !== "number") return "–";
  const t = Math.abs(v) < 0.005 ? "0.00" : v.toFixed(2);
  return `${v > 0 && t !== "0.00" ? "+" : ""}${t} ms`;
};
const deltaClass = (v: any) => (typeof v === "number" && v >= 0.005 ? "pos" : typeof v === "number" && v <= -0.005 ? "neg" : "");

/** The CSV file of the job diff (the ranked lines, then the job's buckets, groups and kernels). */
export function jobDiffCsvHref(p: JobPair): string {
  return url("jobdiff", { ...p, format: "csv" });
}

/** Renders the answer of /jobdiff for the pair `p`. */
export function renderJobDiff(d: any, p: JobPair): HTMLElement {
  const a = d?.a ?? {}, b = d?.b ?? {};
  const header = `Step ${ms(a.step_ms)} (${fmtNum(a.ranks)} ranks, ${fmtNum(a.steps)} steps) → ${ms(b.step_ms)} (${fmtNum(b.ranks)} ranks, ${fmtNum(b.steps)} steps): ${sms(d?.step_delta_ms)} per step`;
  const lines: any[] = Array.isArray(d?.lines) ? d.lines : [];
  const buckets: any[] = Array.isArray(d?.buckets) ? d.buckets : [];
  const label: Record<string, string> = Object.fromEntries(buckets.map((x) => [String(x.bucket), String(x.label ?? x.bucket)]));
  const perRank: any[] = Array.isArray(d?.per_rank) ? d.per_rank : [];
  const bucketKeys = buckets.map((x) => String(x.bucket));
  const rankRows: Record<string, any>[] = perRank.map((r) => ({
    name: `rank ${r.rank}`, rank: r.rank, worker_a: r.worker_a ?? "(A's mean rank)", worker_b: String(r.worker_b ?? ""),
    step_delta_ms: r.step_delta_ms, ...Object.fromEntries(bucketKeys.map((k) => [`b_${k}`, r.buckets?.[k] ?? null])),
  }));
  const rankCols: Column[] = [
    { key: "name", label: "Rank" }, { key: "worker_a", label: "Worker A" }, { key: "worker_b", label: "Worker B" },
    { key: "step_delta_ms", label: "Δ step", numeric: true, fmt: sms },
    // the buckets that changed on some rank are shown, the others behind the Columns menu
    ...bucketKeys.map((k) => ({ key: `b_${k}`, label: `Δ ${label[k]}`, numeric: true, fmt: sms,
      optional: !rankRows.some((r) => Math.abs(Number(r[`b_${k}`]) || 0) >= 0.005) })),
  ];
  const groups: any[] = Array.isArray(d?.groups) ? d.groups : [];
  const groupRows = groups.map((g) => ({ ...g, name: String(g.name ?? ""), group: String(g.group ?? ""), ranks: g.ranks ?? "" }));
  const groupCols: Column[] = [
    { key: "name", label: "Collective" }, { key: "group", label: "Group" }, { key: "ranks", label: "Ranks", fmt: (v) => String(v || "–") },
    { key: "a_ms", label: "A", numeric: true, fmt: ms }, { key: "b_ms", label: "B", numeric: true, fmt: ms }, { key: "delta_ms", label: "Δ", numeric: true, fmt: sms },
    { key: "max_rank", label: "Largest on rank", numeric: true, fmt: (v) => (v === null || v === undefined ? "–" : String(v)) },
    { key: "max_delta_ms", label: "Its Δ", numeric: true, fmt: sms },
  ];
  const kernels: any[] = Array.isArray(d?.kernels) ? d.kernels : [];
  const kernelRows = kernels.map((k) => ({ ...k, name: String(k.name ?? ""), align: String(k.align ?? ""), path: String(k.b_path ?? k.a_path ?? "") }));
  const kernelCols: Column[] = [
    { key: "name", label: "Kernel" }, { key: "path", label: "Op path", fmt: (v) => String(v || "–") },
    { key: "align", label: "Aligned by", fmt: (v) => String(v || "–"), title: "name / structure (place under the same op) / unmatched" },
    { key: "a_ms", label: "A (mean rank)", numeric: true, fmt: ms },
    { key: "b_ms", label: "B (mean rank)", numeric: true, fmt: ms }, { key: "delta_ms", label: "Δ", numeric: true, fmt: sms },
  ];
  const bucketCols: Column[] = [
    { key: "label", label: "Where the step's time goes" }, { key: "a_ms", label: "A", numeric: true, fmt: ms },
    { key: "b_ms", label: "B", numeric: true, fmt: ms }, { key: "delta_ms", label: "Δ", numeric: true, fmt: sms },
  ];
  const notes: string[] = Array.isArray(d?.notes) ? d.notes.map(String) : [];
  const errors: any[] = Array.isArray(d?.errors) ? d.errors : [];
  return h("div", { id: "jobdiff" },
    h("p", { class: "muted" }, `Job A: run ${p.run} (span ${p.span}) · job B: run ${p.exp_run} (span ${p.exp_span}) · every rank, from the per-worker summaries. `,
      h("a", { href: jobDiffCsvHref(p), id: "jobdiff-csv", class: "btn small", download: "" }, "Download CSV")),
    errors.length ? h("div", { class: "banner", id: "jobdiff-errors" }, "Some workers could not be read (the others are compared):",
      h("ul", null, errors.map((e) => h("li", null, `run ${e?.run ?? "?"}: ${e?.file ?? e?.worker ?? ""}: ${e?.error ?? JSON.stringify(e)}`)))) : null,
    h("h3", { id: "jobdiff-header" }, header),
    lines.length
      ? h("ol", { id: "jobdiff-lines", class: "recs" }, lines.map((ln) => h("li", { class: deltaClass(ln.delta_ms), "data-bucket": String(ln.bucket ?? ""), "data-ms": String(ln.delta_ms ?? "") }, String(ln.text ?? ""))))
      : h("p", { class: "banner info", id: "jobdiff-none" }, "No bucket changed by 0.05 ms per step or more on any rank."),
    notes.length ? h("ul", { class: "recs muted", id: "jobdiff-notes" }, notes.map((n) => h("li", null, n))) : null,
    h("div", { id: "jobdiff-buckets" }, dataTable(bucketCols, buckets.map((x) => ({ ...x, name: String(x.label ?? x.bucket) })),
      { caption: "The job's step by bucket (mean rank)", filterKeys: ["label"], exportName: "jobdiff_buckets", rowClass: (r) => deltaClass(r.delta_ms) })),
    h("div", { id: "jobdiff-ranks" }, dataTable(rankCols, rankRows,
      { caption: "Per rank (Δ of B's rank against A's same rank)", filterKeys: ["name", "worker_a", "worker_b"], exportName: "jobdiff_ranks", sortKey: "rank", sortDesc: false, rowClass: (r) => deltaClass(r.step_delta_ms) })),
    h("div", { id: "jobdiff-groups" }, dataTable(groupCols, groupRows,
      { caption: "Collectives per process group (exposed time per step)", filterKeys: ["name", "group"], exportName: "jobdiff_groups", rowClass: (r) => deltaClass(r.delta_ms) })),
    h("div", { id: "jobdiff-kernels" }, dataTable(kernelCols, kernelRows,
      { caption: "Kernels (largest change first; a kernel renamed between the jobs is one row, aligned by its place under the same op)", filterKeys: ["name", "path"], exportName: "jobdiff_kernels", rowClass: (r) => `align-${r.align} ` + deltaClass(r.delta_ms) })));
}
