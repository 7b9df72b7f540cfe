// The TypeScript client of the real-time leaderboard API: reads and live pushes.
export { LeaderboardClient, type ClientOptions } from "./client.js";
export { LeaderboardError } from "./errors.js";
export {
  LiveSubscription,
  backoffMs,
  type LiveHandlers,
  type LiveOptions,
  type LiveState,
  type Reconnected,
  type RetryPolicy,
  type SocketFactory,
} from "./live.js";
export type {
  AroundAnswer,
  AroundQuery,
  DroppedMessage,
  Entry,
  ErrorBody,
  FriendsBoard,
  FriendsQuery,
  GapMessage,
  LiveChange,
  LiveMessage,
  LiveQuery,
  PlayerTournament,
  PlayerTournaments,
  RankAnswer,
  RankMessage,
  RankQuery,
  TopMessage,
  TopPage,
  TopQuery,
  TournamentsQuery,
} from "./types.js";
