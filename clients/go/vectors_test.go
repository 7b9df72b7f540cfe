package lbkit

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// The shared test vectors of the repository (schemas/vectors/).
var vectorsDir = filepath.Join("..", "..", "schemas", "vectors")

type vectorEvent struct {
	EventID  string  `json:"eventId"`
	GameID   string  `json:"gameId"`
	PlayerID string  `json:"playerId"`
	Score    int64   `json:"score"`
	Ts       int64   `json:"ts"`
	Kind     Kind    `json:"kind"`
	KeyID    string  `json:"keyId"`
	Metadata *string `json:"metadata"`
}

func (v vectorEvent) event(sigHex string, t *testing.T) Event {
	return Event{v.EventID, v.GameID, v.PlayerID, v.Score, v.Ts, v.Kind, v.KeyID, unhex(t, sigHex), v.Metadata}
}

// codecOf is the kit's codec of a vectors file's schema id.
func codecOf(t *testing.T, id uint32) *Codec {
	t.Helper()
	var codec *Codec
	var err error
	if id == SchemaIDV2 {
		codec, err = NewCodecV2()
	} else {
		codec, err = NewCodec()
	}
	if err != nil {
		t.Fatal(err)
	}
	return codec
}

type vectors struct {
	SchemaID   uint32 `json:"schema_id"`
	SchemaFile string `json:"schema_file"`
	Keys       string `json:"keys"`
	Valid      []struct {
		Name      string      `json:"name"`
		Event     vectorEvent `json:"event"`
		Canonical string      `json:"canonical"`
		SigHex    string      `json:"sig_hex"`
		KeyHex    string      `json:"key_hex"`
		BodyHex   string      `json:"avro_body_hex"`
		FramedHex string      `json:"framed_hex"`
	} `json:"valid"`
	Invalid []struct {
		Name     string       `json:"name"`
		Code     string       `json:"code"`
		Layer    string       `json:"layer"`
		ValueHex string       `json:"value_hex"`
		Event    *vectorEvent `json:"event"`
		SigHex   string       `json:"sig_hex"`
		Local    bool         `json:"local"`
	} `json:"invalid"`
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// loadVectors gives every vectors file whose schema this kit carries.
func loadVectors(t *testing.T) map[string]vectors {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(vectorsDir, "*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no vectors in %s: %v", vectorsDir, err)
	}
	out := map[string]vectors{}
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var v vectors
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if v.SchemaID != SchemaIDV1 && v.SchemaID != SchemaIDV2 {
			t.Logf("%s: schema id %d is not one this kit writes; skipped", path, v.SchemaID)
			continue
		}
		out[filepath.Base(path)] = v
	}
	if len(out) == 0 {
		t.Fatal("no vectors file for schema v1")
	}
	return out
}

func TestEmbeddedSchemaIsTheRegisteredOne(t *testing.T) {
	for name, embedded := range map[string]string{"score_event.v1.avsc": SchemaV1, "score_event.v2.avsc": SchemaV2} {
		registered, err := os.ReadFile(filepath.Join("..", "..", "schemas", name))
		if err != nil {
			t.Fatal(err)
		}
		if string(registered) != embedded {
			t.Fatalf("%s differs from schemas/%s: copy it again", name, name)
		}
	}
}

func TestValidVectors(t *testing.T) {
	for file, v := range loadVectors(t) {
		codec := codecOf(t, v.SchemaID)
		ring, err := ParseKeyring(v.Keys)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range v.Valid {
			t.Run(file+"/"+c.Name, func(t *testing.T) {
				e := c.Event.event("", t)
				if got := e.Canonical(); got != c.Canonical {
					t.Fatalf("canonical\n got %q\nwant %q", got, c.Canonical)
				}
				if err := ring.Sign(&e, c.Event.KeyID); err != nil {
					t.Fatal(err)
				}
				if got := hex.EncodeToString(e.Sig); got != c.SigHex {
					t.Fatalf("sig %s, want %s", got, c.SigHex)
				}
				body, err := codec.Body(e)
				if err != nil || hex.EncodeToString(body) != c.BodyHex {
					t.Fatalf("body %x (%v), want %s", body, err, c.BodyHex)
				}
				framed, err := codec.Encode(e)
				if err != nil || hex.EncodeToString(framed) != c.FramedHex {
					t.Fatalf("framed %x (%v), want %s", framed, err, c.FramedHex)
				}
				if hex.EncodeToString([]byte(e.PlayerID)) != c.KeyHex {
					t.Fatal("key is not the UTF-8 playerId")
				}
				back, err := codec.Decode(framed)
				if err != nil || back.Canonical() != e.Canonical() || string(back.Sig) != string(e.Sig) {
					t.Fatalf("decode: %+v, %v", back, err)
				}
				if err := Check(e); err != nil {
					t.Fatal(err)
				}
				if ring.Verify(e) != VerdictOK {
					t.Fatal("does not verify")
				}
			})
		}
	}
}

func TestInvalidVectors(t *testing.T) {
	for file, v := range loadVectors(t) {
		codec := codecOf(t, v.SchemaID)
		ring, err := ParseKeyring(v.Keys)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range v.Invalid {
			t.Run(file+"/"+c.Name, func(t *testing.T) {
				e, err := codec.Decode(unhex(t, c.ValueHex))
				if c.Layer == "codec" {
					var ce *CodecError
					if !errors.As(err, &ce) || ce.Code != c.Code {
						t.Fatalf("decode gave %v, want code %s", err, c.Code)
					}
					return
				}
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				want := c.Event.event(c.SigHex, t)
				if e.Canonical() != want.Canonical() || string(e.Sig) != string(want.Sig) {
					t.Fatalf("decoded %+v, want %+v", e, want)
				}
				verdict := ring.Verify(e)
				switch {
				case c.Layer == "signature" && string(verdict) != c.Code:
					t.Fatalf("verify gave %s, want %s", verdict, c.Code)
				case c.Layer == "rules" && verdict != VerdictOK:
					t.Fatalf("verify gave %s, want OK", verdict)
				}
				var ce *CheckError
				checked := Check(e)
				if c.Local != (checked != nil) || (checked != nil && (!errors.As(checked, &ce) || ce.Code != c.Code)) {
					t.Fatalf("Check gave %v; local=%v code=%s", checked, c.Local, c.Code)
				}
			})
		}
	}
}

func TestParseKeyringNamesTheProblemNotTheSecret(t *testing.T) {
	for _, spec := range []string{"", "k1", "k1:zz", "k1:00", "k 1:" + hex.EncodeToString(make([]byte, 16))} {
		if _, err := ParseKeyring(spec); err == nil {
			t.Errorf("%q was accepted", spec)
		}
	}
	if _, err := ParseKeyring("k1:aa, k1:bb"); err == nil {
		t.Error("a duplicate key id was accepted")
	}
}
