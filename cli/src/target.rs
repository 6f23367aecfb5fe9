//! What `ENV` names: a built-in Rust env, served by this binary's hidden `worker` subcommand, or
//! `BINARY:ID`, an env served by a worker binary built with the SDK, whose spaces come from
//! `BINARY describe ID`.

use ringenv_worker::{registry, Space};
use serde_json::Value;
use std::path::PathBuf;

/// A resolved env: the worker program, the env id, and its spaces.
pub struct Target {
    /// What the user typed.
    pub name: String,
    /// The worker program.
    pub program: PathBuf,
    /// Its arguments before the ones the pool appends.
    pub args: Vec<String>,
    /// The env id the worker serves.
    pub env_id: String,
    /// Constructor arguments (JSON).
    pub kwargs: Value,
    /// Observation space.
    pub observation: Space,
    /// Action space.
    pub action: Space,
}

/// Resolves `env` (with constructor arguments `kwargs`).
///
/// # Errors
/// A message naming the env when it is neither a built-in id nor `BINARY:ID` of a worker binary
/// that can describe it.
pub fn resolve(env: &str, kwargs: Value) -> Result<Target, String> {
    if registry::ids().contains(&env) {
        let (observation, action) =
            registry::spaces(env, &kwargs).map_err(|e| format!("argument ENV: {}", e.message))?;
        let program = std::env::current_exe().map_err(|e| format!("cannot locate this binary: {e}"))?;
        let args = vec!["worker".to_string()];
        return Ok(Target { name: env.into(), program, args, env_id: env.into(), kwargs, observation, action });
    }
    let Some((binary, id)) = env.rsplit_once(':').filter(|(b, _)| std::path::Path::new(b).is_file()) else {
        return Err(format!(
            "argument ENV: {env:?} is not a built-in id ({}) nor BINARY:ID of an existing worker binary",
            registry::ids().join(", ")
        ));
    };
    let out = std::process::Command::new(binary)
        .args(["describe", id, "--kwargs", &kwargs.to_string()])
        .output()
        .map_err(|e| format!("cannot run {binary}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{binary} describe {id}: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    let d: Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("{binary} describe {id} printed no JSON: {e}"))?;
    let space = |k: &str| Space::from_json(&d[k]).map_err(|e| format!("{binary} describe {id}: {k}: {e}"));
    Ok(Target {
        name: env.into(),
        program: PathBuf::from(binary),
        args: Vec::new(),
        env_id: id.into(),
        kwargs,
        observation: space("observation_space")?,
        action: space("action_space")?,
    })
}
