// The TypeScript example of docs/CLIENTS.md ("From a browser or Node") as a studio
// would copy it: type-checked against the built package, then run against lb serve.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { LeaderboardClient } from "../dist/index.js";
import { apiUrl, submit, until } from "./support.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const DOC = join(here, "..", "..", "..", "docs", "CLIENTS.md");
const PACKAGE = "@realtime-leaderboard/client";
const dist = join(here, "..", "dist", "index.js");
const scratch = mkdtempSync(join(tmpdir(), "lb-js-docs-"));

/** The ```ts blocks of the section, joined. */
function example() {
  const text = readFileSync(DOC, "utf8");
  const start = text.indexOf("\n## From a browser or Node\n");
  assert.ok(start >= 0, "docs/CLIENTS.md has the section");
  const rest = text.slice(start + 1);
  const next = rest.indexOf("\n## ", 1);
  const section = next < 0 ? rest : rest.slice(0, next);
  const blocks = [...section.matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map((m) => m[1]);
  assert.ok(blocks.length >= 1, "the section has a ts example");
  return blocks.join("\n");
}

before(async () => {
  await submit("g1", [
    ["p1", 950],
    ["p8", 700],
    ["p3", 400],
  ]);
  const client = new LeaderboardClient({ baseUrl: apiUrl() });
  await until("the job applied g1's scores", async () => (await client.top("g1")).entries.length === 3);
});

after(() => rmSync(scratch, { recursive: true, force: true }));

test("the example type-checks against the package and runs", () => {
  const source = example();
  assert.ok(source.includes(`from "${PACKAGE}"`));
  const file = join(scratch, "example.ts");
  writeFileSync(file, source.replaceAll(`"${PACKAGE}"`, JSON.stringify(dist)));
  const program = ts.createProgram([file], {
    strict: true,
    noEmit: true,
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
    lib: ["lib.es2022.d.ts", "lib.dom.d.ts"],
    types: [],
    skipLibCheck: true,
  });
  const problems = ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, "\n"));
  assert.deepEqual(problems, []);

  const { port } = new URL(apiUrl());
  const js = ts.transpileModule(readFileSync(file, "utf8"), {
    compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext },
  }).outputText;
  const runnable = join(scratch, "example.mjs");
  writeFileSync(runnable, js.replaceAll("127.0.0.1:8080", `127.0.0.1:${port}`));
  const run = spawnSync(process.execPath, ["--experimental-websocket", runnable], { encoding: "utf8", timeout: 30_000 });
  assert.equal(run.status, 0, run.stderr);
  assert.match(run.stdout, /^1 p1 950$/m);
  assert.match(run.stdout, /p8: rank 2, better than 33\.33 % of the board/);
  assert.match(run.stdout, /^top \[ 'p1', 'p8', 'p3' \]/m);
  assert.match(run.stdout, /^p8 is now 2$/m);
});
