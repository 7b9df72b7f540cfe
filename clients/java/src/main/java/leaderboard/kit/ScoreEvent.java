package leaderboard.kit;

import java.util.Arrays;

/**
 * One score event. {@code tsMs} is when the score was achieved (epoch milliseconds UTC);
 * {@code sig} is filled in by {@link Keyring#sign}.
 */
public record ScoreEvent(
    String eventId,
    String gameId,
    String playerId,
    long score,
    long tsMs,
    Kind kind,
    String keyId,
    byte[] sig) {

  /** An unsigned event (no key id, no signature yet). */
  public static ScoreEvent of(
      String eventId, String gameId, String playerId, long score, long tsMs, Kind kind) {
    return new ScoreEvent(eventId, gameId, playerId, score, tsMs, kind, "", new byte[0]);
  }

  /** The exact text that is signed: integers in base 10, kind as its symbol. */
  public String canonical() {
    return String.join(
        "|", "v1", eventId, gameId, playerId, Long.toString(score), Long.toString(tsMs),
        kind.name());
  }

  /** The same event with another key id and signature. */
  public ScoreEvent withSignature(String newKeyId, byte[] newSig) {
    return new ScoreEvent(eventId, gameId, playerId, score, tsMs, kind, newKeyId, newSig);
  }

  @Override
  public boolean equals(Object other) {
    return other instanceof ScoreEvent o
        && eventId.equals(o.eventId) && gameId.equals(o.gameId) && playerId.equals(o.playerId)
        && score == o.score && tsMs == o.tsMs && kind == o.kind && keyId.equals(o.keyId)
        && Arrays.equals(sig, o.sig);
  }

  @Override
  public int hashCode() {
    return eventId.hashCode() * 31 + Arrays.hashCode(sig);
  }
}
