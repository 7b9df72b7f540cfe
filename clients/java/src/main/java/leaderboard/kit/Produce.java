package leaderboard.kit;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.producer.ProducerRecord;

/**
 * Produces N signed score events with the Java kit, optionally with planted bad records, and
 * prints a JSON summary; --report writes one JSON line per record (partition, offset,
 * timestamp, the code the job must give it, the event).
 */
public final class Produce {
  /** Planted bad records, in the order they are cycled through. */
  static final List<String> BAD_CODES =
      List.of("SIGNATURE", "UNKNOWN_KEY", "BOUNDS", "FUTURE", "UNKNOWN_GAME", "SCHEMA", "DECODE");

  private static final Map<String, String> DEFAULTS = new LinkedHashMap<>();

  static {
    DEFAULTS.put("brokers", env("LB_KAFKA_BOOTSTRAP", "127.0.0.1:29092"));
    DEFAULTS.put("topic", env("LB_TOPIC", "score-events"));
    DEFAULTS.put("keys", env("LB_HMAC_KEYS", ""));
    DEFAULTS.put("key-id", "");
    DEFAULTS.put("games", "g1");
    DEFAULTS.put("player-prefix", "java-");
    DEFAULTS.put("report", "");
    DEFAULTS.put("count", "1000");
    DEFAULTS.put("bad", "0");
    DEFAULTS.put("players", "100");
    DEFAULTS.put("max-score", "1000");
    DEFAULTS.put("retract-ratio", "0");
    DEFAULTS.put("seed", "1");
    DEFAULTS.put("metadata", "");
  }

  private Produce() {}

  private static String env(String name, String fallback) {
    String value = System.getenv(name);
    return value == null || value.isEmpty() ? fallback : value;
  }

  private static void usage(String problem) {
    System.err.println("lb-produce-java: " + problem + " (options: --" + String.join(" --",
        DEFAULTS.keySet()) + ")");
    System.exit(2);
  }

  public static void main(String[] args) throws Exception {
    Map<String, String> o = new HashMap<>(DEFAULTS);
    for (int i = 0; i < args.length; i++) {
      String name = args[i].startsWith("--") ? args[i].substring(2) : "";
      if (!DEFAULTS.containsKey(name) || i + 1 >= args.length) {
        usage("unknown option or missing value: " + args[i]);
      }
      o.put(name, args[++i]);
    }
    int count = 0;
    int bad = 0;
    int players = 0;
    long maxScore = 0;
    double retract = 0;
    long seed = 0;
    try {
      count = Integer.parseInt(o.get("count"));
      bad = Integer.parseInt(o.get("bad"));
      players = Integer.parseInt(o.get("players"));
      maxScore = Long.parseLong(o.get("max-score"));
      retract = Double.parseDouble(o.get("retract-ratio"));
      seed = Long.parseLong(o.get("seed"));
    } catch (NumberFormatException e) {
      usage("not a number: " + e.getMessage());
    }
    if (o.get("keys").isEmpty()) {
      usage("no keyring: set LB_HMAC_KEYS or --keys");
    }
    if (count < 0 || bad < 0 || bad > count || players < 1 || maxScore < 0) {
      usage("--count, --bad >= 0, --bad <= --count, --players >= 1, --max-score >= 0");
    }
    Keyring ring = null;
    try {
      ring = Keyring.parse(o.get("keys"));
    } catch (IllegalArgumentException e) {
      usage(e.getMessage());
    }
    String keyId = o.get("key-id").isEmpty() ? ring.keyIds().iterator().next() : o.get("key-id");
    Generator g = new Generator(o, ring, keyId, new Random(seed), count, bad, players, maxScore,
        retract);
    run(o, g, ring, keyId, count);
  }

  private static void run(Map<String, String> o, Generator g, Keyring ring, String keyId,
      int count) throws IOException {
    long started = System.nanoTime();
    Object[][] lines = new Object[count][];
    AtomicReference<Exception> failure = new AtomicReference<>();
    try (ScoreProducer producer = new ScoreProducer(o.get("brokers"), o.get("topic"), ring, keyId)) {
      for (int i = 0; i < count; i++) {
        Generator.Planned p = g.next(producer, i);
        final int at = i;
        lines[i] = new Object[] {0, 0L, 0L, p.expected(), p.event()};
        producer.sendRecord(p.record(), (meta, err) -> {
          if (err != null) {
            failure.compareAndSet(null, err);
            return;
          }
          synchronized (lines) {
            lines[at][0] = meta.partition();
            lines[at][1] = meta.offset();
            lines[at][2] = meta.timestamp();
          }
        });
      }
      producer.flush();
    }
    if (failure.get() != null) {
      System.err.println("lb-produce-java: a record failed: " + failure.get());
      System.exit(1);
    }
    ObjectMapper json = new ObjectMapper();
    Map<String, Integer> counts = new TreeMap<>();
    synchronized (lines) {
      for (Object[] line : lines) {
        counts.merge((String) line[3], 1, Integer::sum);
      }
      if (!o.get("report").isEmpty()) {
        try (PrintWriter out = new PrintWriter(Files.newBufferedWriter(Path.of(o.get("report"))))) {
          for (Object[] line : lines) {
            Map<String, Object> row = new LinkedHashMap<>();
            row.put("partition", line[0]);
            row.put("offset", line[1]);
            row.put("timestamp", line[2]);
            row.put("expected", line[3]);
            row.put("event", eventJson((ScoreEvent) line[4]));
            out.println(json.writeValueAsString(row));
          }
        }
      }
    }
    Map<String, Object> summary = new LinkedHashMap<>();
    summary.put("topic", o.get("topic"));
    summary.put("produced", count);
    summary.put("expected", counts);
    summary.put("seconds", (System.nanoTime() - started) / 1e9);
    System.out.println(json.writeValueAsString(summary));
  }

  private static Map<String, Object> eventJson(ScoreEvent e) {
    if (e == null) {
      return null;
    }
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("eventId", e.eventId());
    out.put("gameId", e.gameId());
    out.put("playerId", e.playerId());
    out.put("score", e.score());
    out.put("ts", e.tsMs());
    out.put("kind", e.kind().name());
    out.put("keyId", e.keyId());
    if (e.metadata() != null) {
      out.put("metadata", e.metadata());
    }
    return out;
  }

  /** Valid events, or (at evenly spread indices) planted bad records. */
  record Generator(Map<String, String> o, Keyring ring, String keyId, Random rng, int count,
      int bad, int players, long maxScore, double retract) {
    record Planned(ProducerRecord<byte[], byte[]> record, String expected, ScoreEvent event) {}

    Planned next(ScoreProducer producer, int i) {
      String prefix = o.get("player-prefix");
      String[] games = o.get("games").split(",");
      long now = System.currentTimeMillis();
      ScoreEvent e = ScoreEvent.of(
          String.format("%s%s-%06d", prefix, o.get("seed"), i),
          games[rng.nextInt(games.length)],
          String.format("%s%05d", prefix, rng.nextInt(players)),
          (long) (rng.nextDouble() * (maxScore + 1)),
          now - rng.nextInt(5000),
          Kind.SCORE);
      if (rng.nextDouble() < retract) {
        e = ScoreEvent.of(e.eventId(), e.gameId(), e.playerId(), 0, e.tsMs(), Kind.RETRACT);
      }
      int every = bad > 0 ? count / bad : 0;
      if (bad > 0 && i % every == 0 && i / every < bad) {
        String code = BAD_CODES.get((i / every) % BAD_CODES.size());
        return new Planned(bad(code, e), code, null);
      }
      if (!o.get("metadata").isEmpty() && e.kind() == Kind.SCORE) {
        e = e.withMetadata(o.get("metadata"));  // written as schema v2
      }
      ProducerRecord<byte[], byte[]> record = producer.record(e);
      return new Planned(record, "ok", e.withSignature(keyId, new byte[0]));
    }

    private ProducerRecord<byte[], byte[]> bad(String code, ScoreEvent e) {
      Keyring signer = ring;
      String signerId = keyId;
      switch (code) {
        case "UNKNOWN_KEY" -> {
          signer = new Keyring(Map.of("rogue-key", new byte[32]));
          signerId = "rogue-key";
        }
        case "BOUNDS" -> e = ScoreEvent.of(e.eventId(), e.gameId(), e.playerId(), -1, e.tsMs(),
            Kind.SCORE);
        case "FUTURE" -> e = ScoreEvent.of(e.eventId(), e.gameId(), e.playerId(), e.score(),
            e.tsMs() + 3_600_000, e.kind());
        case "UNKNOWN_GAME" -> e = ScoreEvent.of(e.eventId(), "no-such-game", e.playerId(),
            e.score(), e.tsMs(), e.kind());
        default -> { }
      }
      ScoreEvent signed = signer.sign(e, signerId);
      byte[] value = WireCodec.v1().encode(signed);
      switch (code) {
        case "SIGNATURE" -> value[value.length - 1] ^= 0x01;
        case "SCHEMA" -> ByteBuffer.wrap(value, 1, 4).putInt(99);
        case "DECODE" -> value = Arrays.copyOf(value, value.length - 7);
        default -> { }
      }
      return new ProducerRecord<>(o.get("topic"), e.playerId().getBytes(StandardCharsets.UTF_8),
          value);
    }
  }
}
