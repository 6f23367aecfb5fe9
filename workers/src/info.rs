//! A small typed info dict that an env fills during `reset` or `step`.
//!
//! An [`Info`] holds up to [`Info::CAPACITY`] entries (a `&'static str` key and a bool, integer
//! or float) in a fixed array, so filling it allocates nothing. A command's non-empty infos go as
//! one typed message ([`encode`], [`ringenv_runtime::infos`]); an empty info costs nothing.
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

/// The typed message of `infos` (`(env_id, info)` pairs of one command, ascending, each info
/// non-empty): one run per stretch of consecutive envs whose infos have the same keys and value
/// types in the same order.
///
/// ```
/// use ringenv_runtime::infos::{parse, Value};
/// use ringenv_worker::Info;
/// let (mut a, mut b) = (Info::default(), Info::default());
/// a.set("steps", 12);
/// b.set("steps", 13);
/// let message = ringenv_worker::info::encode(&[(2, a), (3, b)]);
/// let runs = parse(&message, 4).unwrap();
/// assert_eq!((runs.len(), runs[0].first, runs[0].count), (1, 2, 2));
/// assert_eq!(runs[0].value(1, 0, 0).unwrap(), Value::Int(13));
/// ```
pub fn encode(infos: &[(usize, Info)]) -> Vec<u8> {
    use ringenv_runtime::infos::{Field, Value, Writer};
    let value = |v: InfoValue| match v {
        InfoValue::Bool(b) => Value::Bool(b),
        InfoValue::Int(i) => Value::Int(i),
        InfoValue::Float(f) => Value::Float(f),
    };
    let same = |a: &Info, b: &Info| {
        a.iter().map(|(k, v)| (k, value(v).kind())).eq(b.iter().map(|(k, v)| (k, value(v).kind())))
    };
    let mut w = Writer::new();
    let mut rest = infos;
    while let Some((first, info)) = rest.first() {
        let n = rest.iter().enumerate().take_while(|(j, (id, other))| *id == first + j && same(info, other)).count();
        let keys: Vec<(&str, Field)> = info.iter().map(|(k, v)| (k, Field::Scalar(value(v).kind()))).collect();
        w.run(*first, n, &keys).expect("an Info fits the typed format");
        for (_, info) in &rest[..n] {
            for (_, v) in info.iter() {
                w.value(value(v)).expect("numbers use no data section");
            }
        }
        rest = &rest[n..];
    }
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringenv_runtime::infos::{parse, Value};

    #[test]
    fn runs_split_where_ids_or_keys_change() {
        let mut a = Info::default();
        a.set("solved", true);
        a.set("moves", 1i64 << 40);
        let mut b = a;
        b.set("moves", 0.25); // a float now: another run
        let message = encode(&[(0, a), (1, a), (2, b), (5, b)]);
        let runs = parse(&message, 6).unwrap();
        let shape: Vec<_> = runs.iter().map(|r| (r.first, r.count)).collect();
        assert_eq!(shape, [(0, 2), (2, 1), (5, 1)]);
        assert_eq!(runs[0].value(1, 1, 0).unwrap(), Value::Int(1 << 40));
        assert_eq!(runs[1].value(0, 1, 0).unwrap(), Value::Float(0.25));
        assert_eq!(runs[2].keys.iter().map(|(k, _)| *k).collect::<Vec<_>>(), ["solved", "moves"]);
        assert!(encode(&[]).is_empty());
    }

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
