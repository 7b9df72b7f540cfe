package leaderboard.kit;

import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.regex.Pattern;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/** Key id to HMAC secret, like the job's LB_HMAC_KEYS; its text shows key ids only. */
public final class Keyring {
  /** The shortest secret the job accepts (a 128-bit key). */
  public static final int MIN_SECRET_BYTES = 16;

  private static final Pattern KEY_ID = Pattern.compile("[A-Za-z0-9._-]{1,64}");
  private final Map<String, byte[]> secrets;

  public Keyring(Map<String, byte[]> secrets) {
    this.secrets = new LinkedHashMap<>(secrets);
  }

  /** Reads "keyId:hexsecret,keyId2:hexsecret"; errors name the entry, never a secret. */
  public static Keyring parse(String spec) {
    Map<String, byte[]> out = new LinkedHashMap<>();
    if (spec == null || spec.isBlank()) {
      throw new IllegalArgumentException("HMAC keyring: at least one key is required");
    }
    String[] entries = spec.split(",", -1);
    for (int i = 0; i < entries.length; i++) {
      String entry = entries[i].strip();
      int colon = entry.indexOf(':');
      String id = colon < 0 ? "" : entry.substring(0, colon).strip();
      String hex = colon < 0 ? "" : entry.substring(colon + 1).strip();
      if (id.isEmpty() || hex.isEmpty()) {
        throw new IllegalArgumentException(
            "HMAC keyring: entry " + (i + 1) + " must look like keyId:hexsecret");
      }
      if (!KEY_ID.matcher(id).matches()) {
        throw new IllegalArgumentException(
            "HMAC keyring: key id '" + id + "' must be 1-64 characters of [A-Za-z0-9._-]");
      }
      if (out.containsKey(id)) {
        throw new IllegalArgumentException(
            "HMAC keyring: key id '" + id + "' appears more than once");
      }
      byte[] secret;
      try {
        secret = HexFormat.of().parseHex(hex);
      } catch (IllegalArgumentException e) {
        throw new IllegalArgumentException(
            "HMAC keyring: secret of key '" + id + "' (entry " + (i + 1) + ") is not valid hex");
      }
      if (secret.length < MIN_SECRET_BYTES) {
        throw new IllegalArgumentException(
            "HMAC keyring: secret of key '" + id + "' must be at least "
                + MIN_SECRET_BYTES + " bytes");
      }
      out.put(id, secret);
    }
    return new Keyring(out);
  }

  /** The key ids, in the order they were given. */
  public java.util.Set<String> keyIds() {
    return java.util.Collections.unmodifiableSet(secrets.keySet());
  }

  /** The event signed with {@code keyId}: its keyId set and sig the HMAC of its canonical text. */
  public ScoreEvent sign(ScoreEvent event, String keyId) {
    byte[] secret = secrets.get(keyId);
    if (secret == null) {
      throw new IllegalArgumentException(
          "cannot sign with key id '" + keyId + "': not in the keyring");
    }
    return event.withSignature(keyId, hmac(secret, event.canonical()));
  }

  /** "OK", or the dead-letter code the job gives: UNKNOWN_KEY or SIGNATURE. */
  public String verify(ScoreEvent event) {
    byte[] secret = secrets.get(event.keyId());
    if (secret == null) {
      return "UNKNOWN_KEY";
    }
    return MessageDigest.isEqual(hmac(secret, event.canonical()), event.sig()) ? "OK" : "SIGNATURE";
  }

  static byte[] hmac(byte[] secret, String text) {
    try {
      Mac mac = Mac.getInstance("HmacSHA256");
      mac.init(new SecretKeySpec(secret, "HmacSHA256"));
      return mac.doFinal(text.getBytes(StandardCharsets.UTF_8));
    } catch (GeneralSecurityException e) {
      throw new IllegalStateException("HmacSHA256 is not available", e);
    }
  }

  @Override
  public String toString() {
    return "Keyring" + secrets.keySet();
  }
}
