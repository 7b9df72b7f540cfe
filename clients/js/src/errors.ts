/**
 * What a read or a subscription could not do.
 *
 * `status` is the HTTP status (0: no answer reached us; a refused live
 * subscription carries 1008, its WebSocket close code) and `code` the
 * API's stable error code (`NOT_FOUND`, `BAD_REQUEST`, `UNKNOWN_GAME`,
 * `UNAVAILABLE`...; `NETWORK` and `TIMEOUT` are this client's own).
 */
export class LeaderboardError extends Error {
  readonly status: number;
  readonly code: string;

  constructor(status: number, code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "LeaderboardError";
    this.status = status;
    this.code = code;
  }
}

/** The `{"error": {"code", "message"}}` document of an answer, if that is what `body` holds. */
export function errorOf(body: unknown): { code: string; message: string } | null {
  if (typeof body !== "object" || body === null || !("error" in body)) return null;
  const error: unknown = body.error;
  if (typeof error !== "object" || error === null) return null;
  const { code, message } = error as { code?: unknown; message?: unknown };
  return typeof code === "string" && typeof message === "string" ? { code, message } : null;
}
