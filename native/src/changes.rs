//! A group write's change-stream entries as one JSON array, compiled.
//!
//! `sinks/boards/encoding.py` (`change_json`) is the reference and says what an
//! entry is: `{"w":<window id>,"p":<player id>,"o":"<old>","n":"<new>"}`, with
//! `"m":<metadata>` last when the event carried metadata, strings escaped as
//! Python's `json.dumps` escapes them (ASCII only: `\uXXXX`, lowercase hex,
//! surrogate pairs above U+FFFF). A batch of new players makes one entry per
//! board per player, and building them cost the job about as much as packing
//! the rest of the write; here they go into one buffer. The output is the
//! reference's, byte for byte (tests/unit/test_native_changes.py).

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyString, PyTuple};

/// `changes` (`Change` tuples: window id, player id, old, new, metadata) as
/// the stream's JSON array; None for anything but str ids and metadata and
/// int scores, or a string that is not valid Unicode text (a lone surrogate):
/// the caller then encodes them in Python.
#[pyfunction]
pub fn changes_json(changes: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
    let mut out = String::with_capacity(64);
    out.push('[');
    for (at, change) in changes.try_iter()?.enumerate() {
        let change = change?;
        let change = change
            .cast::<PyTuple>()
            .map_err(|_| PyTypeError::new_err("a change must be a Change tuple"))?;
        if change.len() != 5 {
            return Err(PyTypeError::new_err(
                "a change must be a Change tuple of 5 fields",
            ));
        }
        if at > 0 {
            out.push(',');
        }
        out.push_str("{\"w\":");
        if !quoted(&mut out, &change.get_item(0)?)? {
            return Ok(None);
        }
        out.push_str(",\"p\":");
        if !quoted(&mut out, &change.get_item(1)?)? {
            return Ok(None);
        }
        out.push_str(",\"o\":\"");
        if !score(&mut out, &change.get_item(2)?)? {
            return Ok(None);
        }
        out.push_str("\",\"n\":\"");
        if !score(&mut out, &change.get_item(3)?)? {
            return Ok(None);
        }
        out.push('"');
        let meta = change.get_item(4)?;
        if !meta.is_none() {
            out.push_str(",\"m\":");
            if !quoted(&mut out, &meta)? {
                return Ok(None);
            }
        }
        out.push('}');
    }
    out.push(']');
    Ok(Some(out))
}

/// Appends `text` as a JSON string (`json.dumps`' escapes); false for anything
/// but valid Unicode text.
fn quoted(out: &mut String, text: &Bound<'_, PyAny>) -> PyResult<bool> {
    let Ok(text) = text.cast::<PyString>() else {
        return Ok(false);
    };
    let Ok(text) = text.to_str() else {
        return Ok(false);
    };
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
    out.push('"');
    Ok(true)
}

/// Appends a score as the stream writes it: decimal text, nothing for None;
/// false for anything but an int (a bool included) or None.
fn score(out: &mut String, value: &Bound<'_, PyAny>) -> PyResult<bool> {
    if value.is_none() {
        return Ok(true);
    }
    if !value.is_exact_instance_of::<PyInt>() {
        return Ok(false);
    }
    match value.extract::<i64>() {
        Ok(number) => out.push_str(&number.to_string()),
        Err(_) => out.push_str(value.str()?.to_str()?),
    }
    Ok(true)
}
