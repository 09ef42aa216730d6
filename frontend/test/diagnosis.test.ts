import { test } from "node:test";
import assert from "node:assert/strict";
import { rankBuckets, fmtMs, LedgerBucket } from "../src/views/ledger";
import { pathRows, pathMarks, mainWorker, pathWorkers } from "../src/views/critical";
import { asCaveats } from "../src/views/verdict";

const b = (key: string, ms: number | null, rec: number | null): LedgerBucket => ({ key, label: key, ms, recoverable_ms: rec, share: null, fix: "", advice: [], reason: null });

test("rankBuckets: most recoverable first, then ms; buckets without a number last", () => {
  const out = rankBuckets([b("compute", 40, 0), b("sync_skew", null, null), b("data_loading", 20, 20), b("other", 1, 1), b("exposed_comm", 30, 20)]);
  assert.deepEqual(out.map((x) => x.key), ["exposed_comm", "data_loading", "other", "compute", "sync_skew"]);
});

test("fmtMs: three significant decimals at most, a dash when unknown", () => {
  assert.deepEqual([fmtMs(0), fmtMs(0.1844), fmtMs(4.0953), fmtMs(15.39), fmtMs(123.4), fmtMs(null)], ["0 ms", "0.184 ms", "4.10 ms", "15.4 ms", "123 ms", "–"]);
});

test("pathRows / pathMarks: work on a rank, collectives on the late rank, marks for one worker only", () => {
  const segs = [
    { kind: "work", worker: "w2", rank: 2, ms: 50, start_us: 0, end_us: 50000, before: null, why: "data loading +40.0 ms" },
    { kind: "collective", name: "nccl:all_reduce", call: 1, group: "0 (size 4)", late_worker: "w2", late_rank: 2, waiters: 3,
      wait_ms_median: 40, wait_ms_total: 120, transfer_ms: 5, start_us: 50000, end_us: 55000 },
    { kind: "work", worker: "w1", rank: 1, ms: 15, start_us: 55000, end_us: 70000, before: "nccl:all_reduce #1 on group 0", why: null },
  ];
  const rows = pathRows(segs);
  assert.deepEqual(rows.map((r) => [r.rank, r.kind, r.ms]), [["2", "work", 50], ["2", "collective", 5], ["1", "work", 15]]);
  assert.equal(rows[0].segment, "work (data loading +40.0 ms)");
  assert.equal(rows[1].segment, "late at nccl:all_reduce #1 on group 0 (size 4) · 3 ranks waited 40.0 ms (median), 120 ms in all · transfer");
  assert.equal(mainWorker(rows), "w2");
  assert.deepEqual(pathWorkers(rows), ["w2", "w1"]);
  assert.deepEqual(pathWorkers(rows.slice(2).concat(rows.slice(0, 2))), ["w2", "w1"]);
  const m = pathMarks(segs, "w2");
  assert.deepEqual(m.marks.map((x) => [x.a, x.b]), [[0, 50000], [50000, 55000]]);
  assert.deepEqual(m.ranks, ["2", "1"]);
  assert.equal(m.ms, 50);
  assert.deepEqual(pathMarks(segs, "w0").marks, []);
});

test("asCaveats: text, key and withholds kept; entries without text dropped", () => {
  const out = asCaveats([{ key: "missing_ranks", text: "3 of 4 ranks present", withholds: true }, { key: "x" }, null,
    { key: "hosts", text: "2 hosts", withholds: "yes" }]);
  assert.deepEqual(out, [{ key: "missing_ranks", text: "3 of 4 ranks present", withholds: true }, { key: "hosts", text: "2 hosts", withholds: false }]);
  assert.deepEqual(asCaveats(undefined), []);
});
