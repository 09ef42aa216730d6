// The plugin's entry module: TensorBoard's plugin_entry.html imports it and calls render().
import { h, mount, arrowTabs, rove } from "./dom";
import { getJSON, onPending, ApiError, clearCache } from "./api";
import { readHash, writeHash, State } from "./state";
import { readHostState, writeHostState, shareLink } from "./tburl";
import { fileProgressText } from "./progress";
import { CSS } from "./style";
import type { Ctx } from "./ctx";
import { overviewView } from "./views/overview";
import { operatorsView } from "./views/operators";
import { kernelsView } from "./views/kernels";
import { rooflineView } from "./views/roofline";
import { timelineView } from "./views/timeline";
import { memoryView } from "./views/memory";
import { modulesView } from "./views/modules";
import { distributedView } from "./views/distributed";
import { diffView } from "./views/diff";
import { historyView } from "./views/history";

type ViewFn = (ctx: Ctx, el: HTMLElement) => Promise<void> | void;
const VIEWS: [string, string, ViewFn, boolean][] = [
  // id, label, render, needs a single worker
  ["overview", "Overview", overviewView, true],
  ["operators", "Operators", operatorsView, true],
  ["kernels", "Kernels", kernelsView, true],
  ["roofline", "Roofline", rooflineView, true],
  ["timeline", "Timeline", timelineView, true],
  ["memory", "Memory", memoryView, true],
  ["modules", "Modules", modulesView, true],
  ["distributed", "Distributed", distributedView, false],
  ["diff", "Diff", diffView, true],
  ["history", "History", historyView, false],
];

interface RunsAnswer { runs: string[]; loading?: boolean; [k: string]: unknown }

/** Builds the whole UI into document.body. */
export function render(): void {
  if (document.getElementById("gs-app")) return;
  const style = document.createElement("style");
  style.textContent = CSS;
  document.head.appendChild(style);
  const app = new App();
  document.body.appendChild(app.root);
  (window as any).__gpuscope = app.debug;
  // TensorBoard's reload (its button and its auto-reload timer) calls reload() on our iframe element
  try { if (window.frameElement) (window.frameElement as any).reload = () => void app.followHostReload(); } catch { /* not same-origin */ }
  void app.start();
}

/** State keys that refine the view in place (filters, zoom windows, search text, chart metric, sort and
 * grouping): they replace the URL's history entry instead of adding one (`Ctx.set`). */
const REFINEMENTS = new Set(["q", "mq", "find", "find_of", "find_shape", "find_op", "range", "win", "size", "metric", "group_by", "align", "ranks", "device", "ledger", "mtracks", "ends"]);

class App {
  root = h("div", { id: "gs-app" });
  private st: State = readHash();
  private runs: string[] = [];
  private workers: string[] = [];
  /** workers none of whose files could be read (/workers' `unreadable`), with the reason */
  private unreadable: Record<string, string> = {};
  private spans: string[] = [];
  private runSel = h("select", { id: "gs-run", "aria-label": "run" }) as HTMLSelectElement;
  private workerSel = h("select", { id: "gs-worker", "aria-label": "worker" }) as HTMLSelectElement;
  private spanSel = h("select", { id: "gs-span", "aria-label": "span" }) as HTMLSelectElement;
  private tabs = h("nav", { class: "tabs", role: "tablist" });
  private progress = h("div", { class: "progress", id: "gs-progress", role: "progressbar" });
  private banners = h("div", { id: "gs-banners" });
  private notice = h("div");
  private linkBox = h("div");
  private fileProg = h("div", { id: "gs-file-progress", class: "file-progress", role: "status" });
  private main = h("main", { id: "gs-main" });
  private themeBtn = h("button", { type: "button", class: "btn small", id: "gs-theme", title: "theme: follows TensorBoard (auto), light or dark" });
  private generation = 0;
  /** The next `setHash` adds a history entry (a move to another view, selection or drill-down: Back returns
   * from it) instead of replacing the current one (refinements: filters, zoom, search text). */
  private pushNext = false;
  private loading = false;
  private pendingCount = 0;
  debug: Record<string, any> = { renders: 0, ready: false };

  constructor() {
    this.root.append(
      h("header", { class: "topbar" }, h("span", { class: "brand" }, "gpuscope"),
        h("label", null, "Run", this.runSel), h("label", null, "Worker", this.workerSel), h("label", null, "Span", this.spanSel),
        h("span", { style: "flex:1" }),
        h("button", { type: "button", class: "btn small", id: "gs-link", title: "copy a link that opens this view with its options", onclick: () => this.copyLink() }, "Copy link"),
        h("button", { type: "button", class: "btn small", id: "gs-reload", title: "rescan the log directory", onclick: () => this.reload() }, "⟳ Reload"),
        this.themeBtn),
      this.linkBox, this.progress, this.banners, this.notice, this.tabs, this.fileProg, this.main);
    // a new selection ends the view shown (`retire`) at once: while the new run's workers and spans are asked, the
    // old view's pending work must not ask anything more (it would ask for the new run with no worker or span)
    this.runSel.addEventListener("change", () => { this.retire(); this.pushNext = true; this.st.run = this.runSel.value; delete this.st.worker; delete this.st.span; void this.loadWorkers(); });
    this.workerSel.addEventListener("change", () => { this.retire(); this.pushNext = true; this.st.worker = this.workerSel.value; delete this.st.span; void this.loadSpans(); });
    this.spanSel.addEventListener("change", () => { this.pushNext = true; this.st.span = this.spanSel.value; this.show(); });
    this.themeBtn.addEventListener("click", () => {
      const modes = ["auto", "light", "dark"];
      const cur = localStorage.getItem("gpuscope.theme") || "auto";
      localStorage.setItem("gpuscope.theme", modes[(modes.indexOf(cur) + 1) % 3]);
      this.applyTheme();
    });
    arrowTabs(this.tabs);
    onPending((n) => { this.pendingCount = n; this.paintProgress(); });
    // a hash typed in, or Back/Forward over the entries `setHash` pushed (popstate; hashchange too where the
    // fragment differs): the view follows the URL
    const follow = () => {
      const nst = readHash();
      if (writeHash(nst) === writeHash(this.st)) return;
      const changedSel = nst.run !== this.st.run || nst.worker !== this.st.worker || nst.span !== this.st.span;
      this.st = nst;
      this.pushNext = false;
      if (this.runs.length) this.checkRun();
      if (changedSel) { this.retire(); void this.loadWorkers(); } else this.show();
    };
    window.addEventListener("hashchange", follow);
    window.addEventListener("popstate", follow);
    this.applyTheme();
    this.watchTensorBoardTheme();
  }

  /** The view shown stops: its `ctx.alive()` turns false, so it draws and asks nothing more (`show` starts the next). */
  private retire(): void { this.generation++; }

  private paintProgress(): void { this.progress.classList.toggle("on", this.loading || this.pendingCount > 0); }

  private isDark(): boolean {
    const mode = localStorage.getItem("gpuscope.theme") || "auto";
    if (mode !== "auto") return mode === "dark";
    try {
      const pb = window.parent !== window ? window.parent.document.body : null;
      if (pb) return pb.classList.contains("dark-mode");
    } catch { /* cross-origin parent: fall through */ }
    return window.matchMedia?.("(prefers-color-scheme: dark)").matches ?? false;
  }

  private applyTheme(): void {
    const dark = this.isDark();
    const was = document.body.classList.contains("dark");
    document.body.classList.toggle("dark", dark);
    this.themeBtn.textContent = "◐ " + (localStorage.getItem("gpuscope.theme") || "auto");
    if (was !== dark && this.debug.ready) this.show();
  }

  private watchTensorBoardTheme(): void {
    try {
      if (window.parent !== window) new MutationObserver(() => this.applyTheme()).observe(window.parent.document.body, { attributes: true, attributeFilter: ["class"] });
    } catch { /* not same-origin */ }
    window.matchMedia?.("(prefers-color-scheme: dark)").addEventListener?.("change", () => this.applyTheme());
  }

  /** Writes the state into this page's URL (`push`: as a new history entry, so the browser's Back and Forward
   * move between gpuscope's views and drill-downs inside TensorBoard's tab) and mirrors it into TensorBoard's. */
  private setHash(push = false): void {
    const hsh = writeHash(this.st);
    if (hsh !== location.hash && !(hsh === "#" && !location.hash)) {
      // an absolute URL: a bare "#..." would resolve against <base href> and change the path
      const u = new URL(location.href);
      u.hash = hsh;
      // the first state (the URL's own, completed with defaults) replaces: Back from it leaves gpuscope
      if (push && this.debug.ready) history.pushState(null, "", u.href);
      else history.replaceState(null, "", u.href);
    }
    // after Back/Forward this page's URL is already the state: TensorBoard's still follows it
    writeHostState(this.st);
  }

  /** Copies a link to this view (TensorBoard's URL with p.gpuscope.* entries) and shows it. */
  private copyLink(): void {
    const link = shareLink(this.st);
    const input = h("input", { type: "text", id: "gs-link-text", readonly: true, value: link, "aria-label": "link to this view", style: "flex:1" }) as HTMLInputElement;
    const msg = h("span", { class: "muted", id: "gs-link-msg" }, "");
    mount(this.linkBox, h("div", { class: "banner info linkbox" }, "Link to this view: ", input, msg,
      h("button", { type: "button", class: "btn small", onclick: () => this.linkBox.replaceChildren() }, "✕")));
    input.select();
    navigator.clipboard?.writeText(link).then(() => { msg.textContent = " copied"; }, () => { msg.textContent = " (select and copy it)"; });
  }

  private banner(kind: "error" | "info" | "files", title: string, lines: string[] = [], id: string | null = null): void {
    // "files": unreadable trace files, shown in error colours but not as a failure of the page
    this.banners.append(h("div", { class: kind === "info" ? "banner info" : "banner", role: kind === "error" ? "alert" : "status", id: kind === "files" ? "gs-bad-files" : id },
      title, lines.length ? h("ul", null, lines.map((l) => h("li", null, l))) : null));
  }

  async start(): Promise<void> {
    // a reload of TensorBoard keeps its own URL, not the iframe's: take the state from there
    if (!Object.keys(this.st).length) { const host = await readHostState(); if (host && !Object.keys(this.st).length) this.st = host; }
    await this.loadRuns(false);
  }

  /** Rescans the log directory and redraws the current view with fresh data. */
  reload(): void { clearCache(); void this.loadRuns(true); }

  /** TensorBoard reloaded (button or timer): new runs, workers and spans appear in the selectors; the
   * view is redrawn only when its run's workers or its worker's spans changed, so nothing flickers. */
  async followHostReload(): Promise<void> {
    this.debug.hostReloads = (this.debug.hostReloads ?? 0) + 1;
    if (this.loading || !this.debug.ready) { await this.loadRuns(false, true); return; }
    const { run, worker } = this.st;
    await this.loadRuns(false, true);
    if (run !== this.st.run || !this.runs.includes(run)) return;
    try {
      const ws = (await getJSON<{ workers: string[] }>("workers", { run })).workers.map(String);
      const ss = ws.includes(worker) ? (await getJSON<{ spans: string[] }>("spans", { run, worker })).spans.map(String) : [];
      if (run !== this.st.run || worker !== this.st.worker) return;
      if (!sameList(ws, this.workers) || !sameList(ss, this.spans)) { clearCache(); await this.loadWorkers(); }
    } catch { /* the next reload or the view's own request reports it */ }
  }

  /** Lists the runs (`rescan`: the backend lists the log directory again now) and redraws what changed. */
  private async loadRuns(reload: boolean, rescan = reload): Promise<void> {
    let ans: RunsAnswer;
    try { ans = await getJSON<RunsAnswer>("runs", rescan ? { rescan: 1 } : {}); }
    catch (e) { mount(this.banners); this.banner("error", (e as Error).message); return; }
    mount(this.banners);
    this.runs = Array.isArray(ans.runs) ? ans.runs.map(String) : [];
    const finished = this.loading && !ans.loading;
    this.loading = !!ans.loading;
    this.paintProgress();
    this.showLoadProgress(ans);
    this.showBadFiles(ans);
    if (this.loading) setTimeout(() => void this.loadRuns(false), 1000);
    const before = this.runSel.value;
    fillSelect(this.runSel, this.runs);
    if (!this.runs.length) {
      const where = typeof ans.logdir === "string" && ans.logdir ? ans.logdir : "the log directory";
      mount(this.main, h("div", { class: "banner info", id: "gs-empty" }, this.loading ? `Reading the traces in ${where}…` :
        `No profile found in ${where}` + (ans.logdir_missing ? " (there is no such directory: check --logdir)." : ".") +
        " Write traces there with torch.profiler.tensorboard_trace_handler(logdir) or profiler_core.tensorboard_trace_handler(logdir) and reload."));
      mount(this.tabs);
      return;
    }
    this.checkRun();
    this.runSel.value = this.st.run;
    if (reload || finished || before !== this.st.run || !this.debug.ready) await this.loadWorkers();
  }

  /** Falls back to the latest run when the state names none or one that is not there (with a notice). */
  private checkRun(): void {
    if (this.st.run && this.runs.includes(this.st.run)) return;
    const fallback = this.runs[this.runs.length - 1];
    this.notice.replaceChildren();
    if (this.st.run) {
      this.say(`There is no run "${this.st.run}" in the log directory; showing "${fallback}".`);
      delete this.st.worker; delete this.st.span;
    }
    this.st.run = fallback;
  }

  /** A notice that the URL named something that is not there and what is shown instead (never silent). */
  private say(text: string): void {
    this.notice.append(h("div", { class: "banner info", id: this.notice.childElementCount ? null : "gs-notice", role: "status" }, text,
      " ", h("button", { type: "button", class: "btn small", onclick: () => this.notice.replaceChildren() }, "✕")));
  }

  /** While the backend parses, says how far it got (files and bytes, when it tells). */
  private showLoadProgress(ans: RunsAnswer): void {
    const p = (ans.progress ?? ans) as Record<string, unknown>;
    const num = (k: string) => (typeof p[k] === "number" ? (p[k] as number) : null);
    const fd = num("files_done"), ft = num("files_total"), bd = num("bytes_done_est") ?? num("bytes_done"), bt = num("bytes_total");
    const frac = bt ? (bd ?? 0) / bt : ft ? (fd ?? 0) / ft : null;
    this.progress.style.setProperty("--done", frac === null ? "0" : String(Math.min(1, frac)));
    this.progress.classList.toggle("determinate", this.loading && frac !== null);
    if (this.loading) this.banner("info", `Reading traces…` + (ft ? ` ${fd ?? 0} of ${ft} files` : "") + (frac !== null ? ` (${Math.round(frac * 100)} %)` : ""));
  }

  /** Shows the files the backend could not read (it may name the list in a few ways). */
  private showBadFiles(ans: RunsAnswer): void {
    for (const key of ["errors", "bad_files", "unreadable", "failed", "warnings"]) {
      if (key === "errors" && typeof ans.errors === "number") continue;
      const v = ans[key];
      if (!v || (Array.isArray(v) && !v.length) || (typeof v === "object" && !Array.isArray(v) && !Object.keys(v as object).length)) continue;
      const lines: string[] = [];
      if (Array.isArray(v)) for (const x of v) lines.push(typeof x === "string" ? x : x && typeof x === "object" ?
        [x.file ?? x.path ?? x.name ?? "", x.error ?? x.message ?? x.reason ?? ""].filter(Boolean).join(": ") || JSON.stringify(x) : String(x));
      else if (typeof v === "object") for (const [f, m] of Object.entries(v as object)) lines.push(`${f}: ${typeof m === "string" ? m : JSON.stringify(m)}`);
      if (key === "warnings") this.banner("info", "Some events could not be read (the rest of each file is shown):", lines, "gs-warnings");
      else this.banner("files", "Some files could not be read (the others are shown):", lines);
    }
  }

  private async loadWorkers(): Promise<void> {
    const run = this.st.run;
    try {
      const got = await getJSON<{ workers: string[]; unreadable?: Record<string, string> }>("workers", { run });
      this.workers = got.workers.map(String);
      this.unreadable = got.unreadable ?? {};
    }
    catch (e) { this.fail(e); return; }
    if (run !== this.st.run) return;
    if (this.runSel.value !== run) this.runSel.value = run;
    fillSelect(this.workerSel, this.workers, this.unreadable);
    if (!this.workers.length) {
      // nothing to ask /spans or a view about (each needs a worker): say so
      mount(this.main, h("div", { class: "banner info", id: "gs-no-workers" }, `Run "${run}" has no trace that can be read.`));
      return;
    }
    if (!this.st.worker || !this.workers.includes(this.st.worker)) {
      // an unreadable file (an empty trace) is listed, as `gpuscope diagnose` names it, but not opened first
      const fallback = this.workers.find((w) => !(w in this.unreadable)) ?? this.workers[0] ?? "";
      if (this.st.worker) this.say(`There is no worker "${this.st.worker}" in run "${run}"; showing "${fallback}".`);
      this.st.worker = fallback;
    }
    this.workerSel.value = this.st.worker;
    await this.loadSpans();
  }

  private async loadSpans(): Promise<void> {
    const { run, worker } = this.st;
    try { this.spans = (await getJSON<{ spans: string[] }>("spans", { run, worker })).spans.map(String); }
    catch (e) { this.fail(e); return; }
    if (run !== this.st.run || worker !== this.st.worker) return;
    fillSelect(this.spanSel, this.spans);
    if (!this.st.span || !this.spans.includes(this.st.span)) {
      const fallback = this.spans[this.spans.length - 1] ?? "";
      if (this.st.span) this.say(`Worker "${worker}" has no span "${this.st.span}"; showing span "${fallback}".`);
      this.st.span = fallback;
    }
    this.spanSel.value = this.st.span;
    this.spanSel.disabled = this.spans.length <= 1;
    this.show();
  }

  /** While the view waits for its file, shows that file's own progress and how many are loaded. */
  private watchFile(gen: number, el: HTMLElement): void {
    const sel = { run: this.st.run, worker: this.st.worker, span: this.st.span };
    const waiting = () => gen === this.generation && el.dataset.ready === "0";
    const tick = async () => {
      if (!waiting()) { if (gen === this.generation) this.fileProg.replaceChildren(); return; }
      try {
        const st = await getJSON<any>("file_status", sel);
        if (!waiting()) { if (gen === this.generation) this.fileProg.replaceChildren(); return; }
        const text = fileProgressText(st);
        if (text) mount(this.fileProg, h("div", { class: "banner info" }, text));
        if (st.state === "done" || st.state === "failed") return; // the view request answers now
      } catch { /* the view's own request reports errors */ }
      setTimeout(() => void tick(), 500);
    };
    setTimeout(() => void tick(), 250);
  }

  private fail(e: unknown): void {
    mount(this.main, h("div", { class: "banner", role: "alert" }, e instanceof ApiError ? e.message : `Unexpected error: ${(e as Error)?.message ?? e}`));
  }

  private show(): void {
    const gen = ++this.generation;
    let view = this.st.view;
    if (!VIEWS.some((v) => v[0] === view)) view = this.st.view = "overview";
    // the tabs are drawn again: a tab that had the focus (clicked, or moved to by arrow keys) keeps it on the new one
    const focused = this.tabs.contains(document.activeElement);
    mount(this.tabs, VIEWS.map(([id, label]) => h("button", {
      type: "button", class: "tab", role: "tab", "data-view": id, "aria-selected": String(id === view), "aria-controls": "gs-main",
      onclick: () => { for (const k of Object.keys(this.st)) if (!["run", "worker", "span"].includes(k)) delete this.st[k]; this.st.view = id; this.pushNext = true; this.show(); },
    }, label)));
    rove(this.tabs);
    if (focused) this.tabs.querySelector<HTMLElement>(`[data-view="${view}"]`)?.focus();
    const spec = VIEWS.find((v) => v[0] === view)!;
    // the History view reads every run of the log directory: the run selector does not apply
    this.runSel.disabled = view === "history";
    this.runSel.title = view === "history" ? "the History view shows every run" : "";
    if (!spec[3]) {
      // a view over all workers (distributed): the selector says so
      fillSelect(this.workerSel, ["All"]);
      this.workerSel.disabled = true;
    } else {
      if (this.workerSel.value !== this.st.worker) { fillSelect(this.workerSel, this.workers, this.unreadable); this.workerSel.value = this.st.worker; }
      this.workerSel.disabled = this.workers.length <= 1;
    }
    this.setHash(this.pushNext);
    this.pushNext = false;
    const el = h("div", { class: "view", id: "view-" + view, "data-ready": "0" });
    mount(this.main, el);
    const sel = { run: this.st.run, worker: this.st.worker, span: this.st.span };
    const ctx: Ctx = {
      run: sel.run, worker: sel.worker, span: sel.span, runs: this.runs, dark: document.body.classList.contains("dark"),
      // this view's own selection, whatever the shell's state became since (a run switched while it still loads)
      sel: () => ({ run: sel.run, worker: sel.worker, span: sel.span }),
      get: (k) => this.st[k],
      set: (k, v) => {
        if (gen !== this.generation) return;
        const was = this.st[k];
        if (v === undefined || v === "") delete this.st[k]; else this.st[k] = v;
        // a drill-down (a step, a cell, a worker, a path opened) is a place Back returns from; refinements are not
        this.setHash(!REFINEMENTS.has(k) && was !== this.st[k]);
      },
      alive: () => gen === this.generation,
      go: (v, params = {}) => {
        if (gen !== this.generation) return;
        this.pushNext = true;
        for (const k of Object.keys(this.st)) if (!["run", "worker", "span"].includes(k)) delete this.st[k];
        Object.assign(this.st, params, { view: v });
        this.show();
      },
      open: (run, v, params = {}) => {
        if (gen !== this.generation) return;
        this.retire();
        this.pushNext = true;
        this.st = { ...params, run, view: v };
        this.checkRun();
        void this.loadWorkers();
      },
    };
    this.debug.ready = true;
    this.fileProg.replaceChildren();
    if (spec[3]) this.watchFile(gen, el);
    Promise.resolve().then(() => spec[2](ctx, el)).then(() => {
      if (gen === this.generation) { el.dataset.ready = "1"; this.debug.renders++; this.fileProg.replaceChildren(); }
    }).catch((e) => {
      if (gen !== this.generation) return;
      mount(el, h("div", { class: "banner", role: "alert" }, e instanceof ApiError ? e.message : `This view failed: ${(e as Error)?.message ?? e}`));
      el.dataset.ready = "error";
      this.fileProg.replaceChildren();
      if (!(e instanceof ApiError)) console.warn(e);
    });
  }
}

function sameList(a: string[], b: string[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

function fillSelect(sel: HTMLSelectElement, items: string[], notes: Record<string, string> = {}): void {
  mount(sel, items.map((x) => h("option", { value: x, title: notes[x] ?? null }, notes[x] ? `${x} (unreadable)` : x)));
}

