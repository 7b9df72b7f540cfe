package leaderboard.kit;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.Objects;

/**
 * One score event. {@code tsMs} is when the score was achieved (epoch milliseconds UTC);
 * {@code sig} is filled in by {@link Keyring#sign}; {@code metadata} is what the score was
 * made with (schema v2), null for none (v1).
 */
public record ScoreEvent(
    String eventId,
    String gameId,
    String playerId,
    long score,
    long tsMs,
    Kind kind,
    String keyId,
    byte[] sig,
    String metadata) {

  /** An event without metadata (schema v1). */
  public ScoreEvent(
      String eventId, String gameId, String playerId, long score, long tsMs, Kind kind,
      String keyId, byte[] sig) {
    this(eventId, gameId, playerId, score, tsMs, kind, keyId, sig, null);
  }

  /** An unsigned event (no key id, no signature yet). */
  public static ScoreEvent of(
      String eventId, String gameId, String playerId, long score, long tsMs, Kind kind) {
    return new ScoreEvent(eventId, gameId, playerId, score, tsMs, kind, "", new byte[0]);
  }

  /**
   * The exact text that is signed: integers in base 10, kind as its symbol; with metadata,
   * the v2 string ending in the metadata's SHA-256 as lowercase hex.
   */
  public String canonical() {
    String v1 = String.join(
        "|", "v1", eventId, gameId, playerId, Long.toString(score), Long.toString(tsMs),
        kind.name());
    if (metadata == null) {
      return v1;
    }
    try {
      byte[] digest = MessageDigest.getInstance("SHA-256")
          .digest(metadata.getBytes(StandardCharsets.UTF_8));
      return "v2" + v1.substring(2) + "|" + HexFormat.of().formatHex(digest);
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException("SHA-256 is missing from this JVM", e);
    }
  }

  /** The same event with another key id and signature. */
  public ScoreEvent withSignature(String newKeyId, byte[] newSig) {
    return new ScoreEvent(
        eventId, gameId, playerId, score, tsMs, kind, newKeyId, newSig, metadata);
  }

  /** The same event carrying {@code newMetadata} (null: none). */
  public ScoreEvent withMetadata(String newMetadata) {
    return new ScoreEvent(eventId, gameId, playerId, score, tsMs, kind, keyId, sig, newMetadata);
  }

  @Override
  public boolean equals(Object other) {
    return other instanceof ScoreEvent o
        && eventId.equals(o.eventId) && gameId.equals(o.gameId) && playerId.equals(o.playerId)
        && score == o.score && tsMs == o.tsMs && kind == o.kind && keyId.equals(o.keyId)
        && Arrays.equals(sig, o.sig) && Objects.equals(metadata, o.metadata);
  }

  @Override
  public int hashCode() {
    return eventId.hashCode() * 31 + Arrays.hashCode(sig);
  }
}
