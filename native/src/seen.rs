//! The fingerprint dedupe layout's per-batch work, compiled.
//!
//! `domain/planner/dedupe.py` (`SeenLayout`) is the reference and says what the
//! layout is: an event id's token is the top bits of its BLAKE2b digest (a bag
//! number, then a field of `field_bytes` bytes); bucket `b`'s bags live in
//! `parts` hashes `<prefix><b>:<part>`, one hash field per bag whose value is
//! its entries back to back (the field bytes, then the record time's offset in
//! the bucket, big-endian). On a replayed history a batch touches thousands of
//! buckets and Python spent up to 20 µs per record building the lookups alone
//! (a list, a string and a tuple per token and neighbour bucket); here the same
//! lists are built from one sorted vector. Every answer is the reference's, in
//! the same order (tests/unit/test_dedupe_native.py compares them).

use std::collections::HashMap;

use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

/// The fingerprint layout of one horizon and split (see the module docs).
#[pyclass(frozen, module = "lb_native")]
pub struct SeenBags {
    horizon_ms: i64,
    /// BLAKE2b digest bytes, and the low bits dropped from it for a token.
    digest: usize,
    shift: u32,
    /// Bytes of a bag entry's field, and of its record time offset.
    width: usize,
    value: usize,
    /// Bits of the token below its bag number (`8 * width`).
    bits: u32,
    /// Hashes per bucket (a power of two): `bag & low` picks one, `bag >> high` names the field.
    low: u128,
    high: u32,
    parts: usize,
}

/// A token in a bucket, as `reads` orders them: neighbour bucket, part, then arrival.
/// The token is the caller's own int object (`index` into the tokens read), not a new one.
struct Ask {
    near: i64,
    part: u128,
    name: u128,
    index: usize,
}

#[pymethods]
impl SeenBags {
    /// The layout of `SeenLayout(horizon_ms, split, field_bytes)` with `parts` hashes per bucket.
    #[new]
    fn new(horizon_ms: i64, split: u64, field_bytes: usize, parts: usize) -> PyResult<Self> {
        if split == 0 || !split.is_power_of_two() {
            return Err(PyValueError::new_err(format!(
                "the split must be a power of two, got {split}"
            )));
        }
        if !(1..=16).contains(&field_bytes) {
            return Err(PyValueError::new_err(format!(
                "the dedupe field is 1 to 16 bytes, got {field_bytes}"
            )));
        }
        if horizon_ms < 1 {
            return Err(PyValueError::new_err("the horizon must be at least 1 ms"));
        }
        if parts == 0 || !parts.is_power_of_two() || parts as u64 > split {
            return Err(PyValueError::new_err(format!(
                "parts must be a power of two up to the split, got {parts}"
            )));
        }
        let bits = 8 * field_bytes as u32 + split.trailing_zeros();
        if bits > 128 {
            return Err(PyValueError::new_err(format!(
                "a token of {bits} bits does not fit the compiled layout (at most 128)"
            )));
        }
        let digest = bits.div_ceil(8) as usize;
        let span = 64 - ((horizon_ms - 1) as u64).leading_zeros();
        Ok(Self {
            horizon_ms,
            digest,
            shift: 8 * digest as u32 - bits,
            width: field_bytes,
            value: (span.div_ceil(8) as usize).max(1),
            bits: 8 * field_bytes as u32,
            low: parts as u128 - 1,
            high: parts.trailing_zeros(),
            parts,
        })
    }

    /// `event_id`'s token: the top bits of its BLAKE2b digest, as `SeenLayout.token`.
    fn token(&self, event_id: &str) -> u128 {
        let hash = blake2b_simd::Params::new()
            .hash_length(self.digest)
            .hash(event_id.as_bytes());
        let mut out: u128 = 0;
        for byte in hash.as_bytes() {
            out = out << 8 | u128::from(*byte);
        }
        out >> self.shift
    }

    /// The `HMGET`s (key, fields) that find `buckets`' tokens, and what each answers for.
    ///
    /// `buckets`: record-time bucket -> its tokens in log order; each token is
    /// asked in its bucket and both neighbours, one read per (bucket, part), in
    /// ascending order, fields in the order the reference appends them.
    fn reads<'py>(
        &self,
        py: Python<'py>,
        prefix: &str,
        buckets: &Bound<'py, PyDict>,
    ) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
        let mut asks: Vec<Ask> = Vec::new();
        let mut objects: Vec<Bound<'py, PyAny>> = Vec::new();
        for (bucket, tokens) in buckets.iter() {
            let bucket: i64 = bucket.extract()?;
            let first = objects.len();
            let mut bags = Vec::new();
            for token in tokens.try_iter()? {
                let token = token?;
                bags.push(token.extract::<u128>()? >> self.bits);
                objects.push(token);
            }
            for near in [bucket - 1, bucket, bucket + 1] {
                for (at, &bag) in bags.iter().enumerate() {
                    asks.push(Ask {
                        near,
                        part: bag & self.low,
                        name: bag >> self.high,
                        index: first + at,
                    });
                }
            }
        }
        // Stable: within one (bucket, part), buckets in the order given, then tokens.
        asks.sort_by_key(|ask| (ask.near, ask.part));
        let reads = PyList::empty(py);
        let at = PyList::empty(py);
        let mut start = 0;
        while start < asks.len() {
            let (near, part) = (asks[start].near, asks[start].part);
            let mut end = start;
            while end < asks.len() && asks[end].near == near && asks[end].part == part {
                end += 1;
            }
            let group = &asks[start..end];
            let fields = PyList::new(py, group.iter().map(|ask| ask.name.to_string()))?;
            let tokens = PyList::new(py, group.iter().map(|ask| &objects[ask.index]))?;
            reads.append((format!("{prefix}{near}:{part}"), fields))?;
            at.append((near, tokens))?;
            start = end;
        }
        Ok((reads, at))
    }

    /// Per bucket, token -> record time of the applied copies the reads found.
    ///
    /// `at` and `values` are parallel (`reads`' second list, and each read's
    /// values in field order, None for a missing bag); every bucket asked gets
    /// a dict, empty when none of its tokens was found.
    fn found<'py>(
        &self,
        py: Python<'py>,
        at: &Bound<'py, PyList>,
        values: &Bound<'py, PyList>,
    ) -> PyResult<Bound<'py, PyDict>> {
        if at.len() != values.len() {
            return Err(PyValueError::new_err(
                "the reads and their answers differ in length",
            ));
        }
        let out = PyDict::new(py);
        for (asked, answers) in at.iter().zip(values.iter()) {
            let (bucket, tokens): (Bound<'py, PyAny>, Bound<'py, PyList>) = asked.extract()?;
            let answers = answers
                .cast_into::<PyList>()
                .map_err(|_| PyTypeError::new_err("a read's answers must be a list"))?;
            if tokens.len() != answers.len() {
                return Err(PyValueError::new_err(
                    "a read's tokens and answers differ in length",
                ));
            }
            let start = bucket.extract::<i64>()? * self.horizon_ms;
            let got = match out.get_item(&bucket)? {
                Some(got) => got.cast_into::<PyDict>()?,
                None => {
                    let fresh = PyDict::new(py);
                    out.set_item(&bucket, &fresh)?;
                    fresh
                }
            };
            for (token, answer) in tokens.iter().zip(answers.iter()) {
                if answer.is_none() {
                    continue;
                }
                let bag = answer
                    .cast::<PyBytes>()
                    .map_err(|_| PyTypeError::new_err("a dedupe bag must be bytes"))?;
                if let Some(offset) = self.find(bag.as_bytes(), token.extract()?) {
                    got.set_item(&token, start + offset)?;
                }
            }
        }
        Ok(out)
    }

    /// What `written` (bucket -> token -> record time) appends: key -> bag field -> entries.
    fn writes<'py>(
        &self,
        py: Python<'py>,
        prefix: &str,
        written: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        let mut by_part: Vec<Vec<(u128, Vec<u8>)>> = vec![Vec::new(); self.parts];
        let mut index: HashMap<(usize, u128), usize> = HashMap::new();
        for (bucket, ids) in written.iter() {
            let bucket_at: i64 = bucket.extract()?;
            let start = bucket_at * self.horizon_ms;
            for (token, ts) in ids.cast_into::<PyDict>()?.iter() {
                let token: u128 = token.extract()?;
                let offset = ts.extract::<i64>()? - start;
                let bag = token >> self.bits;
                let part = (bag & self.low) as usize;
                let name = bag >> self.high;
                let slot = *index.entry((part, name)).or_insert_with(|| {
                    by_part[part].push((name, Vec::new()));
                    by_part[part].len() - 1
                });
                self.pack(&mut by_part[part][slot].1, token, offset)?;
            }
            for (part, bags) in by_part.iter_mut().enumerate() {
                if bags.is_empty() {
                    continue;
                }
                let fields = PyDict::new(py);
                for (name, entries) in bags.drain(..) {
                    fields.set_item(name.to_string(), PyBytes::new(py, &entries))?;
                }
                out.set_item(format!("{prefix}{bucket_at}:{part}"), fields)?;
            }
            index.clear();
        }
        Ok(out)
    }
}

impl SeenBags {
    /// The offset stored with `token`'s field in `bag`: its first entry-aligned match.
    fn find(&self, bag: &[u8], token: u128) -> Option<i64> {
        let needle = &token.to_be_bytes()[16 - self.width..];
        let entry = self.width + self.value;
        let mut at = 0;
        while at + self.width <= bag.len() {
            if &bag[at..at + self.width] == needle {
                let end = (at + entry).min(bag.len());
                let offset = bag[at + self.width..end]
                    .iter()
                    .fold(0i64, |acc, byte| acc << 8 | i64::from(*byte));
                return Some(offset);
            }
            at += entry;
        }
        None
    }

    /// Appends `token`'s entry (its field, then `offset` in `value` bytes) to `out`.
    fn pack(&self, out: &mut Vec<u8>, token: u128, offset: i64) -> PyResult<()> {
        if offset < 0 || (self.value < 8 && offset >> (8 * self.value) != 0) {
            return Err(PyOverflowError::new_err(format!(
                "a record time {offset} ms from its bucket's start does not fit a bag entry"
            )));
        }
        out.extend_from_slice(&token.to_be_bytes()[16 - self.width..]);
        out.extend_from_slice(&offset.to_be_bytes()[8 - self.value..]);
        Ok(())
    }
}
