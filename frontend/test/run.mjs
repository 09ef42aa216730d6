// Bundles the unit tests (TypeScript) with esbuild into a temporary folder and runs them with
// node's built-in test runner: `npm test`. Only pure modules are tested here (no DOM).
import * as esbuild from "esbuild";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { spawnSync } from "node:child_process";

const here = dirname(fileURLToPath(import.meta.url));
const out = mkdtempSync(join(tmpdir(), "gpuscope-fe-test-"));
const tests = readdirSync(here).filter((f) => f.endsWith(".test.ts"));
await esbuild.build({ entryPoints: tests.map((f) => join(here, f)), bundle: true, format: "esm", platform: "node", outdir: out, outExtension: { ".js": ".mjs" }, logLevel: "warning" });
const r = spawnSync(process.execPath, ["--test", ...tests.map((f) => join(out, f.replace(/\.ts$/, ".mjs")))], { stdio: "inherit" });
rmSync(out, { recursive: true, force: true });
process.exit(r.status ?? 1);
