import { test } from "node:test";
import assert from "node:assert/strict";
import { otherRun, otherWorker } from "../src/views/diff";

test("diff compares with another run by default", () => {
  assert.equal(otherRun(["a", "b", "c"], "b"), "a");
  assert.equal(otherRun(["a", "b", "c"], "a"), "b");
  assert.equal(otherRun(["a"], "a"), "a");
});

test("diff compares with another worker of the same run, the same worker of another run", () => {
  assert.equal(otherWorker(["w0", "w1"], "w0", true), "w1");
  assert.equal(otherWorker(["w0"], "w0", true), "w0");
  assert.equal(otherWorker(["w0", "w1"], "w1", false), "w1");
  assert.equal(otherWorker(["x", "y"], "w1", false), "x");
});
