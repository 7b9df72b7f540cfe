// A live subscription: one WebSocket to /v1/leaderboards/{gameId}/live, and the
// same subscription again after a lost connection, resumed after the last id.
import { LeaderboardError } from "./errors.js";
import { queryStringOf } from "./query.js";
import type {
  DroppedMessage,
  GapMessage,
  LiveMessage,
  LiveQuery,
  RankMessage,
  TopMessage,
} from "./types.js";

/** A WebSocket constructor: the global one (browsers, Node 22+, Node 20 with --experimental-websocket). */
export type SocketFactory = new (url: string) => WebSocket;

export interface RetryPolicy {
  /** The wait before the first reconnection, doubled after each failed one (500 ms). */
  minMs?: number;
  /** The longest wait between two reconnections (15,000 ms). */
  maxMs?: number;
  /** A connection not open within this many milliseconds is given up and retried (10,000 ms). */
  connectMs?: number;
}

/** What to follow (`window`, `top`, `playerId`, `interval`, `lastEventId`, as the API takes them). */
export type LiveOptions = LiveQuery & { retry?: RetryPolicy };

/**
 * - `connecting`: the first connection is being made;
 * - `live`: a page or rank arrived on the current connection;
 * - `reconnecting`: the connection was lost (or dropped as too slow), another follows;
 * - `refused`: the server refused the subscription (see `refused`); no reconnection;
 * - `closed`: {@link LiveSubscription.close} was called.
 */
export type LiveState = "connecting" | "live" | "reconnecting" | "refused" | "closed";

/** How a reconnection went: resumed after `from` (nothing missed), or `gap` (started afresh). */
export interface Reconnected {
  from: string | null;
  gap: boolean;
}

export interface LiveHandlers {
  /** A fresh top-N page with the changes behind it (after a resume: those missed meanwhile). */
  top?(message: TopMessage): void;
  /** The subscribed player's rank, score and percentile. */
  rank?(message: RankMessage): void;
  /** The resume point was trimmed from the server's change stream: a fresh page and rank follow. */
  gap?(message: GapMessage): void;
  /** The server dropped this subscriber as too slow; the subscription reconnects and resumes. */
  dropped?(message: DroppedMessage): void;
  /** The subscription was refused (unknown game, bad window...): it ends here. */
  refused?(error: LeaderboardError): void;
  /** The first message after a reconnection arrived (before its own handler runs). */
  reconnected?(outcome: Reconnected): void;
  /** Every change of {@link LiveState}. */
  state?(state: LiveState): void;
}

const MIN_MS = 500;
const MAX_MS = 15_000;
const CONNECT_MS = 10_000;

/** The wait before reconnection number `attempt` (0-based): doubling, capped, with jitter. */
export function backoffMs(attempt: number, retry: RetryPolicy = {}, random: () => number = Math.random): number {
  const min = retry.minMs ?? MIN_MS;
  const max = Math.max(min, retry.maxMs ?? MAX_MS);
  const ceiling = Math.min(max, min * 2 ** Math.min(attempt, 30));
  return Math.round(ceiling * (0.5 + random() / 2));
}

function parse(data: unknown): LiveMessage | null {
  if (typeof data !== "string") return null;
  try {
    const message: unknown = JSON.parse(data);
    return typeof message === "object" && message !== null && "type" in message ? (message as LiveMessage) : null;
  } catch {
    return null;
  }
}

export class LiveSubscription {
  private socket: WebSocket | null = null;
  private timer: ReturnType<typeof setTimeout> | undefined;
  /** Connections that ended since the last one that delivered a message. */
  private failures = 0;
  private connections = 0;
  private firstPending = false;
  private resumeFrom: string | null = null;
  private last: string | null;
  private current: LiveState = "connecting";

  constructor(
    private readonly url: string,
    private readonly token: string | undefined,
    private readonly options: LiveOptions,
    private readonly handlers: LiveHandlers,
    private readonly factory: SocketFactory,
  ) {
    this.last = options.lastEventId || null;
    this.connect();
  }

  /** The `id` of the last message received: where a reconnection resumes. */
  get lastId(): string | null {
    return this.last;
  }

  get state(): LiveState {
    return this.current;
  }

  /** Stop: close the socket and never reconnect. */
  close(): void {
    if (this.current === "closed") return;
    clearTimeout(this.timer);
    this.setState("closed");
    if (this.socket !== null) this.drop(this.socket, 1000);
  }

  private connect(): void {
    const { retry: _retry, lastEventId: _first, ...query } = this.options;
    this.resumeFrom = this.last;
    const url = this.url + queryStringOf({ ...query, lastEventId: this.last, token: this.token });
    this.firstPending = true;
    this.connections += 1;
    const socket = new this.factory(url);
    this.socket = socket;
    let opened = false;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.lost(socket), this.options.retry?.connectMs ?? CONNECT_MS);
    socket.onopen = () => {
      opened = true;
      clearTimeout(this.timer);
    };
    socket.onmessage = (event: MessageEvent) => this.receive(event.data);
    socket.onclose = () => this.lost(socket);
    // Browsers follow a failed handshake with a close event; some runtimes (Node 20's) do not.
    socket.onerror = () => {
      if (!opened) this.lost(socket);
    };
  }

  private receive(data: unknown): void {
    const message = parse(data);
    if (message === null) return;
    if (message.type === "error") {
      const { code, message: text } = message.error;
      this.setState("refused");
      this.handlers.refused?.(new LeaderboardError(1008, code, text));
      return; // the server closes the socket; lost() sees the state and stays down
    }
    if (message.id) this.last = message.id;
    if (this.firstPending) {
      this.firstPending = false;
      this.failures = 0;
      if (this.connections > 1) this.handlers.reconnected?.({ from: this.resumeFrom, gap: message.type === "gap" });
    }
    switch (message.type) {
      case "top":
        this.setState("live");
        this.handlers.top?.(message);
        break;
      case "rank":
        this.setState("live");
        this.handlers.rank?.(message);
        break;
      case "gap":
        this.handlers.gap?.(message);
        break;
      case "dropped":
        this.handlers.dropped?.(message);
        break;
    }
  }

  /** The connection ended (or never opened): reconnect after a back-off unless stopped. */
  private lost(socket: WebSocket): void {
    if (this.socket !== socket) return; // already handled
    clearTimeout(this.timer);
    this.drop(socket);
    if (this.current === "closed" || this.current === "refused") return;
    this.setState("reconnecting");
    const wait = backoffMs(this.failures, this.options.retry);
    this.failures += 1;
    this.timer = setTimeout(() => this.connect(), wait);
  }

  /** Forget `socket`: no more events from it, and closed if it is not already. */
  private drop(socket: WebSocket, code?: number): void {
    this.socket = null;
    socket.onopen = socket.onmessage = socket.onclose = socket.onerror = null;
    try {
      socket.close(code);
    } catch {
      // closing a socket that never opened may throw in some runtimes: it is gone either way
    }
  }

  private setState(state: LiveState): void {
    if (state === this.current) return;
    this.current = state;
    this.handlers.state?.(state);
  }
}
