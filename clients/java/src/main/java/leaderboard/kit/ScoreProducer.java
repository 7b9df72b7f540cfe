package leaderboard.kit;

import java.nio.charset.StandardCharsets;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/** Signs, frames and sends score events: key = UTF-8 playerId, idempotent, acks=all. */
public final class ScoreProducer implements AutoCloseable {
  private final KafkaProducer<byte[], byte[]> producer;
  private final WireCodec codec = WireCodec.v1();
  // Events with metadata are written as schema v2.
  private final WireCodec codecV2 = WireCodec.v2();
  private final Keyring keyring;
  private final String keyId;
  private final String topic;

  /** {@code extra} (TLS, SASL, linger...) is applied after the kit's own settings. */
  public ScoreProducer(
      String bootstrap, String topic, Keyring keyring, String keyId, Properties extra) {
    if (!keyring.keyIds().contains(keyId)) {
      throw new IllegalArgumentException(
          "key id '" + keyId + "' is not in the keyring " + keyring);
    }
    Properties props = new Properties();
    props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
    props.put(ProducerConfig.ACKS_CONFIG, "all");
    props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
    props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    props.putAll(extra);
    this.producer = new KafkaProducer<>(props);
    this.keyring = keyring;
    this.keyId = keyId;
    this.topic = topic;
  }

  public ScoreProducer(String bootstrap, String topic, Keyring keyring, String keyId) {
    this(bootstrap, topic, keyring, keyId, new Properties());
  }

  /** The signed, framed record of {@code event}, checked first ({@link Checks#check}). */
  public ProducerRecord<byte[], byte[]> record(ScoreEvent event) {
    Checks.check(event);
    ScoreEvent signed = keyring.sign(event, keyId);
    return new ProducerRecord<>(
        topic, signed.playerId().getBytes(StandardCharsets.UTF_8), (signed.metadata() == null ? codec : codecV2).encode(signed));
  }

  /** Queues {@code event}; the future completes once the brokers have it. */
  public Future<RecordMetadata> send(ScoreEvent event, Callback done) {
    return producer.send(record(event), done);
  }

  /** Sends {@code event} and waits until the brokers have it. */
  public RecordMetadata sendSync(ScoreEvent event)
      throws InterruptedException, ExecutionException {
    return send(event, null).get();
  }

  /** Queues an already built record as is (tests plant bad ones this way). */
  public Future<RecordMetadata> sendRecord(ProducerRecord<byte[], byte[]> record, Callback done) {
    return producer.send(record, done);
  }

  /** Waits for every queued record. */
  public void flush() {
    producer.flush();
  }

  @Override
  public void close() {
    producer.close();
  }
}
