package leaderboard.kit;

/** An event or record the job would dead-letter, with its dead-letter code. */
public class KitException extends RuntimeException {
  private final String code;

  public KitException(String code, String detail) {
    super(code + ": " + detail);
    this.code = code;
  }

  /** The dead-letter code (DECODE, SCHEMA, BOUNDS, ...). */
  public String code() {
    return code;
  }
}
