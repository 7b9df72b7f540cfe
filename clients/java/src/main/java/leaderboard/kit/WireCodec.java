package leaderboard.kit;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import org.apache.avro.AvroRuntimeException;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.avro.io.EncoderFactory;
import org.apache.avro.util.Utf8;

/**
 * Confluent-framed Avro score events of one schema: byte 0x00, the schema id as 4 bytes
 * big-endian, then the event in Avro binary encoding.
 */
public final class WireCodec {
  /** v1's id in schemas/registry.json (subject score-events-value). */
  public static final int SCHEMA_ID_V1 = 1;
  /** The registered v1 schema, shipped in the jar as a resource. */
  public static final String SCHEMA_RESOURCE = "score_event.v1.avsc";
  /** v2's id: v1 plus an optional metadata string. */
  public static final int SCHEMA_ID_V2 = 2;
  /** The registered v2 schema resource. */
  public static final String SCHEMA_RESOURCE_V2 = "score_event.v2.avsc";

  private static final int HEADER = 5;
  private final int schemaId;
  private final Schema schema;
  // Reads the same bytes with kind as its int index, so an index past the symbols is
  // told apart (SCHEMA) from broken bytes (DECODE).
  private final Schema view;

  public WireCodec(String schemaJson, int schemaId) {
    this.schemaId = schemaId;
    this.schema = new Schema.Parser().parse(schemaJson);
    this.view = new Schema.Parser().parse(intKindView(schemaJson));
  }

  /** The codec of the registered v1 schema, id 1. */
  public static WireCodec v1() {
    return new WireCodec(schemaV1(), SCHEMA_ID_V1);
  }

  /** The codec of the registered v2 schema, id 2 (events with metadata). */
  public static WireCodec v2() {
    return new WireCodec(schemaText(SCHEMA_RESOURCE_V2), SCHEMA_ID_V2);
  }

  /** The text of the v1 schema resource (schemas/score_event.v1.avsc, byte for byte). */
  public static String schemaV1() {
    return schemaText(SCHEMA_RESOURCE);
  }

  /** The text of a schema resource (a file of schemas/, byte for byte). */
  public static String schemaText(String resource) {
    try (InputStream in = WireCodec.class.getResourceAsStream(resource)) {
      if (in == null) {
        throw new IllegalStateException(resource + " is missing from the classpath");
      }
      return new String(in.readAllBytes(), StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private static String intKindView(String schemaJson) {
    try {
      ObjectMapper json = new ObjectMapper();
      ObjectNode doc = (ObjectNode) json.readTree(schemaJson);
      for (var field : doc.withArray("fields")) {
        if ("kind".equals(field.path("name").asText())) {
          ((ObjectNode) field).put("type", "int");
          ((ObjectNode) field).remove("default");
        }
      }
      return json.writeValueAsString(doc);
    } catch (IOException e) {
      throw new IllegalArgumentException("score-event schema is not JSON: " + e.getMessage(), e);
    }
  }

  /** The event in Avro binary encoding, without the header. */
  public byte[] body(ScoreEvent e) {
    GenericData.Record record = new GenericData.Record(schema);
    record.put("eventId", e.eventId());
    record.put("gameId", e.gameId());
    record.put("playerId", e.playerId());
    record.put("score", e.score());
    record.put("ts", e.tsMs());
    record.put("kind", new GenericData.EnumSymbol(schema.getField("kind").schema(), e.kind().name()));
    record.put("keyId", e.keyId());
    record.put("sig", ByteBuffer.wrap(e.sig()));
    if (schema.getField("metadata") != null) {
      record.put("metadata", e.metadata());
    } else if (e.metadata() != null) {
      throw new IllegalArgumentException("schema id " + schemaId + " has no metadata field");
    }
    ByteArrayOutputStream out = new ByteArrayOutputStream(96);
    BinaryEncoder encoder = EncoderFactory.get().directBinaryEncoder(out, null);
    try {
      new GenericDatumWriter<GenericRecord>(schema).write(record, encoder);
      encoder.flush();
    } catch (IOException e2) {
      throw new UncheckedIOException(e2);
    }
    return out.toByteArray();
  }

  /** The record value: header and body. */
  public byte[] encode(ScoreEvent e) {
    byte[] body = body(e);
    return ByteBuffer.allocate(HEADER + body.length)
        .put((byte) 0).putInt(schemaId).put(body).array();
  }

  /** The event in a record value, or {@link KitException} with the job's DECODE/SCHEMA code. */
  public ScoreEvent decode(byte[] value) {
    if (value.length < HEADER) {
      throw new KitException(
          "DECODE", value.length + " bytes is shorter than the 5-byte wire header");
    }
    if (value[0] != 0) {
      throw new KitException("DECODE", String.format("magic byte is 0x%02x, not 0x00", value[0]));
    }
    int id = ByteBuffer.wrap(value, 1, 4).getInt();
    if (id != schemaId) {
      throw new KitException("SCHEMA", "unknown schema id " + Integer.toUnsignedString(id));
    }
    BinaryDecoder decoder =
        DecoderFactory.get().binaryDecoder(value, HEADER, value.length - HEADER, null);
    GenericRecord r;
    try {
      r = new GenericDatumReader<GenericRecord>(view).read(null, decoder);
      if (!decoder.isEnd()) {
        throw new KitException("DECODE", "bytes left after the record");
      }
    } catch (IOException | AvroRuntimeException | IndexOutOfBoundsException e) {
      throw new KitException("DECODE", "malformed or truncated Avro body: " + e);
    }
    int index = (Integer) r.get("kind");
    Kind[] kinds = Kind.values();
    if (index < 0 || index >= kinds.length) {
      throw new KitException("SCHEMA", "enum index " + index + " is not a known kind");
    }
    ByteBuffer sig = (ByteBuffer) r.get("sig");
    byte[] sigBytes = new byte[sig.remaining()];
    sig.get(sigBytes);
    String metadata =
        view.getField("metadata") == null || r.get("metadata") == null ? null : text(r, "metadata");
    return new ScoreEvent(
        text(r, "eventId"), text(r, "gameId"), text(r, "playerId"), (Long) r.get("score"),
        (Long) r.get("ts"), kinds[index], text(r, "keyId"), sigBytes, metadata);
  }

  private static String text(GenericRecord r, String field) {
    Utf8 raw = (Utf8) r.get(field);
    try {
      return StandardCharsets.UTF_8.newDecoder()
          .onMalformedInput(CodingErrorAction.REPORT)
          .onUnmappableCharacter(CodingErrorAction.REPORT)
          .decode(ByteBuffer.wrap(raw.getBytes(), 0, raw.getByteLength()))
          .toString();
    } catch (CharacterCodingException e) {
      throw new KitException("SCHEMA", field + ": invalid UTF-8");
    }
  }
}
