// Package lbkit builds, signs, frames and produces leaderboard score events.
//
// The wire contract is the project's (schemas/score_event.v1.avsc,
// schemas/score_event.v2.avsc and docs/CLIENTS.md): the record key is the UTF-8
// playerId, the value is the Confluent framing (byte 0x00, the schema id as 4
// bytes big-endian) followed by the event in Avro binary encoding, and sig is
// the HMAC-SHA256 of the canonical string "v1|eventId|gameId|playerId|score|ts|kind"
// under the secret named by keyId; an event with metadata (schema v2) signs
// "v2|...|kind|" and the lowercase hex SHA-256 of the metadata instead.
// schemas/vectors/ holds the test vectors this package is tested against.
package lbkit

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Kind is what an event asks of the boards: its Avro enum symbol.
type Kind string

const (
	// Score offers a score to every board of the game.
	Score Kind = "SCORE"
	// Retract removes the player from every board of the game.
	Retract Kind = "RETRACT"
)

// Event is one score event. Sig is filled in by Keyring.Sign.
type Event struct {
	EventID  string `avro:"eventId" json:"eventId"`
	GameID   string `avro:"gameId" json:"gameId"`
	PlayerID string `avro:"playerId" json:"playerId"`
	Score    int64  `avro:"score" json:"score"`
	// TsMs is when the score was achieved, epoch milliseconds UTC.
	TsMs  int64  `avro:"ts" json:"ts"`
	Kind  Kind   `avro:"kind" json:"kind"`
	KeyID string `avro:"keyId" json:"keyId"`
	Sig   []byte `avro:"sig" json:"sig,omitempty"`
	// Metadata is what the score was made with (schema v2); nil: none (v1).
	Metadata *string `avro:"metadata" json:"metadata,omitempty"`
}

// Canonical is the exact text that is signed: integers in base 10, kind as its
// symbol; with metadata, the v2 string ending in the metadata's SHA-256 (hex).
func (e Event) Canonical() string {
	parts := []string{
		"v1", e.EventID, e.GameID, e.PlayerID,
		strconv.FormatInt(e.Score, 10), strconv.FormatInt(e.TsMs, 10), string(e.Kind),
	}
	if e.Metadata != nil {
		digest := sha256.Sum256([]byte(*e.Metadata))
		parts[0] = "v2"
		parts = append(parts, hex.EncodeToString(digest[:]))
	}
	return strings.Join(parts, "|")
}

// MinSecretBytes is the shortest secret the job accepts (a 128-bit key).
const MinSecretBytes = 16

var keyIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// Keyring maps key ids to HMAC secrets, like the job's LB_HMAC_KEYS.
type Keyring map[string][]byte

// ParseKeyring reads "keyId:hexsecret,keyId2:hexsecret" (the LB_HMAC_KEYS format).
// Errors name the entry and key id, never a secret.
func ParseKeyring(spec string) (Keyring, error) {
	ring := Keyring{}
	if strings.TrimSpace(spec) == "" {
		return nil, fmt.Errorf("HMAC keyring: at least one key is required")
	}
	for i, raw := range strings.Split(spec, ",") {
		id, secretHex, ok := strings.Cut(strings.TrimSpace(raw), ":")
		id, secretHex = strings.TrimSpace(id), strings.TrimSpace(secretHex)
		if !ok || id == "" || secretHex == "" {
			return nil, fmt.Errorf("HMAC keyring: entry %d must look like keyId:hexsecret", i+1)
		}
		if !keyIDPattern.MatchString(id) {
			return nil, fmt.Errorf("HMAC keyring: key id %q must be 1-64 characters of [A-Za-z0-9._-]", id)
		}
		if _, dup := ring[id]; dup {
			return nil, fmt.Errorf("HMAC keyring: key id %q appears more than once", id)
		}
		secret, err := hex.DecodeString(secretHex)
		if err != nil {
			return nil, fmt.Errorf("HMAC keyring: secret of key %q (entry %d) is not valid hex", id, i+1)
		}
		if len(secret) < MinSecretBytes {
			return nil, fmt.Errorf("HMAC keyring: secret of key %q must be at least %d bytes", id, MinSecretBytes)
		}
		ring[id] = secret
	}
	return ring, nil
}

// String shows the key ids only.
func (k Keyring) String() string {
	ids := make([]string, 0, len(k))
	for id := range k {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return fmt.Sprintf("Keyring%v", ids)
}

// Sign sets e.KeyID to keyID and e.Sig to the HMAC-SHA256 of e.Canonical().
func (k Keyring) Sign(e *Event, keyID string) error {
	secret, ok := k[keyID]
	if !ok {
		return fmt.Errorf("cannot sign with key id %q: not in the keyring", keyID)
	}
	e.KeyID = keyID
	e.Sig = mac(secret, e.Canonical())
	return nil
}

// Verdict of Verify: "OK", or the dead-letter code the job would give.
type Verdict string

const (
	VerdictOK  Verdict = "OK"
	UnknownKey Verdict = "UNKNOWN_KEY"
	Signature  Verdict = "SIGNATURE"
)

// Verify checks e.Sig as the job does, in constant time.
func (k Keyring) Verify(e Event) Verdict {
	secret, ok := k[e.KeyID]
	if !ok {
		return UnknownKey
	}
	if hmac.Equal(mac(secret, e.Canonical()), e.Sig) {
		return VerdictOK
	}
	return Signature
}

func mac(secret []byte, text string) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(text))
	return h.Sum(nil)
}

// MaxIDLength is the longest eventId or playerId the job accepts (characters).
const MaxIDLength = 128

var gameIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// CheckError is an event the job would dead-letter whatever its configuration.
type CheckError struct {
	Code   string // the dead-letter code: SCHEMA or BOUNDS
	Detail string
}

func (e *CheckError) Error() string { return e.Code + ": " + e.Detail }

// Check refuses what the job refuses from the event alone (ids, kind, a negative
// score); the game's max_score and the clock are the job's to judge.
func Check(e Event) error {
	for _, id := range []struct{ name, value string }{{"eventId", e.EventID}, {"playerId", e.PlayerID}} {
		if n := utf8.RuneCountInString(id.value); n == 0 || n > MaxIDLength {
			return &CheckError{"SCHEMA", fmt.Sprintf("%s must be 1..%d characters, got %d", id.name, MaxIDLength, n)}
		}
	}
	if !gameIDPattern.MatchString(e.GameID) {
		return &CheckError{"SCHEMA", fmt.Sprintf("gameId %q is not [A-Za-z0-9._-]{1,64}", e.GameID)}
	}
	if e.Kind != Score && e.Kind != Retract {
		return &CheckError{"SCHEMA", fmt.Sprintf("kind %q is not SCORE or RETRACT", e.Kind)}
	}
	if e.Score < 0 {
		return &CheckError{"BOUNDS", fmt.Sprintf("score %d is below 0", e.Score)}
	}
	return nil
}
