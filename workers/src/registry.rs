//! The built-in Rust envs by id, and how a worker builds them from its init payload.
//!
//! The init payload of a Rust worker is JSON: `{"env_id": "CartPole-v1", "kwargs": {...}}`.
//! Unknown ids and arguments are errors that name the id or argument and list what is accepted.
//!
//! ```
//! use ringenv_worker::registry;
//! assert!(registry::ids().contains(&"CartPole-v1"));
//! let (obs, act) = registry::spaces("BlocksWorld-v0", &serde_json::json!({"num_blocks": 3})).unwrap();
//! assert_eq!(obs.array_spec().shape, vec![2 * 3 * 4 + 3]);
//! assert_eq!(act, ringenv_worker::Space::Discrete { n: 12, start: 0 });
//! assert!(registry::spaces("Nope-v0", &serde_json::Value::Null).is_err());
//! ```

use crate::envs::{BlocksWorld, CartPole};
use crate::host::EnvHost;
use crate::{Env, RustEnvs, Space};
use ringenv_runtime::{Layout, RemoteError, WorkerEndpoint};
use serde::Deserialize;
use serde_json::Value;
use std::ops::Range;

/// The ids of the built-in envs.
pub fn ids() -> &'static [&'static str] {
    &["CartPole-v1", "BlocksWorld-v0"]
}

/// A Rust worker's init payload.
#[derive(Debug, Deserialize, serde::Serialize, PartialEq)]
pub struct RustInit {
    /// The env id.
    pub env_id: String,
    /// Constructor arguments (a JSON object, or null).
    #[serde(default)]
    pub kwargs: Value,
}

fn invalid(message: String) -> RemoteError {
    RemoteError { kind: "ValueError".into(), message, ..Default::default() }
}

fn kwargs_object(id: &str, kwargs: &Value, allowed: &[&str]) -> Result<serde_json::Map<String, Value>, RemoteError> {
    let map = match kwargs {
        Value::Null => serde_json::Map::new(),
        Value::Object(m) => m.clone(),
        other => return Err(invalid(format!("{id}: kwargs must be a mapping, got {other}"))),
    };
    if let Some(bad) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(invalid(format!("{id} takes no argument {bad:?}; it accepts {allowed:?}")));
    }
    Ok(map)
}

fn num_blocks(kwargs: &Value) -> Result<usize, RemoteError> {
    let map = kwargs_object("BlocksWorld-v0", kwargs, &["num_blocks"])?;
    match map.get("num_blocks") {
        None => Ok(4),
        Some(v) => match v.as_u64() {
            Some(n @ 2..=8) => Ok(n as usize),
            _ => Err(invalid(format!("BlocksWorld-v0: num_blocks must be an integer from 2 to 8, got {v}"))),
        },
    }
}

enum Builtin {
    CartPole,
    BlocksWorld(usize),
}

fn lookup(id: &str, kwargs: &Value) -> Result<Builtin, RemoteError> {
    match id {
        "CartPole-v1" => kwargs_object(id, kwargs, &[]).map(|_| Builtin::CartPole),
        "BlocksWorld-v0" => num_blocks(kwargs).map(Builtin::BlocksWorld),
        _ => Err(RemoteError {
            kind: "NameNotFound".into(),
            message: format!("no built-in Rust env {id:?}; the built-in ids are {:?}", ids()),
            ..Default::default()
        }),
    }
}

/// The observation and action spaces of built-in env `id` with `kwargs`.
///
/// # Errors
/// A [`RemoteError`] naming the unknown id or the bad argument.
pub fn spaces(id: &str, kwargs: &Value) -> Result<(Space, Space), RemoteError> {
    fn of<E: Env>(e: E) -> (Space, Space) {
        (e.observation_space(), e.action_space())
    }
    Ok(match lookup(id, kwargs)? {
        Builtin::CartPole => of(CartPole::default()),
        Builtin::BlocksWorld(n) => of(BlocksWorld::new(n)),
    })
}

/// Builds the host of envs `env_ids` of built-in env `id`.
///
/// # Errors
/// A [`RemoteError`] naming the unknown id, the bad argument, or the space mismatch.
pub fn make_host(
    id: &str,
    kwargs: &Value,
    env_ids: Range<usize>,
    layout: &Layout,
) -> Result<Box<dyn EnvHost>, RemoteError> {
    fn host<E: Env>(
        make: impl Fn() -> E,
        env_ids: Range<usize>,
        layout: &Layout,
    ) -> Result<Box<dyn EnvHost>, RemoteError> {
        let envs = env_ids.clone().map(|_| make()).collect();
        Ok(Box::new(RustEnvs::new(envs, env_ids, layout)?))
    }
    match lookup(id, kwargs)? {
        Builtin::CartPole => host(CartPole::default, env_ids, layout),
        Builtin::BlocksWorld(n) => host(|| BlocksWorld::new(n), env_ids, layout),
    }
}

/// The [`crate::worker_loop::run`] builder for built-in envs: parses the JSON init payload.
///
/// # Errors
/// A [`RemoteError`] for malformed JSON, an unknown id or bad arguments.
pub fn build_host(init: &[u8], endpoint: &WorkerEndpoint) -> Result<Box<dyn EnvHost>, RemoteError> {
    let init: RustInit =
        serde_json::from_slice(init).map_err(|e| invalid(format!("malformed Rust worker init payload: {e}")))?;
    make_host(&init.env_id, &init.kwargs, endpoint.env_ids(), endpoint.segment().layout())
}
