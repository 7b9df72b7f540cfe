//! A command's words as the Redis protocol (RESP) bytes, compiled.
//!
//! `sinks/wire.py` packs every command of the job's round trips; a group write
//! carries tens of words per event (members, scores, key indexes, dedupe
//! entries), and hiredis' `pack_command` spent 1.3-3.8 µs of CPU per event on
//! them (a temporary bytes or str object per word). Here a `str` is read as
//! its UTF-8 in place, an `int` that fits 64 bits is written without a Python
//! string, and the frame goes into one buffer. The output is hiredis', byte
//! for byte, and so are its refusals (tests/unit/test_native_resp.py).

use std::io::Write;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyFloat, PyInt, PyString, PyTuple};

/// What hiredis says of a word it cannot pack.
const REFUSED: &str = "A tuple item must be str, int, float or bytes.";

/// `words` (a tuple of `str`, `bytes`, `int` or `float`) as one RESP command.
#[pyfunction]
pub fn pack_command<'py>(
    py: Python<'py>,
    words: &Bound<'py, PyTuple>,
) -> PyResult<Bound<'py, PyBytes>> {
    let mut out: Vec<u8> = Vec::with_capacity(16 + 16 * words.len());
    write!(out, "*{}\r\n", words.len()).expect("writing to a Vec cannot fail");
    let mut digits = itoa_buffer();
    for word in words.iter() {
        if let Ok(text) = word.cast::<PyString>() {
            bulk(&mut out, text.to_str()?.as_bytes());
        } else if let Ok(raw) = word.cast::<PyBytes>() {
            bulk(&mut out, raw.as_bytes());
        } else if word.is_instance_of::<PyBool>() {
            return Err(PyTypeError::new_err(REFUSED));
        } else if word.is_instance_of::<PyInt>() {
            match word.extract::<i64>() {
                Ok(value) => bulk(&mut out, format_i64(&mut digits, value)),
                Err(_) => bulk(&mut out, word.str()?.to_str()?.as_bytes()),
            }
        } else if word.is_instance_of::<PyFloat>() {
            bulk(&mut out, word.repr()?.to_str()?.as_bytes());
        } else {
            return Err(PyTypeError::new_err(REFUSED));
        }
    }
    Ok(PyBytes::new(py, &out))
}

/// Appends one bulk string: `$<len>\r\n<bytes>\r\n`.
fn bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    write!(out, "${}\r\n", bytes.len()).expect("writing to a Vec cannot fail");
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// Room for the decimal text of any `i64`.
fn itoa_buffer() -> [u8; 20] {
    [0; 20]
}

/// `value`'s decimal text, written into the end of `digits`.
fn format_i64(digits: &mut [u8; 20], value: i64) -> &[u8] {
    let mut rest = value.unsigned_abs();
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    if value < 0 {
        at -= 1;
        digits[at] = b'-';
    }
    &digits[at..]
}
