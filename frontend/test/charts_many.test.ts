// Label thinning and the heatmap colour scale of the many-category charts (distributed view).
import { test } from "node:test";
import assert from "node:assert/strict";
import { strideFor, heatColor } from "../src/charts";

test("strideFor: labels never closer than their width", () => {
  assert.equal(strideFor(2, 280, 40), 1);               // two wide slots: every label
  assert.equal(strideFor(16, 35, 40), 2);               // 16 bars in 560 units, 40-unit labels
  const k = strideFor(256, 564 / 256, 26);
  assert.ok(k * (564 / 256) >= 26 + 6, String(k));       // drawn labels are a label width apart
  assert.ok(256 / k >= 8, String(k));                     // and still a few dozen at 256 workers
  assert.equal(strideFor(0, 10, 10), 1);
});

test("heatColor: light for low values, dark for high, clamped", () => {
  const lum = (c: string) => { const [r, g, b] = c.match(/\d+/g)!.map(Number); return 0.3 * r + 0.59 * g + 0.11 * b; };
  assert.ok(lum(heatColor(0)) > lum(heatColor(0.5)) && lum(heatColor(0.5)) > lum(heatColor(1)));
  assert.equal(heatColor(-1), heatColor(0));
  assert.equal(heatColor(2), heatColor(1));
});
