// URL-hash state (run, worker, span, view and per-view keys), so a view can be bookmarked.

export type State = Record<string, string>;

/** Parses `#k=v&k2=v2` into a state object. */
export function readHash(hash: string = location.hash): State {
  const out: State = {};
  new URLSearchParams(hash.replace(/^#/, "")).forEach((v, k) => { out[k] = v; });
  return out;
}

/** Serialises state in a fixed key order (stable URLs). */
export function writeHash(st: State): string {
  const order = ["run", "worker", "span", "view"];
  const keys = Object.keys(st).filter((k) => st[k] !== "" && st[k] !== undefined)
    .sort((a, b) => (order.indexOf(a) + 1 || 99) - (order.indexOf(b) + 1 || 99) || a.localeCompare(b));
  const q = new URLSearchParams();
  for (const k of keys) q.set(k, st[k]);
  return "#" + q.toString();
}
