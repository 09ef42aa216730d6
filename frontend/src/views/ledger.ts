// The recoverable-time ledger ("where the step time goes"): each bucket of the step with its ms, share,
// what a fix could win back, the usual fix and the advice texts that belong to it (docs/diagnosis.md).
import { h, mount, append, fmtPct } from "../dom";
import { exportButtons } from "../export";
import { segmented } from "./widgets";

/** One ranked bucket as the Overview JSON's `ledger.buckets` holds it. */
export interface LedgerBucket {
  key: string; label: string; ms: number | null; recoverable_ms: number | null; share: number | null;
  fix: string; advice: string[]; reason: string | null;
  /** The compute bucket's split by the roofline: below / near the bound, no roof (the below part with causes). */
  split?: any[];
}

/** A ranked ledger: the worker's (`ledger`) or the run's (`run_ledger.critical` / `.mean`). */
export interface Ledger { average_wall_ms?: number; buckets: LedgerBucket[]; recoverable_ms?: number; other_advice?: string[]; reason?: string | null }

/** Milliseconds with three significant decimals at most ("12.3 ms", "0.184 ms"); "–" when unknown. */
export function fmtMs(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !isFinite(ms)) return "–";
  const a = Math.abs(ms);
  if (a === 0) return "0 ms";
  return (a >= 100 ? ms.toFixed(0) : a >= 10 ? ms.toFixed(1) : a >= 1 ? ms.toFixed(2) : ms.toFixed(3)) + " ms";
}

/** The buckets by recoverable ms (most first), then ms; buckets without a number (a reason) last. */
export function rankBuckets(bs: LedgerBucket[]): LedgerBucket[] {
  const v = (x: number | null) => (typeof x === "number" && isFinite(x) ? x : -1);
  return bs.slice().sort((a, b) => v(b.recoverable_ms) - v(a.recoverable_ms) || v(b.ms) - v(a.ms));
}

function asLedger(v: any): Ledger | null {
  if (!v || typeof v !== "object" || !Array.isArray(v.buckets)) return null;
  const buckets = v.buckets.filter((b: any) => b && typeof b === "object" && typeof b.key === "string").map((b: any): LedgerBucket => ({
    key: b.key, label: typeof b.label === "string" ? b.label : b.key,
    ms: typeof b.ms === "number" ? b.ms : null, recoverable_ms: typeof b.recoverable_ms === "number" ? b.recoverable_ms : null,
    share: typeof b.share === "number" ? b.share : null, fix: typeof b.fix === "string" ? b.fix : "",
    advice: Array.isArray(b.advice) ? b.advice.map(String) : [], reason: typeof b.reason === "string" ? b.reason : null,
    split: Array.isArray(b.split) ? b.split : undefined,
  }));
  return { average_wall_ms: v.average_wall_ms, buckets, recoverable_ms: v.recoverable_ms,
    other_advice: Array.isArray(v.other_advice) ? v.other_advice.map(String) : [], reason: typeof v.reason === "string" ? v.reason : null };
}

/** The ledger table: one row per bucket, ranked by recoverable ms. */
export function ledgerTable(led: Ledger, name: string, extraAdvice: Record<string, string[]> = {}): HTMLElement {
  const rows = rankBuckets(led.buckets).map((b) => (b.advice.length || !extraAdvice[b.key]?.length ? b : { ...b, advice: extraAdvice[b.key] }));
  const table = h("table", { class: "data-table ledger", id: "ledger-table" },
    h("thead", null, h("tr", null, h("th", null, "Bucket"), h("th", { class: "num" }, "ms per step (average)"), h("th", { class: "num" }, "% of step"),
      h("th", { class: "num", title: "what removing or overlapping the bucket's cause could win back (an upper bound)" }, "Recoverable ms"),
      h("th", null, "Usual fix"))),
    h("tbody", null, rows.map((b) => h("tr", { "data-key": b.key, class: b.ms === null ? "unmeasured" : (b.recoverable_ms ?? 0) > 0 ? "" : "nothing" },
      h("td", null, b.label),
      h("td", { class: "num" }, fmtMs(b.ms)),
      h("td", { class: "num" }, b.ms === null ? "–" : fmtPct(b.share)),
      h("td", { class: "num rec" }, fmtMs(b.recoverable_ms)),
      h("td", { class: "fix" }, b.ms === null && b.reason ? h("div", { class: "reason" }, "Not measured: ", b.reason) : null,
        b.fix && !b.split ? h("div", null, b.fix) : null,
        b.split ? splitList(b.split) : null,
        b.advice.length ? h("ul", { class: "recs advice" }, b.advice.map((a) => h("li", null, a))) : null)))));
  const total = typeof led.recoverable_ms === "number" ? led.recoverable_ms : null;
  return h("div", { class: "ledger-box" },
    h("div", { class: "table-tools" },
      h("span", { class: "table-info", id: "ledger-total" }, typeof led.average_wall_ms === "number" ? `Average step ${fmtMs(led.average_wall_ms)}` : "",
        total !== null ? ` · at most ${fmtMs(total)} recoverable in all (the buckets do not overlap)` : ""),
      exportButtons(() => name, () => ({ header: ["bucket", "ms_per_step", "share", "recoverable_ms", "fix", "advice", "reason"],
        rows: rows.map((b) => [b.key, b.ms, b.share, b.recoverable_ms, b.fix, b.advice.join(" | "), b.reason]) }))),
    h("div", { class: "table-scroll" }, table));
}

/** The compute bucket's split by the roofline: each part with its ms, the below-bound part's causes and fixes. */
function splitList(split: any[]): HTMLElement {
  return h("ul", { class: "recs split", id: "ledger-compute-split" }, split.filter((p) => p && typeof p.ms === "number").map((p) =>
    h("li", { "data-part": String(p.part) }, `${p.label}: ${fmtMs(p.ms)}`, typeof p.recoverable_ms === "number" ? ` (recoverable ${fmtMs(p.recoverable_ms)})` : "",
      Array.isArray(p.causes) && p.causes.length ? h("ul", null, p.causes.map((c: any) => h("li", null, `${c.label}: ${fmtMs(c.lost_ms)} lost. ${c.fix}`))) : null)));
}

/** The Overview's ledger section: this worker's ledger and, for a run of several workers, the run-level ones. */
export function ledgerSection(d: any, run: string, worker: string, pick: string | undefined, onPick: (v: string) => void): HTMLElement {
  const own = asLedger(d?.ledger);
  const rl = d?.run_ledger && typeof d.run_ledger === "object" ? d.run_ledger : null;
  const crit = asLedger(rl?.critical), mean = asLedger(rl?.mean);
  const pending: string[] = Array.isArray(rl?.pending) ? rl.pending.map(String) : [];
  const runNotes: string[] = Array.isArray(rl?.notes) ? rl.notes.map(String) : [];
  const choices: [string, string][] = [];
  // the mean first: the default, as `gpuscope diagnose` leads with it (waiting for a straggler is its sync skew;
  // the ledger of the rank that set a step holds little of what the others lost to it)
  if (mean) choices.push(["mean", `Run: mean of ${typeof rl?.workers === "number" ? rl.workers : "the"} ranks`]);
  if (crit) choices.push(["critical", "Run: the rank that set each step"]);
  if (own) choices.push(["worker", `This worker (${worker})`]);
  const box = h("section", { class: "section", id: "recommendations" }, h("h3", null, "Where the step time goes"));
  if (!choices.length) {
    const recs: string[] = Array.isArray(d?.recommendations) ? d.recommendations.map(String) : [];
    append(box, [h("p", { class: "muted", id: "ledger-none" }, d?.ledger?.reason ?? "No ledger for this trace."),
      recs.length ? h("ul", { class: "recs" }, recs.map((r) => h("li", null, r))) : null]);
    return box;
  }
  const cur = choices.some(([k]) => k === pick) ? pick! : choices[0][0];
  const led = cur === "critical" ? crit! : cur === "mean" ? mean! : own!;
  const body = h("div", { id: "ledger" });
  const otherAdvice = own?.other_advice ?? [];
  mount(body, led.reason ? h("p", { class: "muted" }, led.reason) : null,
    cur === "critical" ? h("p", { class: "muted", id: "ledger-critical" }, "Per step, the ledger of the rank the others waited for (the longest busy time); waiting for other ranks is sync skew. ",
      criticalRanks(rl?.critical?.steps))
      : cur === "mean" ? h("p", { class: "muted" }, "Each bucket averaged over the ranks that recorded the step.")
        : rl ? h("p", { class: "muted" }, "One trace cannot tell waiting for other ranks from transferring: the run-level ledgers split them.") : null,
    ledgerTable(led, `ledger-${run}-${cur === "worker" ? worker : cur}`, cur === "worker" || !own ? {}
      : Object.fromEntries(own.buckets.filter((b) => b.advice.length).map((b) => [b.key, b.advice.map((a) => `${worker}: ${a}`)]))));
  append(box, [
    choices.length > 1 ? h("div", { class: "toolbar" }, segmented("Ledger of", choices, cur, onPick)) : null,
    pending.length ? h("div", { class: "banner info", id: "ledger-pending", role: "status" },
      `The run-level ledger waits for ${pending.length} worker summar${pending.length === 1 ? "y" : "ies"}: `, pending.join(", ")) : null,
    body,
    runNotes.length && cur !== "worker" ? h("ul", { class: "recs muted" }, runNotes.map((n) => h("li", null, n))) : null,
    otherAdvice.length ? h("div", { id: "other-advice" }, h("h4", null, "Other advice"), h("ul", { class: "recs" }, otherAdvice.map((r) => h("li", null, r)))) : null]);
  return box;
}

/** "Set by node0_rank00002 (steps 1, 2, 3)": which worker's ledger each step of the critical ledger is. */
function criticalRanks(steps: any): string {
  const by = new Map<string, string[]>();
  for (const st of Array.isArray(steps) ? steps : []) {
    if (typeof st?.worker !== "string") continue;
    if (!by.has(st.worker)) by.set(st.worker, []);
    by.get(st.worker)!.push(String(st.step));
  }
  const parts = [...by.entries()].sort((a, b) => b[1].length - a[1].length)
    .map(([w, ss]) => `${w} (step${ss.length === 1 ? "" : "s"} ${ss.length > 6 ? ss.slice(0, 6).join(", ") + ", …" : ss.join(", ")})`);
  return parts.length ? "Set by " + (parts.length > 4 ? parts.slice(0, 4).join("; ") + `; and ${parts.length - 4} more` : parts.join("; ")) + "." : "";
}
