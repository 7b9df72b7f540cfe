package lbkit

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Producer signs, frames and sends score events: key = playerId, idempotent, acks=all.
type Producer struct {
	client *kgo.Client
	codec  *Codec
	// codecV2 writes the events that carry metadata (schema v2).
	codecV2 *Codec
	ring    Keyring
	keyID   string
	topic   string
}

// Delivered reports where a record landed, or why it did not.
type Delivered struct {
	Partition int32
	Offset    int64
	Timestamp time.Time
	Err       error
}

// NewProducer connects to brokers (host:port list) and signs with keyID from ring.
// Extra kgo options (TLS, SASL, linger) are applied after the kit's own.
func NewProducer(brokers []string, topic string, ring Keyring, keyID string, opts ...kgo.Opt) (*Producer, error) {
	if _, ok := ring[keyID]; !ok {
		return nil, fmt.Errorf("key id %q is not in the keyring %s", keyID, ring)
	}
	codec, err := NewCodec()
	if err != nil {
		return nil, err
	}
	codecV2, err := NewCodecV2()
	if err != nil {
		return nil, err
	}
	base := []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), // with idempotent writes, franz-go's default
		kgo.ProducerLinger(5 * time.Millisecond),
	}
	client, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		return nil, err
	}
	return &Producer{client: client, codec: codec, codecV2: codecV2, ring: ring, keyID: keyID, topic: topic}, nil
}

// Record is the signed, framed Kafka record of e, without sending it.
func (p *Producer) Record(e Event) (*kgo.Record, error) {
	if err := Check(e); err != nil {
		return nil, err
	}
	if err := p.ring.Sign(&e, p.keyID); err != nil {
		return nil, err
	}
	codec := p.codec
	if e.Metadata != nil {
		codec = p.codecV2
	}
	value, err := codec.Encode(e)
	if err != nil {
		return nil, err
	}
	return &kgo.Record{Key: []byte(e.PlayerID), Value: value, Topic: p.topic}, nil
}

// Produce sends e and waits until the brokers have it.
func (p *Producer) Produce(ctx context.Context, e Event) (Delivered, error) {
	r, err := p.Record(e)
	if err != nil {
		return Delivered{}, err
	}
	return p.send(ctx, r)
}

// ProduceAsync queues e; done is called once the brokers have it (or it failed).
func (p *Producer) ProduceAsync(ctx context.Context, e Event, done func(Delivered)) error {
	r, err := p.Record(e)
	if err != nil {
		return err
	}
	p.SendAsync(ctx, r, done)
	return nil
}

// SendAsync queues an already built record as is (tests plant bad ones this way).
func (p *Producer) SendAsync(ctx context.Context, r *kgo.Record, done func(Delivered)) {
	p.client.Produce(ctx, r, func(r *kgo.Record, err error) {
		done(Delivered{r.Partition, r.Offset, r.Timestamp, err})
	})
}

func (p *Producer) send(ctx context.Context, r *kgo.Record) (Delivered, error) {
	got := p.client.ProduceSync(ctx, r)
	rec, err := got.First()
	if err != nil {
		return Delivered{Err: err}, err
	}
	return Delivered{rec.Partition, rec.Offset, rec.Timestamp, nil}, nil
}

// Flush waits for every queued record.
func (p *Producer) Flush(ctx context.Context) error { return p.client.Flush(ctx) }

// Close flushes nothing: call Flush first.
func (p *Producer) Close() { p.client.Close() }
