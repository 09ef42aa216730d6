// The text of one file's loading progress (pure: unit-tested).
const MB = (b: number) => (b / 1e6).toFixed(b >= 1e8 ? 0 : 1) + " MB";

/** "Reading f: ≈ 120 MB of 837 MB (68 MB/s, about 10 s left) · 3 of 9 files loaded", or null. */
export function fileProgressText(st: any): string | null {
  if (!st || typeof st !== "object") return null;
  const all = st.all && typeof st.all.files_total === "number" ? ` · ${st.all.files_done ?? 0} of ${st.all.files_total} files loaded` : "";
  const name = String(st.file ?? "the trace");
  if (st.state === "reading") {
    const rate = Number(st.rate_bps) || 0, eta = Number(st.eta_s);
    return `Reading ${name}: ≈ ${MB(Number(st.bytes_done_est) || 0)} of ${MB(Number(st.bytes_total) || 0)}` +
      (rate ? ` (${(rate / 1e6).toFixed(1)} MB/s` + (isFinite(eta) ? `, about ${Math.max(1, Math.round(eta))} s left)` : ")") : "") + all;
  }
  if (st.state === "queued") return `Waiting to read ${name} (${MB(Number(st.bytes_total) || 0)})` + (st.position ? `, place ${st.position} in the queue` : "") + all;
  return null;
}

/** "3 of 8 workers summarized, about 4 s left…" from a run-level route's pending answer (`pending`, `progress`
 * with `eta_s`: the server's estimate from the throughput of the summaries it computed, null before the first). */
export function summarizingText(d: any): string {
  const pending = Array.isArray(d?.pending) ? d.pending.length : 0;
  const total = Number(d?.progress?.total) || pending;
  const done = Number(d?.progress?.done) || Math.max(0, total - pending);
  const eta = d?.progress?.eta_s;
  const left = typeof eta === "number" && isFinite(eta) ? (eta < 1 ? "less than a second left" : `about ${Math.round(eta)} s left`)
    : "estimating the time left";
  return `${done} of ${total} workers summarized, ${left}… (\`gpuscope summarize LOGDIR\` computes the summaries ahead of time)`;
}

/** The workers still read, named while few: "w1, w2" or "w1, w2, w3 and 61 more". */
export function pendingNames(names: string[], shown = 6): string {
  return names.length <= shown ? names.join(", ") : `${names.slice(0, shown).join(", ")} and ${names.length - shown} more`;
}
