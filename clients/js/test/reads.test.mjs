// The reads against a running lb serve: boards written by the real job from
// scores submitted through the API, read back with the client.
import assert from "node:assert/strict";
import { before, test } from "node:test";
import { LeaderboardClient, LeaderboardError } from "../dist/index.js";
import { apiUrl, submit, until } from "./support.mjs";

const GAME = "jsreads";
/** A game with a tournament running now (tests/integration/test_js_client.py writes its rules). */
const CUP = "jscup";
const client = new LeaderboardClient({ baseUrl: apiUrl() });

/** The error a promise rejects with (fails if it resolves). */
async function failure(promise) {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof LeaderboardError, String(error));
    return error;
  }
  assert.fail("expected a LeaderboardError");
}

before(async () => {
  await submit(GAME, [
    ["ada", 300],
    ["bob", 200],
    ["cy", 100],
    ["ü/ser", 75],
    ["dee", 50],
  ]);
  await submit(CUP, [["ada", 500]]);
  await until("the job applied the scores", async () => (await client.top(GAME)).entries.length === 5);
  await until("the job applied the cup's score", async () => (await client.top(CUP)).entries.length === 1);
});

test("top: a page best first, then the next one by cursor", async () => {
  const page = await client.top(GAME, { window: "alltime", limit: 2 });
  assert.equal(page.window, "alltime");
  assert.deepEqual(page.entries, [
    { rank: 1, playerId: "ada", score: 300, profile: null },
    { rank: 2, playerId: "bob", score: 200, profile: null },
  ]);
  assert.ok(page.nextCursor);
  const next = await client.top(GAME, { limit: 2, cursor: page.nextCursor });
  assert.deepEqual(
    next.entries.map((e) => [e.rank, e.playerId]),
    [
      [3, "cy"],
      [4, "ü/ser"],
    ],
  );
  const last = await client.top(GAME, { limit: 2, offset: 4 });
  assert.deepEqual(last.entries, [{ rank: 5, playerId: "dee", score: 50, profile: null }]);
  const bare = await client.top(GAME, { limit: 1, profile: false });
  assert.deepEqual(bare.entries, [{ rank: 1, playerId: "ada", score: 300 }]);
  assert.equal(last.nextCursor, null);
});

test("rank: rank, score and percentile; an id with / and ü is one path segment", async () => {
  assert.deepEqual(await client.rank(GAME, "cy"), {
    window: "alltime",
    playerId: "cy",
    rank: 3,
    score: 100,
    percentile: 40,
  });
  const odd = await client.rank(GAME, "ü/ser", { rank_mode: "competition" });
  assert.equal(odd.rank, 4);
  assert.equal(odd.playerId, "ü/ser");
});

test("around: k players above and below", async () => {
  const around = await client.around(GAME, "cy", { k: 1 });
  assert.deepEqual(around.above, [{ rank: 2, playerId: "bob", score: 200, profile: null }]);
  assert.deepEqual(around.player, { rank: 3, playerId: "cy", score: 100, profile: null });
  assert.deepEqual(around.below, [{ rank: 4, playerId: "ü/ser", score: 75, profile: null }]);
});

test("friends: a player and the players they follow, ranked among themselves", async () => {
  for (const friend of ["cy", "dee"]) {
    const put = await fetch(`${apiUrl()}/v1/leaderboards/${GAME}/players/bob/friends/${friend}`, { method: "PUT" });
    assert.equal(put.status, 200);
  }
  const board = await client.friends(GAME, "bob");
  assert.deepEqual(
    board.entries.map((e) => [e.rank, e.playerId, e.score]),
    [
      [1, "bob", 200],
      [2, "cy", 100],
      [3, "dee", 50],
    ],
  );
  assert.equal(typeof board.cached, "boolean");
});

test("tournaments: the ones a player is on the board of", async () => {
  const mine = await client.tournaments(CUP, "ada");
  assert.equal(mine.tournaments.length, 1);
  const [cup] = mine.tournaments;
  assert.equal(cup.tournament, "now-cup");
  assert.equal(cup.window, "tournament:now-cup");
  assert.equal(cup.status, "running");
  assert.equal(cup.rank, 1);
  assert.equal(cup.score, 500);
  assert.deepEqual((await client.tournaments(GAME, "ada")).tournaments, []);
});

test("errors carry the API's status, code and message", async () => {
  const absent = await failure(client.rank(GAME, "nobody"));
  assert.equal(absent.status, 404);
  assert.equal(absent.code, "NOT_FOUND");
  assert.match(absent.message, /nobody/);
  const badWindow = await failure(client.top(GAME, { window: "fortnightly" }));
  assert.equal(badWindow.status, 400);
  assert.equal(badWindow.code, "BAD_REQUEST");
  const unknown = await failure(client.top("no-such-game"));
  assert.equal(unknown.status, 404);
  assert.equal(unknown.code, "UNKNOWN_GAME");
});
