//! A group write's script arguments, the sections that grow with its events, compiled.
//!
//! `sinks/boards/encoding.py` (`_head`) is the reference and says what each
//! section holds (`apply_group.lua` reads them): the watermark, the members per
//! board, removals, expiries, the registry, the dedupe entries, the tournament
//! counts, the counters and the change-stream entry. A batch of new players
//! puts a score and a member per board per event and two words per dedupe
//! entry into them, and appending them one by one in Python cost the job 2-3 µs
//! per event. Here the same objects go into the same lists, in the same order;
//! the sections that stay small (entry metadata, erasures, teams, distinct
//! counts, the fence) are still built by the Python after it, with the key
//! index this returns (tests/unit/test_native_encode.py).

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// The script's keys so far and `KEYS[i]` index of each key (`key_indexer`).
struct Keys<'py> {
    list: Bound<'py, PyList>,
    index: Bound<'py, PyDict>,
}

impl<'py> Keys<'py> {
    /// `key_index(key)`: appends a key met first, answers its 1-based position.
    fn at(&self, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        if let Some(at) = self.index.get_item(key)? {
            return Ok(at);
        }
        self.list.append(key)?;
        let at = self.list.len().into_pyobject(self.list.py())?.into_any();
        self.index.set_item(key, &at)?;
        Ok(at)
    }
}

/// `_head(write, sort_members)` of `sinks/boards/encoding.py`: the keys, the
/// arguments from the watermark through the change stream, and the key index.
/// `order` is None, or what sorts a board's members (`dict`) into
/// `(member, score)` pairs by score; `changes_json` is the Python function
/// (it takes the compiled path itself when it can).
#[pyfunction]
pub fn encode_head<'py>(
    py: Python<'py>,
    write: &Bound<'py, PyAny>,
    order: &Bound<'py, PyAny>,
    per_command: i64,
    changes_maxlen: i64,
    changes_json: &Bound<'py, PyAny>,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>, Bound<'py, PyDict>)> {
    let group = write.getattr(intern!(py, "keys"))?;
    let keys = Keys {
        list: PyList::new(
            py,
            [
                group.getattr(intern!(py, "watermarks"))?,
                group.getattr(intern!(py, "stats"))?,
                group.getattr(intern!(py, "boards"))?,
            ],
        )?,
        index: PyDict::new(py),
    };
    let args = PyList::empty(py);
    let watermark = write.getattr(intern!(py, "watermark"))?;
    args.append(watermark.get_item(0)?)?;
    args.append(watermark.get_item(1)?)?;
    args.append(write.getattr(intern!(py, "expected"))?)?;
    args.append(per_command)?;
    members(&keys, &args, &write.getattr(intern!(py, "zadd"))?, order)?;
    listed(&keys, &args, &write.getattr(intern!(py, "zrem"))?)?;
    let expire = write
        .getattr(intern!(py, "expire_at_s"))?
        .cast_into::<PyDict>()?;
    args.append(expire.len())?;
    for (key, at) in expire.iter() {
        args.append(keys.at(&key)?)?;
        args.append(at)?;
    }
    let windows = write.getattr(intern!(py, "new_windows"))?;
    args.append(windows.len()?)?;
    for window in windows.try_iter()? {
        args.append(window?)?;
    }
    seen(py, &keys, &args, write)?;
    let counts = write
        .getattr(intern!(py, "counts"))?
        .cast_into::<PyDict>()?;
    args.append(counts.len())?;
    for (key, values) in counts.iter() {
        let values = values.cast_into::<PyDict>()?;
        args.append(keys.at(&key)?)?;
        args.append(values.len())?;
        pairs(&args, &values)?;
    }
    let stats = write.getattr(intern!(py, "stats"))?.cast_into::<PyDict>()?;
    args.append(stats.len())?;
    pairs(&args, &stats)?;
    let changes = write.getattr(intern!(py, "changes"))?;
    if changes.is_truthy()? {
        args.append(1)?;
        args.append(keys.at(&group.getattr(intern!(py, "changes"))?)?)?;
        args.append(changes_maxlen)?;
        args.append(changes_json.call1((changes,))?)?;
    } else {
        args.append(0)?;
    }
    Ok((keys.list, args, keys.index))
}

/// The `zadd` section: n, then per board its key index, n, `(score member)*`.
fn members<'py>(
    keys: &Keys<'py>,
    args: &Bound<'py, PyList>,
    zadd: &Bound<'py, PyAny>,
    order: &Bound<'py, PyAny>,
) -> PyResult<()> {
    let zadd = zadd.cast::<PyDict>()?;
    args.append(zadd.len())?;
    for (key, board) in zadd.iter() {
        let board = board.cast_into::<PyDict>()?;
        args.append(keys.at(&key)?)?;
        args.append(board.len())?;
        if order.is_none() {
            for (member, score) in board.iter() {
                args.append(score)?;
                args.append(member)?;
            }
        } else {
            for pair in order.call1((&board,))?.try_iter()? {
                let pair = pair?;
                args.append(pair.get_item(1)?)?;
                args.append(pair.get_item(0)?)?;
            }
        }
    }
    Ok(())
}

/// The `zrem` section: n, then per board its key index, n, member*.
fn listed<'py>(
    keys: &Keys<'py>,
    args: &Bound<'py, PyList>,
    zrem: &Bound<'py, PyAny>,
) -> PyResult<()> {
    let zrem = zrem.cast::<PyDict>()?;
    args.append(zrem.len())?;
    for (key, players) in zrem.iter() {
        args.append(keys.at(&key)?)?;
        args.append(players.len()?)?;
        for player in players.try_iter()? {
            args.append(player?)?;
        }
    }
    Ok(())
}

/// The dedupe section: n, append?, then per key its index, ttl, n, `(field value)*`.
fn seen<'py>(
    py: Python<'py>,
    keys: &Keys<'py>,
    args: &Bound<'py, PyList>,
    write: &Bound<'py, PyAny>,
) -> PyResult<()> {
    let seen = write.getattr(intern!(py, "seen"))?.cast_into::<PyDict>()?;
    let ttl = write.getattr(intern!(py, "seen_ttl_s"))?;
    args.append(seen.len())?;
    let append = write.getattr(intern!(py, "seen_append"))?.is_truthy()?;
    args.append(if append { 1 } else { 0 })?;
    for (key, ids) in seen.iter() {
        let ids = ids.cast_into::<PyDict>()?;
        args.append(keys.at(&key)?)?;
        args.append(&ttl)?;
        args.append(ids.len())?;
        pairs(args, &ids)?;
    }
    Ok(())
}

/// Every `(key value)` of `values`, in its order.
fn pairs<'py>(args: &Bound<'py, PyList>, values: &Bound<'py, PyDict>) -> PyResult<()> {
    for (name, value) in values.iter() {
        args.append(name)?;
        args.append(value)?;
    }
    Ok(())
}
