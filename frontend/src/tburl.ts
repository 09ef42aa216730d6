// The view state in TensorBoard's own URL. TensorBoard's plugin host answers iframe plugins'
// "experimental.GetURLPluginData" (the `p.<plugin>.<key>` entries of its URL hash) but offers no
// way to write them; so the state is read from there on start, mirrored into the host page's URL
// when it is same-origin (plain history.replaceState, no navigation), and "copy link" builds it.
import type { State } from "./state";

const PLUGIN = "gpuscope";
const PREFIX = `p.${PLUGIN}.`;

/** The p.gpuscope.* entries of a URL's hash. */
export function parseHostHash(hash: string): State {
  const out: State = {};
  for (const part of hash.replace(/^#/, "").split("&")) {
    const i = part.indexOf("=");
    if (i < 0) continue;
    try {
      const k = decodeURIComponent(part.slice(0, i)), v = decodeURIComponent(part.slice(i + 1));
      if (k.startsWith(PREFIX) && v) out[k.slice(PREFIX.length)] = v;
    } catch { /* malformed escape: skipped */ }
  }
  return out;
}

/** This plugin's state in TensorBoard's URL: read from the host page when same-origin (TensorBoard
 * 2.x's own GetURLPluginData answers from an in-memory hash that misses the real URL), else asked
 * through the plugin host's message channel. Null when there is none. */
export async function readHostState(timeoutMs = 1500): Promise<State | null> {
  const w = hostWindow();
  if (w) { const st = parseHostHash(w.location.hash); if (Object.keys(st).length) return st; }
  return askHost(timeoutMs);
}

/** Asks the TensorBoard host for this plugin's URL data; null when there is no host or no answer. */
function askHost(timeoutMs: number): Promise<State | null> {
  if (window.parent === window) return Promise.resolve(null);
  return new Promise((resolve) => {
    const ch = new MessageChannel();
    const done = (v: State | null) => { clearTimeout(timer); ch.port1.close(); resolve(v); };
    const timer = setTimeout(() => done(null), timeoutMs);
    ch.port1.onmessage = (ev) => {
      let m: any;
      try { m = JSON.parse(String(ev.data)); } catch { return; }
      if (!m || typeof m !== "object") return;
      if (!m.isReply) { ch.port1.postMessage(JSON.stringify({ type: m.type, id: m.id, payload: null, error: null, isReply: true })); return; }
      if (m.id !== 0) return;
      const p = m.payload && typeof m.payload === "object" && !m.error ? m.payload : null;
      const out: State = {};
      if (p) for (const [k, v] of Object.entries(p)) if (typeof v === "string" && v) out[k] = v;
      done(Object.keys(out).length ? out : null);
    };
    ch.port1.start();
    try { window.parent.postMessage("experimental.bootstrap", "*", [ch.port2]); } catch { done(null); return; }
    ch.port1.postMessage(JSON.stringify({ type: "experimental.GetURLPluginData", id: 0, payload: { pluginName: PLUGIN }, error: null, isReply: false }));
  });
}

/** `base` (a URL) with its hash's p.gpuscope.* entries replaced by `st` (other entries kept). */
export function hostURL(base: string, st: State): string {
  const u = new URL(base);
  const parts = u.hash.replace(/^#/, "").split("&").filter((x) => x && !decodeURIComponent(x.split("=")[0]).startsWith(PREFIX));
  if (!parts.length || parts[0].includes("=")) parts.unshift(PLUGIN);
  for (const [k, v] of Object.entries(st)) if (v !== undefined && v !== "") parts.push(encodeURIComponent(PREFIX + k) + "=" + encodeURIComponent(v));
  u.hash = parts.join("&");
  return u.href;
}

/** The host page when it is TensorBoard's and same-origin, else null. */
function hostWindow(): Window | null {
  try {
    if (window.parent !== window && window.parent.location.origin === location.origin) return window.parent;
  } catch { /* cross-origin */ }
  return null;
}

/** Mirrors the state into the host page's URL (so F5 and bookmarks keep it) when that is allowed. */
export function writeHostState(st: State): void {
  const w = hostWindow();
  if (!w) return;
  try {
    const cur = w.location.href;
    const first = w.location.hash.replace(/^#/, "").split("&")[0];
    if (first && first !== PLUGIN && !first.startsWith(PREFIX)) return; // another dashboard is shown
    const next = hostURL(cur, st);
    if (next !== cur) w.history.replaceState(w.history.state, "", next);
  } catch { /* the host refused: the copy-link button still works */ }
}

/** A link that opens TensorBoard on this view (the host's URL when reachable, else this page's). */
export function shareLink(st: State): string {
  const w = hostWindow();
  return w ? hostURL(w.location.href, st) : (() => { const u = new URL(location.href); u.hash = new URLSearchParams(st as Record<string, string>).toString(); return u.href; })();
}
