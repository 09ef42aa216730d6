// What the shell hands to each view.
export interface Ctx {
  run: string;
  worker: string;
  span: string;
  runs: string[];
  /** The run/worker/span query parameters for the current selection. */
  sel(): { run: string; worker: string; span: string };
  /** Reads a per-view key from the URL state. */
  get(key: string): string | undefined;
  /** Writes a per-view key to the URL state (no re-render). */
  set(key: string, value: string | undefined): void;
  /** True while this view is still the one shown (async renders check it before writing). */
  alive(): boolean;
  dark: boolean;
  /** Opens another view of the same run/worker/span with the given options (e.g. the timeline on a name). */
  go(view: string, params?: Record<string, string>): void;
  /** Opens a view of another run (its first worker, the span `params.span` when it has it) with the given options
   * (e.g. the History view's button to the job diff of two runs). */
  open(run: string, view: string, params?: Record<string, string>): void;
}
