// The live page: a game's top N and a player's rank, pushed over one WebSocket by
// the TypeScript client (clients/js), which reconnects after a lost connection and
// resumes after the last id (a "gap" says the server no longer had it). Bundled
// with the client into live.js by scripts/build_js.sh (esbuild); no CDN.
import {
  type Entry,
  LeaderboardClient,
  type LiveState,
  type LiveSubscription,
  type RankMessage,
  type Reconnected,
  type TopMessage,
} from "../../clients/js/src/index.js";

interface Watch {
  game: string;
  window: string;
  top: string;
  player: string;
}

function element<T extends HTMLElement>(id: string): T {
  const found = document.getElementById(id);
  if (found === null) throw new Error(`the page has no #${id}`);
  return found as T;
}

const form = element<HTMLFormElement>("watch");
const statusBox = element("status");
const notice = element("notice");
const tbody = element<HTMLTableElement>("top-table").tBodies[0] as HTMLTableSectionElement;
// /?token=... is passed on to the API (Authorization on reads, token on the WebSocket).
const token = new URLSearchParams(location.search).get("token") ?? undefined;
const client = new LeaderboardClient({ baseUrl: location.origin, token });
let subscription: LiveSubscription | null = null;
/** Set by a reconnection: the next page tells how many missed changes it replayed. */
let resumed: Reconnected | null = null;

function setStatus(state: string, text: string): void {
  statusBox.dataset.state = state;
  statusBox.textContent = text;
}

function show(value: number | string | null | undefined): string {
  if (value === null || value === undefined) return "–";
  return typeof value === "number" ? value.toLocaleString("en-US") : value;
}

/** The player cell: avatar and display name when the entry carries a profile, else the id. */
function fillPlayer(cell: HTMLTableCellElement, entry: Entry): void {
  const profile = entry.profile ?? null;
  cell.replaceChildren();
  cell.title = entry.playerId;
  cell.dataset.name = profile?.displayName ?? "";
  if (profile?.avatarUrl) {
    const avatar = document.createElement("img");
    avatar.className = "avatar";
    avatar.alt = "";
    avatar.src = profile.avatarUrl;
    cell.append(avatar);
  }
  const name = document.createElement("span");
  name.textContent = profile?.displayName ?? entry.playerId;
  cell.append(name);
}

function renderTop(message: TopMessage, player: string): void {
  const before = new Map([...tbody.rows].map((row) => [row.dataset.player, row.dataset.score]));
  tbody.replaceChildren(
    ...message.entries.map((entry) => {
      const row = document.createElement("tr");
      row.dataset.player = entry.playerId;
      row.dataset.score = String(entry.score);
      const rank = document.createElement("td");
      const who = document.createElement("td");
      const score = document.createElement("td");
      rank.textContent = show(entry.rank);
      fillPlayer(who, entry);
      score.textContent = show(entry.score);
      row.append(rank, who, score);
      if (entry.playerId === player) row.classList.add("me");
      if (before.size && before.get(entry.playerId) !== row.dataset.score) row.classList.add("changed");
      return row;
    }),
  );
  element("empty").hidden = message.entries.length > 0;
  element("board-title").textContent = `Top ${message.entries.length} · ${message.window}`;
}

function renderRank(message: RankMessage): void {
  element("me").hidden = false;
  element("me-player").textContent = message.playerId;
  element("me-rank").textContent = message.score === null ? "no score" : show(message.rank);
  element("me-score").textContent = show(message.score);
  element("me-percentile").textContent = message.percentile === null ? "–" : `${message.percentile} %`;
}

function tell(text: string, state: string): void {
  notice.hidden = false;
  notice.dataset.state = state;
  notice.textContent = text;
}

function onState(state: LiveState): void {
  if (state === "connecting") setStatus("connecting", "connecting…");
  else if (state === "reconnecting" && statusBox.dataset.state !== "dropped") {
    setStatus("connecting", "reconnecting…");
  }
}

/** Profiles change without a board change (no push): the shown rows' names are re-read. */
const PROFILE_REFRESH_MS = 2000;
let refresher: number | undefined;

async function refreshProfiles(params: Watch): Promise<void> {
  if (!tbody.rows.length) return;
  const page = await client.top(params.game, { window: params.window, limit: Number(params.top) });
  const entries = new Map(page.entries.map((entry) => [entry.playerId, entry]));
  for (const row of [...tbody.rows]) {
    const entry = entries.get(row.dataset.player ?? "");
    const cell = row.cells[1];
    if (entry !== undefined && cell !== undefined && cell.dataset.name !== (entry.profile?.displayName ?? "")) {
      fillPlayer(cell, entry);
    }
  }
}

function watch(params: Watch): void {
  subscription?.close();
  window.clearInterval(refresher);
  refresher = window.setInterval(() => {
    refreshProfiles(params).catch(() => undefined); // the next push or refresh tries again
  }, PROFILE_REFRESH_MS);
  resumed = null;
  notice.hidden = true;
  subscription = client.live(
    params.game,
    {
      window: params.window,
      top: Number(params.top),
      playerId: params.player || undefined,
      interval: 250,
    },
    {
      state: onState,
      top: (message) => {
        renderTop(message, params.player);
        if (resumed !== null && !resumed.gap) {
          const missed = message.changes.length;
          tell(`reconnected: resumed, ${missed} missed change${missed === 1 ? "" : "s"} replayed`, "resumed");
        }
        resumed = null;
        setStatus("live", `live · ${new Date().toLocaleTimeString()}`);
      },
      rank: (message) => {
        renderRank(message);
        setStatus("live", `live · ${new Date().toLocaleTimeString()}`);
      },
      reconnected: (outcome) => {
        resumed = outcome;
        if (outcome.gap) tell("reconnected after a gap: the board is shown afresh", "gap");
      },
      dropped: (message) => setStatus("dropped", `dropped: ${message.reason}`),
      refused: (error) => setStatus("error", error.message),
    },
  );
}

function current(): Watch {
  const data = new FormData(form);
  const field = (name: string, fallback: string): string => String(data.get(name) ?? "").trim() || fallback;
  return { game: field("game", ""), window: field("window", "alltime"), top: field("top", "10"), player: field("player", "") };
}

form.addEventListener("submit", (event) => {
  event.preventDefault();
  const params = current();
  const query = new URLSearchParams({ ...params });
  if (token !== undefined) query.set("token", token);
  history.replaceState(null, "", `?${query}`);
  element("me").hidden = true;
  watch(params);
});

// /?game=g1&player=p8&window=weekly&top=10 fills the form and starts watching.
const initial = new URLSearchParams(location.search);
if (initial.get("game")) {
  for (const name of ["game", "window", "top", "player"]) {
    const value = initial.get(name);
    const input = form.elements.namedItem(name);
    if (value !== null && input instanceof HTMLInputElement) input.value = value;
  }
  watch(current());
}
