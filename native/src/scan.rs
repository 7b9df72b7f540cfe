//! The planner's first pass over one group's records, compiled.
//!
//! `domain/planner/scan.py` is the reference (`_records`): per record its
//! dedupe token under its record-time bucket, and per board the player's value
//! when the planner's cache cannot answer it, a tournament's counts through
//! the planner's own callable. This twin fills the same dicts, lists and set in
//! the same order and calls the same callables (a board once per window and
//! call: one game per group, so a window names one board).

use std::collections::HashMap;

use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PySet, PyTuple};

use crate::fold::Fields;

/// The scan of `domain/planner/scan.py`, built once with the constants it compares against.
#[pyclass(frozen, module = "lb_native")]
pub struct ScanKernel {
    retract: Py<PyAny>,
    erase_all: Py<PyAny>,
    tournament: Py<PyAny>,
    fields: Fields,
}

/// A window as the scan needs it: a tournament's or not, its id, its board's key once asked.
struct WindowInfo<'py> {
    window: Bound<'py, PyAny>,
    tournament: bool,
    id: Bound<'py, PyAny>,
    key: Option<Bound<'py, PyAny>>,
}

#[pymethods]
impl ScanKernel {
    /// `retract` is `EventKind.RETRACT`, `erase_all` the erasure's game id,
    /// `tournament` `WindowKind.TOURNAMENT`; the field names are
    /// `ScoreEvent._fields` and `Accepted._fields`.
    #[new]
    fn new(
        retract: Py<PyAny>,
        erase_all: Py<PyAny>,
        tournament: Py<PyAny>,
        event_fields: Vec<String>,
        record_fields: Vec<String>,
    ) -> PyResult<Self> {
        Ok(Self {
            retract,
            erase_all,
            tournament,
            fields: Fields::new(&event_fields, &record_fields)?,
        })
    }

    /// Scans `records` into `out` (a `Scan`) as `scan._records` does, their tokens into `tokens`.
    fn scan<'py>(
        &self,
        out: &Bound<'py, PyAny>,
        records: &Bound<'py, PyAny>,
        tokens: &Bound<'py, PyDict>,
        sources: &Bound<'py, PyAny>,
    ) -> PyResult<()> {
        let py = out.py();
        let mut run = Run::new(self, out, tokens, sources)?;
        for rec in records.try_iter()? {
            run.record(rec?.cast_into::<PyTuple>()?)?;
        }
        if run.retracts {
            out.setattr(intern!(py, "retracts"), true)?;
        }
        Ok(())
    }
}

/// One call's state: the `Scan`'s collections and the `Sources`' callables.
struct Run<'py, 'k> {
    kernel: &'k ScanKernel,
    py: Python<'py>,
    buckets: Bound<'py, PyDict>,
    missing: Bound<'py, PyDict>,
    counts: Bound<'py, PyDict>,
    asked: Bound<'py, PySet>,
    tokens: Bound<'py, PyDict>,
    tag: Bound<'py, PyAny>,
    horizon_ms: i64,
    token_of: Bound<'py, PyAny>,
    entries: Bound<'py, PyAny>,
    fresh: bool,
    absent: Option<Bound<'py, PyAny>>,
    board_of: Bound<'py, PyAny>,
    counts_of: Bound<'py, PyAny>,
    /// Keyed by the window's address; each entry holds the window, so no address is reused.
    windows: HashMap<usize, WindowInfo<'py>>,
    bucket: Option<i64>,
    ids: Option<Bound<'py, PyList>>,
    retracts: bool,
}

impl<'py, 'k> Run<'py, 'k> {
    fn new(
        kernel: &'k ScanKernel,
        out: &Bound<'py, PyAny>,
        tokens: &Bound<'py, PyDict>,
        sources: &Bound<'py, PyAny>,
    ) -> PyResult<Self> {
        let py = out.py();
        let horizon_ms: i64 = sources.getattr(intern!(py, "horizon_ms"))?.extract()?;
        if horizon_ms <= 0 {
            return Err(PyValueError::new_err(format!(
                "the dedupe horizon must be positive, got {horizon_ms} ms"
            )));
        }
        let absent = sources.getattr(intern!(py, "absent"))?;
        Ok(Self {
            kernel,
            py,
            buckets: out.getattr(intern!(py, "buckets"))?.cast_into()?,
            missing: out.getattr(intern!(py, "missing"))?.cast_into()?,
            counts: out.getattr(intern!(py, "counts"))?.cast_into()?,
            asked: out.getattr(intern!(py, "asked"))?.cast_into()?,
            tokens: tokens.clone(),
            tag: sources.getattr(intern!(py, "tag"))?,
            horizon_ms,
            token_of: sources.getattr(intern!(py, "token_of"))?,
            entries: sources.getattr(intern!(py, "entries"))?,
            fresh: sources.getattr(intern!(py, "fresh"))?.is_truthy()?,
            absent: if absent.is_none() { None } else { Some(absent) },
            board_of: sources.getattr(intern!(py, "board_of"))?,
            counts_of: sources.getattr(intern!(py, "counts_of"))?,
            windows: HashMap::new(),
            bucket: None,
            ids: None,
            retracts: false,
        })
    }

    /// One record (`_records`' loop body).
    fn record(&mut self, rec: Bound<'py, PyTuple>) -> PyResult<()> {
        let py = self.py;
        let f = &self.kernel.fields;
        let event = rec.get_item(f.event)?.cast_into::<PyTuple>()?;
        let retract = event.get_item(f.kind)?.is(self.kernel.retract.bind(py));
        if retract
            && event
                .get_item(f.game_id)?
                .eq(self.kernel.erase_all.bind(py))?
        {
            self.retracts = true; // an erasure: the registry, no dedupe id
            return Ok(());
        }
        let record_ts: i64 = rec.get_item(f.record_ts_ms)?.extract()?;
        let bucket = record_ts.div_euclid(self.horizon_ms);
        if self.bucket != Some(bucket) {
            self.bucket = Some(bucket);
            self.ids = Some(self.bucket_ids(bucket)?);
        }
        let event_id = event.get_item(f.event_id)?;
        let token = self.token_of.call1((&event_id,))?;
        self.tokens.set_item(&event_id, &token)?;
        self.ids
            .as_ref()
            .expect("set with the bucket")
            .append(&token)?;
        if retract {
            self.retracts = true;
            return Ok(());
        }
        let player = event.get_item(f.player_id)?;
        let key = PyTuple::new(py, [&self.tag, &player])?;
        let known = self.entries.call_method1(intern!(py, "get"), (key,))?;
        let known = if known.is_none() {
            None
        } else {
            Some(known.cast_into::<PyDict>()?)
        };
        // Fresh: judged after the get, which may itself have evicted someone.
        let ask = !self.fresh || self.entries.getattr(intern!(py, "evicted"))?.is_truthy()?;
        let windows = rec.get_item(f.windows)?;
        for window in windows.try_iter()? {
            self.window(&rec, &window?, &player, known.as_ref(), ask)?;
        }
        Ok(())
    }

    /// `buckets.setdefault(bucket, [])`.
    fn bucket_ids(&self, bucket: i64) -> PyResult<Bound<'py, PyList>> {
        let key = bucket.into_pyobject(self.py)?;
        if let Some(ids) = self.buckets.get_item(&key)? {
            return Ok(ids.cast_into::<PyList>()?);
        }
        let ids = PyList::empty(self.py);
        self.buckets.set_item(&key, &ids)?;
        Ok(ids)
    }

    /// One window of a record: its tournament counts, then the player's value if unknown.
    fn window(
        &mut self,
        rec: &Bound<'py, PyTuple>,
        window: &Bound<'py, PyAny>,
        player: &Bound<'py, PyAny>,
        known: Option<&Bound<'py, PyDict>>,
        ask: bool,
    ) -> PyResult<()> {
        let py = self.py;
        let address = window.as_ptr() as usize;
        if !self.windows.contains_key(&address) {
            let kind = window.getattr(intern!(py, "kind"))?;
            let info = WindowInfo {
                window: window.clone(),
                tournament: kind.is(self.kernel.tournament.bind(py)),
                id: window.getattr(intern!(py, "id"))?,
                key: None,
            };
            self.windows.insert(address, info);
        }
        let info = &self.windows[&address];
        if info.tournament {
            self.counts_of
                .call1((rec, &info.window, &self.asked, &self.counts))?;
        }
        if !ask {
            return Ok(());
        }
        if let Some(known) = known {
            if known.contains(&info.id)? {
                return Ok(());
            }
        }
        let key = match &info.key {
            Some(key) => key.clone(),
            None => {
                let board = self.board_of.call1((rec, window))?;
                let key = board.getattr(intern!(py, "key"))?;
                if let Some(info) = self.windows.get_mut(&address) {
                    info.key = Some(key.clone());
                }
                key
            }
        };
        if let Some(absent) = &self.absent {
            if absent.call1((&key, player))?.is_truthy()? {
                return Ok(());
            }
        }
        let pair = PyTuple::new(py, [&key, player])?;
        if self.asked.contains(&pair)? {
            return Ok(());
        }
        self.asked.add(pair)?;
        match self.missing.get_item(&key)? {
            Some(players) => players.cast_into::<PyList>()?.append(player),
            None => self.missing.set_item(&key, PyList::new(py, [player])?),
        }
    }
}
