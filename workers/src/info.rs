//! A small typed info dict that an env fills during `reset` or `step`.
//!
//! An [`Info`] holds up to [`Info::CAPACITY`] entries, each a `&'static str` key and a bool,
//! integer or float value, in a fixed array: filling it allocates nothing. The worker sends a
//! non-empty info to Python, where it is vectorised as Gymnasium's vector envs do (an array per
//! key and a `_key` mask); an empty one costs nothing.
//!
//! ```
//! use ringenv_worker::{Info, InfoValue};
//! let mut info = Info::default();
//! info.set("is_success", true);
//! info.set("boxes_on_goal", 2);
//! info.set("boxes_on_goal", 3); // replaces
//! assert_eq!(info.get("boxes_on_goal"), Some(InfoValue::Int(3)));
//! assert_eq!(info.len(), 2);
//! info.clear();
//! assert!(info.is_empty());
//! ```

/// One info value.
///
/// ```
/// use ringenv_worker::InfoValue;
/// assert_eq!(InfoValue::from(3u8), InfoValue::Int(3));
/// assert_eq!(InfoValue::from(0.5f32), InfoValue::Float(0.5));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum InfoValue {
    /// A Python `bool`.
    Bool(bool),
    /// A Python `int`.
    Int(i64),
    /// A Python `float`.
    Float(f64),
}

macro_rules! info_from {
    ($variant:ident: $($t:ty),*) => {$(
        impl From<$t> for InfoValue {
            fn from(v: $t) -> InfoValue { InfoValue::$variant(v.into()) }
        }
    )*};
}
info_from!(Bool: bool);
info_from!(Int: i8, i16, i32, i64, u8, u16, u32);
info_from!(Float: f32, f64);

/// Up to [`Info::CAPACITY`] `(key, value)` entries, in insertion order. Two infos are equal when
/// they hold the same entries in the same order.
///
/// ```
/// use ringenv_worker::Info;
/// let mut info = Info::default();
/// info.set("deadlocked", false);
/// assert_eq!(info.iter().collect::<Vec<_>>(), [("deadlocked", false.into())]);
/// ```
#[derive(Clone, Copy)]
pub struct Info {
    entries: [(&'static str, InfoValue); Info::CAPACITY],
    len: usize,
}

impl Default for Info {
    fn default() -> Info {
        Info { entries: [("", InfoValue::Bool(false)); Info::CAPACITY], len: 0 }
    }
}

impl PartialEq for Info {
    fn eq(&self, other: &Info) -> bool {
        self.iter().eq(other.iter())
    }
}

impl std::fmt::Debug for Info {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Info {
    /// The most entries one info holds.
    pub const CAPACITY: usize = 8;

    /// Sets `key` to `value`, replacing an earlier value of the same key.
    ///
    /// # Panics
    /// When `key` is new and the info already holds [`Info::CAPACITY`] keys (the message names
    /// the key, and the panic's location is the caller's line: `#[track_caller]`).
    #[track_caller]
    pub fn set(&mut self, key: &'static str, value: impl Into<InfoValue>) {
        let value = value.into();
        if let Some(e) = self.entries[..self.len].iter_mut().find(|(k, _)| *k == key) {
            e.1 = value;
            return;
        }
        assert!(self.len < Info::CAPACITY, "Info holds at most {} keys; cannot add {key:?}", Info::CAPACITY);
        self.entries[self.len] = (key, value);
        self.len += 1;
    }

    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<InfoValue> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// The entries, in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, InfoValue)> + '_ {
        self.entries[..self.len].iter().copied()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Removes every entry.
    pub fn clear(&mut self) {
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_insertion_order_and_refuses_a_ninth_key() {
        let mut info = Info::default();
        let keys = ["a", "b", "c", "d", "e", "f", "g", "h"];
        for (i, k) in keys.iter().enumerate() {
            info.set(k, i as i64);
        }
        assert_eq!(info.iter().map(|(k, _)| k).collect::<Vec<_>>(), keys);
        info.set("a", 1.5); // replacing is fine when full
        assert_eq!(info.get("a"), Some(InfoValue::Float(1.5)));
        let mut other = info;
        other.clear();
        other.set("a", 1.5);
        assert_ne!(info, other); // stale entries past the length do not count, the others do
        other.clear();
        assert_eq!(other, Info::default());
        assert_eq!(format!("{other:?}"), "{}");
        let full = std::panic::catch_unwind(move || info.set("i", true)).unwrap_err();
        assert_eq!(full.downcast_ref::<String>().unwrap(), "Info holds at most 8 keys; cannot add \"i\"");
    }
}
