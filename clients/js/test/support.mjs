// What the tests share: the API they run against, signed score submissions (as a
// game server sends them: POST /v1/scores, then Kafka, the job, Redis), polling,
// and a TCP proxy that can cut every connection through it.
import assert from "node:assert/strict";
import { createHmac, randomUUID } from "node:crypto";
import net from "node:net";
import { setTimeout as sleep } from "node:timers/promises";

/** The running `lb serve` (tests/integration/test_js_client.py starts it and the job). */
export function apiUrl() {
  const url = process.env.LB_API_URL;
  assert.ok(url, "LB_API_URL names a running lb serve (tests/integration/test_js_client.py sets it)");
  return url;
}

/** `keyId:hexsecret`, one of the server's LB_HMAC_KEYS. */
function signingKey() {
  const key = process.env.LB_TEST_KEY;
  assert.ok(key, "LB_TEST_KEY is keyId:hexsecret of a key the server accepts");
  const [keyId, hex] = key.split(":");
  return { keyId, secret: Buffer.from(hex, "hex") };
}

/** Signed SCORE events of `game`, one per `[playerId, score]`, stamped now. */
export function signed(game, scores) {
  const { keyId, secret } = signingKey();
  return scores.map(([playerId, score]) => {
    const eventId = randomUUID();
    const timestamp = Date.now();
    const canonical = `v1|${eventId}|${game}|${playerId}|${score}|${timestamp}|SCORE`;
    const sig = createHmac("sha256", secret).update(canonical, "utf8").digest("hex");
    return { eventId, gameId: game, playerId, score, timestamp, kind: "SCORE", keyId, sig };
  });
}

/** Submit scores through the API's intake; resolves once Kafka acknowledged them (202). */
export async function submit(game, scores) {
  const answer = await fetch(`${apiUrl()}/v1/scores`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(signed(game, scores)),
  });
  assert.equal(answer.status, 202, await answer.text());
}

/** Poll `check` (sync or async) every 25 ms until it is truthy; fail naming `what` after `ms`. */
export async function until(what, check, ms = 30_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    let ok = false;
    try {
      ok = await check();
    } catch {
      ok = false;
    }
    if (ok) return;
    assert.ok(Date.now() < deadline, `timed out after ${ms} ms waiting for: ${what}`);
    await sleep(25);
  }
}

/**
 * A TCP proxy on a free loopback port in front of `target` (a base URL).
 * `cut()` closes every connection and refuses new ones until `restore()`:
 * a lost connection, as a client sees one.
 */
export async function startProxy(target) {
  const { hostname, port } = new URL(target);
  const open = new Set();
  let refusing = false;
  let accepted = 0;
  const server = net.createServer((client) => {
    accepted += 1;
    if (refusing) {
      client.destroy();
      return;
    }
    const upstream = net.connect(Number(port), hostname);
    const pair = [client, upstream];
    const end = () => {
      for (const socket of pair) {
        socket.destroy();
        open.delete(socket);
      }
    };
    for (const socket of pair) {
      open.add(socket);
      socket.on("error", end);
      socket.on("close", end);
    }
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    get accepted() {
      return accepted;
    },
    cut() {
      refusing = true;
      for (const socket of open) socket.destroy();
      open.clear();
    },
    restore() {
      refusing = false;
    },
    close() {
      for (const socket of open) socket.destroy();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}
