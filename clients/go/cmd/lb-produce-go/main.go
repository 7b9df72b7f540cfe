// Command lb-produce-go produces N signed score events with the Go kit, optionally
// with planted bad records, and prints a JSON summary; -report writes one JSON line
// per record (partition, offset, timestamp, the code the job must give it, the event).
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	lbkit "leaderboard/clients/go"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Planted bad records, in the order they are cycled through.
var badCodes = []string{"SIGNATURE", "UNKNOWN_KEY", "BOUNDS", "FUTURE", "UNKNOWN_GAME", "SCHEMA", "DECODE"}

type options struct {
	brokers, topic, keys, keyID, games, prefix, report, metadata string
	count, bad, players                                          int
	maxScore                                                     int64
	retract                                                      float64
	seed                                                         uint64
}

type line struct {
	Partition int32        `json:"partition"`
	Offset    int64        `json:"offset"`
	Timestamp int64        `json:"timestamp"`
	Expected  string       `json:"expected"`
	Event     *lbkit.Event `json:"event"`
}

func main() {
	o := parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "lb-produce-go:", err)
		os.Exit(1)
	}
}

func env(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

func parse() options {
	var o options
	flag.StringVar(&o.brokers, "brokers", env("LB_KAFKA_BOOTSTRAP", "127.0.0.1:29092"), "Kafka bootstrap servers, comma-separated")
	flag.StringVar(&o.topic, "topic", env("LB_TOPIC", "score-events"), "topic to produce to")
	flag.StringVar(&o.keys, "keys", os.Getenv("LB_HMAC_KEYS"), "keyring, keyId:hexsecret,... (default $LB_HMAC_KEYS)")
	flag.StringVar(&o.keyID, "key-id", "", "key id to sign with (default: the keyring's first)")
	flag.StringVar(&o.games, "games", "g1", "comma-separated game ids")
	flag.StringVar(&o.prefix, "player-prefix", "go-", "prefix of the generated player ids")
	flag.StringVar(&o.report, "report", "", "write one JSON line per record to this file")
	flag.IntVar(&o.count, "count", 1000, "records to produce (planted bad ones included)")
	flag.IntVar(&o.bad, "bad", 0, "planted bad records, spread evenly, one of each code in turn")
	flag.IntVar(&o.players, "players", 100, "distinct players")
	flag.Int64Var(&o.maxScore, "max-score", 1000, "highest score generated")
	flag.Float64Var(&o.retract, "retract-ratio", 0, "share of RETRACT events")
	flag.Uint64Var(&o.seed, "seed", 1, "random seed")
	flag.StringVar(&o.metadata, "metadata", "", "metadata every valid SCORE event carries, as schema v2 (default: none, v1)")
	flag.Parse()
	problem := ""
	switch {
	case o.keys == "":
		problem = "no keyring: set LB_HMAC_KEYS or -keys"
	case o.count < 0 || o.bad < 0 || o.bad > o.count:
		problem = "-count and -bad must be >= 0 and -bad <= -count"
	case o.players < 1 || o.maxScore < 0:
		problem = "-players must be >= 1 and -max-score >= 0"
	}
	if problem != "" {
		fmt.Fprintln(os.Stderr, "lb-produce-go:", problem)
		os.Exit(2)
	}
	return o
}

func run(o options) error {
	ring, err := lbkit.ParseKeyring(o.keys)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lb-produce-go:", err)
		os.Exit(2)
	}
	if o.keyID == "" {
		o.keyID = strings.TrimSpace(strings.SplitN(strings.SplitN(o.keys, ",", 2)[0], ":", 2)[0])
	}
	producer, err := lbkit.NewProducer(strings.Split(o.brokers, ","), o.topic, ring, o.keyID)
	if err != nil {
		return err
	}
	defer producer.Close()
	g := &generator{o: o, rng: rand.New(rand.NewPCG(o.seed, 29)), ring: ring}
	codec, err := lbkit.NewCodec()
	if err != nil {
		return err
	}
	g.codec = codec

	ctx := context.Background()
	started := time.Now()
	lines := make([]line, o.count)
	var mu sync.Mutex
	var failures []error
	for i := 0; i < o.count; i++ {
		rec, expected, event, err := g.next(producer, i)
		if err != nil {
			return err
		}
		lines[i] = line{Expected: expected, Event: event}
		i := i
		producer.SendAsync(ctx, rec, func(d lbkit.Delivered) {
			mu.Lock()
			defer mu.Unlock()
			if d.Err != nil {
				failures = append(failures, d.Err)
				return
			}
			lines[i].Partition, lines[i].Offset, lines[i].Timestamp = d.Partition, d.Offset, d.Timestamp.UnixMilli()
		})
	}
	if err := producer.Flush(ctx); err != nil {
		return err
	}
	if len(failures) > 0 {
		return fmt.Errorf("%d records failed: %w", len(failures), errors.Join(failures[:1]...))
	}
	counts := map[string]int{}
	for _, l := range lines {
		counts[l.Expected]++
	}
	if err := writeReport(o.report, lines); err != nil {
		return err
	}
	summary, _ := json.Marshal(map[string]any{
		"topic": o.topic, "produced": o.count, "expected": counts,
		"seconds": time.Since(started).Round(time.Millisecond).Seconds(),
	})
	fmt.Println(string(summary))
	return nil
}

func writeReport(path string, lines []line) error {
	if path == "" {
		return nil
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(out)
	for i := range lines {
		if err := enc.Encode(&lines[i]); err != nil {
			out.Close()
			return err
		}
	}
	return out.Close()
}

type generator struct {
	o     options
	rng   *rand.Rand
	ring  lbkit.Keyring
	codec *lbkit.Codec
}

// next is record i: a valid event, or (at evenly spread indices) a planted bad one.
func (g *generator) next(p *lbkit.Producer, i int) (*kgo.Record, string, *lbkit.Event, error) {
	o := g.o
	now := time.Now().UnixMilli()
	e := lbkit.Event{
		EventID:  fmt.Sprintf("%s%d-%06d", o.prefix, o.seed, i),
		GameID:   strings.Split(o.games, ",")[g.rng.IntN(len(strings.Split(o.games, ",")))],
		PlayerID: fmt.Sprintf("%s%05d", o.prefix, g.rng.IntN(o.players)),
		Score:    g.rng.Int64N(o.maxScore + 1),
		TsMs:     now - g.rng.Int64N(5000),
		Kind:     lbkit.Score,
	}
	if g.rng.Float64() < o.retract {
		e.Kind, e.Score = lbkit.Retract, 0
	}
	if o.bad > 0 && i%(o.count/o.bad) == 0 && i/(o.count/o.bad) < o.bad {
		code := badCodes[(i/(o.count/o.bad))%len(badCodes)]
		rec, err := g.bad(code, e)
		return rec, code, nil, err
	}
	if o.metadata != "" && e.Kind == lbkit.Score {
		meta := o.metadata
		e.Metadata = &meta
	}
	rec, err := p.Record(e)
	if err != nil {
		return nil, "", nil, err
	}
	e.KeyID = o.keyID
	e.Sig = nil
	return rec, "ok", &e, nil
}

// bad builds a record the job must dead-letter with code.
func (g *generator) bad(code string, e lbkit.Event) (*kgo.Record, error) {
	ring, keyID := g.ring, g.o.keyID
	switch code {
	case "UNKNOWN_KEY":
		ring, keyID = lbkit.Keyring{"rogue-key": make([]byte, 32)}, "rogue-key"
	case "BOUNDS":
		e.Score, e.Kind = -1, lbkit.Score
	case "FUTURE":
		e.TsMs += 3_600_000
	case "UNKNOWN_GAME":
		e.GameID = "no-such-game"
	}
	if err := ring.Sign(&e, keyID); err != nil {
		return nil, err
	}
	value, err := g.codec.Encode(e)
	if err != nil {
		return nil, err
	}
	switch code {
	case "SIGNATURE":
		value[len(value)-1] ^= 0x01
	case "SCHEMA":
		binary.BigEndian.PutUint32(value[1:5], 99)
	case "DECODE":
		value = value[:len(value)-7]
	}
	return &kgo.Record{Key: []byte(e.PlayerID), Value: value, Topic: g.o.topic}, nil
}
