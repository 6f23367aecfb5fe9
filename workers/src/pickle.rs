//! The few pickle messages a Rust worker exchanges with ringenv's Python side.
//!
//! Python sends `reset` options as `cloudpickle.dumps(options)` and reads each reset's and step's
//! message as `cloudpickle.loads(payload)` → `(observations, [(env_id, info), ...])`. A Rust
//! worker needs neither cloudpickle nor Python for that: [`decode`] reads the plain-data subset of
//! the pickle format (protocols 2 to 5: `None`, `bool`, `int`, `float`, `str`, `list`, `tuple`,
//! `dict` with string keys) into a JSON value, and [`encode_infos`] writes the message of a step
//! whose envs filled an [`Info`] (observations travel in shared memory, so that part is `None`).
//! Opcodes follow CPython's `Lib/pickletools.py`.
//!
//! ```
//! use ringenv_worker::{pickle, Info};
//! // cloudpickle.dumps({"level": 3}) with Python 3.11
//! let bytes = b"\x80\x05\x95\x0e\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x05level\x94K\x03s.";
//! assert_eq!(pickle::decode(bytes).unwrap(), serde_json::json!({"level": 3}));
//! let mut info = Info::default();
//! info.set("solved", true);
//! let message = pickle::encode_infos(&[(4, info)]);
//! assert_eq!(&message[..2], b"\x80\x02"); // protocol 2
//! ```

use crate::{Info, InfoValue};
use serde_json::{Map, Number, Value};

/// Why a pickle could not be read as plain data.
///
/// ```
/// let err = ringenv_worker::pickle::decode(b"\x80\x05").unwrap_err();
/// assert!(err.to_string().contains("truncated pickle at byte 2"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PickleError(pub String);

impl std::fmt::Display for PickleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cannot read the reset options of a Rust env: {} (options must be plain Python data: None, bool, int, \
             float, str, list, tuple, and dict with str keys)",
            self.0
        )
    }
}
impl std::error::Error for PickleError {}

/// The deepest nesting of lists, tuples and dicts a message may have (reset options are shallow;
/// deeper values would recurse deeply when dropped or compared).
const MAX_DEPTH: usize = 64;

/// At most how many bytes the strings fetched from the memo (`BINGET`) may add up to, besides
/// the input itself: a 2-byte `BINGET` of a long memoised string would otherwise copy it once per
/// 2 input bytes.
const MAX_MEMO_COPIES: usize = 16 << 20;

enum Item {
    Mark,
    /// A value and its nesting depth (0 for a scalar, 1 for a flat list, ...).
    Value(Value, usize),
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], PickleError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| PickleError(format!("truncated pickle at byte {}", self.at)))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], PickleError> {
        Ok(self.take(N)?.try_into().expect("N bytes"))
    }
    fn string(&mut self, n: usize) -> Result<Value, PickleError> {
        let raw = self.take(n)?;
        let s = std::str::from_utf8(raw).map_err(|e| PickleError(format!("a str that is not UTF-8: {e}")))?;
        Ok(Value::String(s.to_string()))
    }
}

fn int(v: i128) -> Result<Value, PickleError> {
    if let Ok(i) = i64::try_from(v) {
        Ok(Value::from(i))
    } else if let Ok(u) = u64::try_from(v) {
        Ok(Value::from(u))
    } else {
        Err(PickleError(format!("the int {v} does not fit in 64 bits")))
    }
}

/// Values with their depths, and the depth of a container holding them.
type Values = (Vec<Value>, usize);

/// The depth of a container of items of depth `inner` (an error past [`MAX_DEPTH`]).
fn container_depth(inner: usize) -> Result<usize, PickleError> {
    let depth = inner + 1;
    if depth > MAX_DEPTH {
        return Err(PickleError(format!("values nested deeper than {MAX_DEPTH} levels")));
    }
    Ok(depth)
}

fn pop_to_mark(stack: &mut Vec<Item>) -> Result<Values, PickleError> {
    let mark = stack.iter().rposition(|i| matches!(i, Item::Mark)).ok_or_else(|| PickleError("no MARK".into()))?;
    let items = stack.split_off(mark + 1);
    stack.pop();
    let mut depth = 0;
    let mut values = Vec::with_capacity(items.len());
    for item in items {
        match item {
            Item::Value(v, d) => {
                depth = depth.max(d);
                values.push(v);
            }
            Item::Mark => return Err(PickleError("a MARK after the last MARK".into())),
        }
    }
    Ok((values, depth))
}

fn pop(stack: &mut Vec<Item>) -> Result<(Value, usize), PickleError> {
    match stack.pop() {
        Some(Item::Value(v, d)) => Ok((v, d)),
        _ => Err(PickleError("stack underflow".into())),
    }
}

fn set_items(stack: &mut [Item], (pairs, inner): Values) -> Result<(), PickleError> {
    let Some(Item::Value(Value::Object(map), depth)) = stack.last_mut() else {
        return Err(PickleError("SETITEMS on something other than a dict".into()));
    };
    *depth = (*depth).max(container_depth(inner)?);
    let mut it = pairs.into_iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        match k {
            Value::String(k) => map.insert(k, v),
            other => return Err(PickleError(format!("a dict key {other} that is not a str"))),
        };
    }
    Ok(())
}

fn append(stack: &mut [Item], (values, inner): Values) -> Result<(), PickleError> {
    match stack.last_mut() {
        Some(Item::Value(Value::Array(list), depth)) => {
            *depth = (*depth).max(container_depth(inner)?);
            list.extend(values);
            Ok(())
        }
        _ => Err(PickleError("APPENDS on something other than a list".into())),
    }
}

/// Reads a pickle of plain data as a JSON value (a tuple becomes a list).
///
/// ```
/// // pickle.dumps((1, "a", None, 2.5), protocol=2)
/// let bytes = b"\x80\x02(K\x01X\x01\x00\x00\x00aq\x00NG@\x04\x00\x00\x00\x00\x00\x00tq\x01.";
/// assert_eq!(ringenv_worker::pickle::decode(bytes).unwrap(), serde_json::json!([1, "a", null, 2.5]));
/// ```
///
/// Memory is bounded by the input: each opcode pushes at most one value, a memo index is at
/// most the number of input bytes (every memoised value came from at least one byte of input),
/// strings fetched from the memo add up to at most 16 MiB, and values nest at most 64 deep.
///
/// # Errors
/// [`PickleError`] naming the first opcode outside the plain-data subset (for example a NumPy
/// array or any other object), a non-finite float, an int beyond 64 bits, a non-str dict key, a
/// memo index beyond the input, values nested or memo copies beyond the bounds above, or a
/// truncated stream.
pub fn decode(bytes: &[u8]) -> Result<Value, PickleError> {
    let mut r = Reader { bytes, at: 0 };
    let mut stack: Vec<Item> = Vec::new();
    let mut memo: Vec<Option<Value>> = Vec::new();
    let mut copied = 0usize;
    let put = |memo: &mut Vec<Option<Value>>, k: usize, v: Option<Value>| {
        // A pickle of n bytes memoises fewer than n values: a larger index is a forgery, and
        // growing the memo to it would allocate without bound (4 bytes of LONG_BINPUT name 2^32).
        if k >= bytes.len() {
            return Err(PickleError(format!("memo index {k} in a pickle of {} bytes", bytes.len())));
        }
        if memo.len() <= k {
            memo.resize(k + 1, None);
        }
        memo[k] = v;
        Ok(())
    };
    loop {
        let at = r.at;
        let op = r.take(1)?[0];
        let value = match op {
            0x80 => {
                r.take(1)?; // PROTO n
                continue;
            }
            0x95 => {
                r.take(8)?; // FRAME length
                continue;
            }
            b'.' => return pop(&mut stack).map(|(v, _)| v), // STOP
            b'(' => {
                stack.push(Item::Mark);
                continue;
            }
            b'N' => Value::Null,
            0x88 => Value::Bool(true),
            0x89 => Value::Bool(false),
            b'J' => Value::from(i32::from_le_bytes(r.array()?)),
            b'K' => Value::from(r.take(1)?[0]),
            b'M' => Value::from(u16::from_le_bytes(r.array()?)),
            0x8a => {
                let n = usize::from(r.take(1)?[0]);
                let raw = r.take(n)?;
                if n > 16 {
                    return Err(PickleError(format!("an int of {n} bytes does not fit in 64 bits")));
                }
                let fill = if raw.last().is_some_and(|b| b & 0x80 != 0) { 0xff } else { 0 };
                let mut wide = [fill; 16];
                wide[..n].copy_from_slice(raw);
                int(i128::from_le_bytes(wide))?
            }
            b'G' => {
                let v = f64::from_be_bytes(r.array()?);
                Value::Number(Number::from_f64(v).ok_or_else(|| PickleError(format!("the float {v} is not finite")))?)
            }
            0x8c => {
                let n = usize::from(r.take(1)?[0]);
                r.string(n)?
            }
            b'X' => {
                let n = u32::from_le_bytes(r.array()?) as usize;
                r.string(n)?
            }
            0x8d => {
                let n = usize::try_from(u64::from_le_bytes(r.array()?)).map_err(|_| PickleError("huge str".into()))?;
                r.string(n)?
            }
            b'}' => Value::Object(Map::new()),
            b']' | b')' => Value::Array(Vec::new()),
            b't' => {
                let (items, inner) = pop_to_mark(&mut stack)?;
                stack.push(Item::Value(Value::Array(items), container_depth(inner)?));
                continue;
            }
            0x85..=0x87 => {
                let n = usize::from(op - 0x84);
                let (mut items, mut inner) = (Vec::with_capacity(n), 0);
                for _ in 0..n {
                    let (v, d) = pop(&mut stack)?;
                    inner = inner.max(d);
                    items.push(v);
                }
                items.reverse();
                stack.push(Item::Value(Value::Array(items), container_depth(inner)?));
                continue;
            }
            b's' => {
                let (v, dv) = pop(&mut stack)?;
                let (k, dk) = pop(&mut stack)?;
                set_items(&mut stack, (vec![k, v], dk.max(dv)))?;
                continue;
            }
            b'u' => {
                let pairs = pop_to_mark(&mut stack)?;
                set_items(&mut stack, pairs)?;
                continue;
            }
            b'a' => {
                let (v, d) = pop(&mut stack)?;
                append(&mut stack, (vec![v], d))?;
                continue;
            }
            b'e' => {
                let values = pop_to_mark(&mut stack)?;
                append(&mut stack, values)?;
                continue;
            }
            0x94 | b'q' | b'r' => {
                let k = match op {
                    0x94 => memo.len(),
                    b'q' => usize::from(r.take(1)?[0]),
                    _ => u32::from_le_bytes(r.array()?) as usize,
                };
                let top = match stack.last() {
                    // Containers are memoised empty and filled later: a GET of one (a list or dict
                    // referenced twice) would see a stale copy, so it is refused below.
                    Some(Item::Value(Value::Array(_) | Value::Object(_), _)) => None,
                    Some(Item::Value(v, _)) => Some(v.clone()),
                    _ => return Err(PickleError("MEMOIZE with no value".into())),
                };
                put(&mut memo, k, top)?;
                continue;
            }
            b'h' | b'j' => {
                let k = if op == b'h' { usize::from(r.take(1)?[0]) } else { u32::from_le_bytes(r.array()?) as usize };
                let v = memo.get(k).cloned().flatten().ok_or_else(|| {
                    PickleError(format!("memo {k} is unknown or a list or dict referenced twice (shared references)"))
                })?;
                copied += v.as_str().map_or(0, str::len);
                if copied > MAX_MEMO_COPIES {
                    return Err(PickleError(format!(
                        "memoised strings fetched more than {MAX_MEMO_COPIES} bytes in all"
                    )));
                }
                v
            }
            other => {
                return Err(PickleError(format!(
                    "pickle opcode {other:#04x} at byte {at} (an object such as a NumPy array or a class instance)"
                )))
            }
        };
        stack.push(Item::Value(value, 0));
    }
}

fn push_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'X'); // BINUNICODE
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn push_int(out: &mut Vec<u8>, v: i64) {
    match i32::try_from(v) {
        Ok(v) => {
            out.push(b'J'); // BININT
            out.extend_from_slice(&v.to_le_bytes());
        }
        Err(_) => {
            out.extend_from_slice(&[0x8a, 8]); // LONG1, 8 bytes two's complement
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
}

/// The message of a reset or step whose envs filled an info: the pickle (protocol 2) of
/// `(None, [(env_id, {key: value, ...}), ...])`, as `ringenv.AsyncVectorEnv` reads it.
///
/// ```
/// use ringenv_worker::{pickle, Info};
/// let mut info = Info::default();
/// info.set("steps", 12);
/// let decoded = pickle::decode(&pickle::encode_infos(&[(2, info)])).unwrap();
/// assert_eq!(decoded, serde_json::json!([null, [[2, {"steps": 12}]]]));
/// ```
pub fn encode_infos(infos: &[(usize, Info)]) -> Vec<u8> {
    let mut out = vec![0x80, 2, b'N', b']']; // PROTO 2, None, []
    if !infos.is_empty() {
        out.push(b'(');
        for (env, info) in infos {
            push_int(&mut out, *env as i64);
            out.extend_from_slice(b"}(");
            for (key, value) in info.iter() {
                push_str(&mut out, key);
                match value {
                    InfoValue::Bool(b) => out.push(if b { 0x88 } else { 0x89 }),
                    InfoValue::Int(i) => push_int(&mut out, i),
                    InfoValue::Float(f) => {
                        out.push(b'G');
                        out.extend_from_slice(&f.to_be_bytes());
                    }
                }
            }
            out.extend_from_slice(&[b'u', 0x86]); // SETITEMS, TUPLE2
        }
        out.push(b'e'); // APPENDS
    }
    out.extend_from_slice(&[0x86, b'.']); // TUPLE2, STOP
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn decodes_what_cloudpickle_writes_for_plain_data() {
        // cloudpickle.dumps({'level': 3, 'name': 'x', 'f': True, 'r': 0.5, 'l': [1, 2, (3, None)],
        //                    'big': 2**70, 'neg': -5}) with Python 3.11, but 'big' is 2**62 here.
        let bytes = b"\x80\x05\x95Y\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x05level\x94K\x03\x8c\x04name\x94\
\x8c\x01x\x94\x8c\x01f\x94\x88\x8c\x01r\x94G?\xe0\x00\x00\x00\x00\x00\x00\x8c\x01l\x94]\x94(K\x01K\x02K\x03N\x86\x94e\
\x8c\x03big\x94\x8a\x08\x00\x00\x00\x00\x00\x00\x00@\x8c\x03neg\x94J\xfb\xff\xff\xffu.";
        let want = json!({"level": 3, "name": "x", "f": true, "r": 0.5, "l": [1, 2, [3, null]],
                          "big": 1u64 << 62, "neg": -5});
        assert_eq!(decode(bytes).unwrap(), want);
    }

    #[test]
    fn objects_and_huge_ints_are_named() {
        // cloudpickle.dumps({'a': numpy.int64(1)}) starts its value with STACK_GLOBAL machinery.
        let err = decode(b"\x80\x05}\x94\x8c\x01a\x94\x8c\x05numpy\x94\x93.").unwrap_err();
        assert!(err.to_string().contains("opcode 0x93"), "{err}");
        // 2**70 as LONG1 of 9 bytes
        let err = decode(b"\x80\x05\x8a\t\x00\x00\x00\x00\x00\x00\x00\x00@.").unwrap_err();
        assert!(err.0.contains("does not fit in 64 bits"), "{err}");
        assert!(decode(b"\x80\x05}").unwrap_err().0.contains("truncated"));
    }

    #[test]
    fn a_huge_memo_index_is_an_error_not_an_allocation() {
        // None, LONG_BINPUT 0xffffffff: five bytes once asked for a memo of 2^32 entries (128 GiB).
        let err = decode(b"Nr\xff\xff\xff\xff").unwrap_err();
        assert!(err.0.contains("memo index 4294967295 in a pickle of 6 bytes"), "{err}");
        let err = decode(b"Nr\xff\xff\xff\x7f.").unwrap_err();
        assert!(err.0.contains("memo index"), "{err}");
        // BINPUT within the input is fine.
        assert_eq!(decode(b"Nq\x01.").unwrap(), Value::Null);
    }

    #[test]
    fn nesting_and_memo_copies_are_bounded() {
        // 100 nested lists: ]]]...] then 99 APPENDs.
        let mut deep = vec![b']'; 100];
        deep.extend(vec![b'a'; 99]);
        deep.push(b'.');
        assert!(decode(&deep).unwrap_err().0.contains("nested deeper than 64"));
        let mut ok = vec![b']'; 60];
        ok.extend(vec![b'a'; 59]);
        ok.push(b'.');
        assert!(decode(&ok).is_ok());
        // A 1 MiB string memoised, then fetched 40 times: 40 MiB of copies from ~1 MiB of input.
        let mut many = vec![b'X'];
        many.extend_from_slice(&(1u32 << 20).to_le_bytes());
        many.extend(std::iter::repeat_n(b'a', 1 << 20));
        many.extend_from_slice(b"q\x00]");
        for _ in 0..40 {
            many.extend_from_slice(b"h\x00a");
        }
        many.push(b'.');
        assert!(decode(&many).unwrap_err().0.contains("memoised strings"));
    }

    #[test]
    fn info_message_round_trips_through_the_decoder() {
        let mut a = Info::default();
        a.set("solved", true);
        a.set("moves", 1i64 << 40);
        a.set("ratio", 0.25);
        let mut b = Info::default();
        b.set("solved", false);
        let value = decode(&encode_infos(&[(3, a), (70000, b)])).unwrap();
        let want =
            json!([null, [[3, {"solved": true, "moves": 1i64 << 40, "ratio": 0.25}], [70000, {"solved": false}]]]);
        assert_eq!(value, want);
        assert_eq!(decode(&encode_infos(&[])).unwrap(), json!([null, []]));
    }
}
