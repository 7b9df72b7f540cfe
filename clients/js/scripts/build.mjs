// Builds the package and the live page's script, in three steps:
//   1. src/generated/openapi.ts from openapi.json (openapi-typescript): the API's types;
//   2. type-check src/ and compile it to dist/ (tsc), and type-check the page;
//   3. bundle the page (api/static/live.ts) with the client into api/static/live.js (esbuild).
// Run by `npm run build` (scripts/build_js.sh does it at install).
import { spawnSync } from "node:child_process";
import { mkdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const repo = join(root, "..", "..");
const modules = join(root, "node_modules");

function run(what, script, args) {
  const done = spawnSync(process.execPath, [join(modules, script), ...args], { cwd: root, stdio: "inherit" });
  if (done.status !== 0) {
    console.error(`build: ${what} failed (exit ${done.status ?? done.signal})`);
    process.exit(1);
  }
}

mkdirSync(join(root, "src", "generated"), { recursive: true });
run("openapi-typescript", "openapi-typescript/bin/cli.js", [
  "openapi.json",
  "--output",
  "src/generated/openapi.ts",
  "--silent",
]);
rmSync(join(root, "dist"), { recursive: true, force: true });
run("tsc (the package)", "typescript/bin/tsc", ["-p", "tsconfig.json"]);
run("tsc (the live page)", "typescript/bin/tsc", ["-p", "tsconfig.page.json"]);
await build({
  entryPoints: [join(repo, "api", "static", "live.ts")],
  outfile: join(repo, "api", "static", "live.js"),
  bundle: true,
  format: "iife",
  target: ["es2020"],
  platform: "browser",
  charset: "utf8",
  legalComments: "none",
  logLevel: "warning",
  banner: {
    js: "// Built by clients/js (npm run build, scripts/build_js.sh) from api/static/live.ts: do not edit.",
  },
});
