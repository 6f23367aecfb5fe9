//! Typed constructor arguments: Python's `env_kwargs` (a JSON object) into a Rust struct, with
//! errors that name the argument.
//!
//! [`parse`] refuses an argument the struct does not have (the field list is read from its
//! `Deserialize` impl) and names the argument whose value does not fit, with serde's reason.
//!
//! ```
//! use serde::Deserialize;
//! use serde_json::json;
//! #[derive(Deserialize, Debug, PartialEq)]
//! #[serde(default)]
//! struct Args { size: usize, slippery: bool }
//! impl Default for Args { fn default() -> Self { Args { size: 5, slippery: false } } }
//!
//! let args: Args = ringenv_worker::kwargs::parse("Maze-v0", &json!({"size": 8})).unwrap();
//! assert_eq!(args, Args { size: 8, slippery: false });
//! let err = ringenv_worker::kwargs::parse::<Args>("Maze-v0", &json!({"size": "8"})).unwrap_err();
//! assert_eq!(err.to_string(), "Maze-v0: argument \"size\" = \"8\" does not fit: invalid type: \
//!            string \"8\", expected usize (Maze-v0 accepts size, slippery)");
//! let err = ringenv_worker::kwargs::parse::<Args>("Maze-v0", &json!({"colour": 1})).unwrap_err();
//! assert_eq!(err.to_string(), "Maze-v0 takes no argument \"colour\"; it accepts size, slippery");
//! ```

use serde::de::{DeserializeOwned, Visitor};
use serde::Deserializer;
use serde_json::{Map, Value};

/// Why `env_kwargs` do not fit an env's arguments.
///
/// ```
/// use ringenv_worker::kwargs::{parse, KwargsError};
/// let err = parse::<u32>("X-v0", &serde_json::json!("many")).unwrap_err();
/// assert!(matches!(err, KwargsError::NotAMapping { .. }));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KwargsError {
    /// `env_kwargs` is not a mapping.
    NotAMapping {
        /// The env's registry id (as Gymnasium's `id`).
        id: String,
        /// What was given, as JSON.
        got: String,
    },
    /// An argument the env does not take.
    Unknown {
        /// The env's registry id (as Gymnasium's `id`).
        id: String,
        /// The argument.
        name: String,
        /// The arguments the env takes.
        accepted: Vec<String>,
    },
    /// An argument whose value does not fit its type, or a missing required argument.
    Invalid {
        /// The env's registry id (as Gymnasium's `id`).
        id: String,
        /// The argument, when one is at fault.
        name: Option<String>,
        /// Its value as JSON, when one is at fault.
        value: Option<String>,
        /// serde's reason (for example ``invalid type: string "8", expected usize``).
        reason: String,
        /// The arguments the env takes (empty when unknown).
        accepted: Vec<String>,
    },
    /// The env's constructor refused the arguments (its error message).
    Refused {
        /// The env's registry id (as Gymnasium's `id`).
        id: String,
        /// The constructor's message.
        reason: String,
    },
}

impl std::fmt::Display for KwargsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KwargsError::NotAMapping { id, got } => write!(f, "{id}: env_kwargs must be a mapping, got {got}"),
            KwargsError::Unknown { id, name, accepted } if accepted.is_empty() => {
                write!(f, "{id} takes no arguments, got {name:?}")
            }
            KwargsError::Unknown { id, name, accepted } => {
                write!(f, "{id} takes no argument {name:?}; it accepts {}", accepted.join(", "))
            }
            KwargsError::Invalid { id, name, value, reason, accepted } => {
                match (name, value) {
                    (Some(n), Some(v)) => write!(f, "{id}: argument {n:?} = {v} does not fit: {reason}")?,
                    _ => write!(f, "{id}: {reason}")?,
                }
                if !accepted.is_empty() {
                    write!(f, " ({id} accepts {})", accepted.join(", "))?;
                }
                Ok(())
            }
            KwargsError::Refused { id, reason } => write!(f, "{id}: {reason}"),
        }
    }
}
impl std::error::Error for KwargsError {}

/// A deserializer that only records the field names a struct asks for.
struct FieldProbe<'a>(&'a mut Option<&'static [&'static str]>);

#[derive(Debug, thiserror::Error)]
#[error("probed")]
struct Probed;
impl serde::de::Error for Probed {
    fn custom<T: std::fmt::Display>(_: T) -> Probed {
        Probed
    }
}

impl<'de> Deserializer<'de> for FieldProbe<'_> {
    type Error = Probed;
    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Probed> {
        Err(Probed)
    }
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Probed> {
        *self.0 = Some(fields);
        Err(Probed)
    }
    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
        unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

/// The field names of `T` when it deserializes as a struct (derived `Deserialize`), else `None`
/// (a map, `serde_json::Value`, a struct with `#[serde(flatten)]`, ...).
///
/// ```
/// use ringenv_worker::kwargs::fields_of;
/// #[derive(serde::Deserialize)]
/// struct Args { num_blocks: usize, seed: u64 }
/// assert_eq!(fields_of::<Args>(), Some(&["num_blocks", "seed"][..]));
/// assert_eq!(fields_of::<serde_json::Value>(), None);
/// ```
pub fn fields_of<T: DeserializeOwned>() -> Option<&'static [&'static str]> {
    let mut fields = None;
    let _ = T::deserialize(FieldProbe(&mut fields));
    fields
}

/// The arguments of env `id` from `kwargs` (a JSON object; `null` counts as `{}`).
///
/// ```
/// #[derive(serde::Deserialize)]
/// struct Args { #[serde(default = "four")] num_blocks: usize }
/// fn four() -> usize { 4 }
/// let args: Args = ringenv_worker::kwargs::parse("Blocks-v0", &serde_json::Value::Null).unwrap();
/// assert_eq!(args.num_blocks, 4); // the default
/// ```
///
/// # Errors
/// [`KwargsError`]: not a mapping, an argument `T` does not have (when `T` is a struct), or an
/// argument that does not fit (naming it, its value and serde's reason).
pub fn parse<T: DeserializeOwned>(id: &str, kwargs: &Value) -> Result<T, KwargsError> {
    let map = match kwargs {
        Value::Null => Map::new(),
        Value::Object(m) => m.clone(),
        other => return Err(KwargsError::NotAMapping { id: id.into(), got: other.to_string() }),
    };
    let fields = fields_of::<T>();
    let accepted: Vec<String> = fields.unwrap_or(&[]).iter().map(|s| s.to_string()).collect();
    if let Some(fields) = fields {
        if let Some(bad) = map.keys().find(|k| !fields.contains(&k.as_str())) {
            return Err(KwargsError::Unknown { id: id.into(), name: bad.clone(), accepted });
        }
    }
    // One argument per line, so that serde's line number names the argument at fault.
    let entries: Vec<(&String, &Value)> = map.iter().collect();
    let mut text = String::from("{\n");
    for (i, (k, v)) in entries.iter().enumerate() {
        let sep = if i + 1 < entries.len() { "," } else { "" };
        text.push_str(&format!("{}: {v}{sep}\n", Value::String((*k).clone())));
    }
    text.push('}');
    serde_json::from_str(&text).map_err(|e| {
        let full = e.to_string();
        let reason = full.rfind(" at line ").map_or(full.as_str(), |at| &full[..at]).to_string();
        let at = e.line().checked_sub(2).and_then(|i| entries.get(i));
        KwargsError::Invalid {
            id: id.into(),
            name: at.map(|(k, _)| (*k).clone()),
            value: at.map(|(_, v)| v.to_string()),
            reason,
            accepted,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Deserialize, Debug, PartialEq)]
    struct Required {
        width: u32,
        #[serde(default)]
        walls: Vec<(u8, u8)>,
    }

    #[test]
    fn the_argument_at_fault_is_named_among_several() {
        let err = parse::<Required>("Grid-v0", &json!({"walls": [[1, 2], [3, 300]], "width": 4})).unwrap_err();
        let KwargsError::Invalid { name, value, reason, .. } = &err else { panic!("{err:?}") };
        assert_eq!((name.as_deref(), value.as_deref()), (Some("walls"), Some("[[1,2],[3,300]]")));
        assert!(reason.contains("300"), "{reason}");
        let err = parse::<Required>("Grid-v0", &json!({})).unwrap_err().to_string();
        assert_eq!(err, "Grid-v0: missing field `width` (Grid-v0 accepts width, walls)");
        assert_eq!(parse::<Required>("Grid-v0", &json!({"width": 2})).unwrap(), Required { width: 2, walls: vec![] });
        let err = parse::<Required>("Grid-v0", &json!([1])).unwrap_err().to_string();
        assert_eq!(err, "Grid-v0: env_kwargs must be a mapping, got [1]");
    }

    #[test]
    fn maps_accept_any_name_and_structs_list_their_fields() {
        let any: std::collections::BTreeMap<String, i32> = parse("X-v0", &json!({"a": 1, "b": 2})).unwrap();
        assert_eq!(any.len(), 2);
        assert_eq!(fields_of::<std::collections::BTreeMap<String, i32>>(), None);
        assert_eq!(fields_of::<Required>(), Some(&["width", "walls"][..]));
    }
}
