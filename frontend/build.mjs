// Builds the bundle into ../tb_plugin/static/ (deterministic: no timestamps, no hashes).
// `node build.mjs --check` builds into memory and fails if the committed bundle differs.
import * as esbuild from "esbuild";
import { readFileSync, writeFileSync, mkdirSync, existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const outdir = join(here, "..", "tb_plugin", "static");
const check = process.argv.includes("--check");

const result = await esbuild.build({
  entryPoints: [join(here, "src", "index.ts")],
  bundle: true,
  minify: true,
  format: "esm",
  target: ["es2020"],
  charset: "utf8",
  legalComments: "none",
  sourcemap: false,
  write: false,
  outfile: join(outdir, "index.js"),
  logLevel: "warning",
});

let differs = [];
for (const file of result.outputFiles) {
  const name = file.path.slice(outdir.length + 1);
  if (check) {
    const committed = existsSync(file.path) ? readFileSync(file.path) : null;
    if (!committed || Buffer.compare(committed, Buffer.from(file.contents)) !== 0) differs.push(name);
  } else {
    mkdirSync(dirname(file.path), { recursive: true });
    writeFileSync(file.path, file.contents);
    console.log(`wrote tb_plugin/static/${name} (${file.contents.length} bytes)`);
  }
}
if (check) {
  if (differs.length) {
    console.error(`tb_plugin/static/ is out of date with frontend/src: ${differs.join(", ")} differ. ` +
      "Run `npm run build` in frontend/ and commit the result.");
    process.exit(1);
  }
  console.log("tb_plugin/static/ matches frontend/src");
}
