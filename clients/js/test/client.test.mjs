// What the client puts on the wire, seen by a small HTTP server of the test's own:
// the token (Authorization on reads, `token` on the WebSocket URL), percent-encoded
// ids, the query; and the reconnection back-off.
import assert from "node:assert/strict";
import http from "node:http";
import { after, before, test } from "node:test";
import { LeaderboardClient, LeaderboardError, backoffMs } from "../dist/index.js";
import { until } from "./support.mjs";

const requests = [];
const upgrades = [];
let server;
let base;

before(async () => {
  server = http.createServer((request, response) => {
    requests.push({ url: request.url, authorization: request.headers.authorization });
    if (request.url.startsWith("/v1/leaderboards/down/")) {
      response.writeHead(503, { "Content-Type": "application/json" });
      response.end(JSON.stringify({ error: { code: "UNAVAILABLE", message: "Redis: gone" } }));
      return;
    }
    response.writeHead(200, { "Content-Type": "application/json" });
    response.end(JSON.stringify({ window: "alltime", entries: [], nextCursor: null }));
  });
  server.on("upgrade", (request, socket) => {
    upgrades.push(request.url);
    socket.destroy(); // refused at the handshake: the client will try again
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${server.address().port}`;
});

after(() => new Promise((resolve) => server.close(resolve)));

test("a token goes as Authorization: Bearer on reads and as token= on the WebSocket", async () => {
  const client = new LeaderboardClient({ baseUrl: `${base}/`, token: "s3cret/+=" });
  await client.top("g1", { window: "weekly", limit: 3 });
  assert.deepEqual(requests.at(-1), {
    url: "/v1/leaderboards/g1/top?window=weekly&limit=3",
    authorization: "Bearer s3cret/+=",
  });
  const live = client.live("g1", { top: 5, playerId: "p8", retry: { minMs: 50, maxMs: 50 } }, {});
  await until("a handshake", () => upgrades.length >= 1, 5_000);
  live.close();
  const url = new URL(upgrades.at(-1), base);
  assert.equal(url.pathname, "/v1/leaderboards/g1/live");
  assert.deepEqual(Object.fromEntries(url.searchParams), { top: "5", playerId: "p8", token: "s3cret/+=" });
});

test("without a token neither is sent; ids are one percent-encoded path segment each", async () => {
  const client = new LeaderboardClient({ baseUrl: base });
  await client.rank("g.1", "ü/ser 1", { rank_mode: "competition" });
  assert.deepEqual(requests.at(-1), {
    url: "/v1/leaderboards/g.1/players/%C3%BC%2Fser%201?rank_mode=competition",
    authorization: undefined,
  });
  await client.friends("g1", "p&8", { window: "daily" });
  assert.equal(requests.at(-1).url, "/v1/leaderboards/g1/friends?window=daily&playerId=p%268");
  const before = upgrades.length;
  const live = client.live("g1", { window: "alltime", retry: { minMs: 50, maxMs: 50 } }, {});
  await until("a handshake", () => upgrades.length > before, 5_000);
  live.close();
  assert.equal(new URL(upgrades.at(-1), base).search, "?window=alltime");
});

test("a refused handshake is retried with back-off until close()", async () => {
  const client = new LeaderboardClient({ baseUrl: base });
  const states = [];
  const before = upgrades.length;
  const live = client.live("g1", { retry: { minMs: 20, maxMs: 40 } }, { state: (s) => states.push(s) });
  await until("three attempts", () => upgrades.length >= before + 3, 5_000);
  live.close();
  assert.deepEqual(states, ["reconnecting", "closed"]);
});

test("an error answer is a LeaderboardError with the API's code; no answer is NETWORK", async () => {
  const client = new LeaderboardClient({ baseUrl: base });
  await assert.rejects(client.top("down"), (error) => {
    assert.ok(error instanceof LeaderboardError);
    assert.deepEqual([error.status, error.code, error.message], [503, "UNAVAILABLE", "Redis: gone"]);
    return true;
  });
  const nobody = new LeaderboardClient({ baseUrl: "http://127.0.0.1:9" });
  await assert.rejects(nobody.top("g1"), (error) => error instanceof LeaderboardError && error.code === "NETWORK");
  assert.throws(() => new LeaderboardClient({ baseUrl: "ftp://example" }), TypeError);
});

test("back-off doubles from minMs up to maxMs, jittered into its upper half", () => {
  const retry = { minMs: 100, maxMs: 1000 };
  assert.deepEqual(
    [0, 1, 2, 3, 4, 10].map((n) => backoffMs(n, retry, () => 1)),
    [100, 200, 400, 800, 1000, 1000],
  );
  assert.equal(backoffMs(3, retry, () => 0), 400);
  assert.equal(backoffMs(0, {}, () => 1), 500);
  assert.equal(backoffMs(99, {}, () => 1), 15_000);
});
