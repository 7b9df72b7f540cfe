package leaderboard.kit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/** The kit against the repository's shared test vectors (schemas/vectors/). */
class VectorsTest {
  private static final Path SCHEMAS = Path.of("..", "..", "schemas");
  private static final HexFormat HEX = HexFormat.of();
  /** Every vectors file whose schema this kit writes (v1, v2). */
  private static List<JsonNode> files() throws IOException {
    List<JsonNode> out = new ArrayList<>();
    try (Stream<Path> paths = Files.list(SCHEMAS.resolve("vectors"))) {
      for (Path path : paths.filter(p -> p.toString().endsWith(".json")).sorted().toList()) {
        JsonNode doc = new ObjectMapper().readTree(path.toFile());
        int id = doc.get("schema_id").asInt();
        if (id == WireCodec.SCHEMA_ID_V1 || id == WireCodec.SCHEMA_ID_V2) {
          out.add(doc);
        }
      }
    }
    assertFalse(out.isEmpty(), "no vectors file for schema v1");
    return out;
  }

  private static WireCodec codecOf(JsonNode doc) {
    return doc.get("schema_id").asInt() == WireCodec.SCHEMA_ID_V2 ? WireCodec.v2() : WireCodec.v1();
  }

  private static ScoreEvent event(JsonNode e, String sigHex) {
    JsonNode metadata = e.path("metadata");
    return new ScoreEvent(e.get("eventId").asText(), e.get("gameId").asText(),
        e.get("playerId").asText(), e.get("score").asLong(), e.get("ts").asLong(),
        Kind.valueOf(e.get("kind").asText()), e.get("keyId").asText(), HEX.parseHex(sigHex),
        metadata.isTextual() ? metadata.asText() : null);
  }

  @Test
  void theSchemaResourceIsTheRegisteredOne() throws IOException {
    String registered = Files.readString(SCHEMAS.resolve("score_event.v1.avsc"));
    assertEquals(registered, WireCodec.schemaV1());
    String v2 = Files.readString(SCHEMAS.resolve("score_event.v2.avsc"));
    assertEquals(v2, WireCodec.schemaText(WireCodec.SCHEMA_RESOURCE_V2));
  }

  @TestFactory
  List<DynamicTest> validVectors() throws IOException {
    List<DynamicTest> tests = new ArrayList<>();
    for (JsonNode doc : files()) {
      Keyring ring = Keyring.parse(doc.get("keys").asText());
      WireCodec codec = codecOf(doc);
      for (JsonNode c : doc.get("valid")) {
        tests.add(DynamicTest.dynamicTest(c.get("name").asText(), () -> {
          ScoreEvent unsigned = event(c.get("event"), "");
          assertEquals(c.get("canonical").asText(), unsigned.canonical());
          ScoreEvent signed = ring.sign(unsigned, c.get("event").get("keyId").asText());
          assertEquals(c.get("sig_hex").asText(), HEX.formatHex(signed.sig()));
          assertEquals(c.get("avro_body_hex").asText(), HEX.formatHex(codec.body(signed)));
          byte[] framed = codec.encode(signed);
          assertEquals(c.get("framed_hex").asText(), HEX.formatHex(framed));
          assertEquals(c.get("key_hex").asText(),
              HEX.formatHex(signed.playerId().getBytes(StandardCharsets.UTF_8)));
          assertEquals(signed, codec.decode(framed));
          assertEquals("OK", ring.verify(signed));
          Checks.check(signed);
        }));
      }
    }
    return tests;
  }

  @TestFactory
  List<DynamicTest> invalidVectors() throws IOException {
    List<DynamicTest> tests = new ArrayList<>();
    for (JsonNode doc : files()) {
      Keyring ring = Keyring.parse(doc.get("keys").asText());
      WireCodec codec = codecOf(doc);
      for (JsonNode c : doc.get("invalid")) {
        tests.add(
            DynamicTest.dynamicTest(c.get("name").asText(), () -> invalid(ring, codec, c)));
      }
    }
    return tests;
  }

  private static void invalid(Keyring ring, WireCodec codec, JsonNode c) {
    String code = c.get("code").asText();
    byte[] value = HEX.parseHex(c.get("value_hex").asText());
    if (c.get("layer").asText().equals("codec")) {
      KitException refused = assertThrows(KitException.class, () -> codec.decode(value));
      assertEquals(code, refused.code(), refused.getMessage());
      return;
    }
    ScoreEvent decoded = codec.decode(value);
    ScoreEvent expected = event(c.get("event"), c.get("sig_hex").asText());
    assertEquals(expected, decoded);
    String verdict = ring.verify(decoded);
    assertEquals(c.get("layer").asText().equals("signature") ? code : "OK", verdict);
    if (c.get("local").asBoolean()) {
      KitException refused = assertThrows(KitException.class, () -> Checks.check(decoded));
      assertEquals(code, refused.code());
    } else {
      Checks.check(decoded);
    }
  }

  @Test
  void keyringErrorsNameTheProblemNotTheSecret() {
    for (String spec : List.of("", "k1", "k1:zz", "k1:00", "k 1:" + "00".repeat(16),
        "k1:" + "ab".repeat(16) + ",k1:" + "cd".repeat(16))) {
      IllegalArgumentException e =
          assertThrows(IllegalArgumentException.class, () -> Keyring.parse(spec));
      assertFalse(e.getMessage().contains("abab"), e.getMessage());
    }
    assertTrue(Keyring.parse("k1:" + "ab".repeat(16)).toString().contains("k1"));
    assertArrayEquals(new byte[0], ScoreEvent.of("e", "g", "p", 1, 2, Kind.SCORE).sig());
  }
}
