// The live subscription against a running lb serve: pushes of real board changes,
// a lost connection (cut by a TCP proxy) resumed from the last id, a gap, a refusal.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { LeaderboardClient } from "../dist/index.js";
import { apiUrl, startProxy, submit, until } from "./support.mjs";

const GAME = "jslive";
const FAST = { minMs: 100, maxMs: 300 };
const client = new LeaderboardClient({ baseUrl: apiUrl() });
let proxy;

/** Subscribe, recording every callback as `[kind, payload]` in order. */
function record(through, game, options) {
  const seen = [];
  const handlers = {};
  for (const kind of ["top", "rank", "gap", "dropped", "refused", "reconnected", "state"]) {
    handlers[kind] = (payload) => seen.push([kind, payload]);
  }
  const subscription = through.live(game, { retry: FAST, ...options }, handlers);
  return { subscription, seen, of: (kind) => seen.filter(([k]) => k === kind).map(([, p]) => p) };
}

before(async () => {
  proxy = await startProxy(apiUrl());
  await submit(GAME, [
    ["ada", 300],
    ["bob", 200],
    ["cy", 100],
  ]);
  // Not a top read: the server's page cache would follow the game's stream from then
  // on, and the resume test needs a game nobody follows while it is disconnected.
  await until("the job applied the scores", async () => {
    const around = await client.around(GAME, "bob", { k: 1 });
    return around.above.length === 1 && around.below.length === 1;
  });
});

after(() => proxy.close());

test("the first page and rank, then a page and rank for each change", async (t) => {
  const live = record(client, GAME, { top: 5, playerId: "cy", interval: 50 });
  t.after(() => live.subscription.close());
  await until("the first page and rank", () => live.of("top").length && live.of("rank").length);
  const [page] = live.of("top");
  assert.deepEqual(
    page.entries.map((e) => [e.rank, e.playerId, e.score]),
    [
      [1, "ada", 300],
      [2, "bob", 200],
      [3, "cy", 100],
    ],
  );
  assert.match(page.id, /^\d+-\d+$/);
  assert.deepEqual(page.changes, []);
  assert.equal(live.of("rank")[0].rank, 3);
  assert.equal(live.subscription.state, "live");

  await submit(GAME, [["cy", 450]]);
  await until("a page with cy first", () => live.of("top").at(-1).entries[0].playerId === "cy");
  const pushed = live.of("top").at(-1);
  assert.deepEqual(pushed.changes, [{ playerId: "cy", old: 100, new: 450, rank: 1 }]);
  await until("cy's rank 1", () => live.of("rank").at(-1).rank === 1);
  assert.equal(live.subscription.lastId, live.seen.at(-1)[1].id);
  assert.deepEqual(live.of("state"), ["live"]);
});

test("a lost connection resumes after the last id: what was missed comes with the next page", async (t) => {
  const viaProxy = new LeaderboardClient({ baseUrl: proxy.url });
  const live = record(viaProxy, GAME, { top: 5, interval: 50 });
  t.after(() => live.subscription.close());
  await until("the first page", () => live.of("top").length === 1);
  const last = live.subscription.lastId;
  assert.equal(last, live.of("top")[0].id);

  proxy.cut();
  await until("the client notices", () => live.subscription.state === "reconnecting");
  // Longer than the server's blocking stream read (1 s): with nobody left following
  // the game, the server stops reading its stream before dee's change is written.
  await sleep(1500);
  await submit(GAME, [["dee", 999]]);
  await until("the job applied dee's score", async () => (await client.rank(GAME, "dee")).rank === 1);
  await sleep(300); // reconnections refused meanwhile back off and try again
  proxy.restore();

  await until("reconnected", () => live.of("reconnected").length === 1, 10_000);
  assert.deepEqual(live.of("reconnected")[0], { from: last, gap: false });
  await until("the page after the reconnection", () => live.of("top").length === 2);
  const resumed = live.of("top")[1];
  assert.equal(resumed.entries[0].playerId, "dee");
  assert.deepEqual(resumed.changes, [{ playerId: "dee", old: null, new: 999, rank: 1 }]);
  assert.notEqual(resumed.id, last);
  assert.deepEqual(live.of("gap"), []);
  assert.deepEqual(live.of("state"), ["live", "reconnecting", "live"]);
});

test("a position the change stream no longer holds is a gap, then a fresh page", async (t) => {
  const live = record(client, GAME, { top: 3, lastEventId: "1-0" });
  t.after(() => live.subscription.close());
  await until("a page", () => live.of("top").length === 1);
  assert.deepEqual(
    live.seen.filter(([kind]) => kind === "gap" || kind === "top").map(([kind]) => kind),
    ["gap", "top"],
  );
  assert.equal(live.of("gap")[0].lastEventId, "1-0");
  assert.deepEqual(live.of("top")[0].changes, []);
});

test("a refused subscription reports the server's code and does not reconnect", async (t) => {
  const viaProxy = new LeaderboardClient({ baseUrl: proxy.url });
  for (const [game, window, code] of [
    [GAME, "fortnightly", "BAD_REQUEST"],
    ["no-such-game", "alltime", "UNKNOWN_GAME"],
  ]) {
    const live = record(viaProxy, game, { window });
    t.after(() => live.subscription.close());
    await until(`${code} reported`, () => live.of("refused").length === 1);
    const [error] = live.of("refused");
    assert.equal(error.code, code);
    assert.equal(error.status, 1008);
    assert.equal(live.subscription.state, "refused");
  }
  const accepted = proxy.accepted;
  await sleep(600); // two reconnections' worth of FAST backoff
  assert.equal(proxy.accepted, accepted, "a refused subscription connected again");
});

test("close() ends the subscription for good", async () => {
  const viaProxy = new LeaderboardClient({ baseUrl: proxy.url });
  const live = record(viaProxy, GAME, { top: 3 });
  await until("a page", () => live.of("top").length === 1);
  live.subscription.close();
  assert.equal(live.subscription.state, "closed");
  const accepted = proxy.accepted;
  await sleep(600);
  assert.equal(proxy.accepted, accepted);
  assert.deepEqual(live.of("state"), ["live", "closed"]);
});
