package leaderboard.kit;

import java.util.regex.Pattern;

/** What the job refuses from the event alone; max_score and the clock are the job's to judge. */
public final class Checks {
  /** The longest eventId or playerId the job accepts, in characters (code points). */
  public static final int MAX_ID_LENGTH = 128;

  private static final Pattern GAME_ID = Pattern.compile("[A-Za-z0-9._-]{1,64}");

  private Checks() {}

  /** Throws {@link KitException} (SCHEMA or BOUNDS) for an event the job would refuse. */
  public static void check(ScoreEvent e) {
    checkId("eventId", e.eventId());
    checkId("playerId", e.playerId());
    if (!GAME_ID.matcher(e.gameId()).matches()) {
      throw new KitException("SCHEMA", "gameId '" + e.gameId() + "' is not [A-Za-z0-9._-]{1,64}");
    }
    if (e.kind() == null) {
      throw new KitException("SCHEMA", "kind is missing");
    }
    if (e.score() < 0) {
      throw new KitException("BOUNDS", "score " + e.score() + " is below 0");
    }
  }

  private static void checkId(String name, String value) {
    int n = value.codePointCount(0, value.length());
    if (n == 0 || n > MAX_ID_LENGTH) {
      throw new KitException(
          "SCHEMA", name + " must be 1.." + MAX_ID_LENGTH + " characters, got " + n);
    }
  }
}
