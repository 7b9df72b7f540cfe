//! The per-event fold of one piece, compiled: the job's hot loop.
//!
//! `domain/planner/fold.py` is the reference (`_records` and `score`) and
//! holds the rules: per record, the dedupe rule over neighbouring record-time
//! buckets, the player's values as the piece starts, and each board's new
//! value under the game's operator. This twin walks the same records over the
//! same Python dicts and sets (the `Fold` state stays in Python) and leaves
//! them exactly as the reference does; what happens rarely (a board's first
//! record in the batch, a window's first in the piece, a tournament attempt, a
//! RETRACT, an erasure) calls the `Fold`'s own Python methods. In Python the
//! loop cost about 12 µs per record on a batch of new players (three boards
//! each); tests/unit/test_native_planner.py compares the two plan for plan.

use std::collections::HashMap;

use pyo3::exceptions::{PyKeyError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PySet, PyString, PyTuple};

use crate::tuples;

/// `score`'s answer: the record changed state, an `INCR` total was capped.
const CHANGED: u32 = 1;
const CAPPED: u32 = 2;

/// How a game combines a score with a value (`domain.games.Operator`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Best,
    Incr,
    Set,
    /// Not one of the three: every board of the game asks Python.
    Other,
}

/// Which of the two packed-value rules a board uses (`Board.apply`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// `operators.apply_composite`: highest wins.
    Descending,
    /// `operators.apply_composite_asc`: lowest wins.
    Ascending,
    /// Anything else: called as Python.
    Other,
}

/// Positions of the fields the fold and the scan read in a `ScoreEvent` and an `Accepted`.
pub(crate) struct Fields {
    pub(crate) event_id: usize,
    pub(crate) game_id: usize,
    pub(crate) player_id: usize,
    pub(crate) score: usize,
    pub(crate) ts_ms: usize,
    pub(crate) kind: usize,
    pub(crate) metadata: usize,
    pub(crate) record_ts_ms: usize,
    pub(crate) event: usize,
    pub(crate) game: usize,
    pub(crate) windows: usize,
}

impl Fields {
    pub(crate) fn new(event: &[String], record: &[String]) -> PyResult<Self> {
        let at = tuples::position;
        Ok(Self {
            event_id: at(event, "event_id")?,
            game_id: at(event, "game_id")?,
            player_id: at(event, "player_id")?,
            score: at(event, "score")?,
            ts_ms: at(event, "ts_ms")?,
            kind: at(event, "kind")?,
            metadata: at(event, "metadata")?,
            record_ts_ms: at(record, "record_ts_ms")?,
            event: at(record, "event")?,
            game: at(record, "game")?,
            windows: at(record, "windows")?,
        })
    }
}

/// The fold of `domain/planner/fold.py`, built once with the constants it compares against.
#[pyclass(frozen, module = "lb_native")]
pub struct FoldKernel {
    retract: Py<PyAny>,
    erase_all: Py<PyAny>,
    best: Py<PyAny>,
    incr: Py<PyAny>,
    set: Py<PyAny>,
    apply_descending: Py<PyAny>,
    apply_ascending: Py<PyAny>,
    saturates: Py<PyAny>,
    fields: Fields,
}

#[pymethods]
impl FoldKernel {
    /// `retract` is `EventKind.RETRACT`, `erase_all` the erasure's game id,
    /// `operators` `(BEST, INCR, SET)`, `rules` `(apply_composite,
    /// apply_composite_asc)`, `saturates` `saturates_composite`; the field
    /// names are `ScoreEvent._fields` and `Accepted._fields`.
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(
        retract: Py<PyAny>,
        erase_all: Py<PyAny>,
        operators: (Py<PyAny>, Py<PyAny>, Py<PyAny>),
        rules: (Py<PyAny>, Py<PyAny>),
        saturates: Py<PyAny>,
        event_fields: Vec<String>,
        record_fields: Vec<String>,
    ) -> PyResult<Self> {
        let (best, incr, set) = operators;
        Ok(Self {
            retract,
            erase_all,
            best,
            incr,
            set,
            apply_descending: rules.0,
            apply_ascending: rules.1,
            saturates,
            fields: Fields::new(&event_fields, &record_fields)?,
        })
    }

    /// Folds `piece` into `state` (a `Fold`) as `fold._records` does, board
    /// events into `write`; answers `(applied, noop, duplicates, saturated)`.
    fn fold<'py>(
        &self,
        state: &Bound<'py, PyAny>,
        piece: &Bound<'py, PyAny>,
        write: &Bound<'py, PyAny>,
    ) -> PyResult<(u64, u64, u64, u64)> {
        let mut run = Run::new(self, state, write)?;
        for rec in piece.try_iter()? {
            run.record(rec?.cast_into::<PyTuple>()?)?;
        }
        Ok((run.applied, run.noop, run.duplicates, run.saturated))
    }
}

/// What the fold needs of one board, read once per call.
#[derive(Clone)]
struct BoardInfo<'py> {
    board: Bound<'py, PyAny>,
    key: Bound<'py, PyAny>,
    window_id: Bound<'py, PyAny>,
    origin_ms: i128,
    unit_ms: i128,
    slots: i128,
    ascending: bool,
    stop: bool,
    tournament: bool,
    rule: Rule,
}

/// What the fold needs of one game.
#[derive(Clone)]
struct GameInfo<'py> {
    op: Op,
    op_object: Bound<'py, PyAny>,
    max_score: i128,
    max_score_object: Bound<'py, PyAny>,
}

/// One call's working state: the `Fold`'s dicts, and what was read of its objects.
struct Run<'py, 'k> {
    kernel: &'k FoldKernel,
    py: Python<'py>,
    state: Bound<'py, PyAny>,
    write: Bound<'py, PyAny>,
    horizon_ms: i64,
    tag: Bound<'py, PyAny>,
    entries: Bound<'py, PyAny>,
    tally: Bound<'py, PyAny>,
    working: Bound<'py, PyDict>,
    initial: Bound<'py, PyDict>,
    carried: Bound<'py, PyDict>,
    tokens: Bound<'py, PyDict>,
    written: Bound<'py, PyDict>,
    seen_read: Bound<'py, PyDict>,
    scores_read: Bound<'py, PyDict>,
    boards: Bound<'py, PyDict>,
    touched: Bound<'py, PySet>,
    setters: Bound<'py, PyDict>,
    token_of: Option<Bound<'py, PyAny>>,
    /// Keyed by the object's address; each entry holds the object, so no address is reused.
    board_info: HashMap<usize, BoardInfo<'py>>,
    game_info: HashMap<usize, (Bound<'py, PyAny>, GameInfo<'py>)>,
    window_ids: HashMap<usize, (Bound<'py, PyAny>, Bound<'py, PyAny>)>,
    /// The current bucket: its write dict and every dict a copy may sit in.
    bucket: Option<i64>,
    ids: Option<Bound<'py, PyDict>>,
    known: Vec<Bound<'py, PyDict>>,
    annotated: bool,
    applied: u64,
    noop: u64,
    duplicates: u64,
    saturated: u64,
}

fn dict<'py>(
    state: &Bound<'py, PyAny>,
    name: &Bound<'py, PyString>,
) -> PyResult<Bound<'py, PyDict>> {
    Ok(state.getattr(name)?.cast_into::<PyDict>()?)
}

impl<'py, 'k> Run<'py, 'k> {
    fn new(
        kernel: &'k FoldKernel,
        state: &Bound<'py, PyAny>,
        write: &Bound<'py, PyAny>,
    ) -> PyResult<Self> {
        let py = state.py();
        let horizon_ms: i64 = state.getattr(intern!(py, "horizon_ms"))?.extract()?;
        if horizon_ms <= 0 {
            return Err(PyValueError::new_err(format!(
                "the dedupe horizon must be positive, got {horizon_ms} ms"
            )));
        }
        Ok(Self {
            kernel,
            py,
            state: state.clone(),
            write: write.clone(),
            horizon_ms,
            tag: state
                .getattr(intern!(py, "keys"))?
                .getattr(intern!(py, "tag"))?,
            entries: state.getattr(intern!(py, "entries"))?,
            tally: state.getattr(intern!(py, "tally"))?,
            working: dict(state, intern!(py, "working"))?,
            initial: dict(state, intern!(py, "initial"))?,
            carried: dict(state, intern!(py, "carried"))?,
            tokens: dict(state, intern!(py, "tokens"))?,
            written: dict(state, intern!(py, "written"))?,
            seen_read: dict(state, intern!(py, "seen_read"))?,
            scores_read: dict(state, intern!(py, "scores_read"))?,
            boards: dict(state, intern!(py, "boards"))?,
            touched: state
                .getattr(intern!(py, "touched"))?
                .cast_into::<PySet>()?,
            setters: dict(state, intern!(py, "setters"))?,
            token_of: None,
            board_info: HashMap::new(),
            game_info: HashMap::new(),
            window_ids: HashMap::new(),
            bucket: None,
            ids: None,
            known: Vec::new(),
            annotated: false,
            applied: 0,
            noop: 0,
            duplicates: 0,
            saturated: 0,
        })
    }

    /// One record of the piece (`_records`' loop body).
    fn record(&mut self, rec: Bound<'py, PyTuple>) -> PyResult<()> {
        let py = self.py;
        let f = &self.kernel.fields;
        let event = rec.get_item(f.event)?.cast_into::<PyTuple>()?;
        let kind = event.get_item(f.kind)?;
        let player = event.get_item(f.player_id)?;
        let retract = kind.is(self.kernel.retract.bind(py));
        if retract
            && event
                .get_item(f.game_id)?
                .eq(self.kernel.erase_all.bind(py))?
        {
            // An erasure: neither deduplicated nor counted (see `_records`).
            let mine = self.mine(&player)?;
            self.state
                .call_method1(intern!(py, "erase"), (&player, mine))?;
            return Ok(());
        }
        let record_ts_object = rec.get_item(f.record_ts_ms)?;
        let record_ts: i64 = record_ts_object.extract()?;
        let bucket = record_ts.div_euclid(self.horizon_ms);
        if self.bucket != Some(bucket) {
            self.sources(bucket)?;
        }
        let event_id = event.get_item(f.event_id)?;
        let token = match self.tokens.get_item(&event_id)? {
            Some(token) if !token.is_none() => token,
            _ => self.token_of()?.call1((&event_id,))?,
        };
        if self.seen_within(&token, record_ts)? {
            self.duplicates += 1;
            return Ok(());
        }
        let ids = self.ids.as_ref().expect("set with the bucket");
        ids.set_item(&token, &record_ts_object)?;
        let mine = self.mine(&player)?;
        if retract {
            self.state
                .call_method1(intern!(py, "retract"), (&player, mine))?;
            self.applied += 1;
            return Ok(());
        }
        let before = self
            .initial
            .get_item(&player)?
            .ok_or_else(|| PyKeyError::new_err(player.clone().unbind()))?
            .cast_into::<PyDict>()?;
        let outcome = self.score(&rec, &event, &player, &before, &mine)?;
        if outcome & CHANGED != 0 {
            self.applied += 1;
        } else {
            self.noop += 1;
        }
        self.saturated += u64::from(outcome >> 1);
        Ok(())
    }

    /// The layout's tokenizer, asked of the state once (only a token the lookups missed needs it).
    fn token_of(&mut self) -> PyResult<&Bound<'py, PyAny>> {
        if self.token_of.is_none() {
            let py = self.py;
            let layout = self.state.getattr(intern!(py, "layout"))?;
            self.token_of = Some(layout.getattr(intern!(py, "tokenizer"))?);
        }
        Ok(self.token_of.as_ref().expect("just set"))
    }

    /// `dedupe.sources`: the bucket's write dict and every non-empty dict its copy may sit in.
    fn sources(&mut self, bucket: i64) -> PyResult<()> {
        let py = self.py;
        let key = bucket.into_pyobject(py)?;
        let ids = match self.written.get_item(&key)? {
            Some(ids) => ids.cast_into::<PyDict>()?,
            None => {
                let ids = PyDict::new(py);
                self.written.set_item(&key, &ids)?;
                ids
            }
        };
        let mut known = vec![ids.clone()];
        let (below, above) = (bucket - 1, bucket + 1);
        let near = [
            (&self.seen_read, bucket),
            (&self.written, below),
            (&self.written, above),
            (&self.seen_read, below),
            (&self.seen_read, above),
        ];
        for (dicts, at) in near {
            if let Some(got) = dicts.get_item(at)? {
                let got = got.cast_into::<PyDict>()?;
                if !got.is_empty() {
                    known.push(got);
                }
            }
        }
        self.bucket = Some(bucket);
        self.ids = Some(ids);
        self.known = known;
        Ok(())
    }

    /// `dedupe.seen_within`: an applied copy of `token` within the horizon, either side.
    fn seen_within(&self, token: &Bound<'py, PyAny>, record_ts: i64) -> PyResult<bool> {
        let horizon = i128::from(self.horizon_ms);
        for seen in &self.known {
            if let Some(stored) = seen.get_item(token)? {
                if stored.is_none() {
                    continue;
                }
                let stored = match stored.extract::<i64>() {
                    Ok(small) => i128::from(small),
                    Err(_) => stored.extract::<i128>()?,
                };
                let gap = i128::from(record_ts) - stored;
                if -horizon <= gap && gap <= horizon {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// The player's working values, started (`Fold.start`) at their first record in the piece.
    fn mine(&mut self, player: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
        if let Some(mine) = self.working.get_item(player)? {
            return Ok(mine.cast_into::<PyDict>()?);
        }
        let py = self.py;
        let mut cached = None;
        if !self.carried.is_empty() {
            cached = self.carried.get_item(player)?.filter(|c| !c.is_none());
        }
        if cached.is_none() {
            let key = PyTuple::new(py, [&self.tag, player])?;
            let got = self.entries.call_method1(intern!(py, "get"), (key,))?;
            cached = Some(got).filter(|c| !c.is_none());
        }
        let before = match cached {
            Some(cached) => cached.cast_into::<PyDict>()?.copy()?,
            None => PyDict::new(py),
        };
        self.initial.set_item(player, &before)?;
        let mine = before.copy()?;
        self.working.set_item(player, &mine)?;
        Ok(mine)
    }

    /// `fold.score`: a SCORE record on each board it scores on; `CHANGED` and/or `CAPPED`.
    fn score(
        &mut self,
        rec: &Bound<'py, PyTuple>,
        event: &Bound<'py, PyTuple>,
        player: &Bound<'py, PyAny>,
        before: &Bound<'py, PyDict>,
        mine: &Bound<'py, PyDict>,
    ) -> PyResult<u32> {
        let py = self.py;
        let f = &self.kernel.fields;
        let game = self.game(rec.get_item(f.game)?)?;
        let value_object = event.get_item(f.score)?;
        let value = i128::from(value_object.extract::<i64>()?);
        let ts = i128::from(event.get_item(f.ts_ms)?.extract::<i64>()?);
        let meta = event.get_item(f.metadata)?;
        if !meta.is_none() && !self.annotated {
            self.state.setattr(intern!(py, "annotated"), true)?;
            self.annotated = true;
        }
        let windows = rec.get_item(f.windows)?;
        let mut out = 0;
        for window in windows.try_iter()? {
            let window = window?;
            let board = self.board(rec, &window)?;
            if board.tournament {
                let counted = self
                    .tally
                    .call_method1(intern!(py, "attempt"), (&board.board, player))?;
                if !counted.is_truthy()? {
                    continue; // refused (counted): this board only, not the others
                }
                out |= CHANGED;
            }
            let window_id = &board.window_id;
            if !self.touched.contains(window_id)? {
                self.state
                    .call_method1(intern!(py, "touch"), (&board.board, &self.write))?;
            }
            let current = match mine.get_item(window_id)? {
                Some(current) => current,
                None => {
                    let key = PyTuple::new(py, [&board.key, player])?;
                    let read = match self.scores_read.get_item(key)? {
                        Some(read) => read,
                        None => py.None().into_bound(py),
                    };
                    before.set_item(window_id, &read)?;
                    mine.set_item(window_id, &read)?;
                    read
                }
            };
            let slot = if board.unit_ms != 0 {
                floor_div(ts - board.origin_ms, board.unit_ms)
            } else {
                0
            };
            let step = Step {
                game: &game,
                board: &board,
                current: &current,
                value,
                value_object: &value_object,
                slot,
            };
            let (new, capped) = match step.native()? {
                Some(done) => done,
                None => step.python(self.kernel)?,
            };
            if capped {
                out |= CAPPED;
            }
            let Some(new) = new else {
                if game.op == Op::Best && board.stop {
                    // Windows come narrowest first and every wider board
                    // contains this one, so its best is never below: done.
                    break;
                }
                continue;
            };
            mine.set_item(window_id, new)?;
            self.setters
                .set_item(PyTuple::new(py, [window_id, player])?, &meta)?;
            out |= CHANGED;
        }
        Ok(out)
    }

    /// The board of `window` (`Fold.board` the first time the batch meets it), read once.
    fn board(
        &mut self,
        rec: &Bound<'py, PyTuple>,
        window: &Bound<'py, PyAny>,
    ) -> PyResult<BoardInfo<'py>> {
        let py = self.py;
        let address = window.as_ptr() as usize;
        let window_id = match self.window_ids.get(&address) {
            Some((_, id)) => id.clone(),
            None => {
                let id = window.getattr(intern!(py, "id"))?;
                self.window_ids
                    .insert(address, (window.clone(), id.clone()));
                id
            }
        };
        let board = match self.boards.get_item(&window_id)? {
            Some(board) => board,
            None => self
                .state
                .call_method1(intern!(py, "board"), (rec, window))?,
        };
        let address = board.as_ptr() as usize;
        if !self.board_info.contains_key(&address) {
            let info = self.read_board(board)?;
            self.board_info.insert(address, info);
        }
        Ok(self.board_info[&address].clone())
    }

    fn read_board(&self, board: Bound<'py, PyAny>) -> PyResult<BoardInfo<'py>> {
        let py = self.py;
        let apply = board.getattr(intern!(py, "apply"))?;
        let rule = if apply.is(self.kernel.apply_descending.bind(py)) {
            Rule::Descending
        } else if apply.is(self.kernel.apply_ascending.bind(py)) {
            Rule::Ascending
        } else {
            Rule::Other
        };
        Ok(BoardInfo {
            key: board.getattr(intern!(py, "key"))?,
            window_id: board.getattr(intern!(py, "window_id"))?,
            origin_ms: board.getattr(intern!(py, "origin_ms"))?.extract()?,
            unit_ms: board.getattr(intern!(py, "unit_ms"))?.extract()?,
            slots: board.getattr(intern!(py, "slots"))?.extract()?,
            ascending: board.getattr(intern!(py, "ascending"))?.is_truthy()?,
            stop: board.getattr(intern!(py, "stop"))?.is_truthy()?,
            tournament: !board.getattr(intern!(py, "tournament"))?.is_none(),
            rule,
            board,
        })
    }

    /// The game's operator and cap, read once per game object.
    fn game(&mut self, game: Bound<'py, PyAny>) -> PyResult<GameInfo<'py>> {
        let address = game.as_ptr() as usize;
        if let Some((_, info)) = self.game_info.get(&address) {
            return Ok(info.clone());
        }
        let py = self.py;
        let k = self.kernel;
        let op_object = game.getattr(intern!(py, "operator"))?;
        let op = if op_object.is(k.best.bind(py)) {
            Op::Best
        } else if op_object.is(k.incr.bind(py)) {
            Op::Incr
        } else if op_object.is(k.set.bind(py)) {
            Op::Set
        } else {
            Op::Other
        };
        let max_score_object = game.getattr(intern!(py, "max_score"))?;
        let info = GameInfo {
            op,
            max_score: max_score_object.extract()?,
            op_object,
            max_score_object,
        };
        let found = info.clone();
        self.game_info.insert(address, (game, info));
        Ok(found)
    }
}

/// One event on one board: the new value (None: unchanged) and whether it was capped.
struct Step<'a, 'py> {
    game: &'a GameInfo<'py>,
    board: &'a BoardInfo<'py>,
    current: &'a Bound<'py, PyAny>,
    value: i128,
    value_object: &'a Bound<'py, PyAny>,
    slot: i128,
}

type Outcome<'py> = (Option<Bound<'py, PyAny>>, bool);

impl<'py> Step<'_, 'py> {
    /// The step in machine integers, or None where Python must take it (an
    /// unknown operator or rule, no slots, a value beyond 64 bits).
    fn native(&self) -> PyResult<Option<Outcome<'py>>> {
        let (game, board) = (self.game, self.board);
        if game.op == Op::Other || board.rule == Rule::Other || board.slots <= 0 {
            return Ok(None);
        }
        let current = if self.current.is_none() {
            None
        } else {
            match self.current.extract::<i64>() {
                Ok(v) => Some(i128::from(v)),
                Err(_) => return Ok(None),
            }
        };
        let capped = game.op == Op::Incr
            && saturates(
                current,
                self.value,
                board.slots,
                game.max_score,
                board.ascending,
            );
        let new = match board.rule {
            Rule::Ascending => apply_ascending(
                game.op,
                current,
                self.value,
                self.slot,
                board.slots,
                game.max_score,
            ),
            _ => apply_descending(
                game.op,
                current,
                self.value,
                self.slot,
                board.slots,
                game.max_score,
            ),
        };
        if Some(new) == current {
            return Ok(Some((None, capped)));
        }
        let py = self.current.py();
        let new = match i64::try_from(new) {
            Ok(small) => small.into_pyobject(py)?.into_any(),
            Err(_) => new.into_pyobject(py)?.into_any(),
        };
        Ok(Some((Some(new), capped)))
    }

    /// The step through the Python rules themselves.
    fn python(&self, kernel: &FoldKernel) -> PyResult<Outcome<'py>> {
        let (game, board) = (self.game, self.board);
        let py = self.current.py();
        let slot = self.slot.into_pyobject(py)?;
        let slots = board.slots.into_pyobject(py)?;
        let capped = game.op == Op::Incr
            && kernel
                .saturates
                .bind(py)
                .call1((
                    self.current,
                    self.value_object,
                    &slots,
                    &game.max_score_object,
                    board.ascending,
                ))?
                .is_truthy()?;
        let apply = board.board.getattr(intern!(py, "apply"))?;
        let new = apply.call1((
            &game.op_object,
            self.current,
            self.value_object,
            slot,
            slots,
            &game.max_score_object,
        ))?;
        if new.eq(self.current)? {
            return Ok((None, capped));
        }
        Ok((Some(new), capped))
    }
}

/// Python's `a // b`.
fn floor_div(a: i128, b: i128) -> i128 {
    let q = a / b;
    if a % b != 0 && ((a < 0) != (b < 0)) {
        q - 1
    } else {
        q
    }
}

/// `operators.saturates_composite`: adding `score` would pass `max_score`.
fn saturates(
    current: Option<i128>,
    score: i128,
    slots: i128,
    max_score: i128,
    ascending: bool,
) -> bool {
    let Some(current) = current else {
        return false;
    };
    let stored = current.div_euclid(slots);
    let total = if ascending {
        max_score - stored
    } else {
        stored
    };
    total + score > max_score
}

/// `operators.apply_composite` on machine integers (slots > 0).
fn apply_descending(
    op: Op,
    current: Option<i128>,
    score: i128,
    slot: i128,
    slots: i128,
    max_score: i128,
) -> i128 {
    let new = score * slots + (slots - 1 - slot);
    let Some(current) = current else {
        return new;
    };
    let (cur_score, rest) = (current.div_euclid(slots), current.rem_euclid(slots));
    let cur_slot = slots - 1 - rest;
    match op {
        Op::Best => new.max(current),
        Op::Incr => {
            let total = (cur_score + score).min(max_score);
            total * slots + (slots - 1 - cur_slot.max(slot))
        }
        _ => {
            if slot >= cur_slot {
                new
            } else {
                current
            }
        }
    }
}

/// `operators.apply_composite_asc`: a lowest-wins board, whose values hold `max_score - score`.
fn apply_ascending(
    op: Op,
    current: Option<i128>,
    score: i128,
    slot: i128,
    slots: i128,
    max_score: i128,
) -> i128 {
    if let (Op::Incr, Some(current)) = (op, current) {
        let (cur_stored, rest) = (current.div_euclid(slots), current.rem_euclid(slots));
        let cur_slot = slots - 1 - rest;
        let stored = if cur_stored > score {
            cur_stored - score
        } else {
            0
        };
        return stored * slots + (slots - 1 - cur_slot.max(slot));
    }
    apply_descending(op, current, max_score - score, slot, slots, max_score)
}
