//! A board's members packed as `ZADD` commands in score order, compiled.
//!
//! A replay's load (`jobs/replay_memory.py`) writes every board it folded in
//! large `ZADD` calls, members in score order so that Redis inserts each one
//! next to the one before. In Python the client side of that cost about 2.5
//! µs of CPU per member (the sort, the argument lists, hiredis formatting every
//! score), as much as Redis' own insert; here the members are copied out of
//! the board's dict once, sorted by score and then by member, and each call
//! is written as the Redis protocol (RESP) bytes that hiredis would send for
//! the same command. Equal scores come in the order Redis keeps them (by the
//! member's bytes): each insert then lands right after the one before even
//! inside a large tie, where a tie in any order has Redis walk the tie's
//! scattered nodes (about a tenth more `ZADD` time on a 10M-member board of
//! log-normal integer scores; alike where a time tie-break leaves few ties).
//! What a member and a score are stays decided in Python: this only orders
//! and frames them.

use std::cmp::Ordering;
use std::io::Write;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};

/// One member: its score and where its UTF-8 name sits in `names`.
struct Entry {
    score: f64,
    at: usize,
    len: usize,
}

/// Iterates a board's members as packed `ZADD <key> score member ...` commands.
///
/// Built from the board's dict (`str` member -> `int | float` score); each
/// item is one command of at most `chunk` members, the members of all items
/// in the order Redis keeps them: ascending score, equal scores by the
/// member's bytes (`-0.0` and `0.0` are one score, as in Redis).
#[pyclass(module = "lb_native")]
pub struct BoardPacker {
    /// `ZADD` and the key, framed, as they start every command.
    head: Vec<u8>,
    names: Vec<u8>,
    order: Vec<Entry>,
    chunk: usize,
    next: usize,
    scratch: Vec<u8>,
}

#[pymethods]
impl BoardPacker {
    #[new]
    fn new(key: &str, members: &Bound<'_, PyDict>, chunk: usize) -> PyResult<Self> {
        if chunk == 0 {
            return Err(PyValueError::new_err("chunk must be at least 1"));
        }
        let mut names = Vec::new();
        let mut order = Vec::with_capacity(members.len());
        for (member, score) in members.iter() {
            let name = member
                .cast::<PyString>()
                .map_err(|_| PyTypeError::new_err("a board member must be a str"))?
                .to_str()?;
            let score: f64 = score.extract()?;
            if score.is_nan() {
                return Err(PyValueError::new_err(format!("board member {name:?} has a NaN score")));
            }
            order.push(Entry { score, at: names.len(), len: name.len() });
            names.extend_from_slice(name.as_bytes());
        }
        order.sort_unstable_by(|a, b| {
            // No NaN here (refused above): partial_cmp is total, and -0.0 == 0.0.
            a.score
                .partial_cmp(&b.score)
                .unwrap_or(Ordering::Equal)
                .then_with(|| names[a.at..a.at + a.len].cmp(&names[b.at..b.at + b.len]))
        });
        let mut head = Vec::new();
        bulk(&mut head, b"ZADD");
        bulk(&mut head, key.as_bytes());
        Ok(BoardPacker { head, names, order, chunk, next: 0, scratch: Vec::new() })
    }

    /// How many members the board holds.
    fn __len__(&self) -> usize {
        self.order.len()
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        let end = self.order.len().min(self.next + self.chunk);
        if self.next >= end {
            return None;
        }
        let mut out = std::mem::take(&mut self.scratch);
        out.clear();
        write!(out, "*{}\r\n", 2 + 2 * (end - self.next)).expect("writes to a Vec");
        out.extend_from_slice(&self.head);
        let mut number = Vec::with_capacity(32);
        for entry in &self.order[self.next..end] {
            number.clear();
            write!(number, "{}", entry.score).expect("writes to a Vec");
            bulk(&mut out, &number);
            bulk(&mut out, &self.names[entry.at..entry.at + entry.len]);
        }
        self.next = end;
        let packed = PyBytes::new(py, &out);
        self.scratch = out;
        Some(packed)
    }
}

/// Appends one RESP bulk string.
fn bulk(out: &mut Vec<u8>, value: &[u8]) {
    write!(out, "${}\r\n", value.len()).expect("writes to a Vec");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}
