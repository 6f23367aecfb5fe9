//! Hosting Python envs in a worker (or in the main process, for a pool's inline share: the same
//! host, built by [`build_for`]): the step loop is Rust, calling each env through PyO3 and
//! writing its observation straight into the env's rows of the shared slot, its reward,
//! terminated and truncated into theirs.
//!
//! Flat observations are copied from Rust ([`crate::obs_copy`]) or by NumPy assignment;
//! Dict and Tuple spaces leaf by leaf, Text leaves through `ringenv._obs_writer`; spaces with no
//! fixed layout (and a split Dict's keys of none) travel pickled in the completion's message.
//! Actions come from the slot's action rows or pickled; reset seeds from the seed rows, or
//! pickled with the options for a seed of `2**64` or more.
//!
//! Autoreset follows the mode given at start-up, as Gymnasium's `AsyncVectorEnv` worker does.
//! Infos go as one typed message ([`crate::infos`]) where they can, else pickled; the inline
//! share hands its message over as Python objects ([`Handover`]). An env's exception becomes a
//! [`RemoteError`] built by `ringenv._worker._describe_exception`.

use crate::obs_copy::{Leaves, Row, Walk};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple, PyType};
use ringenv_runtime::{Array, RemoteError, Segment, SlotView, WorkerEndpoint};
use ringenv_worker::host::{seed_of, write_step, Autoreset, EnvHost};
use std::ops::Range;
use std::sync::{Arc, Mutex};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    NextStep,
    SameStep,
    Disabled,
}

/// Where observations go.
enum ObsTarget {
    /// `rows[slot][k]`: env k's row, written by [`Row::copy_from`], else into its view by NumPy
    /// assignment once the shape is checked against `shape`; `space` is named in errors.
    Rows { rows: Vec<Vec<Row>>, shape: Py<PyAny>, space: Py<PyAny> },
    /// A Dict or Tuple space: `leaves[slot][k]` holds env k's leaves, written along `walk`.
    /// For a split Dict, `pickled` names the keys whose values go into the completion's message
    /// instead (a `dict` of them per env), `walk` covering the others.
    Tree { walk: Walk, leaves: Vec<Vec<Leaves>>, pickled: Option<Vec<Py<PyAny>>> },
    /// Pickled into the completion's message.
    Pickled,
}

/// What `ringenv._worker._build` returns.
type Built = (
    Vec<Py<PyAny>>,
    Option<Vec<Vec<Py<PyAny>>>>,
    bool,
    Option<Vec<Py<PyAny>>>,
    Option<Vec<Py<PyAny>>>,
    bool,
    String,
    Py<PyAny>,
);

/// Where the inline share leaves its message (the tuple a worker's message unpickles to) for
/// the pool's `wait` or `recv` to take out.
pub type Handover = Arc<Mutex<Option<Py<PyAny>>>>;

thread_local! {
    /// A `KeyboardInterrupt` or `SystemExit` (Ctrl-C, `sys.exit` in a signal handler) raised in
    /// an env's `reset` or `step` hosted in this thread: in the main process that is the inline
    /// share's, which [`take_interrupt`] hands to the waiting call to raise at once.
    static INTERRUPT: std::cell::RefCell<Option<PyErr>> = const { std::cell::RefCell::new(None) };
}

/// The `KeyboardInterrupt` or `SystemExit` the last command hosted in this thread stopped on, if
/// any (see [`PyEnvs`]'s loops).
pub fn take_interrupt() -> Option<PyErr> {
    INTERRUPT.with(|i| i.borrow_mut().take())
}

/// An env's exception that is not an `Exception` (`KeyboardInterrupt`, `SystemExit`): the loop
/// stops there and the exception is kept for [`take_interrupt`].
fn interrupted(py: Python<'_>, e: PyErr, env_ids: &Range<usize>, id: usize) -> RemoteError {
    let envs = ringenv_runtime::EnvIds(env_ids);
    keep_interrupt(py, e, id, |kind| {
        format!(
            "{kind} in env {id} (of envs {envs} in one process): the envs after it were not stepped, and the results \
             of this call are lost"
        )
    })
}

/// [`interrupted`] for a `call` (`call`, `get_attr`, `set_attr`), which runs over the envs in
/// one Python helper: `env_id` is the env it stopped at when the helper could name it
/// ([`call_env_id`]), else the message names the share.
fn interrupted_call(py: Python<'_>, e: PyErr, env_ids: &Range<usize>, env_id: Option<usize>) -> RemoteError {
    let envs = ringenv_runtime::EnvIds(env_ids);
    keep_interrupt(py, e, env_id.unwrap_or(env_ids.start), |kind| match env_id {
        Some(id) => format!(
            "{kind} while env {id} (of envs {envs} in one process) ran the call: it may have run on the envs before \
             it, and the results of this call are lost"
        ),
        None => format!(
            "{kind} while envs {envs} (in one process) ran the call: it may have run on some of them, and the \
             results of this call are lost"
        ),
    })
}

/// The env that raised `e` in a `call` or while it was built: the global env id
/// `ringenv._worker._call` or `_build` sets on the exception as `CALL_ENV_ID` (`None` for an
/// exception that takes no attributes, or one raised before any env ran).
fn call_env_id(helpers: &Bound<'_, PyModule>, e: &PyErr) -> Option<usize> {
    let py = helpers.py();
    let name = helpers.getattr("CALL_ENV_ID").ok()?;
    let name = name.cast::<pyo3::types::PyString>().ok()?;
    e.value(py).getattr(name).ok()?.extract::<usize>().ok()
}

/// Keeps the interrupt `e` for [`take_interrupt`] and returns the command's error: `message`
/// of the exception's type name, naming env `id`.
fn keep_interrupt(py: Python<'_>, e: PyErr, id: usize, message: impl FnOnce(&str) -> String) -> RemoteError {
    let kind = e.get_type(py).name().map(|n| n.to_string()).unwrap_or_default();
    let error = RemoteError { env_id: Some(id as u64), message: message(&kind), kind, ..Default::default() };
    INTERRUPT.with(|i| *i.borrow_mut() = Some(e));
    error
}

/// How many times ringenv's own code after an env returned ([`completing`]) is run again after an
/// interrupt, before the interrupt is treated as the env's.
const COMPLETING_TRIES: usize = 3;

/// Runs `f`, ringenv's own code after an env's `step` or `reset`, to completion: an interrupt
/// raised in it is kept in `deferred` and `f` runs again, so the env's result is not lost. After
/// [`COMPLETING_TRIES`] interrupts in a row the last one is returned.
fn completing<'py, T>(
    py: Python<'py>,
    deferred: &mut Option<PyErr>,
    mut f: impl FnMut() -> PyResult<T>,
) -> PyResult<T> {
    let mut tries = 0;
    loop {
        match f() {
            Err(e) if !e.is_instance_of::<pyo3::exceptions::PyException>(py) && tries < COMPLETING_TRIES => {
                tries += 1;
                if deferred.is_none() {
                    *deferred = Some(e);
                }
            }
            other => return other,
        }
    }
}

/// Keeps `deferred`, an interrupt [`completing`] held back, for [`take_interrupt`].
fn defer_interrupt(deferred: Option<PyErr>) {
    if let Some(e) = deferred {
        INTERRUPT.with(|i| {
            let mut i = i.borrow_mut();
            if i.is_none() {
                *i = Some(e);
            }
        });
    }
}

/// Env `id`'s reset seed, a Python `int` or `None`: from `big` (the seeds of `2**64` or more,
/// which travel in the reset's payload, by env id) where it is there, else from shared memory.
fn reset_seed<'py>(
    py: Python<'py>,
    view: &SlotView<'_>,
    id: usize,
    big: Option<&Bound<'py, PyDict>>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    if let Some(seed) = big.map(|seeds| seeds.get_item(id)).transpose()?.flatten() {
        return Ok(Some(seed));
    }
    Ok(match seed_of(view, id) {
        Some(seed) => Some(seed.into_pyobject(py)?.into_any()),
        None => None,
    })
}

/// One env's step (or autoreset) result: reward, terminated, truncated, info.
type StepResult<'py> = (f64, bool, bool, Bound<'py, PyDict>);

/// The Python envs of one worker (or of the main process's inline share). Holds its Python
/// objects unbound, so it outlives any one GIL scope; each call binds them.
pub struct PyEnvs {
    helpers: Py<PyModule>,
    envs: Vec<Py<PyAny>>,
    env_ids: Range<usize>,
    mode: Mode,
    autoreset: Autoreset,
    obs: ObsTarget,
    /// `actions[slot]`: this worker's action rows; `None` when actions travel pickled.
    actions: Option<Vec<Py<PyAny>>>,
    /// Box actions are copied out of the segment before `env.step`, so an env that keeps its
    /// action never sees it change; Discrete actions arrive as NumPy scalars.
    copy_action: bool,
    ellipsis: Py<PyAny>,
    /// `numpy.ndarray`, the one type [`Row::copy_from`] copies.
    ndarray: Py<PyType>,
    /// The inline share's [`Handover`]; `None` in a worker process, whose messages are pickled.
    handover: Option<Handover>,
}

/// Builds a worker's envs from the init payload by calling `ringenv._worker._build`.
pub fn build(py: Python<'_>, init: &[u8], endpoint: &WorkerEndpoint) -> Result<Box<dyn EnvHost>, RemoteError> {
    build_for(py, init, endpoint.segment(), endpoint.env_ids(), None)
}

/// Builds the envs `env_ids` of a pool over `segment` from the init payload, wherever they are
/// hosted: a worker process ([`build`]) or the main process's inline share (with a `handover`:
/// its messages are left there as Python objects instead of pickled).
///
/// # Errors
/// The factory's or the space check's exception, described as a [`RemoteError`] naming the env
/// it was raised for.
pub fn build_for(
    py: Python<'_>,
    init: &[u8],
    segment: &Segment,
    env_ids: Range<usize>,
    handover: Option<Handover>,
) -> Result<Box<dyn EnvHost>, RemoteError> {
    let helpers = py.import("ringenv._worker").map_err(|e| describe_without_helpers(py, e))?;
    build_with(py, &helpers, init, segment, env_ids, handover).map_err(|e| {
        let env_id = call_env_id(&helpers, &e);
        describe(&helpers, e, env_id)
    })
}

fn leaves<'py>(py: Python<'py>, specs: &[ringenv_runtime::ArraySpec]) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for s in specs {
        list.append((s.dtype.numpy_name(), s.shape.clone()))?;
    }
    Ok(list)
}

fn build_with(
    py: Python<'_>,
    helpers: &Bound<'_, PyModule>,
    init: &[u8],
    segment: &Segment,
    env_ids: Range<usize>,
    handover: Option<Handover>,
) -> PyResult<Box<dyn EnvHost>> {
    let layout = segment.layout();
    let info = PyDict::new(py);
    // The env indices this host builds, as a `range` (start and stop read from it).
    info.set_item("env_ids", pyo3::types::PyRange::new(py, env_ids.start as isize, env_ids.end as isize)?)?;
    info.set_item("num_envs", layout.num_envs)?;
    info.set_item("segment", crate::py_segment::PySegment::array(py, segment.memory())?)?;
    info.set_item("obs_leaves", leaves(py, &layout.obs)?)?;
    info.set_item("action_leaves", leaves(py, &layout.action)?)?;
    let base = segment.memory().as_ptr() as usize;
    let offsets = PyList::empty(py);
    for s in 0..layout.depth {
        let v = segment.slot(s);
        let obs: Vec<usize> = (0..layout.obs.len()).map(|k| v.address(Array::Obs(k)) - base).collect();
        let act: Vec<usize> = (0..layout.action.len()).map(|k| v.address(Array::Action(k)) - base).collect();
        offsets.append((obs, act))?;
    }
    info.set_item("offsets", offsets)?;
    let built = helpers.getattr("_build")?.call1((PyBytes::new(py, init), info))?;
    let (envs, targets, obs_fast, pickled_keys, actions, copy_action, mode, space): Built = built.extract()?;
    let mode = match mode.as_str() {
        "next_step" => Mode::NextStep,
        "same_step" => Mode::SameStep,
        "disabled" => Mode::Disabled,
        other => return Err(pyo3::exceptions::PyValueError::new_err(format!("unknown autoreset mode {other:?}"))),
    };
    let obs = match targets {
        None => ObsTarget::Pickled,
        Some(t) if obs_fast => {
            let row = t[0][0].bind(py);
            let shape = row.getattr("shape")?.unbind();
            let rows = t.iter().map(|s| s.iter().map(|r| Row::of(r.bind(py))).collect()).collect::<PyResult<_>>()?;
            ObsTarget::Rows { rows, shape, space }
        }
        Some(t) => {
            // `(write, tree, leaves)` per slot and env (`ringenv._worker._build`); one tree for all.
            let walk = Walk::parse(&t[0][0].bind(py).get_item(1)?)?;
            let leaves = t
                .iter()
                .map(|s| s.iter().map(|target| Leaves::of(target.bind(py))).collect::<PyResult<Vec<_>>>())
                .collect::<PyResult<_>>()?;
            ObsTarget::Tree { walk, leaves, pickled: pickled_keys }
        }
    };
    Ok(Box::new(PyEnvs {
        helpers: helpers.clone().unbind(),
        autoreset: Autoreset::new(envs.len()),
        envs,
        env_ids,
        mode,
        obs,
        actions,
        copy_action,
        ellipsis: py.Ellipsis(),
        ndarray: py.import("numpy")?.getattr("ndarray")?.cast_into::<PyType>()?.unbind(),
        handover,
    }))
}

/// The name of `value`'s type (`""` when it has none to read).
fn type_name(value: &Bound<'_, PyAny>) -> String {
    value.get_type().name().map(|n| n.to_string()).unwrap_or_default()
}

fn describe_without_helpers(py: Python<'_>, e: PyErr) -> RemoteError {
    RemoteError {
        kind: e.get_type(py).name().map(|n| n.to_string()).unwrap_or_default(),
        message: e.value(py).to_string(),
        ..Default::default()
    }
}

fn describe(helpers: &Bound<'_, PyModule>, e: PyErr, env_id: Option<usize>) -> RemoteError {
    let py = helpers.py();
    // `into_value` attaches the traceback to the exception object (`value` does not on 3.11),
    // so the worker's frames reach the caller.
    let exc = e.clone_ref(py).into_value(py);
    let described = helpers
        .getattr("_describe_exception")
        .and_then(|f| f.call1((exc,)))
        .and_then(|d| d.extract::<(String, String, String, Vec<u8>)>());
    match described {
        Ok((kind, message, traceback, payload)) => {
            RemoteError { env_id: env_id.map(|i| i as u64), kind, message, traceback, payload }
        }
        Err(_) => RemoteError { env_id: env_id.map(|i| i as u64), ..describe_without_helpers(py, e) },
    }
}

impl PyEnvs {
    fn helper<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        args: impl pyo3::call::PyCallArgs<'py>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.helpers.bind(py).getattr(name)?.call1(args)
    }

    fn describe(&self, py: Python<'_>, e: PyErr, env_id: Option<usize>) -> RemoteError {
        describe(self.helpers.bind(py), e, env_id)
    }

    /// Writes env k's observation to its target, or keeps it for the pickled message.
    fn put_obs<'py>(
        &self,
        py: Python<'py>,
        k: usize,
        slot: usize,
        obs: &Bound<'py, PyAny>,
        pickled: &mut Vec<Bound<'py, PyAny>>,
    ) -> PyResult<()> {
        match &self.obs {
            ObsTarget::Rows { rows, shape, space } => {
                let row = &rows[slot][k];
                if row.copy_from(obs, self.ndarray.bind(py)) {
                    return Ok(());
                }
                let id = self.env_ids.start + k;
                let same = obs.getattr(pyo3::intern!(py, "shape")).and_then(|s| s.eq(shape.bind(py))).unwrap_or(false);
                let value = if same { obs.clone() } else { self.helper(py, "_checked_obs", (obs, space, id))? };
                row.view(py).set_item(self.ellipsis.bind(py), value).map_err(|e| {
                    match self.helper(py, "_obs_misfit", (e.value(py), obs, space, id)) {
                        Ok(error) => PyErr::from_value(error),
                        Err(_) => e,
                    }
                })
            }
            ObsTarget::Tree { walk, leaves, pickled: keys } => {
                leaves[slot][k].write(walk, obs, self.ndarray.bind(py))?;
                if let Some(keys) = keys {
                    let part = PyDict::new(py);
                    for key in keys {
                        let value = obs.get_item(key).map_err(|e| {
                            if !e.is_instance_of::<pyo3::exceptions::PyKeyError>(py) {
                                return e;
                            }
                            let key = key.bind(py).repr().map(|r| r.to_string()).unwrap_or_default();
                            let id = self.env_ids.start + k;
                            pyo3::exceptions::PyKeyError::new_err(format!(
                                "env {id} returned a Dict observation without the key {key} of its observation space"
                            ))
                        })?;
                        part.set_item(key, value)?;
                    }
                    pickled.push(part.into_any());
                }
                Ok(())
            }
            ObsTarget::Pickled => {
                pickled.push(obs.clone());
                Ok(())
            }
        }
    }

    /// Calls env `k`'s `reset(seed=seed, options=options)` (`seed`: a Python `int` or `None`).
    fn reset_env<'py>(
        &self,
        py: Python<'py>,
        k: usize,
        seed: Option<Bound<'py, PyAny>>,
        options: &Bound<'py, PyAny>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyDict>)> {
        let kwargs = PyDict::new(py);
        kwargs.set_item("seed", seed)?;
        kwargs.set_item("options", options)?;
        let out = self.envs[k].bind(py).call_method("reset", (), Some(&kwargs))?;
        let [obs, info] = self.returned(k, "reset", "(observation, info)", out)?;
        Ok((obs, self.info_dict(k, "reset", info)?))
    }

    /// The `N` values env `k`'s `method` returned (`form` names them): a tuple or a list of
    /// `N` items, as Gymnasium's vector envs unpack them; anything else is an error naming the
    /// env and the form.
    fn returned<'py, const N: usize>(
        &self,
        k: usize,
        method: &str,
        form: &str,
        out: Bound<'py, PyAny>,
    ) -> PyResult<[Bound<'py, PyAny>; N]> {
        // Read in place (no collection: this runs for every env step).
        let seq = match (out.cast::<PyTuple>(), out.cast::<PyList>()) {
            (Ok(t), _) => Some(t.as_sequence()),
            (_, Ok(l)) => Some(l.as_sequence()),
            _ => None,
        };
        let len = seq.map(|s| s.len()).transpose()?;
        let env_id = self.env_ids.start + k;
        match (seq, len) {
            (Some(seq), Some(n)) if n == N => {
                let mut items: [Option<Bound<'py, PyAny>>; N] = std::array::from_fn(|_| None);
                for (i, item) in items.iter_mut().enumerate() {
                    *item = Some(seq.get_item(i)?);
                }
                Ok(items.map(|item| item.expect("each item was set above")))
            }
            (_, Some(n)) => Err(pyo3::exceptions::PyValueError::new_err(format!(
                "env {env_id}: env.{method} must return {form}, got {n} items"
            ))),
            _ => Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "env {env_id}: env.{method} must return {form} (a tuple), got {}",
                type_name(&out)
            ))),
        }
    }

    /// The info env `k`'s `method` returned, as a `dict` (another mapping copied into one);
    /// anything else is a `TypeError` naming the env.
    fn info_dict<'py>(&self, k: usize, method: &str, info: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
        match info.cast_into::<PyDict>() {
            Ok(info) => Ok(info),
            Err(e) => {
                let info = e.into_inner();
                if let Ok(mapping) = info.cast::<pyo3::types::PyMapping>() {
                    let dict = PyDict::new(info.py());
                    dict.update(mapping)?;
                    return Ok(dict);
                }
                Err(pyo3::exceptions::PyTypeError::new_err(format!(
                    "env {}: env.{method} returned an info of type {}; an info must be a dict",
                    self.env_ids.start + k,
                    type_name(&info)
                )))
            }
        }
    }

    fn action<'py>(
        &self,
        py: Python<'py>,
        k: usize,
        slot: usize,
        pickled: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        match (&self.actions, pickled) {
            (Some(views), _) => {
                let a = views[slot].bind(py).get_item(k)?;
                if self.copy_action {
                    a.call_method0("copy")
                } else {
                    Ok(a)
                }
            }
            (None, Some(all)) => all.get_item(self.env_ids.start + k),
            (None, None) => {
                Err(pyo3::exceptions::PyRuntimeError::new_err("a step arrived without its pickled actions"))
            }
        }
    }

    /// [`PyEnvs::put_obs`] run to completion ([`completing`]): an interrupt in it does not lose
    /// the observation; what an interrupted attempt had added to `pickled` is taken back first.
    fn put_obs_completing<'py>(
        &self,
        py: Python<'py>,
        k: usize,
        slot: usize,
        obs: Bound<'py, PyAny>,
        pickled: &mut Vec<Bound<'py, PyAny>>,
        deferred: &mut Option<PyErr>,
    ) -> PyResult<()> {
        let before = pickled.len();
        completing(py, deferred, || {
            pickled.truncate(before);
            self.put_obs(py, k, slot, &obs, pickled)
        })
    }

    /// Steps env k (or autoresets it in next-step mode), writing its observation. An interrupt
    /// in ringenv's own code after the env returned goes to `deferred` ([`completing`]).
    fn step_env<'py>(
        &mut self,
        py: Python<'py>,
        k: usize,
        slot: usize,
        actions: Option<&Bound<'py, PyAny>>,
        pickled: &mut Vec<Bound<'py, PyAny>>,
        deferred: &mut Option<PyErr>,
    ) -> PyResult<StepResult<'py>> {
        if self.mode == Mode::NextStep && self.autoreset.take(k) {
            let (obs, info) = self.reset_env(py, k, None, &py.None().into_bound(py))?;
            self.put_obs_completing(py, k, slot, obs, pickled, deferred)?;
            return Ok((0.0, false, false, info));
        }
        let out = self.envs[k].bind(py).call_method1("step", (self.action(py, k, slot, actions)?,))?;
        let [mut obs, reward, terminated, truncated, info] =
            self.returned(k, "step", "(observation, reward, terminated, truncated, info)", out)?;
        let reward: f64 = reward.extract().map_err(|e: PyErr| {
            let type_name = type_name(&reward);
            pyo3::exceptions::PyTypeError::new_err(format!(
                "env {}: step returned a reward of type {type_name}; a reward must be a real number ({})",
                self.env_ids.start + k,
                e.value(py)
            ))
        })?;
        let terminated = terminated.is_truthy()?;
        let truncated = truncated.is_truthy()?;
        // The step's info as the env returned it is `final_info`, as in Gymnasium (which keeps a
        // mapping that is not a dict as an object there).
        let step_info = info.clone();
        let mut info = self.info_dict(k, "step", info)?;
        if self.mode == Mode::SameStep && (terminated || truncated) {
            let (reset_obs, reset_info) = self.reset_env(py, k, None, &py.None().into_bound(py))?;
            info = completing(py, deferred, || {
                self.helper(py, "_same_step_info", (&step_info, &obs, &reset_info))?
                    .cast_into::<PyDict>()
                    .map_err(PyErr::from)
            })?;
            obs = reset_obs;
        }
        self.put_obs_completing(py, k, slot, obs, pickled, deferred)?;
        self.autoreset.record(k, terminated, truncated);
        Ok((reward, terminated, truncated, info))
    }

    /// The command's message: pickled observations (pickled path) and non-empty infos, or the
    /// infos' typed message ([`crate::infos::encode`]) when there are no pickled observations.
    /// The inline share hands over its Python objects instead: the typed message (as `bytes`), or
    /// `(None, infos, message)` when the message holds copies of arrays (its envs' own dicts kept
    /// for `env_infos()`), or `(observations, infos)`.
    fn finish<'py>(
        &self,
        py: Python<'py>,
        pickled: Vec<Bound<'py, PyAny>>,
        infos: Vec<(usize, Bound<'py, PyDict>)>,
        error: Option<RemoteError>,
    ) -> Result<Option<Vec<u8>>, RemoteError> {
        if let Some(e) = error {
            return Err(e);
        }
        let has_obs = matches!(self.obs, ObsTarget::Pickled | ObsTarget::Tree { pickled: Some(_), .. });
        if infos.is_empty() && !has_obs {
            return Ok(None);
        }
        if !has_obs {
            if let Some((message, mutable)) = crate::infos::encode(&infos) {
                if let Some(handover) = &self.handover {
                    let message = PyBytes::new(py, &message).into_any();
                    let message = if mutable {
                        (py.None(), infos, message)
                            .into_pyobject(py)
                            .map_err(|e| self.describe(py, e, None))?
                            .into_any()
                    } else {
                        message
                    };
                    *handover.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(message.unbind());
                    return Ok(Some(Vec::new()));
                }
                return Ok(Some(message));
            }
        }
        let obs = if has_obs { PyList::new(py, pickled).map(Bound::into_any) } else { Ok(py.None().into_bound(py)) };
        if let Some(handover) = &self.handover {
            let message = obs.and_then(|o| (o, infos).into_pyobject(py)).map_err(|e| self.describe(py, e, None))?;
            *handover.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(message.into_any().unbind());
            return Ok(Some(Vec::new()));
        }
        obs.and_then(|o| self.helper(py, "_pack", (o, infos, self.env_ids.start)))
            .and_then(|b| b.extract::<Vec<u8>>())
            .map(Some)
            .map_err(|e| self.describe(py, e, None))
    }

    fn unpack<'py>(&self, py: Python<'py>, payload: Option<&[u8]>) -> Result<Bound<'py, PyAny>, RemoteError> {
        match payload {
            None => Ok(py.None().into_bound(py)),
            Some(bytes) => {
                self.helper(py, "_unpack", (PyBytes::new(py, bytes),)).map_err(|e| self.describe(py, e, None))
            }
        }
    }

    /// A reset's payload read for one env (`ringenv._worker._unpack_reset`): a fresh copy of its
    /// options, and the seeds of `2**64` or more by env id, which travel there rather than in
    /// shared memory (`None`: every seed is in shared memory). Without a payload, `(None, None)`.
    fn unpack_reset<'py>(
        &self,
        py: Python<'py>,
        payload: Option<&[u8]>,
    ) -> Result<(Bound<'py, PyAny>, Option<Bound<'py, PyDict>>), RemoteError> {
        match payload {
            None => Ok((py.None().into_bound(py), None)),
            Some(bytes) => self
                .helper(py, "_unpack_reset", (PyBytes::new(py, bytes),))
                .and_then(|request| request.extract())
                .map_err(|e| self.describe(py, e, None)),
        }
    }

    fn reset_in(
        &mut self,
        py: Python<'_>,
        view: &mut SlotView<'_>,
        slot: usize,
        options: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>, RemoteError> {
        // Each env gets its own copy of the options, as in Gymnasium's AsyncVectorEnv.
        let (first, big_seeds) = self.unpack_reset(py, options)?;
        let mut unpacked = Some(first);
        let (mut pickled, mut infos, mut error, mut deferred) = (Vec::new(), Vec::new(), None, None);
        for k in 0..self.envs.len() {
            let id = self.env_ids.start + k;
            if view.seed_flags(id).skips_reset() {
                // Not in the reset mask: the env keeps its state; the main process keeps its
                // last observation.
                pickled.push(py.None().into_bound(py));
                continue;
            }
            let env_options = match unpacked.take() {
                Some(first) => first,
                None => self.unpack_reset(py, options)?.0,
            };
            let result = reset_seed(py, view, id, big_seeds.as_ref())
                .and_then(|seed| self.reset_env(py, k, seed, &env_options))
                .and_then(|(obs, info)| {
                    self.put_obs_completing(py, k, slot, obs, &mut pickled, &mut deferred)?;
                    Ok(info)
                });
            match result {
                Ok(info) if info.is_empty() => {}
                Ok(info) => infos.push((id, info)),
                Err(e) if !e.is_instance_of::<pyo3::exceptions::PyException>(py) => {
                    error = Some(interrupted(py, e, &self.env_ids, id));
                    break;
                }
                Err(e) => {
                    error.get_or_insert_with(|| self.describe(py, e, Some(id)));
                }
            }
            self.autoreset.record(k, false, false);
            write_step(view, id, 0.0, false, false);
        }
        defer_interrupt(deferred);
        self.finish(py, pickled, infos, error)
    }

    fn step_in(
        &mut self,
        py: Python<'_>,
        view: &mut SlotView<'_>,
        slot: usize,
        actions: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>, RemoteError> {
        let actions = match actions {
            Some(_) => Some(self.unpack(py, actions)?),
            None => None,
        };
        let (mut pickled, mut infos, mut error, mut deferred) = (Vec::new(), Vec::new(), None, None);
        for k in 0..self.envs.len() {
            let id = self.env_ids.start + k;
            match self.step_env(py, k, slot, actions.as_ref(), &mut pickled, &mut deferred) {
                Ok((reward, terminated, truncated, info)) => {
                    write_step(view, id, reward, terminated, truncated);
                    if !info.is_empty() {
                        infos.push((id, info));
                    }
                }
                Err(e) if !e.is_instance_of::<pyo3::exceptions::PyException>(py) => {
                    error = Some(interrupted(py, e, &self.env_ids, id));
                    break;
                }
                Err(e) => {
                    error.get_or_insert_with(|| self.describe(py, e, Some(id)));
                }
            }
        }
        defer_interrupt(deferred);
        self.finish(py, pickled, infos, error)
    }
}

impl EnvHost for PyEnvs {
    fn reset(
        &mut self,
        view: &mut SlotView<'_>,
        slot: usize,
        options: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>, RemoteError> {
        Python::attach(|py| self.reset_in(py, view, slot, options))
    }

    fn step(
        &mut self,
        view: &mut SlotView<'_>,
        slot: usize,
        actions: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>, RemoteError> {
        Python::attach(|py| self.step_in(py, view, slot, actions))
    }

    fn call(&mut self, request: &[u8]) -> Result<Option<Vec<u8>>, RemoteError> {
        Python::attach(|py| {
            let envs = PyList::new(py, &self.envs).map_err(|e| self.describe(py, e, None))?;
            self.helper(py, "_call", (envs, self.env_ids.start, PyBytes::new(py, request)))
                .and_then(|b| b.extract::<Vec<u8>>())
                .map(Some)
                .map_err(|e| {
                    let env_id = call_env_id(self.helpers.bind(py), &e);
                    if e.is_instance_of::<pyo3::exceptions::PyException>(py) {
                        self.describe(py, e, env_id)
                    } else {
                        // Ctrl-C (or SystemExit) in the share: raised at once, as for a step
                        interrupted_call(py, e, &self.env_ids, env_id)
                    }
                })
        })
    }

    /// Closes every env; one whose `close` raises is named in a `RuntimeWarning` and the others
    /// are closed all the same. A `KeyboardInterrupt` or `SystemExit` is kept for
    /// [`take_interrupt`] instead.
    fn close(&mut self) {
        Python::attach(|py| {
            let mut interrupt = None;
            for (k, env) in self.envs.iter().enumerate() {
                if let Err(e) = env.bind(py).call_method0("close") {
                    if self.handover.is_some() && !e.is_instance_of::<pyo3::exceptions::PyException>(py) {
                        interrupt.get_or_insert(e);
                        continue;
                    }
                    let kind = e.get_type(py).name().map(|n| n.to_string()).unwrap_or_else(|_| "exception".into());
                    let text = e.value(py).str().map(|s| s.to_string()).unwrap_or_default();
                    let message = format!("env {}'s close() raised {kind}: {text}", self.env_ids.start + k);
                    let message = std::ffi::CString::new(message.replace('\0', " ")).unwrap_or_default();
                    let category = py.get_type::<pyo3::exceptions::PyRuntimeWarning>();
                    let _ = PyErr::warn(py, &category, &message, 0);
                }
            }
            defer_interrupt(interrupt);
        })
    }
}
