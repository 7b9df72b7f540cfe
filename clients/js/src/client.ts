// The reads of the HTTP API, one method per route, typed from the OpenAPI document.
import { LeaderboardError, errorOf } from "./errors.js";
import { queryStringOf } from "./query.js";
import { LiveSubscription, type LiveHandlers, type LiveOptions, type SocketFactory } from "./live.js";
import {
  AROUND,
  FRIENDS,
  RANK,
  TOP,
  TOURNAMENTS,
  type AnswerOf,
  type AroundAnswer,
  type AroundQuery,
  type FriendsBoard,
  type FriendsQuery,
  type PathOf,
  type PlayerTournaments,
  type QueryOf,
  type RankAnswer,
  type RankQuery,
  type ReadPath,
  type TopPage,
  type TopQuery,
  type TournamentsQuery,
} from "./types.js";

export interface ClientOptions {
  /** Where the API is served, e.g. `http://127.0.0.1:8080` (a page passes `location.origin`). */
  baseUrl: string;
  /** Sent as `Authorization: Bearer <token>` on reads and as `token` on the WebSocket URL. */
  token?: string;
  /** A read that has not answered within this many milliseconds fails with `TIMEOUT` (10,000). */
  timeoutMs?: number;
  /** The `fetch` to use (default: the global one). */
  fetch?: typeof fetch;
  /** The WebSocket constructor to use (default: the global one). */
  WebSocket?: SocketFactory;
}

/** Fill `{name}` segments with the percent-encoded values (an id may hold `/`). */
function fill(path: string, values: Record<string, string>): string {
  return path.replace(/\{(\w+)\}/g, (_, name: string) => {
    const value = values[name];
    if (value === undefined || value === "") throw new TypeError(`${name} is required`);
    return encodeURIComponent(value);
  });
}

export class LeaderboardClient {
  readonly baseUrl: string;
  readonly token: string | undefined;
  private readonly timeoutMs: number;
  private readonly fetcher: typeof fetch;
  private readonly socketFactory: SocketFactory | undefined;

  constructor(options: ClientOptions) {
    const base = new URL(options.baseUrl);
    if (base.protocol !== "http:" && base.protocol !== "https:") {
      throw new TypeError(`baseUrl must be an http(s) URL, not ${options.baseUrl}`);
    }
    this.baseUrl = base.origin + base.pathname.replace(/\/+$/, "");
    this.token = options.token || undefined;
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.fetcher = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.socketFactory = options.WebSocket;
  }

  /** One page of a board, best first (by `offset`, or after a `cursor`). */
  top(gameId: string, query?: TopQuery): Promise<TopPage> {
    return this.read(TOP, { gameId }, query);
  }

  /** A player's rank, score and percentile; `NOT_FOUND` (404) without a score. */
  rank(gameId: string, playerId: string, query?: RankQuery): Promise<RankAnswer> {
    return this.read(RANK, { gameId, playerId }, query);
  }

  /** The `k` players right above and below a player; `NOT_FOUND` (404) without a score. */
  around(gameId: string, playerId: string, query?: AroundQuery): Promise<AroundAnswer> {
    return this.read(AROUND, { gameId, playerId }, query);
  }

  /** A player and the players they follow, ranked among themselves. */
  friends(gameId: string, playerId: string, query?: FriendsQuery): Promise<FriendsBoard> {
    return this.read(FRIENDS, { gameId }, { ...query, playerId });
  }

  /** The tournaments a player is on the board of (an empty list when none). */
  tournaments(gameId: string, playerId: string, query?: TournamentsQuery): Promise<PlayerTournaments> {
    return this.read(TOURNAMENTS, { gameId, playerId }, query);
  }

  /**
   * Follow a board's top N and/or a player's rank, pushed over a WebSocket.
   *
   * The subscription reconnects by itself after a lost connection, resuming
   * after the last message's `id` (see {@link LiveSubscription}).
   */
  live(gameId: string, options: LiveOptions, handlers: LiveHandlers): LiveSubscription {
    const path = fill("/v1/leaderboards/{gameId}/live", { gameId });
    const wsBase = this.baseUrl.replace(/^http/, "ws") + path;
    const factory = this.socketFactory ?? (globalThis.WebSocket as SocketFactory | undefined);
    if (factory === undefined) {
      throw new TypeError("no WebSocket here: pass options.WebSocket (Node 20: node --experimental-websocket)");
    }
    return new LiveSubscription(wsBase, this.token, options, handlers, factory);
  }

  /** `GET path`: the 200 answer, or a LeaderboardError with the API's code and message. */
  private async read<P extends ReadPath>(path: P, values: PathOf<P>, query: QueryOf<P> | undefined): Promise<AnswerOf<P>> {
    const url = this.baseUrl + fill(path, values as Record<string, string>) + queryStringOf(query);
    const headers: Record<string, string> = { Accept: "application/json" };
    if (this.token) headers.Authorization = `Bearer ${this.token}`;
    let answer: Response;
    try {
      answer = await this.fetcher(url, { headers, signal: AbortSignal.timeout(this.timeoutMs) });
    } catch (cause) {
      const timedOut = cause instanceof Error && cause.name === "TimeoutError";
      throw new LeaderboardError(
        0,
        timedOut ? "TIMEOUT" : "NETWORK",
        timedOut ? `GET ${url}: no answer within ${this.timeoutMs} ms` : `GET ${url}: ${String(cause)}`,
        { cause },
      );
    }
    const text = await answer.text();
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      body = undefined;
    }
    if (!answer.ok) {
      const error = errorOf(body);
      throw new LeaderboardError(
        answer.status,
        error?.code ?? "HTTP",
        error?.message ?? `GET ${url} answered ${answer.status}: ${text.slice(0, 200)}`,
      );
    }
    if (body === undefined) {
      throw new LeaderboardError(answer.status, "HTTP", `GET ${url} answered something that is not JSON`);
    }
    return body as AnswerOf<P>;
  }
}
