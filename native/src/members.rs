//! A piece's changed members, compiled: the board writes, the cache entries
//! and the change stream's changes in one walk.
//!
//! `domain/planner/changes.py` is the reference (`emit`'s walk over the
//! players' values before and after a piece, and `group_changes`): per
//! (board, player) only the piece's final value is written, and only when it
//! differs from the value before. In Python the two walked the same dicts
//! twice and cost about 3 µs per record on a batch of new players (three
//! boards each); here one walk fills the same dicts and lists, in the same
//! order (tests/unit/test_native_members.py compares them).

use std::collections::HashMap;

use crate::tuples;

use pyo3::exceptions::PyKeyError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple, PyType};

/// A board value never read (a RETRACT removes it without looking): `model.UNKNOWN`.
const UNKNOWN: i64 = -1;

/// How one board's stored values decode to scores (`TieCodec`): slots, ascending, ceiling.
#[derive(Clone, Copy)]
struct Codec {
    slots: i64,
    ascending: bool,
    ceiling: i64,
}

impl Codec {
    /// The score of a stored value: `codec.stored(value // slots)`.
    fn score(self, value: i64) -> i64 {
        let score = value.div_euclid(self.slots);
        if self.ascending {
            self.ceiling - score
        } else {
            score
        }
    }
}

/// Where the walk writes, and what it needs besides the values.
struct Out<'py> {
    prefix: String,
    zadd: Bound<'py, PyDict>,
    zrem: Bound<'py, PyDict>,
    changes: Option<Bound<'py, PyList>>,
    change_type: Bound<'py, PyType>,
    codec_of: Bound<'py, PyAny>,
    /// Per window id: its board key, its members in `zadd`, its removals in `zrem`, its codec.
    keys: HashMap<String, Bound<'py, PyString>>,
    adds: HashMap<String, Bound<'py, PyDict>>,
    removes: HashMap<String, Bound<'py, PyList>>,
    codecs: HashMap<String, Codec>,
}

/// The piece's changed members into `zadd` / `zrem` (board key -> members),
/// each player's values into `cache` under `(tag, player)` (without the
/// values never read when `retracted`), and, when `changes` is a list, a
/// `change_type(window, player, old, new)` per changed member with decoded
/// scores (`codec_of(window)` gives `(slots, ascending, ceiling)`, asked once
/// per window). Answers whether a value the piece changed back to where it
/// was has a setter in `setters` (its metadata may change).
#[pyfunction]
#[pyo3(signature = (initial, working, prefix, tag, zadd, zrem, cache, retracted, changes, change_type, codec_of, setters))]
#[allow(clippy::too_many_arguments)]
pub fn diff_members<'py>(
    initial: &Bound<'py, PyDict>,
    working: &Bound<'py, PyDict>,
    prefix: &str,
    tag: &Bound<'py, PyAny>,
    zadd: Bound<'py, PyDict>,
    zrem: Bound<'py, PyDict>,
    cache: &Bound<'py, PyDict>,
    retracted: bool,
    changes: Option<Bound<'py, PyList>>,
    change_type: Bound<'py, PyType>,
    codec_of: Bound<'py, PyAny>,
    setters: Option<Bound<'py, PyDict>>,
) -> PyResult<bool> {
    let py = initial.py();
    tuples::check(&change_type, FIELDS, "change_type (Change)")?;
    let mut out = Out {
        prefix: prefix.to_owned(),
        zadd,
        zrem,
        changes,
        change_type,
        codec_of,
        keys: HashMap::new(),
        adds: HashMap::new(),
        removes: HashMap::new(),
        codecs: HashMap::new(),
    };
    let mut reverted = false;
    for (player, mine) in working.iter() {
        let mine = mine.cast_into::<PyDict>()?;
        let before = initial
            .get_item(&player)?
            .ok_or_else(|| PyKeyError::new_err(player.clone().unbind()))?
            .cast_into::<PyDict>()?;
        let kept = if retracted {
            Some(PyDict::new(py))
        } else {
            None
        };
        for (window, value) in mine.iter() {
            let new = number(&value)?;
            if let Some(kept) = &kept {
                if new != Some(UNKNOWN) {
                    kept.set_item(&window, &value)?;
                }
            }
            let old = match before.get_item(&window)? {
                Some(old) => Some(number(&old)?),
                None => None,
            };
            if old == Some(new) {
                if let Some(setters) = &setters {
                    if !reverted {
                        reverted = setters.contains(PyTuple::new(py, [&window, &player])?)?;
                    }
                }
                continue;
            }
            let window_id = window.cast::<PyString>()?.to_str()?;
            out.write(window_id, &player, &value, new)?;
            if out.changes.is_some() {
                out.change(
                    window_id,
                    &window,
                    &player,
                    old.unwrap_or(Some(UNKNOWN)),
                    new,
                )?;
            }
        }
        let key = PyTuple::new(py, [tag, &player])?;
        match kept {
            Some(kept) => cache.set_item(key, kept)?,
            None => cache.set_item(key, mine)?,
        }
    }
    Ok(reverted)
}

/// The fields of a `Change`: window id, player id, old, new, metadata.
const FIELDS: usize = 5;

/// A board value: None, or an int.
fn number(value: &Bound<'_, PyAny>) -> PyResult<Option<i64>> {
    if value.is_none() {
        Ok(None)
    } else {
        Ok(Some(value.extract()?))
    }
}

impl<'py> Out<'py> {
    /// The member's write: removed when `new` is None, else added with `value`.
    fn write(
        &mut self,
        window_id: &str,
        player: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
        new: Option<i64>,
    ) -> PyResult<()> {
        let py = player.py();
        if new.is_none() {
            if let Some(list) = self.removes.get(window_id) {
                return list.append(player);
            }
            let key = self.key(py, window_id);
            let list = match self.zrem.get_item(&key)? {
                Some(list) => list.cast_into::<PyList>()?,
                None => {
                    let list = PyList::empty(py);
                    self.zrem.set_item(&key, &list)?;
                    list
                }
            };
            list.append(player)?;
            self.removes.insert(window_id.to_owned(), list);
            return Ok(());
        }
        if let Some(members) = self.adds.get(window_id) {
            return members.set_item(player, value);
        }
        let key = self.key(py, window_id);
        let members = match self.zadd.get_item(&key)? {
            Some(members) => members.cast_into::<PyDict>()?,
            None => {
                let members = PyDict::new(py);
                self.zadd.set_item(&key, &members)?;
                members
            }
        };
        members.set_item(player, value)?;
        self.adds.insert(window_id.to_owned(), members);
        Ok(())
    }

    /// The board key of a window: the group's prefix, then the window id.
    fn key(&mut self, py: Python<'py>, window_id: &str) -> Bound<'py, PyString> {
        self.keys
            .entry(window_id.to_owned())
            .or_insert_with(|| PyString::new(py, &format!("{}{window_id}", self.prefix)))
            .clone()
    }

    /// The member's change, with decoded scores (`group_changes`).
    fn change(
        &mut self,
        window_id: &str,
        window: &Bound<'py, PyAny>,
        player: &Bound<'py, PyAny>,
        old: Option<i64>,
        new: Option<i64>,
    ) -> PyResult<()> {
        let unknown = matches!(old, None | Some(UNKNOWN));
        let (old, new) = if new.is_none() && unknown {
            (None, None)
        } else {
            let codec = self.codec(window_id, window)?;
            (
                if unknown {
                    None
                } else {
                    old.map(|v| codec.score(v))
                },
                new.map(|v| codec.score(v)),
            )
        };
        let py = window.py();
        let change = tuples::fill(
            &self.change_type,
            [
                window.clone(),
                player.clone(),
                old.into_pyobject(py)?.into_any(),
                new.into_pyobject(py)?.into_any(),
                py.None().into_bound(py),
            ],
        )?;
        self.changes
            .as_ref()
            .expect("asked only with a changes list")
            .append(change)
    }

    /// The window's codec, asked of `codec_of` once.
    fn codec(&mut self, window_id: &str, window: &Bound<'py, PyAny>) -> PyResult<Codec> {
        if let Some(codec) = self.codecs.get(window_id) {
            return Ok(*codec);
        }
        let (slots, ascending, ceiling): (i64, bool, i64) =
            self.codec_of.call1((window,))?.extract()?;
        let codec = Codec {
            slots: slots.max(1),
            ascending,
            ceiling,
        };
        self.codecs.insert(window_id.to_owned(), codec);
        Ok(codec)
    }
}
