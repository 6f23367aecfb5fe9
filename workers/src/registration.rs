//! The registration of the built-in Rust env, and how a worker builds it from its init payload.
//!
//! The built-ins are a [`Registry`] named `ringenv`: `CartPole-v1`. The init payload of a Rust
//! worker is JSON `{"id": "CartPole-v1", "kwargs": {...}}` (`env_id` is accepted for `id`).
//!
//! ```
//! use ringenv_worker::registration;
//! assert!(registration::ids().contains(&"CartPole-v1"));
//! let (obs, act) = registration::spaces("CartPole-v1", &serde_json::json!({})).unwrap();
//! assert_eq!(obs.array_spec().shape, vec![4]);
//! assert_eq!(act, ringenv_worker::Space::Discrete { n: 2, start: 0 });
//! assert!(registration::spaces("Nope-v0", &serde_json::Value::Null).is_err());
//! ```

use crate::envs::CartPole;
use crate::host::EnvHost;
use crate::{Registry, Space};
use ringenv_runtime::{Layout, RemoteError, WorkerEndpoint};
use serde::Deserialize;
use serde_json::Value;
use std::ops::Range;
use std::sync::OnceLock;

/// The ids of the built-in envs.
pub fn ids() -> &'static [&'static str] {
    &["CartPole-v1"]
}

/// The registry of the built-in envs (named `ringenv`).
pub fn builtins() -> &'static Registry {
    static BUILTINS: OnceLock<Registry> = OnceLock::new();
    BUILTINS.get_or_init(|| Registry::new("ringenv").env("CartPole-v1", CartPole::new))
}

/// A Rust worker's init payload, `{"id": ..., "kwargs": {...}}`. Workers also read an
/// optional `"on_panic": "report" | "exit"` ([`crate::rust_envs::OnPanic`]; see
/// [`Registry::build_host`]).
#[derive(Debug, Deserialize, serde::Serialize, PartialEq)]
pub struct RustInit {
    /// The env's registry id (`"CartPole-v1"`; read from `"env_id"` too, its old spelling).
    #[serde(alias = "env_id")]
    pub id: String,
    /// Constructor arguments (a JSON object, or null).
    #[serde(default)]
    pub kwargs: Value,
}

/// The observation and action spaces of built-in env `id` with `kwargs`.
///
/// # Errors
/// A [`RemoteError`] naming the unknown id or the bad argument.
pub fn spaces(id: &str, kwargs: &Value) -> Result<(Space, Space), RemoteError> {
    builtins().spaces(id, kwargs)
}

/// Builds the host of envs `env_ids` (env indices in the pool) of built-in env `id`.
///
/// # Errors
/// A [`RemoteError`] naming the unknown id, the bad argument, or the space mismatch.
pub fn make_host(
    id: &str,
    kwargs: &Value,
    env_ids: Range<usize>,
    layout: &Layout,
) -> Result<Box<dyn EnvHost>, RemoteError> {
    builtins().make_host(id, kwargs, env_ids, layout)
}

/// The [`crate::worker_loop::run`] builder for built-in envs: parses the JSON init payload.
///
/// # Errors
/// A [`RemoteError`] for malformed JSON, an unknown id or bad arguments.
pub fn build_host(init: &[u8], endpoint: &WorkerEndpoint) -> Result<Box<dyn EnvHost>, RemoteError> {
    builtins().build_host(init, endpoint)
}

/// As [`build_host`], for the envs `env_ids` of a pool of layout `layout` hosted anywhere (the
/// main process's inline share of a pool, [`ringenv_runtime::PoolConfig::inline`]).
///
/// # Errors
/// As [`build_host`].
pub fn build_host_for(init: &[u8], env_ids: Range<usize>, layout: &Layout) -> Result<Box<dyn EnvHost>, RemoteError> {
    builtins().build_host_for(init, env_ids, layout)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ids_match_the_registry_and_arguments_are_checked() {
        assert_eq!(builtins().ids(), ids());
        let err = spaces("CartPole-v1", &json!({"colour": 2})).unwrap_err();
        assert_eq!(err.message, "CartPole-v1 takes no arguments, got \"colour\"");
        let err = spaces("Nope-v9", &Value::Null).unwrap_err();
        assert!(err.message.contains("Nope-v9") && err.message.contains("CartPole-v1"), "{}", err.message);
    }

    #[test]
    fn init_payload_names_the_registry_id_id_and_reads_the_old_env_id_spelling() {
        let init = RustInit { id: "CartPole-v1".into(), kwargs: Value::Null };
        assert_eq!(serde_json::to_value(&init).unwrap(), json!({"id": "CartPole-v1", "kwargs": null}));
        let old: RustInit = serde_json::from_value(json!({"env_id": "CartPole-v1"})).unwrap();
        assert_eq!(old, init);
    }
}
