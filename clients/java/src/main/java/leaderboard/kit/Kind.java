package leaderboard.kit;

/** What an event asks of the boards; the name is the Avro enum symbol. */
public enum Kind {
  /** Offer a score to every board of the game. */
  SCORE,
  /** Remove the player from every board of the game. */
  RETRACT
}
