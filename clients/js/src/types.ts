// The API's shapes, taken from the types openapi-typescript generates from
// openapi.json (the app's own OpenAPI document): nothing here restates a field.
// The live messages are the documented envelopes (docs/API.md, "Live pushes")
// around those same answers; WebSocket routes are not part of an OpenAPI document.
import type { components, paths } from "./generated/openapi.js";

type Schemas = components["schemas"];

/** One ranked line: `{rank, playerId, score}` (`rank` null beyond the game's exact tier). */
export type Entry = Schemas["Entry"];
/** `GET .../top`: one page, best first; `nextCursor` null at the end. */
export type TopPage = Schemas["TopPage"];
/** `GET .../players/{playerId}`: rank, score and percentile on one board. */
export type RankAnswer = Schemas["RankAnswer"];
/** `GET .../players/{playerId}/neighbors`: `above + [player] + below`. */
export type AroundAnswer = Schemas["AroundAnswer"];
/** `GET .../friends?playerId=`: a player and the players they follow, ranked among themselves. */
export type FriendsBoard = Schemas["FriendsBoard"];
/** `GET .../players/{playerId}/tournaments`: the tournaments a player is on the board of. */
export type PlayerTournaments = Schemas["PlayerTournaments"];
/** One tournament of {@link PlayerTournaments}. */
export type PlayerTournament = Schemas["PlayerTournament"];
/** Every error answer: `{"error": {"code", "message"}}`. */
export type ErrorBody = Schemas["ErrorBody"];

/** The routes that answer a `GET` with a JSON document. */
export type ReadPath = {
  [P in keyof paths]: paths[P] extends { get: { responses: { 200: { content: { "application/json": unknown } } } } }
    ? P
    : never;
}[keyof paths];

type Get<P extends ReadPath> = paths[P]["get"];
/** The query parameters of a read, as the OpenAPI document declares them. */
export type QueryOf<P extends ReadPath> = NonNullable<Get<P>["parameters"]["query"]>;
/** The path parameters of a read. */
export type PathOf<P extends ReadPath> = Get<P>["parameters"]["path"];
/** The 200 answer of a read. */
export type AnswerOf<P extends ReadPath> = Get<P>["responses"][200]["content"]["application/json"];

export const TOP = "/v1/leaderboards/{gameId}/top";
export const RANK = "/v1/leaderboards/{gameId}/players/{playerId}";
export const AROUND = "/v1/leaderboards/{gameId}/players/{playerId}/neighbors";
export const FRIENDS = "/v1/leaderboards/{gameId}/friends";
export const TOURNAMENTS = "/v1/leaderboards/{gameId}/players/{playerId}/tournaments";
/** The Server-Sent Events route: its query is the live subscription's (the WebSocket takes the same). */
export const EVENTS = "/v1/leaderboards/{gameId}/events";

/** `window`, `limit`, `offset`, `cursor`, `rank_mode`. */
export type TopQuery = QueryOf<typeof TOP>;
/** `window`, `rank_mode`. */
export type RankQuery = QueryOf<typeof RANK>;
/** `window`, `k`, `rank_mode`. */
export type AroundQuery = QueryOf<typeof AROUND>;
/** `window` (the player is an argument of its own). */
export type FriendsQuery = Omit<QueryOf<typeof FRIENDS>, "playerId">;
/** `rank_mode`. */
export type TournamentsQuery = QueryOf<typeof TOURNAMENTS>;
/** `window`, `top`, `playerId`, `interval`, `lastEventId`: what a live subscriber follows. */
export type LiveQuery = NonNullable<paths[typeof EVENTS]["get"]["parameters"]["query"]>;

/** A change behind a pushed page: `rank` is the player's rank on that page (null: not on it). */
export interface LiveChange {
  playerId: string;
  old: number | null;
  new: number | null;
  rank: number | null;
}

/** Every push carries `id`, the stream position it reflects (resume after it). */
interface Positioned {
  id: string;
}

/** A fresh top-N page, and the changes that caused it since the last push. */
export type TopMessage = Positioned & TopPage & { type: "top"; changes: LiveChange[] };
/** The subscribed player's rank (`rank`, `score`, `percentile` null without a score). */
export type RankMessage = Positioned & RankAnswer & { type: "rank" };
/** The resume point fell off the capped change stream: a fresh page and rank follow. */
export type GapMessage = Positioned & { type: "gap"; lastEventId: string };
/** The server dropped this subscriber as too slow (it closes with 1013). */
export type DroppedMessage = Positioned & { type: "dropped"; reason: string };
/** A refused subscription (bad window, unknown game...); the socket closes with 1008. */
export type ErrorMessage = ErrorBody & { type: "error" };

/** Anything the live endpoint sends. */
export type LiveMessage = TopMessage | RankMessage | GapMessage | DroppedMessage | ErrorMessage;
