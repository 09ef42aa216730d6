import { test } from "node:test";
import assert from "node:assert/strict";
import { fmtRunTime, topBuckets } from "../src/views/history";

test("fmtRunTime shows a run's time in UTC to the minute, or a dash", () => {
  assert.equal(fmtRunTime(1790900000000 * 1e6), "2026-10-02 00:13");
  assert.equal(fmtRunTime(0), "–");
  assert.equal(fmtRunTime(null), "–");
});

test("topBuckets names the largest buckets with their labels, skipping empty ones", () => {
  const b = { compute: 3.64, exposed_comm: 1.1, other: 0, data_loading: 0.2, host_sync: 0.05 };
  assert.equal(topBuckets(b, { compute: "Compute (kernels)" }), "Compute (kernels) 3.64 ms · exposed comm 1.10 ms · data loading 0.200 ms");
  assert.equal(topBuckets({}, {}), "–");
  assert.equal(topBuckets(null, {}), "–");
});
