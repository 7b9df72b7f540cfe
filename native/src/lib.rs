//! Batch decode + signature verify of score events, compiled.
//!
//! The job's validation step spends most of its time turning Kafka record
//! values into events and checking their HMAC. This module does both for a
//! whole batch in one call and hands back, per record, either the event (a
//! `ScoreEvent` built by calling the Python class) and its signature verdict,
//! or the dead-letter code and a detail. Every other rule (game ids, bounds,
//! event time, windows, the Kafka key) stays in `domain/validation.py`.
//!
//! What is decoded, and how errors are classified, is decided in Python:
//! `schemas/native.py` hands over, per schema id, the same *wire views* the
//! fastavro path reads (enums as their int index, logical types dropped, ints
//! widened to longs) and the writer's enum index -> `EventKind` table; every
//! version is resolved against the newest one (v2 adds `metadata`). The
//! Avro itself is read by the `apache-avro` crate; this file only frames it,
//! classifies the outcome exactly like `schemas/codec.py` and verifies the
//! signature exactly like `domain/signing.py`.
//!
//! `judge.rs` (the validation rules' common case), `scan.rs` (the planner's first pass over a group), `fold.rs` (the planner's per-event fold), `zadd.rs` (the replay load's `ZADD` packing), `seen.rs` (the dedupe
//! fingerprint layout's batch work), `members.rs` (a piece's changed members),
//! `encode.rs` (a group write's script arguments), `reads.rs` (the dedupe
//! lookups' read commands and replies), `resp.rs` (commands as protocol bytes)
//! and `changes.rs` (the change stream's JSON) are the other compiled pieces.

mod changes;
mod encode;
mod fold;
mod judge;
mod members;
mod reads;
mod resp;
mod scan;
mod seen;
mod tuples;
mod zadd;

use std::collections::HashMap;
use std::io::{self, Read};

use apache_avro::error::Details;
use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::types::Value;
use apache_avro::Schema;
use hmac::{KeyInit, Mac};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple, PyType};
use sha2::Digest;

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// Magic byte plus the 4-byte big-endian schema id (Confluent wire format).
const HEADER_SIZE: usize = 5;
/// Longest detail text, like `schemas/codec.py`'s `_DETAIL_LIMIT`.
const DETAIL_LIMIT: usize = 200;
/// Largest single allocation a length prefix may ask for. A Kafka record is at
/// most a few MB, so a bigger length is garbage: refused before allocating.
const MAX_ALLOCATION_BYTES: usize = 16 * 1024 * 1024;

/// The v1 fields a `ScoreEvent` is made of, in the order of its constructor.
const FIELDS: [&str; 8] = [
    "eventId", "gameId", "playerId", "score", "ts", "kind", "keyId", "sig",
];
/// The optional field v2 adds: the `ScoreEvent`'s ninth and last item.
const METADATA: &str = "metadata";
/// Items of a `ScoreEvent`: the v1 fields and `metadata`.
const ITEMS: usize = FIELDS.len() + 1;

/// One registered schema id, prepared once.
struct Wire {
    schema_id: u32,
    writer: Schema,
    /// The newest version's view to resolve the value against, or None when the
    /// value is read as written: this id *is* the newest, or its ScoreEvent fields
    /// are the newest view's and only `metadata` is missing (see `reads_as_written`).
    reader: Option<Schema>,
    /// Position of each of `FIELDS` in the record read.
    positions: [usize; 8],
    /// Position of `metadata` in the record read (None: it has none, read as null).
    metadata: Option<usize>,
    /// Writer enum index -> (EventKind member, its symbol); None for a symbol
    /// `EventKind` does not know.
    kinds: Vec<Option<(Py<PyAny>, String)>>,
}

/// One record's `(event, code, detail)`, as `check` returns them column by column.
type Outcome<'py> = (
    Option<Bound<'py, PyAny>>,
    Option<Bound<'py, PyAny>>,
    Option<Bound<'py, PyAny>>,
);

/// Why one record is refused, before any signature is looked at.
struct Refusal {
    code: &'static str,
    detail: String,
}

impl Refusal {
    fn decode(detail: String) -> Self {
        Refusal { code: "DECODE", detail: clip(detail) }
    }

    fn schema(detail: String) -> Self {
        Refusal { code: "SCHEMA", detail: clip(detail) }
    }
}

fn clip(mut text: String) -> String {
    if text.chars().count() > DETAIL_LIMIT {
        text = text.chars().take(DETAIL_LIMIT - 3).collect::<String>() + "...";
    }
    text
}

/// The fields of one decoded event, borrowed from the decoded Avro value.
struct Fields<'v> {
    event_id: &'v str,
    game_id: &'v str,
    player_id: &'v str,
    score: i64,
    ts_ms: i64,
    kind: i64,
    key_id: &'v str,
    sig: &'v [u8],
    metadata: Option<&'v str>,
}

/// A reader over one record's body that remembers whether the decoder ever
/// asked for bytes past the end.
///
/// `apache-avro` reads a string, a boolean or a union index that runs into
/// the end of the input as a null instead of failing; a truncated record must
/// be `DECODE`, so every read past the end is noted here and checked after.
struct Body<'a> {
    rest: &'a [u8],
    past_end: bool,
}

impl Read for Body<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.len() > self.rest.len() {
            self.past_end = true;
        }
        self.rest.read(buf)
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        if buf.len() > self.rest.len() {
            self.past_end = true;
            self.rest = &[];
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let (head, tail) = self.rest.split_at(buf.len());
        buf.copy_from_slice(head);
        self.rest = tail;
        Ok(())
    }
}

/// Decodes and verifies batches of record values for one subject and keyring.
#[pyclass(frozen, module = "lb_native")]
struct DecodeVerifier {
    wires: HashMap<u32, Wire>,
    keys: HashMap<String, HmacSha256>,
    event_type: Py<PyType>,
    /// Interned verdict codes, returned as they are.
    signature: Py<PyString>,
    unknown_key: Py<PyString>,
}

#[pymethods]
impl DecodeVerifier {
    /// `wires`: (schema id, writer view JSON, reader view JSON or None, writer
    /// enum index -> (EventKind, symbol) or None); `keys`: (key id, secret);
    /// `event_type`: the `ScoreEvent` class.
    #[new]
    fn new(
        py: Python<'_>,
        wires: Vec<(u32, String, Option<String>, Vec<Option<(Py<PyAny>, String)>>)>,
        keys: Vec<(String, Vec<u8>)>,
        event_type: Py<PyType>,
    ) -> PyResult<Self> {
        apache_avro::util::max_allocation_bytes(MAX_ALLOCATION_BYTES);
        let mut prepared = HashMap::new();
        let mut positions = None;
        for (schema_id, writer_json, reader_json, kinds) in wires {
            let writer = parse(schema_id, &writer_json)?;
            let reader = reader_json.map(|json| parse(schema_id, &json)).transpose()?;
            let read_as = reader.as_ref().unwrap_or(&writer);
            let found = field_positions(read_as)
                .ok_or_else(|| PyValueError::new_err("the view read lacks a ScoreEvent field"))?;
            if *positions.get_or_insert(found) != found {
                return Err(PyValueError::new_err("schema ids disagree about the view read"));
            }
            // Resolution builds a second value per record; skip it where it
            // could only add `metadata` as null.
            let (reader, (positions, metadata)) = match reader {
                Some(view) if reads_as_written(&writer, &view) => {
                    (None, field_positions(&writer).unwrap_or(found))
                }
                other => (other, found),
            };
            prepared
                .insert(schema_id, Wire { schema_id, writer, reader, positions, metadata, kinds });
        }
        if positions.is_none() {
            return Err(PyValueError::new_err("at least one schema is required"));
        }
        tuples::check(event_type.bind(py), ITEMS, "event_type (ScoreEvent)")?;
        let mut macs = HashMap::new();
        for (key_id, secret) in keys {
            let mac = HmacSha256::new_from_slice(&secret)
                .map_err(|_| PyValueError::new_err("an HMAC key cannot be used"))?;
            macs.insert(key_id, mac);
        }
        Ok(DecodeVerifier {
            wires: prepared,
            keys: macs,
            event_type,
            signature: PyString::intern(py, "SIGNATURE").unbind(),
            unknown_key: PyString::intern(py, "UNKNOWN_KEY").unbind(),
        })
    }

    /// Three columns, one item per value in order: `(events, codes, details)`.
    ///
    /// * event, None, None: decoded, signature valid;
    /// * event, "SIGNATURE" | "UNKNOWN_KEY", None: decoded, refused by the
    ///   keyring (the caller words the detail, after its own field checks);
    /// * None, "DECODE" | "SCHEMA", detail: not an event. A value that is not
    ///   `bytes` (a tombstone's None) is `DECODE`.
    ///
    /// Columns rather than a tuple per record: no container is built per
    /// record beyond the event itself.
    fn check<'py>(
        &self,
        py: Python<'py>,
        values: &Bound<'py, PyList>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let mut readers: HashMap<u32, Option<GenericDatumReader<'_>>> = HashMap::new();
        let mut message = Vec::with_capacity(256);
        let size = values.len();
        let (mut events, mut codes, mut details) =
            (Vec::with_capacity(size), Vec::with_capacity(size), Vec::with_capacity(size));
        for value in values.iter() {
            let (event, code, detail) = match value.cast::<PyBytes>() {
                Ok(bytes) => self.one(py, bytes.as_bytes(), &mut readers, &mut message)?,
                Err(_) => refused(py, Refusal::decode("record has no value".to_owned())),
            };
            events.push(event);
            codes.push(code);
            details.push(detail);
        }
        PyTuple::new(
            py,
            [PyList::new(py, events)?, PyList::new(py, codes)?, PyList::new(py, details)?],
        )
    }
}

impl DecodeVerifier {
    fn one<'py, 's>(
        &'s self,
        py: Python<'py>,
        data: &[u8],
        readers: &mut HashMap<u32, Option<GenericDatumReader<'s>>>,
        message: &mut Vec<u8>,
    ) -> PyResult<Outcome<'py>> {
        let (wire, value) = match self.decode(data, readers) {
            Ok(found) => found,
            Err(refusal) => return Ok(refused(py, refusal)),
        };
        let fields = match self.fields(wire, &value) {
            Ok(fields) => fields,
            Err(refusal) => return Ok(refused(py, refusal)),
        };
        // A negative index names no kind (fastavro would index from the end).
        let index = usize::try_from(fields.kind).unwrap_or(usize::MAX);
        let Some((kind, symbol)) = wire.kinds.get(index).and_then(Option::as_ref) else {
            return Ok(refused(
                py,
                Refusal::schema(format!(
                    "schema id {}: enum index {} is not a known kind",
                    wire.schema_id, fields.kind
                )),
            ));
        };
        let verdict = match self.keys.get(fields.key_id) {
            None => Some(self.unknown_key.bind(py).clone().into_any()),
            Some(template) => {
                canonical(message, &fields, symbol);
                let mut mac = template.clone();
                mac.update(message);
                match mac.verify_slice(fields.sig) {
                    Ok(()) => None,
                    Err(_) => Some(self.signature.bind(py).clone().into_any()),
                }
            }
        };
        let event = tuples::fill(
            self.event_type.bind(py),
            [
                PyString::new(py, fields.event_id).into_any(),
                PyString::new(py, fields.game_id).into_any(),
                PyString::new(py, fields.player_id).into_any(),
                fields.score.into_pyobject(py)?.into_any(),
                fields.ts_ms.into_pyobject(py)?.into_any(),
                kind.bind(py).clone(),
                PyString::new(py, fields.key_id).into_any(),
                PyBytes::new(py, fields.sig).into_any(),
                match fields.metadata {
                    Some(text) => PyString::new(py, text).into_any(),
                    None => py.None().into_bound(py),
                },
            ],
        )?;
        Ok((Some(event), verdict, None))
    }

    /// The record's Avro value, read as the newest version; the refusal `schemas/codec.py` would give.
    fn decode<'s>(
        &'s self,
        data: &[u8],
        readers: &mut HashMap<u32, Option<GenericDatumReader<'s>>>,
    ) -> Result<(&'s Wire, Value), Refusal> {
        let size = data.len();
        if size < HEADER_SIZE {
            return Err(Refusal::decode(format!(
                "{size} bytes is shorter than the 5-byte wire header"
            )));
        }
        if data[0] != 0 {
            return Err(Refusal::decode(format!("magic byte is 0x{:02x}, not 0x00", data[0])));
        }
        let schema_id = u32::from_be_bytes([data[1], data[2], data[3], data[4]]);
        let Some(wire) = self.wires.get(&schema_id) else {
            return Err(Refusal::schema(format!("unknown schema id {schema_id}")));
        };
        let reader = readers.entry(schema_id).or_insert_with(|| {
            GenericDatumReader::builder(&wire.writer).build().ok()
        });
        let Some(reader) = reader.as_ref() else {
            return Err(Refusal::schema(format!("schema id {schema_id} cannot be read")));
        };
        let mut body = Body { rest: &data[HEADER_SIZE..], past_end: false };
        let read = reader.read_value(&mut body);
        if body.past_end {
            return Err(Refusal::decode(format!(
                "schema id {schema_id}: malformed or truncated Avro body: the record ends early"
            )));
        }
        let value = match read {
            Ok(value) => value,
            Err(error) => {
                return Err(match error.details() {
                    Details::ConvertToUtf8(_) | Details::ConvertToUtf8Error(_) => {
                        Refusal::schema(format!("schema id {schema_id}: invalid UTF-8 in a string"))
                    }
                    _ => Refusal::decode(format!(
                        "schema id {schema_id}: malformed or truncated Avro body: {error}"
                    )),
                });
            }
        };
        let value = match &wire.reader {
            None => value,
            Some(v1) => value.resolve(v1).map_err(|error| {
                Refusal::schema(format!(
                    "schema id {schema_id} cannot be read as the newest version: {error}"
                ))
            })?,
        };
        if !body.rest.is_empty() {
            return Err(Refusal::decode(format!(
                "schema id {schema_id}: {} bytes left after the record",
                body.rest.len()
            )));
        }
        Ok((wire, value))
    }

    /// The event's fields out of a decoded record.
    fn fields<'v>(&self, wire: &Wire, value: &'v Value) -> Result<Fields<'v>, Refusal> {
        let Value::Record(items) = value else {
            return Err(Refusal::decode(format!("schema id {}: not a record", wire.schema_id)));
        };
        let at = |field: usize| items.get(wire.positions[field]).map(|(_, v)| v);
        let text = |field: usize| match at(field) {
            Some(Value::String(s)) => Ok(s.as_str()),
            _ => Err(mistyped(wire, field)),
        };
        let long = |field: usize| match at(field) {
            Some(Value::Long(n)) => Ok(*n),
            Some(Value::Int(n)) => Ok(i64::from(*n)),
            _ => Err(mistyped(wire, field)),
        };
        let sig = match at(7) {
            Some(Value::Bytes(b)) => b.as_slice(),
            _ => return Err(mistyped(wire, 7)),
        };
        let kind = long(5)?;
        let metadata = match wire.metadata.and_then(|at| items.get(at)).map(|(_, v)| v) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.as_str()),
            Some(Value::Union(_, inner)) => match inner.as_ref() {
                Value::Null => None,
                Value::String(s) => Some(s.as_str()),
                _ => return Err(mistyped_metadata(wire)),
            },
            Some(_) => return Err(mistyped_metadata(wire)),
        };
        Ok(Fields {
            event_id: text(0)?,
            game_id: text(1)?,
            player_id: text(2)?,
            score: long(3)?,
            ts_ms: long(4)?,
            kind,
            key_id: text(6)?,
            sig,
            metadata,
        })
    }
}

fn mistyped(wire: &Wire, field: usize) -> Refusal {
    Refusal::decode(format!(
        "schema id {}: field {} does not hold its v1 type",
        wire.schema_id, FIELDS[field]
    ))
}

fn mistyped_metadata(wire: &Wire) -> Refusal {
    Refusal::decode(format!(
        "schema id {}: field {METADATA} is neither null nor a string",
        wire.schema_id
    ))
}

/// `domain.signing.canonical`, UTF-8: `v1|eventId|gameId|playerId|score|ts|kind`
/// without metadata; with it, `v2|...|kind|` and the metadata's SHA-256 in lowercase hex.
fn canonical(message: &mut Vec<u8>, fields: &Fields<'_>, symbol: &str) {
    use std::io::Write;
    message.clear();
    let version = if fields.metadata.is_some() { "v2" } else { "v1" };
    // Writing to a Vec cannot fail.
    let _ = write!(
        message,
        "{}|{}|{}|{}|{}|{}|{}",
        version,
        fields.event_id,
        fields.game_id,
        fields.player_id,
        fields.score,
        fields.ts_ms,
        symbol
    );
    if let Some(text) = fields.metadata {
        let digest = sha2::Sha256::digest(text.as_bytes());
        message.push(b'|');
        for byte in digest.iter() {
            let _ = write!(message, "{byte:02x}");
        }
    }
}

fn refused<'py>(py: Python<'py>, refusal: Refusal) -> Outcome<'py> {
    let code = PyString::intern(py, refusal.code).into_any();
    let detail = PyString::new(py, &refusal.detail).into_any();
    (None, Some(code), Some(detail))
}

fn parse(schema_id: u32, json: &str) -> PyResult<Schema> {
    Schema::parse_str(json).map_err(|error| {
        PyValueError::new_err(format!("schema id {schema_id}: not a valid Avro schema: {error}"))
    })
}

/// Whether a value written with `writer` reads the same as its resolution
/// against `view` would: every field of `view` is in `writer` with the same
/// schema, except `metadata`, which may be missing (resolution would fill in
/// its default, null, which `fields` reads the same as no field).
fn reads_as_written(writer: &Schema, view: &Schema) -> bool {
    let (Schema::Record(written), Schema::Record(read)) = (writer, view) else {
        return false;
    };
    read.fields.iter().all(|field| match written.fields.iter().find(|w| w.name == field.name) {
        Some(w) => w.schema == field.schema,
        None => field.name == METADATA,
    })
}

/// Where each of `FIELDS` sits in a record schema (None if one is missing),
/// and where `metadata` sits if the schema has it.
fn field_positions(schema: &Schema) -> Option<([usize; 8], Option<usize>)> {
    let Schema::Record(record) = schema else {
        return None;
    };
    let mut positions = [0usize; 8];
    for (slot, name) in FIELDS.iter().enumerate() {
        positions[slot] = record.fields.iter().position(|f| f.name == *name)?;
    }
    Some((positions, record.fields.iter().position(|f| f.name == METADATA)))
}

/// Compiled decode + verify of score events (see `schemas/native.py`), the
/// validation rules' common case (`judge.rs`), and
/// the replay load's `ZADD` packing (`zadd.rs`), the fingerprint dedupe
/// layout's per-batch work (`seen.rs`), the planner's first pass (`scan.rs`) and per-event fold (`fold.rs`), a piece's changed members
/// (`members.rs`), a group write's script arguments (`encode.rs`), the dedupe
/// lookups' reads (`reads.rs`), the commands' packing (`resp.rs`) and the change
/// stream's JSON (`changes.rs`).
#[pymodule]
mod lb_native {
    #[pymodule_export]
    use super::DecodeVerifier;
    #[pymodule_export]
    use super::changes::changes_json;
    #[pymodule_export]
    use super::encode::encode_head;
    #[pymodule_export]
    use super::fold::FoldKernel;
    #[pymodule_export]
    use super::judge::JudgeKernel;
    #[pymodule_export]
    use super::members::diff_members;
    #[pymodule_export]
    use super::reads::seen_commands;
    #[pymodule_export]
    use super::reads::seen_values;
    #[pymodule_export]
    use super::resp::pack_command;
    #[pymodule_export]
    use super::scan::ScanKernel;
    #[pymodule_export]
    use super::seen::SeenBags;
    #[pymodule_export]
    use super::zadd::BoardPacker;
}
