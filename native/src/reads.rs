//! A round trip's dedupe lookups as read commands, and their replies back, compiled.
//!
//! `sinks/boards/reads.py` (`_seen_commands` and the dedupe part of
//! `parse_reads`) is the reference. A replayed history's batch asks thousands
//! of dedupe keys for a field or two each, and building a command per run of
//! them, then cutting the replies back into one list per key, cost the job
//! about 10 µs per record in Python. Here the same commands (the same tuples,
//! the same words, in the same order) and the same lists come out
//! (tests/unit/test_native_reads.py).

use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

/// What a dedupe lookup reads with: the words of one key's or one run's command.
struct Run<'py> {
    keys: Vec<Bound<'py, PyAny>>,
    counts: Vec<usize>,
    fields: Vec<Bound<'py, PyAny>>,
}

/// `_seen_commands(seen, batched)`: per lookup `(key, fields)`, its fields'
/// `HMGET`s (at most `read_chunk` fields each) or, when `batched`, runs of
/// short lookups (at most `short_read` fields) in one `EVAL` of `script`.
#[pyfunction]
pub fn seen_commands<'py>(
    py: Python<'py>,
    seen: &Bound<'py, PyAny>,
    batched: bool,
    short_read: usize,
    read_chunk: usize,
    script: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    let eval = "EVAL".into_pyobject(py)?.into_any();
    let hmget = "HMGET".into_pyobject(py)?.into_any();
    let mut run = Run {
        keys: Vec::new(),
        counts: Vec::new(),
        fields: Vec::new(),
    };
    for lookup in seen.try_iter()? {
        let lookup = lookup?;
        let key = lookup.get_item(0)?;
        let ids = lookup.get_item(1)?;
        let n = ids.len()?;
        if batched && n <= short_read {
            run.keys.push(key);
            run.counts.push(n);
            for id in ids.try_iter()? {
                run.fields.push(id?);
            }
            if run.fields.len() >= read_chunk {
                flush(py, &out, &mut run, &eval, script)?;
            }
            continue;
        }
        flush(py, &out, &mut run, &eval, script)?;
        let ids: Vec<Bound<'py, PyAny>> = ids.try_iter()?.collect::<PyResult<_>>()?;
        let spans: Vec<&[Bound<'py, PyAny>]> = if n <= read_chunk {
            vec![&ids[..]]
        } else {
            ids.chunks(read_chunk).collect()
        };
        for span in spans {
            let mut words = Vec::with_capacity(2 + span.len());
            words.push(hmget.clone());
            words.push(key.clone());
            words.extend(span.iter().cloned());
            out.append(PyTuple::new(py, words)?)?;
        }
    }
    flush(py, &out, &mut run, &eval, script)?;
    Ok(out)
}

/// The run so far as one `EVAL`: script, key count, keys, field counts, fields.
fn flush<'py>(
    py: Python<'py>,
    out: &Bound<'py, PyList>,
    run: &mut Run<'py>,
    eval: &Bound<'py, PyAny>,
    script: &Bound<'py, PyAny>,
) -> PyResult<()> {
    if run.keys.is_empty() {
        return Ok(());
    }
    let mut words = Vec::with_capacity(3 + 2 * run.keys.len() + run.fields.len());
    words.push(eval.clone());
    words.push(script.clone());
    words.push(run.keys.len().into_pyobject(py)?.into_any());
    words.append(&mut run.keys);
    for count in run.counts.drain(..) {
        words.push(count.into_pyobject(py)?.into_any());
    }
    words.append(&mut run.fields);
    out.append(PyTuple::new(py, words)?)?;
    Ok(())
}

/// The dedupe part of `parse_reads`: from `answers[at]` on, replies are taken
/// until every field of `seen` has its value; answers a list of values per
/// lookup, in order, and where the next reply starts.
#[pyfunction]
pub fn seen_values<'py>(
    py: Python<'py>,
    seen: &Bound<'py, PyAny>,
    answers: &Bound<'py, PyAny>,
    at: usize,
) -> PyResult<(Bound<'py, PyList>, usize)> {
    let mut sizes = Vec::new();
    for lookup in seen.try_iter()? {
        sizes.push(lookup?.get_item(1)?.len()?);
    }
    let need: usize = sizes.iter().sum();
    let mut values: Vec<Bound<'py, PyAny>> = Vec::with_capacity(need);
    let mut at = at;
    while values.len() < need {
        for value in answers.get_item(at)?.try_iter()? {
            values.push(value?);
        }
        at += 1;
    }
    let out = PyList::empty(py);
    let mut start = 0;
    for size in sizes {
        out.append(PyList::new(py, &values[start..start + size])?)?;
        start += size;
    }
    Ok((out, at))
}
