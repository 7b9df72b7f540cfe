// The live page: one WebSocket to /v1/leaderboards/{game}/live; the server pushes
// a whole top-N page ("top") and the player's rank ("rank") whenever they change.
// On a dropped connection it reconnects with the last id, so nothing is missed
// while the server's change stream still holds it (a "gap" message says otherwise).
"use strict";

const form = document.getElementById("watch");
const statusBox = document.getElementById("status");
const tbody = document.querySelector("#top-table tbody");
let socket = null;
let lastId = null;
let retry = null;

function setStatus(state, text) {
  statusBox.dataset.state = state;
  statusBox.textContent = text;
}

function text(value) {
  if (value === null || value === undefined) return "–";
  return typeof value === "number" ? value.toLocaleString("en-US") : String(value);
}

function renderTop(message, player) {
  const before = new Map([...tbody.rows].map((row) => [row.dataset.player, row.dataset.score]));
  tbody.replaceChildren(
    ...message.entries.map((entry) => {
      const row = document.createElement("tr");
      row.dataset.player = entry.playerId;
      row.dataset.score = String(entry.score);
      for (const value of [entry.rank, entry.playerId, entry.score]) {
        const cell = document.createElement("td");
        cell.textContent = text(value);
        row.append(cell);
      }
      if (entry.playerId === player) row.classList.add("me");
      if (before.size && before.get(entry.playerId) !== row.dataset.score) row.classList.add("changed");
      return row;
    }),
  );
  document.getElementById("empty").hidden = message.entries.length > 0;
  document.getElementById("board-title").textContent = `Top ${message.entries.length} · ${message.window}`;
}

function renderRank(message) {
  document.getElementById("me").hidden = false;
  document.getElementById("me-player").textContent = message.playerId;
  document.getElementById("me-rank").textContent = message.score === null ? "no score" : text(message.rank);
  document.getElementById("me-score").textContent = text(message.score);
  document.getElementById("me-percentile").textContent =
    message.percentile === null ? "–" : `${message.percentile} %`;
}

function watch(params, resume) {
  if (socket) socket.onclose = null, socket.close();
  clearTimeout(retry);
  const query = new URLSearchParams({ window: params.window, top: params.top, interval: "250" });
  if (params.player) query.set("playerId", params.player);
  if (resume && lastId) query.set("lastEventId", lastId);
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const url = `${scheme}://${location.host}/v1/leaderboards/${encodeURIComponent(params.game)}/live?${query}`;
  setStatus("connecting", "connecting…");
  socket = new WebSocket(url);
  let refused = false;
  socket.onmessage = (event) => {
    const message = JSON.parse(event.data);
    if (message.id) lastId = message.id;
    if (message.type === "top") renderTop(message, params.player);
    else if (message.type === "rank") renderRank(message);
    else if (message.type === "error") refused = true, setStatus("error", message.error.message);
    else if (message.type === "dropped") setStatus("dropped", `dropped: ${message.reason}`);
    if (message.type === "top" || message.type === "rank") {
      setStatus("live", `live · ${new Date().toLocaleTimeString()}`);
    }
  };
  socket.onclose = () => {
    if (refused) return;
    setStatus("connecting", "reconnecting…");
    retry = setTimeout(() => watch(params, true), 1000);
  };
}

function current() {
  const data = new FormData(form);
  return {
    game: data.get("game").trim(),
    window: (data.get("window") || "alltime").trim(),
    top: data.get("top") || "10",
    player: data.get("player").trim(),
  };
}

form.addEventListener("submit", (event) => {
  event.preventDefault();
  const params = current();
  lastId = null;
  history.replaceState(null, "", `?${new URLSearchParams(params)}`);
  document.getElementById("me").hidden = true;
  watch(params, false);
});

// /?game=g1&player=p8&window=weekly&top=10 fills the form and starts watching.
const initial = new URLSearchParams(location.search);
if (initial.get("game")) {
  for (const name of ["game", "window", "top", "player"]) {
    if (initial.get(name) !== null) form.elements[name].value = initial.get(name);
  }
  watch(current(), false);
}
