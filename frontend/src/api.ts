// Talks to the plugin's routes (relative URLs: the iframe's base is /data/plugin/gpuscope/).

export class ApiError extends Error {
  constructor(message: string, readonly status: number, readonly route: string) { super(message); }
}

let pending = 0;
const listeners: ((n: number) => void)[] = [];
/** Subscribes to the number of requests in flight (drives the progress bar). */
export function onPending(fn: (n: number) => void): void { listeners.push(fn); }
function bump(d: number): void { pending += d; for (const l of listeners) l(pending); }

/** Builds a route URL with query parameters (undefined/empty values skipped). */
export function url(route: string, params: Record<string, string | number | undefined | null> = {}): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") q.set(k, String(v));
  const qs = q.toString();
  return "./" + route + (qs ? "?" + qs : "");
}

const cache = new Map<string, Promise<any>>();

/** GETs JSON; a non-2xx answer becomes an ApiError carrying the backend's `error` text. */
export async function getJSON<T = any>(route: string, params: Record<string, string | number | undefined | null> = {}, opts: { cache?: boolean } = {}): Promise<T> {
  const u = url(route, params);
  if (opts.cache && cache.has(u)) return cache.get(u)!;
  const p = fetchJSON<T>(u, route);
  if (opts.cache) { cache.set(u, p); p.catch(() => cache.delete(u)); }
  return p;
}

async function fetchJSON<T>(u: string, route: string): Promise<T> {
  bump(1);
  try {
    let res: Response;
    try { res = await fetch(u, { headers: { Accept: "application/json" } }); }
    catch (e) { throw new ApiError(`Cannot reach the TensorBoard server (${route}): ${(e as Error).message}`, 0, route); }
    const text = await res.text();
    let body: any = null;
    try { body = text ? JSON.parse(text) : null; } catch { /* not JSON */ }
    if (!res.ok) {
      const msg = body && typeof body.error === "string" ? body.error : text.slice(0, 300) || res.statusText;
      throw new ApiError(`${route}: ${msg} (HTTP ${res.status})`, res.status, route);
    }
    if (body === null) throw new ApiError(`${route}: the server sent something that is not JSON`, res.status, route);
    return body as T;
  } finally { bump(-1); }
}

/** How often a view asks again while a run's per-worker summaries are still being read or computed (ms): soon at
 * first (a small run's summaries take a fraction of a second), then every PENDING_POLL_MS. */
export const PENDING_POLL_MS = 1000;
export function pendingPollMs(i: number): number { return Math.min(PENDING_POLL_MS, 200 * 2 ** i); }

/** Whether an answer names workers whose summaries are still being computed (`pending`). */
export function isPending(d: any): boolean { return Array.isArray(d?.pending) && d.pending.length > 0; }

/** GETs `route` (cached) until `still(answer)` is false: each pending answer goes to `onPending`, is forgotten and
 * asked again after `pendingPollMs`. The complete answer, or null once `alive()` is false (the view went away). */
export async function getWhenReady<T = any>(route: string, params: Record<string, string | number | undefined | null>, alive: () => boolean,
  opts: { onPending?: (d: any) => void | Promise<void>; still?: (d: any) => boolean } = {}): Promise<T | null> {
  const still = opts.still ?? isPending;
  for (let i = 0; ; i++) {
    const d = await getJSON<T>(route, params, { cache: true });
    if (!alive()) return null;
    if (!still(d)) return d;
    forget(route, params);
    await opts.onPending?.(d);
    await new Promise((r) => setTimeout(r, pendingPollMs(i)));
    if (!alive()) return null;
  }
}

/** Forgets one cached answer (a partial one that will be asked again). */
export function forget(route: string, params: Record<string, string | number | undefined | null> = {}): void { cache.delete(url(route, params)); }

/** Forgets cached answers (after a reload of the runs). */
export function clearCache(): void { cache.clear(); }
