//! A [`Registry`]: the env ids a worker binary serves, each with its typed constructor (the
//! built-in envs are registered in [`crate::registration`]).
//!
//! A constructor takes no argument or one `serde::Deserialize` argument (Python's `env_kwargs`,
//! parsed by [`kwargs::parse`]) and returns the env or `Result<env, impl Display>` (an `Err`
//! reaches Python as a `ValueError`). A registry named `custom_env` also answers
//! `custom_env:Sokoban-v0` for `Sokoban-v0` (`-` and `_` are the same).
//!
//! ```
//! use ringenv_worker::{envs::CartPole, Registry};
//! use serde_json::json;
//! let registry = Registry::new("my-envs")
//!     .env("CartPole-v1", CartPole::new)
//!     .env("Poles-v0", |n: usize| if n > 0 { Ok(CartPole::new()) } else { Err("n must be positive") });
//! let (obs, _) = registry.spaces("my_envs:Poles-v0", &json!(3)).unwrap();
//! assert_eq!(obs.array_spec().shape, vec![4]);
//! let err = registry.spaces("Poles-v0", &json!(0)).unwrap_err();
//! assert_eq!(err.message, "Poles-v0: n must be positive");
//! assert_eq!(registry.spaces("Nope-v0", &json!({})).unwrap_err().kind, "NameNotFound");
//! ```

use crate::check::{check_env, CheckOptions, CheckReport};
use crate::host::EnvHost;
use crate::kwargs::{self, KwargsError};
use crate::rust_envs::OnPanic;
use crate::{env::declared_spaces, panic, Env, RustEnvs, Space};
use ringenv_runtime::{Layout, RemoteError, WorkerEndpoint};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::marker::PhantomData;
use std::ops::Range;

/// What a constructor returns: an env, or `Result<env, impl Display>`.
///
/// ```
/// use ringenv_worker::{envs::CartPole, IntoEnv};
/// assert!(CartPole::new().into_env().is_ok());
/// let refused = Err::<CartPole, _>("no pole").into_env().err().unwrap();
/// assert_eq!(refused, "no pole");
/// ```
pub trait IntoEnv {
    /// The env type.
    type Env: Env;
    /// The env, or the constructor's error message.
    ///
    /// # Errors
    /// The constructor's error, as text.
    fn into_env(self) -> Result<Self::Env, String>;
}

impl<E: Env> IntoEnv for E {
    type Env = E;
    fn into_env(self) -> Result<E, String> {
        Ok(self)
    }
}

impl<E: Env, X: std::fmt::Display> IntoEnv for Result<E, X> {
    type Env = E;
    fn into_env(self) -> Result<E, String> {
        self.map_err(|e| e.to_string())
    }
}

/// A function building an env from its keyword arguments: `Fn() -> R` (`M = ()`: the env takes
/// no arguments) or `Fn(A) -> R` with `A: Deserialize` (`M = (A,)`), where `R:` [`IntoEnv`].
/// `M` only tells the two apart; it is inferred.
///
/// ```
/// use ringenv_worker::{envs::CartPole, Constructor};
/// use serde_json::json;
/// let no_args = CartPole::new;
/// assert!(no_args.construct("CartPole-v1", &json!({})).is_ok());
/// let err = no_args.construct("CartPole-v1", &json!({"gravity": 9.8})).err().unwrap();
/// assert_eq!(err.to_string(), "CartPole-v1 takes no arguments, got \"gravity\"");
/// ```
pub trait Constructor<M>: Send + Sync + 'static {
    /// The env type built.
    type Env: Env;
    /// Builds env `id` from `kwargs` (a JSON object or null).
    ///
    /// # Errors
    /// [`KwargsError`] when the arguments do not fit, or the constructor refused them.
    fn construct(&self, id: &str, kwargs: &Value) -> Result<Self::Env, KwargsError>;
    /// The argument names, when known (the fields of a struct argument).
    fn arguments(&self) -> Vec<String>;
}

impl<F, R> Constructor<()> for F
where
    F: Fn() -> R + Send + Sync + 'static,
    R: IntoEnv,
{
    type Env = R::Env;
    fn construct(&self, id: &str, kwargs: &Value) -> Result<R::Env, KwargsError> {
        let none: std::collections::BTreeMap<String, Value> = kwargs::parse(id, kwargs)?;
        if let Some(name) = none.keys().next() {
            return Err(KwargsError::Unknown { id: id.into(), name: name.clone(), accepted: Vec::new() });
        }
        self().into_env().map_err(|reason| KwargsError::Refused { id: id.into(), reason })
    }
    fn arguments(&self) -> Vec<String> {
        Vec::new()
    }
}

impl<F, A, R> Constructor<(A,)> for F
where
    F: Fn(A) -> R + Send + Sync + 'static,
    A: DeserializeOwned,
    R: IntoEnv,
{
    type Env = R::Env;
    fn construct(&self, id: &str, kwargs: &Value) -> Result<R::Env, KwargsError> {
        // A struct takes the mapping; any other argument type takes the value itself (so that
        // `|n: usize| ...` reads `json!(3)`, for Rust callers).
        let args: A = match (kwargs::fields_of::<A>(), kwargs) {
            (None, v) if !v.is_object() && !v.is_null() => serde_json::from_value(v.clone()).map_err(|e| {
                KwargsError::Invalid { id: id.into(), name: None, value: None, reason: e.to_string(), accepted: vec![] }
            })?,
            _ => kwargs::parse(id, kwargs)?,
        };
        self(args).into_env().map_err(|reason| KwargsError::Refused { id: id.into(), reason })
    }
    fn arguments(&self) -> Vec<String> {
        kwargs::fields_of::<A>().unwrap_or(&[]).iter().map(|s| s.to_string()).collect()
    }
}

/// The type-erased operations of one registered constructor.
trait Erased: Send + Sync {
    fn spaces(&self, id: &str, kwargs: &Value) -> Result<(Space, Space), RemoteError>;
    fn host(
        &self,
        id: &str,
        kwargs: &Value,
        env_ids: Range<usize>,
        layout: &Layout,
        on_panic: OnPanic,
    ) -> Result<Box<dyn EnvHost>, RemoteError>;
    fn check(&self, id: &str, kwargs: &Value, options: &CheckOptions) -> Result<CheckReport, RemoteError>;
    fn arguments(&self) -> Vec<String>;
}

struct Typed<M, C>(C, PhantomData<fn() -> M>);

impl<M: 'static, C: Constructor<M>> Typed<M, C> {
    fn make(&self, id: &str, kwargs: &Value) -> Result<C::Env, RemoteError> {
        match panic::catch(|| self.0.construct(id, kwargs)) {
            Ok(Ok(env)) => Ok(env),
            Ok(Err(e)) => Err(RemoteError { kind: "ValueError".into(), message: e.to_string(), ..Default::default() }),
            Err(p) => {
                let error = crate::rust_envs::panic_error(0, p);
                Err(RemoteError {
                    env_id: None,
                    message: format!("{id}: the constructor panicked: {}", error.message),
                    ..error
                })
            }
        }
    }
}

impl<M: 'static, C: Constructor<M>> Erased for Typed<M, C> {
    fn spaces(&self, id: &str, kwargs: &Value) -> Result<(Space, Space), RemoteError> {
        let env = self.make(id, kwargs)?;
        declared_spaces(&env).map_err(|e| RemoteError {
            kind: "InvalidSpace".into(),
            message: format!("{id}: {e}"),
            ..Default::default()
        })
    }
    fn host(
        &self,
        id: &str,
        kwargs: &Value,
        env_ids: Range<usize>,
        layout: &Layout,
        on_panic: OnPanic,
    ) -> Result<Box<dyn EnvHost>, RemoteError> {
        let envs = env_ids.clone().map(|_| self.make(id, kwargs)).collect::<Result<Vec<_>, _>>()?;
        Ok(Box::new(RustEnvs::new(envs, env_ids, layout)?.on_panic(on_panic)))
    }
    fn check(&self, id: &str, kwargs: &Value, options: &CheckOptions) -> Result<CheckReport, RemoteError> {
        self.make(id, kwargs)?; // arguments errors are reported as such, not as a failed check
        let make = || self.make(id, kwargs).unwrap_or_else(|e| panic!("{e}"));
        Ok(check_env(make, options))
    }
    fn arguments(&self) -> Vec<String> {
        self.0.arguments()
    }
}

/// A Rust worker's init payload: `{"id": ..., "kwargs": {...}, "on_panic": "report"}`
/// (`kwargs` and `on_panic` optional; see [`OnPanic`]); `id` is the env's registry id, also read
/// from `"env_id"`, its old spelling.
#[derive(Debug, serde::Deserialize)]
struct WorkerInit {
    #[serde(alias = "env_id")]
    id: String,
    #[serde(default)]
    kwargs: Value,
    #[serde(default)]
    on_panic: OnPanic,
}

/// Env ids and their constructors (see the [module docs](self)).
///
/// ```
/// use ringenv_worker::{envs::CartPole, Registry};
/// let registry = Registry::new("demo").env("CartPole-v1", CartPole::new);
/// assert_eq!((registry.name(), registry.ids()), ("demo", vec!["CartPole-v1"]));
/// let description = registry.describe("demo:CartPole-v1", &serde_json::Value::Null).unwrap();
/// assert_eq!(description["observation_space"]["dtype"], "float32");
/// ```
pub struct Registry {
    name: String,
    entries: Vec<(String, Box<dyn Erased>)>,
}

/// `id` without its Gymnasium version suffix (`Sokoban-v0` -> `Sokoban`; an id without one is
/// itself).
fn unversioned(id: &str) -> &str {
    match id.rsplit_once("-v") {
        Some((name, v)) if !name.is_empty() && !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => id,
    }
}

fn same_name(a: &str, b: &str) -> bool {
    a.replace('-', "_") == b.replace('-', "_")
}

impl Registry {
    /// An empty registry named `name` (the namespace of its ids; [`crate::worker_main!`] uses
    /// the crate's package name).
    pub fn new(name: &str) -> Registry {
        Registry { name: name.to_string(), entries: Vec::new() }
    }

    /// Registers env `id`, built by `make` (see [`Constructor`]).
    ///
    /// # Panics
    /// When `id` is empty, contains `:` or is already registered.
    pub fn env<M: 'static, C: Constructor<M>>(mut self, id: &str, make: C) -> Registry {
        assert!(!id.is_empty() && !id.contains(':'), "env id {id:?} must be non-empty and contain no ':'");
        assert!(self.entries.iter().all(|(i, _)| i != id), "env id {id:?} is registered twice");
        self.entries.push((id.to_string(), Box::new(Typed(make, PhantomData))));
        self
    }

    /// The registry's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The registered ids, in registration order.
    pub fn ids(&self) -> Vec<&str> {
        self.entries.iter().map(|(id, _)| id.as_str()).collect()
    }

    /// The argument names of env `id` (empty when it takes none or they are not a struct's).
    ///
    /// # Errors
    /// `NameNotFound` for an unknown id.
    pub fn arguments(&self, id: &str) -> Result<Vec<String>, RemoteError> {
        Ok(self.entry(id)?.1.arguments())
    }

    fn entry(&self, id: &str) -> Result<(&str, &dyn Erased), RemoteError> {
        let bare = match id.split_once(':') {
            Some((ns, rest)) if same_name(ns, &self.name) => rest,
            _ => id,
        };
        match self.entries.iter().find(|(i, _)| i == bare) {
            Some((i, e)) => Ok((i.as_str(), e.as_ref())),
            None => {
                // Gymnasium's kinds: VersionNotFound when another version of the name is served.
                let name = unversioned(bare);
                let versions: Vec<&str> =
                    self.ids().into_iter().filter(|i| unversioned(i) == name && name != bare).collect();
                let (kind, other) = if versions.is_empty() {
                    ("NameNotFound", String::new())
                } else {
                    ("VersionNotFound", format!(" ({name} is served as {})", versions.join(", ")))
                };
                Err(RemoteError {
                    kind: kind.into(),
                    message: format!(
                        "no env {id:?} in {}{other}; its ids are {:?} (also spelled {}:ID)",
                        self.name,
                        self.ids(),
                        self.name
                    ),
                    ..Default::default()
                })
            }
        }
    }

    /// The checked `(observation, action)` spaces of env `id` built with `kwargs`.
    ///
    /// # Errors
    /// A [`RemoteError`]: `NameNotFound` (unknown id, listing the ids; `VersionNotFound` when
    /// only the `-vN` version differs from a served id's, as Gymnasium tells them apart),
    /// `ValueError` (arguments
    /// that do not fit, naming the argument, or refused by the constructor), `panic` (the
    /// constructor panicked, with the location), `InvalidSpace` (see [`crate::SpaceError`]).
    pub fn spaces(&self, id: &str, kwargs: &Value) -> Result<(Space, Space), RemoteError> {
        let (id, entry) = self.entry(id)?;
        entry.spaces(id, kwargs)
    }

    /// The description a worker binary prints for `describe`: `{"id", "observation_space",
    /// "action_space", "arguments"}`, spaces in [`Space::to_json`] form.
    ///
    /// # Errors
    /// As [`Registry::spaces`].
    pub fn describe(&self, id: &str, kwargs: &Value) -> Result<Value, RemoteError> {
        let (bare, entry) = self.entry(id)?;
        let (obs, act) = entry.spaces(bare, kwargs)?;
        Ok(serde_json::json!({
            "id": bare,
            "observation_space": obs.to_json(),
            "action_space": act.to_json(),
            "arguments": entry.arguments(),
        }))
    }

    /// The host of envs `env_ids` of env `id` built with `kwargs`, for a segment with `layout`
    /// (panics reported, [`OnPanic::Report`]).
    ///
    /// # Errors
    /// As [`Registry::spaces`], and `SpaceMismatch` when the layout does not fit the spaces.
    pub fn make_host(
        &self,
        id: &str,
        kwargs: &Value,
        env_ids: Range<usize>,
        layout: &Layout,
    ) -> Result<Box<dyn EnvHost>, RemoteError> {
        let (id, entry) = self.entry(id)?;
        entry.host(id, kwargs, env_ids, layout, OnPanic::Report)
    }

    /// The [`crate::worker_loop::run`] builder: parses the JSON init payload
    /// `{"id": ..., "kwargs": {...}, "on_panic": "report" | "exit"}` (the last two optional)
    /// and builds the worker's envs.
    ///
    /// # Errors
    /// A `ValueError` for a malformed payload, else as [`Registry::make_host`].
    pub fn build_host(&self, init: &[u8], endpoint: &WorkerEndpoint) -> Result<Box<dyn EnvHost>, RemoteError> {
        self.build_host_for(init, endpoint.env_ids(), endpoint.segment().layout())
    }

    /// As [`Registry::build_host`], for the envs `env_ids` of a pool of layout `layout` hosted
    /// anywhere (a worker process, or the main process's inline share).
    ///
    /// # Errors
    /// As [`Registry::build_host`].
    pub fn build_host_for(
        &self,
        init: &[u8],
        env_ids: Range<usize>,
        layout: &Layout,
    ) -> Result<Box<dyn EnvHost>, RemoteError> {
        let init: WorkerInit = serde_json::from_slice(init).map_err(|e| RemoteError {
            kind: "ValueError".into(),
            message: format!("malformed Rust worker init payload: {e}"),
            ..Default::default()
        })?;
        let (id, entry) = self.entry(&init.id)?;
        entry.host(id, &init.kwargs, env_ids, layout, init.on_panic)
    }

    /// Runs [`check_env`] on env `id` built with `kwargs`.
    ///
    /// # Errors
    /// As [`Registry::spaces`] when the env cannot be built at all (the check itself reports
    /// every later problem).
    pub fn check(&self, id: &str, kwargs: &Value, options: &CheckOptions) -> Result<CheckReport, RemoteError> {
        let (id, entry) = self.entry(id)?;
        entry.check(id, kwargs, options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envs::CartPole;
    use serde_json::json;

    fn registry() -> Registry {
        Registry::new("custom-env").env("CartPole-v1", CartPole::new).env("Panicky-v0", || -> CartPole { panic!("no") })
    }

    #[test]
    fn namespaces_resolve_with_dashes_or_underscores_and_others_are_refused() {
        let r = registry();
        for id in ["CartPole-v1", "custom-env:CartPole-v1", "custom_env:CartPole-v1"] {
            assert_eq!(r.describe(id, &Value::Null).unwrap()["id"], "CartPole-v1", "{id}");
        }
        let err = r.spaces("other:CartPole-v1", &Value::Null).unwrap_err();
        assert_eq!(err.kind, "NameNotFound");
        assert!(err.message.contains("\"CartPole-v1\", \"Panicky-v0\"") && err.message.contains("custom-env:ID"));
    }

    #[test]
    fn constructor_errors_name_the_argument_or_the_panic_location() {
        let r = registry();
        let err = r.spaces("CartPole-v1", &json!({"foo": 1})).unwrap_err();
        assert_eq!(
            (err.kind.as_str(), err.message.as_str()),
            ("ValueError", "CartPole-v1 takes no arguments, got \"foo\"")
        );
        let err = r.spaces("Panicky-v0", &Value::Null).unwrap_err();
        assert_eq!(err.kind, "panic");
        assert!(
            err.message.starts_with("Panicky-v0: the constructor panicked: no (panicked at workers/src/"),
            "{}",
            err.message
        );
        assert!(r.check("Panicky-v0", &Value::Null, &CheckOptions::default()).is_err());
    }

    #[test]
    fn an_unknown_version_of_a_served_name_is_version_not_found() {
        let r = registry();
        let err = r.spaces("custom_env:CartPole-v0", &Value::Null).unwrap_err();
        assert_eq!(err.kind, "VersionNotFound");
        assert!(
            err.message
                .starts_with("no env \"custom_env:CartPole-v0\" in custom-env (CartPole is served as CartPole-v1);"),
            "{}",
            err.message
        );
        for unknown in ["CartPole", "Cart-v1", "Nope-v0", "-v1"] {
            assert_eq!(r.spaces(unknown, &Value::Null).unwrap_err().kind, "NameNotFound", "{unknown}");
        }
        assert_eq!((unversioned("A-v12"), unversioned("A-vx"), unversioned("A")), ("A", "A-vx", "A"));
    }

    #[test]
    #[should_panic(expected = "registered twice")]
    fn duplicate_ids_panic() {
        let _ = registry().env("CartPole-v1", CartPole::new);
    }
}
