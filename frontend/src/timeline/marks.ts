// Time spans marked over the timeline's event area (the critical path's segments on this worker).

/** A marked span in the timeline's µs, with what it is (shown in the status and on hover). */
export interface Mark { a: number; b: number; label: string }

/** Draws the marks as translucent bands over the plot area with a solid bar along its top edge; returns how
 * many are in view (at least one pixel wide, so a 1 ns segment still shows). */
export function drawMarks(c: CanvasRenderingContext2D, marks: Mark[], xOf: (t: number) => number, x0: number, x1: number, y0: number, y1: number): number {
  let shown = 0;
  c.save();
  for (const m of marks) {
    const xa = Math.max(x0, xOf(m.a)), xb = Math.min(x1, Math.max(xOf(m.b), xOf(m.a) + 1));
    if (xb <= xa) continue;
    shown++;
    c.fillStyle = "rgba(229,57,53,.13)"; c.fillRect(xa, y0, xb - xa, y1 - y0);
    c.fillStyle = "rgba(229,57,53,.9)"; c.fillRect(xa, y0, xb - xa, 4);
  }
  c.restore();
  return shown;
}

/** The mark under a time, if any (the latest-starting one). */
export function markAt(marks: Mark[], t: number): Mark | null {
  let best: Mark | null = null;
  for (const m of marks) if (m.a <= t && t <= m.b && (!best || m.a > best.a)) best = m;
  return best;
}
