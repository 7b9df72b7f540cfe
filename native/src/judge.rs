//! The validation rules' common case, compiled: a decoded, signed event that passes.
//!
//! `domain/validation.py` holds the rules (`Validator._judge`) and stays their
//! only statement: this twin accepts a record only when every one of them
//! passes on values it can read as machine integers and only through what the
//! rules have already memoised (a game's rules, a quarter hour's windows),
//! and builds the same `Accepted`. Every other record (a tombstone, a decode
//! or signature verdict, a game or quarter hour met for the first time, any
//! metadata, any rule that fails) goes to the Python `slow` callable, which
//! judges it and files it as accepted or dead, so dead letters and their
//! details are worded in one place. In Python the accepted case cost about
//! 2.5 µs per record; tests/unit/test_native_judge.py compares the two.

use std::collections::HashMap;

use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple, PyType};

use crate::tuples;

/// Positions in a `SourceRecord` and a `ScoreEvent`.
struct Fields {
    offset: usize,
    timestamp_ms: usize,
    key: usize,
    value: usize,
    event_id: usize,
    game_id: usize,
    player_id: usize,
    score: usize,
    ts_ms: usize,
    kind: usize,
    metadata: usize,
}

/// The validator's common case, built once with the constants the rules use.
#[pyclass(frozen, module = "lb_native")]
pub struct JudgeKernel {
    score_kind: Py<PyAny>,
    accepted: Py<PyType>,
    max_id_length: usize,
    memo_ms: i64,
    fields: Fields,
}

/// One game's rules as the common case reads them (`_GameRules`).
#[derive(Clone)]
struct Rules<'py> {
    game: Bound<'py, PyAny>,
    max_score: i64,
    future_skew_ms: i64,
    ts_low: i64,
    ts_high: i64,
    by_day: Bound<'py, PyDict>,
}

/// Per rules object (by address, held with it): its rules, None when Python must judge its game.
type Known<'py> = HashMap<usize, (Bound<'py, PyAny>, Option<Rules<'py>>)>;

#[pymethods]
impl JudgeKernel {
    /// `score_kind` is `EventKind.SCORE`, `accepted` the `Accepted` class,
    /// `max_id_length` `validation.MAX_ID_LENGTH`, `memo_ms` the windows'
    /// memo period; the field names are `SourceRecord._fields` and
    /// `ScoreEvent._fields`.
    #[new]
    fn new(
        score_kind: Py<PyAny>,
        accepted: Bound<'_, PyType>,
        record_fields: Vec<String>,
        event_fields: Vec<String>,
        max_id_length: usize,
        memo_ms: i64,
    ) -> PyResult<Self> {
        tuples::check(&accepted, 5, "accepted (Accepted)")?;
        if memo_ms <= 0 {
            return Err(PyValueError::new_err("the memo period must be positive"));
        }
        let (r, e) = (&record_fields, &event_fields);
        Ok(Self {
            score_kind,
            accepted: accepted.unbind(),
            max_id_length,
            memo_ms,
            fields: Fields {
                offset: tuples::position(r, "offset")?,
                timestamp_ms: tuples::position(r, "timestamp_ms")?,
                key: tuples::position(r, "key")?,
                value: tuples::position(r, "value")?,
                event_id: tuples::position(e, "event_id")?,
                game_id: tuples::position(e, "game_id")?,
                player_id: tuples::position(e, "player_id")?,
                score: tuples::position(e, "score")?,
                ts_ms: tuples::position(e, "ts_ms")?,
                kind: tuples::position(e, "kind")?,
                metadata: tuples::position(e, "metadata")?,
            },
        })
    }

    /// Judges each record with its decode + verify outcome, in order: an
    /// accepted common case into `accepted`, every other record through
    /// `slow(record, event, code, detail)`. `rules` is the validator's dict
    /// of memoised game rules.
    #[allow(clippy::too_many_arguments)]
    fn judge<'py>(
        &self,
        records: &Bound<'py, PyAny>,
        events: &Bound<'py, PyAny>,
        codes: &Bound<'py, PyAny>,
        details: &Bound<'py, PyAny>,
        rules: &Bound<'py, PyDict>,
        slow: &Bound<'py, PyAny>,
        accepted: &Bound<'py, PyList>,
    ) -> PyResult<()> {
        let count = records.len()?;
        if events.len()? != count || codes.len()? != count || details.len()? != count {
            return Err(PyValueError::new_err(
                "records, events, codes and details differ in length",
            ));
        }
        let mut known: Known<'py> = HashMap::new();
        for at in 0..count {
            let record = records.get_item(at)?;
            let event = events.get_item(at)?;
            let code = codes.get_item(at)?;
            let found = if code.is_none() {
                self.common(&record, &event, rules, &mut known)?
            } else {
                None
            };
            match found {
                Some(done) => accepted.append(done)?,
                None => {
                    slow.call1((&record, &event, &code, details.get_item(at)?))?;
                }
            }
        }
        Ok(())
    }
}

impl JudgeKernel {
    /// The `Accepted` of a record that passes every rule through memoised
    /// answers; None where Python must judge it.
    fn common<'py>(
        &self,
        record: &Bound<'py, PyAny>,
        event: &Bound<'py, PyAny>,
        rules: &Bound<'py, PyDict>,
        known: &mut Known<'py>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let f = &self.fields;
        let (Ok(record), Ok(event)) = (record.cast::<PyTuple>(), event.cast::<PyTuple>()) else {
            return Ok(None);
        };
        if record.get_item(f.value)?.is_none() || !event.get_item(f.metadata)?.is_none() {
            return Ok(None);
        }
        let Some(game) = self.rules(&event.get_item(f.game_id)?, rules, known)? else {
            return Ok(None);
        };
        if !self.identity(record, event)? {
            return Ok(None);
        }
        let record_ts_object = record.get_item(f.timestamp_ms)?;
        let (Ok(score), Ok(ts), Ok(record_ts)) = (
            event.get_item(f.score)?.extract::<i64>(),
            event.get_item(f.ts_ms)?.extract::<i64>(),
            record_ts_object.extract::<i64>(),
        ) else {
            return Ok(None);
        };
        let py = record.py();
        let scores = event.get_item(f.kind)?.is(self.score_kind.bind(py));
        let bounded = score >= 0 && (!scores || score <= game.max_score);
        let future = i128::from(ts) > i128::from(record_ts) + i128::from(game.future_skew_ms);
        if !bounded || future || !(game.ts_low <= ts && ts < game.ts_high) {
            return Ok(None);
        }
        let Some(memo) = game.by_day.get_item(ts.div_euclid(self.memo_ms))? else {
            return Ok(None);
        };
        let memo = memo.cast_into::<PyTuple>()?;
        let closes: i64 = memo.get_item(1)?.extract()?;
        if record_ts > closes {
            return Ok(None); // some board has closed: Python keeps the open ones
        }
        let accepted = tuples::fill(
            self.accepted.bind(py),
            [
                record.get_item(f.offset)?,
                record_ts_object,
                event.clone().into_any(),
                game.game,
                memo.get_item(0)?,
            ],
        )?;
        Ok(Some(accepted))
    }

    /// The game's memoised rules, read once per call; None when not memoised yet.
    fn rules<'py>(
        &self,
        game_id: &Bound<'py, PyAny>,
        rules: &Bound<'py, PyDict>,
        known: &mut Known<'py>,
    ) -> PyResult<Option<Rules<'py>>> {
        let Some(found) = rules.get_item(game_id)? else {
            return Ok(None);
        };
        let address = found.as_ptr() as usize;
        if let Some((_, read)) = known.get(&address) {
            return Ok(read.clone());
        }
        let read = read_rules(&found)?;
        // Held with its answer: `slow` may clear the dict, and a freed address be reused.
        known.insert(address, (found, read.clone()));
        Ok(read)
    }

    /// `_check_identity`: both ids 1 to `max_id_length` characters, the key the player's UTF-8.
    fn identity(&self, record: &Bound<'_, PyTuple>, event: &Bound<'_, PyTuple>) -> PyResult<bool> {
        let f = &self.fields;
        let limit = self.max_id_length;
        let event_id = event.get_item(f.event_id)?;
        let player = event.get_item(f.player_id)?;
        let (Ok(event_id), Ok(player)) = (event_id.cast::<PyString>(), player.cast::<PyString>())
        else {
            return Ok(false);
        };
        let (ids, players) = (event_id.len()?, player.len()?);
        if !(0 < ids && ids <= limit && 0 < players && players <= limit) {
            return Ok(false);
        }
        let key = record.get_item(f.key)?;
        let (Ok(key), Ok(player)) = (key.cast::<PyBytes>(), player.to_str()) else {
            return Ok(false);
        };
        Ok(key.as_bytes() == player.as_bytes())
    }
}

/// A `_GameRules` read as integers; None when one is not (Python judges those games).
fn read_rules<'py>(found: &Bound<'py, PyAny>) -> PyResult<Option<Rules<'py>>> {
    let py = found.py();
    let game = found.getattr(intern!(py, "game"))?;
    let by_day = found.getattr(intern!(py, "_by_day"))?;
    let read = (
        game.getattr(intern!(py, "max_score"))?.extract::<i64>(),
        game.getattr(intern!(py, "future_skew_ms"))?
            .extract::<i64>(),
        found.getattr(intern!(py, "ts_low"))?.extract::<i64>(),
        found.getattr(intern!(py, "ts_high"))?.extract::<i64>(),
        by_day.cast_into::<PyDict>(),
    );
    let (Ok(max_score), Ok(future_skew_ms), Ok(ts_low), Ok(ts_high), Ok(by_day)) = read else {
        return Ok(None);
    };
    Ok(Some(Rules {
        game,
        max_score,
        future_skew_ms,
        ts_low,
        ts_high,
        by_day,
    }))
}
