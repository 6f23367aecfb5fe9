//! Hosting Python envs in a worker: the step loop is Rust, calling each env through PyO3 and
//! writing its observation straight into the env's row of the shared slot (a NumPy view of the
//! segment, `view[...] = obs`), its reward, terminated and truncated into theirs.
//!
//! Autoreset is Gymnasium's next-step mode ([`Autoreset`]). Infos cost nothing when empty; the
//! non-empty ones of a command are pickled together as `[(env_id, info), ...]` and travel on the
//! control socket. An exception in an env becomes a [`RemoteError`] carrying its type, message,
//! formatted traceback and the pickled exception, built by `ringenv._worker._describe_exception`.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use ringenv_runtime::{Array, RemoteError, SlotView, WorkerEndpoint};
use ringenv_worker::host::{seed_of, write_step, Autoreset, EnvHost};
use std::ops::Range;

/// The Python envs of one worker.
pub struct PyEnvs<'py> {
    helpers: Bound<'py, PyModule>,
    envs: Vec<Bound<'py, PyAny>>,
    env_ids: Range<usize>,
    autoreset: Autoreset,
    /// `obs[slot][k]`: NumPy view of env k's observation row in slot `slot`.
    obs: Vec<Vec<Bound<'py, PyAny>>>,
    /// `actions[slot]`: NumPy view of this worker's action rows in slot `slot`.
    actions: Vec<Bound<'py, PyAny>>,
    /// Box actions are copied out of the segment before `env.step`, so an env that keeps its
    /// action never sees it change; Discrete actions arrive as NumPy scalars.
    copy_action: bool,
    ellipsis: Bound<'py, PyAny>,
}

type StepResult<'py> = (f64, bool, bool, Bound<'py, PyDict>);
/// What `ringenv._worker._build` returns: envs, obs row views by slot, action views by slot,
/// whether Box actions are copied.
type Built<'py> = (Vec<Bound<'py, PyAny>>, Vec<Vec<Bound<'py, PyAny>>>, Vec<Bound<'py, PyAny>>, bool);

/// Builds the envs from the init payload by calling `ringenv._worker._build`.
pub fn build<'py>(
    py: Python<'py>,
    init: &[u8],
    endpoint: &WorkerEndpoint,
) -> Result<Box<dyn EnvHost + 'py>, RemoteError> {
    let helpers = py.import("ringenv._worker").map_err(|e| describe_without_helpers(py, e))?;
    build_with(py, &helpers, init, endpoint).map_err(|e| describe(&helpers, e, None))
}

fn build_with<'py>(
    py: Python<'py>,
    helpers: &Bound<'py, PyModule>,
    init: &[u8],
    endpoint: &WorkerEndpoint,
) -> PyResult<Box<dyn EnvHost + 'py>> {
    let layout = endpoint.segment().layout();
    let env_ids = endpoint.env_ids();
    let info = PyDict::new(py);
    info.set_item("env_ids", (env_ids.start, env_ids.end))?;
    info.set_item("segment", crate::py_segment::PySegment::new(endpoint.segment().memory()))?;
    let base = endpoint.segment().memory().as_ptr() as usize;
    let offsets = PyList::empty(py);
    for s in 0..layout.depth {
        let v = endpoint.slot(s);
        offsets.append((v.address(Array::Obs) - base, v.address(Array::Action) - base))?;
    }
    info.set_item("offsets", offsets)?;
    info.set_item("obs", (layout.obs.dtype.numpy_name(), layout.obs.shape.clone()))?;
    info.set_item("action", (layout.action.dtype.numpy_name(), layout.action.shape.clone()))?;
    let built = helpers.getattr("_build")?.call1((pyo3::types::PyBytes::new(py, init), info))?;
    let (envs, obs, actions, copy_action): Built<'py> = built.extract()?;
    Ok(Box::new(PyEnvs {
        helpers: helpers.clone(),
        autoreset: Autoreset::new(envs.len()),
        envs,
        env_ids,
        obs,
        actions,
        copy_action,
        ellipsis: py.Ellipsis().into_bound(py),
    }))
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

impl<'py> PyEnvs<'py> {
    fn reset_one(
        &self,
        k: usize,
        slot: usize,
        seed: Option<u64>,
        options: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let py = self.helpers.py();
        let kwargs = PyDict::new(py);
        kwargs.set_item("seed", seed)?;
        kwargs.set_item("options", options)?;
        let out = self.envs[k].call_method("reset", (), Some(&kwargs))?;
        let (obs, info): (Bound<PyAny>, Bound<PyDict>) = out.extract()?;
        self.obs[slot][k].set_item(&self.ellipsis, obs)?;
        Ok(info)
    }

    fn step_one(&self, k: usize, slot: usize) -> PyResult<StepResult<'py>> {
        let mut action = self.actions[slot].get_item(k)?;
        if self.copy_action {
            action = action.call_method0("copy")?;
        }
        let out = self.envs[k].call_method1("step", (action,))?;
        let out = out.cast_into::<PyTuple>()?;
        if out.len() != 5 {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "env.step must return (observation, reward, terminated, truncated, info), got {} items",
                out.len()
            )));
        }
        self.obs[slot][k].set_item(&self.ellipsis, out.get_item(0)?)?;
        let reward: f64 = out.get_item(1)?.extract()?;
        let terminated = out.get_item(2)?.is_truthy()?;
        let truncated = out.get_item(3)?.is_truthy()?;
        Ok((reward, terminated, truncated, out.get_item(4)?.cast_into::<PyDict>()?))
    }

    fn finish(
        &self,
        infos: Vec<(usize, Bound<'py, PyDict>)>,
        error: Option<RemoteError>,
    ) -> Result<Option<Vec<u8>>, RemoteError> {
        if let Some(e) = error {
            return Err(e);
        }
        if infos.is_empty() {
            return Ok(None);
        }
        self.helpers
            .getattr("_pack_infos")
            .and_then(|f| f.call1((infos,)))
            .and_then(|b| b.extract::<Vec<u8>>())
            .map(Some)
            .map_err(|e| describe(&self.helpers, e, None))
    }
}

impl<'py> EnvHost for PyEnvs<'py> {
    fn reset(
        &mut self,
        view: &mut SlotView<'_>,
        slot: usize,
        options: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>, RemoteError> {
        self.autoreset.clear();
        let py = self.helpers.py();
        let options = match options {
            None => py.None().into_bound(py),
            Some(bytes) => self
                .helpers
                .getattr("_unpack")
                .and_then(|f| f.call1((pyo3::types::PyBytes::new(py, bytes),)))
                .map_err(|e| describe(&self.helpers, e, None))?,
        };
        let (mut infos, mut error) = (Vec::new(), None);
        for k in 0..self.envs.len() {
            let id = self.env_ids.start + k;
            match self.reset_one(k, slot, seed_of(view, id), &options) {
                Ok(info) if info.is_empty() => {}
                Ok(info) => infos.push((id, info)),
                Err(e) => {
                    error.get_or_insert_with(|| describe(&self.helpers, e, Some(id)));
                }
            }
            write_step(view, id, 0.0, false, false);
        }
        self.finish(infos, error)
    }

    fn step(&mut self, view: &mut SlotView<'_>, slot: usize) -> Result<Option<Vec<u8>>, RemoteError> {
        let py = self.helpers.py();
        let none = py.None().into_bound(py);
        let (mut infos, mut error) = (Vec::new(), None);
        for k in 0..self.envs.len() {
            let id = self.env_ids.start + k;
            let result = if self.autoreset.take(k) {
                self.reset_one(k, slot, None, &none).map(|info| (0.0, false, false, info))
            } else {
                self.step_one(k, slot)
            };
            match result {
                Ok((reward, terminated, truncated, info)) => {
                    self.autoreset.record(k, terminated, truncated);
                    write_step(view, id, reward, terminated, truncated);
                    if !info.is_empty() {
                        infos.push((id, info));
                    }
                }
                Err(e) => {
                    error.get_or_insert_with(|| describe(&self.helpers, e, Some(id)));
                }
            }
        }
        self.finish(infos, error)
    }

    fn close(&mut self) {
        for env in &self.envs {
            let _ = env.call_method0("close");
        }
    }
}
