package lbkit

import (
	_ "embed"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/hamba/avro/v2"
)

// SchemaV1 is schemas/score_event.v1.avsc, byte for byte (a test compares them).
//
//go:embed score_event.v1.avsc
var SchemaV1 string

// SchemaIDV1 is v1's id in schemas/registry.json (subject score-events-value).
const SchemaIDV1 = 1

// SchemaV2 is schemas/score_event.v2.avsc, byte for byte: v1 plus an optional metadata string.
//
//go:embed score_event.v2.avsc
var SchemaV2 string

// SchemaIDV2 is v2's id in schemas/registry.json.
const SchemaIDV2 = 2

const headerSize = 5

// CodecError is a record value the job would dead-letter as DECODE or SCHEMA.
type CodecError struct {
	Code   string
	Detail string
}

func (e *CodecError) Error() string { return e.Code + ": " + e.Detail }

// Codec writes (and reads back) Confluent-framed Avro score events of one schema.
type Codec struct {
	id     uint32
	schema avro.Schema
	// view reads the same bytes with kind as its int index, so an index past
	// the symbols is told apart (SCHEMA) from broken bytes (DECODE).
	view avro.Schema
}

type wireEvent struct {
	EventID  string  `avro:"eventId"`
	GameID   string  `avro:"gameId"`
	PlayerID string  `avro:"playerId"`
	Score    int64   `avro:"score"`
	TsMs     int64   `avro:"ts"`
	Kind     int32   `avro:"kind"`
	KeyID    string  `avro:"keyId"`
	Sig      []byte  `avro:"sig"`
	Metadata *string `avro:"metadata"`
}

var symbols = []Kind{Score, Retract}

// NewCodec is the codec of schema v1 with id 1.
func NewCodec() (*Codec, error) { return NewCodecFor(SchemaV1, SchemaIDV1) }

// NewCodecV2 is the codec of schema v2 with id 2 (events with metadata).
func NewCodecV2() (*Codec, error) { return NewCodecFor(SchemaV2, SchemaIDV2) }

// NewCodecFor is the codec of a schema text registered under id.
func NewCodecFor(schemaJSON string, id uint32) (*Codec, error) {
	schema, err := avro.ParseWithCache(schemaJSON, "", &avro.SchemaCache{})
	if err != nil {
		return nil, fmt.Errorf("score-event schema: %w", err)
	}
	viewJSON, err := intKindView(schemaJSON)
	if err != nil {
		return nil, err
	}
	view, err := avro.ParseWithCache(viewJSON, "", &avro.SchemaCache{})
	if err != nil {
		return nil, fmt.Errorf("score-event schema view: %w", err)
	}
	return &Codec{id: id, schema: schema, view: view}, nil
}

// intKindView is the schema with the kind enum read as an int (its index on the wire).
func intKindView(schemaJSON string) (string, error) {
	var doc map[string]any
	if err := json.Unmarshal([]byte(schemaJSON), &doc); err != nil {
		return "", fmt.Errorf("score-event schema: %w", err)
	}
	fields, _ := doc["fields"].([]any)
	for _, f := range fields {
		field, _ := f.(map[string]any)
		if field["name"] == "kind" {
			field["type"] = "int"
			delete(field, "default")
		}
	}
	out, err := json.Marshal(doc)
	return string(out), err
}

// Body is the event in Avro binary encoding, without the 5-byte header.
func (c *Codec) Body(e Event) ([]byte, error) {
	body, err := avro.Marshal(c.schema, e)
	if err != nil {
		return nil, fmt.Errorf("event %q does not fit the schema: %w", e.EventID, err)
	}
	return body, nil
}

// Encode is the record value: 0x00, the schema id (4 bytes big-endian), the body.
func (c *Codec) Encode(e Event) ([]byte, error) {
	body, err := c.Body(e)
	if err != nil {
		return nil, err
	}
	out := make([]byte, headerSize, headerSize+len(body))
	binary.BigEndian.PutUint32(out[1:headerSize], c.id)
	return append(out, body...), nil
}

// Decode reads a record value back, with the job's DECODE/SCHEMA classification.
//
// Bytes left after the record are found by writing it again: Avro writers emit
// minimal varints, so the re-written length is the length that was read.
func (c *Codec) Decode(value []byte) (Event, error) {
	if len(value) < headerSize {
		return Event{}, &CodecError{"DECODE", fmt.Sprintf("%d bytes is shorter than the 5-byte wire header", len(value))}
	}
	if value[0] != 0 {
		return Event{}, &CodecError{"DECODE", fmt.Sprintf("magic byte is 0x%02x, not 0x00", value[0])}
	}
	if id := binary.BigEndian.Uint32(value[1:headerSize]); id != c.id {
		return Event{}, &CodecError{"SCHEMA", fmt.Sprintf("unknown schema id %d", id)}
	}
	var w wireEvent
	if err := avro.Unmarshal(c.view, value[headerSize:], &w); err != nil {
		return Event{}, &CodecError{"DECODE", fmt.Sprintf("malformed or truncated Avro body: %v", err)}
	}
	again, err := avro.Marshal(c.view, w)
	if err != nil {
		return Event{}, &CodecError{"DECODE", err.Error()}
	}
	if extra := len(value) - headerSize - len(again); extra > 0 {
		return Event{}, &CodecError{"DECODE", fmt.Sprintf("%d bytes left after the record", extra)}
	}
	strs := []string{w.EventID, w.GameID, w.PlayerID, w.KeyID}
	if w.Metadata != nil {
		strs = append(strs, *w.Metadata)
	}
	for _, s := range strs {
		if !utf8.ValidString(s) {
			return Event{}, &CodecError{"SCHEMA", "invalid UTF-8 in a string"}
		}
	}
	if w.Kind < 0 || int(w.Kind) >= len(symbols) {
		return Event{}, &CodecError{"SCHEMA", fmt.Sprintf("enum index %d is not a known kind", w.Kind)}
	}
	return Event{w.EventID, w.GameID, w.PlayerID, w.Score, w.TsMs, symbols[w.Kind], w.KeyID, w.Sig, w.Metadata}, nil
}
