//! Typed infos: the one wire format of per-step infos, written by Python workers (the bindings
//! encode each env's `dict`) and Rust workers (the SDK encodes each env's `Info`) alike, and read
//! by the main process, which builds Gymnasium's vectorised columns, or each env's own dict, from
//! it without a Python object per value on the way. Single-threaded: a message is bytes.
//!
//! A message is one or more *runs*. A run holds consecutive envs whose infos have the same keys
//! in the same order, each key's values of one [`Field`]: a number ([`Kind::Int`], `Float`,
//! `Bool`, a NumPy scalar of at most 8 bytes), a `str`, `None`, a tuple of those, a NumPy array
//! of one dtype and shape, or a list of scalars. Layout of a run (native byte order: the worker
//! and the main process are one machine):
//!
//! ```text
//! 0   4 bytes   MAGIC ("\0RTI"; a pickle starts with 0x80, so the two never meet)
//! 4   u32       first env id
//! 8   u32       count of envs (at least 1), ids first .. first + count
//! 12  u16       count of keys (at least 1)
//! 14  u32       bytes of the data section
//! 18  per key:  u8 kind (b'i' int, b'f' float, b'b' bool, b'n' NumPy, b's' str, b'z' None,
//!               b't' tuple, b'a' array, b'l' list), u8 (a NumPy scalar's or an array's dtype
//!               number, a tuple's length, else 0), u16 length of the name, then for a tuple
//!               2 bytes per item (its kind, as a scalar key's first two bytes), for an array a
//!               u8 count of dimensions (at most MAX_NDIM) and a u32 per dimension; then the
//!               key's UTF-8 bytes
//! ..  cells:    count x width cells of 8 bytes, env by env (one cell per scalar, array or list
//!               key, one per item of a tuple key, in key order): a number's bytes, or the
//!               offset and length (u32 each) of a string's, an array's or a list's bytes in
//!               the data section, nothing for None
//! ..  data:     strings' UTF-8 bytes, arrays' bytes in C order, lists: ITEM bytes per item,
//!               its kind (2 bytes) and its cell
//! ```
//!
//! Everything is checked before use ([`parse`]): a malformed message, whoever wrote it, is an
//! [`InfosError`] naming what was wrong, never a panic or an out-of-bounds read.
//!
//! ```
//! use ringenv_runtime::infos::{self, Field, Kind, Value, Writer};
//! let mut w = Writer::new();
//! let keys = [("steps", Field::Scalar(Kind::Int)), ("text", Field::Scalar(Kind::Str))];
//! w.run(3, 2, &keys).unwrap();
//! for (steps, text) in [(7, "hi"), (8, "")] {
//!     w.value(Value::Int(steps)).unwrap();
//!     w.value(Value::Str(text)).unwrap();
//! }
//! let message = w.finish();
//! let runs = infos::parse(&message, 5).unwrap();
//! assert_eq!((runs[0].first, runs[0].count), (3, 2));
//! assert_eq!(runs[0].value(1, 0, 0).unwrap(), Value::Int(8)); // env 1 of the run, key 0
//! assert_eq!(runs[0].value(0, 1, 0).unwrap(), Value::Str("hi")); // env 0, key 1
//! assert!(infos::parse(&message[..20], 5).is_err());
//! ```

/// The first bytes of a run.
pub const MAGIC: &[u8; 4] = b"\0RTI";
/// Bytes of one value's cell.
pub const CELL: usize = 8;
/// Bytes of one list item in the data section: its kind and its cell.
pub const ITEM: usize = 2 + CELL;
/// The most items of a typed tuple (its length is one byte of the key's header).
pub const MAX_ARITY: usize = 255;
/// The most dimensions of a typed array (NumPy 2's own limit is 64).
pub const MAX_NDIM: usize = 32;
/// Bytes of a run before its first key.
const HEADER: usize = 18;
const TUPLE: u8 = b't';
const ARRAY: u8 = b'a';
const LIST: u8 = b'l';

/// The type of one scalar value.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    /// A Python `int` (an `i64`).
    Int,
    /// A Python `float` (an `f64`).
    Float,
    /// A Python `bool` (a byte, 0 or 1).
    Bool,
    /// A NumPy scalar of the dtype of this type number (`dtype.num`), its bytes in the cell.
    Numpy(u8),
    /// A `str`: its UTF-8 bytes in the data section.
    Str,
    /// `None`.
    None,
}

impl Kind {
    /// The kind's two bytes in a message.
    pub fn code(self) -> [u8; 2] {
        match self {
            Kind::Int => [b'i', 0],
            Kind::Float => [b'f', 0],
            Kind::Bool => [b'b', 0],
            Kind::Numpy(num) => [b'n', num],
            Kind::Str => [b's', 0],
            Kind::None => [b'z', 0],
        }
    }

    /// The kind of `code`, if it names one.
    pub fn of_code(code: [u8; 2]) -> Option<Kind> {
        Some(match code {
            [b'i', 0] => Kind::Int,
            [b'f', 0] => Kind::Float,
            [b'b', 0] => Kind::Bool,
            [b'n', num] => Kind::Numpy(num),
            [b's', 0] => Kind::Str,
            [b'z', 0] => Kind::None,
            _ => return None,
        })
    }
}

/// The type of one key's values.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Field {
    /// A scalar.
    Scalar(Kind),
    /// A tuple of at most [`MAX_ARITY`] scalars of these kinds, in order.
    Tuple(Vec<Kind>),
    /// A C-ordered array of the dtype of this NumPy type number and this shape (at most
    /// [`MAX_NDIM`] dimensions, each below 2**32).
    Array {
        /// The dtype's type number.
        num: u8,
        /// The array's shape.
        shape: Vec<usize>,
    },
    /// A list of scalars of any kinds.
    List,
}

impl Field {
    /// Cells per env.
    pub fn width(&self) -> usize {
        match self {
            Field::Tuple(kinds) => kinds.len(),
            _ => 1,
        }
    }

    /// Whether its values put bytes in the data section.
    fn uses_data(&self) -> bool {
        match self {
            Field::Scalar(kind) => *kind == Kind::Str,
            Field::Tuple(kinds) => kinds.contains(&Kind::Str),
            Field::Array { .. } | Field::List => true,
        }
    }
}

/// One scalar value, as written or read.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Value<'a> {
    /// A Python `int`.
    Int(i64),
    /// A Python `float`.
    Float(f64),
    /// A Python `bool`.
    Bool(bool),
    /// A NumPy scalar: its dtype's type number and its bytes (the dtype's itemsize first).
    Numpy(u8, [u8; CELL]),
    /// A `str`.
    Str(&'a str),
    /// `None`.
    None,
}

impl Value<'_> {
    /// The value's kind.
    pub fn kind(&self) -> Kind {
        match self {
            Value::Int(_) => Kind::Int,
            Value::Float(_) => Kind::Float,
            Value::Bool(_) => Kind::Bool,
            Value::Numpy(num, _) => Kind::Numpy(*num),
            Value::Str(_) => Kind::Str,
            Value::None => Kind::None,
        }
    }
}

/// Why a message was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed typed infos message from a worker: {0}")]
pub struct InfosError(pub String);

fn malformed<T>(what: String) -> Result<T, InfosError> {
    Err(InfosError(what))
}

/// Writes a message, run by run: [`Writer::run`], then each env's cells in key order
/// ([`Writer::value`], [`Writer::cell`]), then the next run or [`Writer::finish`]. The caller
/// writes exactly the cells the run's keys declare; a writer that gives `None` (a count, a name
/// or a data section too large for the format) is dropped.
#[derive(Default)]
pub struct Writer {
    out: Vec<u8>,
    /// The current run's data section.
    data: Vec<u8>,
    /// Where the current run's header starts.
    run: Option<usize>,
}

impl Writer {
    /// An empty message.
    pub fn new() -> Writer {
        Writer::default()
    }

    /// Starts a run of `count` envs from env `first` with `keys`; `None` when they do not fit the
    /// format (no key, more than `u16::MAX` keys or name bytes, ids beyond `u32`, a tuple of more
    /// than [`MAX_ARITY`] items, an array of more than [`MAX_NDIM`] dimensions or one of 2**32).
    pub fn run(&mut self, first: usize, count: usize, keys: &[(&str, Field)]) -> Option<()> {
        self.end_run()?;
        let nkeys = u16::try_from(keys.len()).ok().filter(|n| *n > 0)?;
        self.run = Some(self.out.len());
        self.out.extend_from_slice(MAGIC);
        self.out.extend_from_slice(&u32::try_from(first).ok()?.to_ne_bytes());
        self.out.extend_from_slice(&u32::try_from(count).ok()?.to_ne_bytes());
        self.out.extend_from_slice(&nkeys.to_ne_bytes());
        self.out.extend_from_slice(&[0; 4]); // the data section's length, set by `end_run`
        for (name, field) in keys {
            let code = match field {
                Field::Scalar(kind) => kind.code(),
                Field::Tuple(kinds) => [TUPLE, u8::try_from(kinds.len()).ok()?],
                Field::Array { num, .. } => [ARRAY, *num],
                Field::List => [LIST, 0],
            };
            self.out.extend_from_slice(&code);
            self.out.extend_from_slice(&u16::try_from(name.len()).ok()?.to_ne_bytes());
            match field {
                Field::Scalar(_) | Field::List => {}
                Field::Tuple(kinds) => kinds.iter().for_each(|kind| self.out.extend_from_slice(&kind.code())),
                Field::Array { shape, .. } => {
                    self.out.push(u8::try_from(shape.len()).ok().filter(|n| usize::from(*n) <= MAX_NDIM)?);
                    for d in shape {
                        self.out.extend_from_slice(&u32::try_from(*d).ok()?.to_ne_bytes());
                    }
                }
            }
            self.out.extend_from_slice(name.as_bytes());
        }
        Some(())
    }

    /// Appends one cell.
    pub fn cell(&mut self, cell: [u8; CELL]) {
        self.out.extend_from_slice(&cell);
    }

    /// Appends the cell of `value` (a string's bytes to the data section); `None` when the data
    /// section would pass 4 GiB.
    pub fn value(&mut self, value: Value<'_>) -> Option<()> {
        let cell = self.cell_of(value)?;
        self.cell(cell);
        Some(())
    }

    /// The cell of `value`, a string's bytes appended to the data section (a list's items are
    /// cells that live in the data section: [`Writer::span`] of their bytes).
    pub fn cell_of(&mut self, value: Value<'_>) -> Option<[u8; CELL]> {
        let mut cell = [0; CELL];
        match value {
            Value::Int(v) => cell = v.to_ne_bytes(),
            Value::Float(v) => cell = v.to_ne_bytes(),
            Value::Bool(v) => cell[0] = u8::from(v),
            Value::Numpy(_, bytes) => cell = bytes,
            Value::Str(s) => cell = self.span(s.as_bytes())?,
            Value::None => {}
        }
        Some(cell)
    }

    /// Appends `bytes` to the data section and gives the cell that names them (offset and length);
    /// `None` when the data section would pass 4 GiB.
    pub fn span(&mut self, bytes: &[u8]) -> Option<[u8; CELL]> {
        let offset = u32::try_from(self.data.len()).ok()?;
        let len = u32::try_from(bytes.len()).ok().filter(|len| offset.checked_add(*len).is_some())?;
        self.data.extend_from_slice(bytes);
        let mut cell = [0; CELL];
        cell[..4].copy_from_slice(&offset.to_ne_bytes());
        cell[4..].copy_from_slice(&len.to_ne_bytes());
        Some(cell)
    }

    fn end_run(&mut self) -> Option<()> {
        if let Some(at) = self.run.take() {
            let len = u32::try_from(self.data.len()).ok()?;
            self.out[at + 14..at + HEADER].copy_from_slice(&len.to_ne_bytes());
            self.out.append(&mut self.data);
        }
        Some(())
    }

    /// The message (empty when no run was started).
    pub fn finish(mut self) -> Vec<u8> {
        self.end_run().expect("the data section's length was checked by each write");
        self.out
    }
}

/// Whether `bytes` is a typed message (by its first bytes; [`parse`] checks the rest).
pub fn is_typed(bytes: &[u8]) -> bool {
    bytes.starts_with(MAGIC)
}

/// One run of a message, checked.
#[derive(Debug)]
pub struct Run<'a> {
    /// Its first env id.
    pub first: usize,
    /// Its count of envs (at least 1).
    pub count: usize,
    /// The bytes of the keys' section: two runs of the same bytes have the same keys and fields.
    pub schema: &'a [u8],
    /// The keys' names and fields, in order.
    pub keys: Vec<(&'a str, Field)>,
    /// Each key's first cell in an env's row.
    offsets: Vec<usize>,
    /// Cells of an env's row.
    width: usize,
    cells: &'a [u8],
    data: &'a [u8],
}

/// The runs of `bytes`, a message for a vector env of `num_envs` envs, checked.
///
/// # Errors
/// [`InfosError`] naming what is wrong: a missing magic, a truncated key, an unknown kind, a name
/// that is not UTF-8, env ids outside `0..num_envs`, cells or data of the wrong length.
pub fn parse(bytes: &[u8], num_envs: usize) -> Result<Vec<Run<'_>>, InfosError> {
    let mut runs = Vec::new();
    let mut at = 0;
    while at < bytes.len() || runs.is_empty() {
        let (run, end) = parse_run(bytes, at, num_envs)?;
        runs.push(run);
        at = end;
    }
    Ok(runs)
}

/// The run at byte `start` of `bytes`, and where it ends.
fn parse_run(bytes: &[u8], start: usize, num_envs: usize) -> Result<(Run<'_>, usize), InfosError> {
    let head = match bytes.get(start..start + HEADER) {
        Some(head) if is_typed(head) => head,
        _ => return malformed(format!("{} bytes at byte {start}, not starting with the typed header", bytes.len())),
    };
    let u32_at = |at: usize| u32::from_ne_bytes(head[at..at + 4].try_into().expect("4 bytes")) as usize;
    let (first, count, data_len) = (u32_at(4), u32_at(8), u32_at(14));
    let nkeys = usize::from(u16::from_ne_bytes([head[12], head[13]]));
    if count == 0 || nkeys == 0 || first.checked_add(count).is_none_or(|end| end > num_envs) {
        return malformed(format!(
            "envs {first}..{} with {nkeys} keys in a vector env of {num_envs} envs",
            first.saturating_add(count)
        ));
    }
    let truncated = |at: usize| InfosError(format!("truncated key at byte {at}"));
    let kind_at = |at: usize| {
        let code = bytes.get(at..at + 2).ok_or_else(|| truncated(at))?;
        Kind::of_code([code[0], code[1]]).ok_or_else(|| InfosError(format!("unknown value kind {code:?} at byte {at}")))
    };
    let mut at = start + HEADER;
    let (mut keys, mut offsets, mut width) = (Vec::with_capacity(nkeys), Vec::with_capacity(nkeys), 0);
    for _ in 0..nkeys {
        let head = bytes.get(at..at + 4).ok_or_else(|| truncated(at))?;
        let len = usize::from(u16::from_ne_bytes([head[2], head[3]]));
        let (field, extra) = match head[0] {
            TUPLE => {
                let arity = usize::from(head[1]);
                (Field::Tuple((0..arity).map(|j| kind_at(at + 4 + 2 * j)).collect::<Result<_, _>>()?), 2 * arity)
            }
            ARRAY => {
                let ndim = usize::from(*bytes.get(at + 4).ok_or_else(|| truncated(at))?);
                let dims = bytes
                    .get(at + 5..at + 5 + 4 * ndim)
                    .filter(|_| ndim <= MAX_NDIM)
                    .ok_or_else(|| InfosError(format!("an array key of {ndim} dimensions at byte {at}")))?;
                let shape = dims.chunks_exact(4).map(|d| u32::from_ne_bytes(d.try_into().expect("4 bytes")) as usize);
                (Field::Array { num: head[1], shape: shape.collect() }, 1 + 4 * ndim)
            }
            LIST if head[1] == 0 => (Field::List, 0),
            _ => (Field::Scalar(kind_at(at)?), 0),
        };
        let name_at = at + 4 + extra;
        let name = bytes.get(name_at..name_at + len).ok_or_else(|| truncated(at))?;
        let name =
            std::str::from_utf8(name).map_err(|_| InfosError(format!("a key that is not UTF-8 at byte {at}")))?;
        offsets.push(width);
        width += field.width();
        keys.push((name, field));
        at = name_at + len;
    }
    let has_data = keys.iter().any(|(_, field)| field.uses_data());
    let size = count.checked_mul(width).and_then(|n| n.checked_mul(CELL));
    let end = size.and_then(|size| at.checked_add(size)?.checked_add(data_len));
    let Some(end) = end.filter(|end| *end <= bytes.len() && (has_data || data_len == 0)) else {
        return malformed(format!(
            "{} bytes of values for {count} envs x {width} cells of {nkeys} keys and {data_len} bytes of data",
            bytes.len() - at
        ));
    };
    let (cells, data) = bytes[at..end].split_at(end - at - data_len);
    let schema = &bytes[start + HEADER..at];
    Ok((Run { first, count, schema, keys, offsets, width, cells, data }, end))
}

impl<'a> Run<'a> {
    /// Whether `other` has the same keys and fields, in the same order.
    pub fn same_keys(&self, other: &Run<'_>) -> bool {
        self.schema == other.schema
    }

    /// Cell `j` (0 but for a tuple key's items) of env `i` (of this run's, from 0) and key `k`.
    ///
    /// # Panics
    /// When `i`, `k` or `j` is out of range.
    pub fn cell(&self, i: usize, k: usize, j: usize) -> [u8; CELL] {
        assert!(i < self.count && j < self.keys[k].1.width(), "cell {j} of key {k} of env {i}");
        let at = (i * self.width + self.offsets[k] + j) * CELL;
        self.cells[at..at + CELL].try_into().expect("a cell")
    }

    /// The bytes of the data section that `cell` (an offset and a length) names.
    ///
    /// # Errors
    /// [`InfosError`] naming `what` when they are not all in the data section.
    pub fn span(&self, cell: [u8; CELL], what: &str) -> Result<&'a [u8], InfosError> {
        let offset = u32::from_ne_bytes(cell[..4].try_into().expect("4 bytes")) as usize;
        let len = u32::from_ne_bytes(cell[4..].try_into().expect("4 bytes")) as usize;
        self.data.get(offset..offset + len).ok_or_else(|| {
            InfosError(format!("{what} of {len} bytes at {offset} of a data section of {} bytes", self.data.len()))
        })
    }

    /// The scalar of `kind` in `cell`.
    ///
    /// # Errors
    /// [`InfosError`] for a string outside the data section or not UTF-8.
    pub fn scalar(&self, kind: Kind, cell: [u8; CELL]) -> Result<Value<'a>, InfosError> {
        Ok(match kind {
            Kind::Int => Value::Int(i64::from_ne_bytes(cell)),
            Kind::Float => Value::Float(f64::from_ne_bytes(cell)),
            Kind::Bool => Value::Bool(cell[0] != 0),
            Kind::Numpy(num) => Value::Numpy(num, cell),
            Kind::None => Value::None,
            Kind::Str => Value::Str(
                std::str::from_utf8(self.span(cell, "a string")?)
                    .map_err(|_| InfosError("a string that is not UTF-8".into()))?,
            ),
        })
    }

    /// The scalar of env `i`, key `k` (a scalar key), item `j` (of a tuple key; else 0).
    ///
    /// # Errors
    /// As [`Run::scalar`]; [`InfosError`] for an array or list key.
    pub fn value(&self, i: usize, k: usize, j: usize) -> Result<Value<'a>, InfosError> {
        let kind = match &self.keys[k].1 {
            Field::Scalar(kind) => *kind,
            Field::Tuple(kinds) => kinds[j],
            _ => return malformed(format!("key {:?} does not hold scalars", self.keys[k].0)),
        };
        self.scalar(kind, self.cell(i, k, j))
    }

    /// The items of the list whose cell is `cell`.
    ///
    /// # Errors
    /// [`InfosError`] for items outside the data section or not whole, an unknown kind, a string
    /// outside the data section or not UTF-8.
    pub fn list(&self, cell: [u8; CELL]) -> Result<Vec<Value<'a>>, InfosError> {
        let items = self.span(cell, "a list")?;
        if items.len() % ITEM != 0 {
            return malformed(format!("a list of {} bytes, not whole items of {ITEM}", items.len()));
        }
        items
            .chunks_exact(ITEM)
            .map(|item| {
                let kind = Kind::of_code([item[0], item[1]])
                    .ok_or_else(|| InfosError(format!("unknown value kind {:?} in a list", &item[..2])))?;
                self.scalar(kind, item[2..].try_into().expect("a cell"))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut w = Writer::new();
        let keys = [
            ("n", Field::Scalar(Kind::Int)),
            ("xy", Field::Tuple(vec![Kind::Float, Kind::Str, Kind::None])),
            ("mask", Field::Array { num: 0, shape: vec![3] }),
            ("cmds", Field::List),
            ("h", Field::Scalar(Kind::Numpy(23))),
        ];
        w.run(1, 2, &keys).unwrap();
        for i in 0..2 {
            w.value(Value::Int(-5 - i)).unwrap();
            w.value(Value::Float(0.5)).unwrap();
            w.value(Value::Str("é")).unwrap();
            w.value(Value::None).unwrap();
            let cell = w.span(&[1, 0, i as u8]).unwrap();
            w.cell(cell);
            let mut items = Vec::new();
            for v in [Value::Str("go"), Value::Bool(true), Value::Int(i)] {
                items.extend_from_slice(&v.kind().code());
                items.extend_from_slice(&w.cell_of(v).unwrap());
            }
            let cell = w.span(&items).unwrap();
            w.cell(cell);
            w.value(Value::Numpy(23, [1, 2, 0, 0, 0, 0, 0, 0])).unwrap();
        }
        w.run(3, 1, &[("done", Field::Scalar(Kind::Bool))]).unwrap();
        w.value(Value::Bool(true)).unwrap();
        w.finish()
    }

    #[test]
    fn every_field_round_trips_in_runs() {
        let message = sample();
        let runs = parse(&message, 4).unwrap();
        assert_eq!(runs.len(), 2);
        let (a, b) = (&runs[0], &runs[1]);
        assert_eq!((a.first, a.count, b.first, b.count), (1, 2, 3, 1));
        assert!(!a.same_keys(b) && a.same_keys(&parse(&message, 4).unwrap()[0]));
        assert_eq!(a.value(1, 0, 0).unwrap(), Value::Int(-6));
        assert_eq!(a.value(0, 1, 1).unwrap(), Value::Str("é"));
        assert_eq!(a.value(0, 1, 2).unwrap(), Value::None);
        assert_eq!(a.span(a.cell(1, 2, 0), "an array").unwrap(), [1, 0, 1]);
        assert_eq!(a.list(a.cell(1, 3, 0)).unwrap(), [Value::Str("go"), Value::Bool(true), Value::Int(1)]);
        assert_eq!(a.value(0, 4, 0).unwrap(), Value::Numpy(23, [1, 2, 0, 0, 0, 0, 0, 0]));
        assert_eq!(b.value(0, 0, 0).unwrap(), Value::Bool(true));
        assert!(a.value(0, 2, 0).is_err(), "an array key holds no scalar");
    }

    #[test]
    fn malformed_messages_are_errors_not_panics() {
        let message = sample();
        assert!(parse(&message, 3).unwrap_err().to_string().contains("in a vector env of 3 envs"));
        let second = message.windows(4).rposition(|w| w == MAGIC).unwrap();
        for n in (0..message.len()).filter(|n| *n != second) {
            assert!(parse(&message[..n], 4).is_err(), "{n} bytes");
        }
        // Every byte flipped: an error or a message whose reads are errors or values, never a panic.
        for n in 0..message.len() {
            let mut bad = message.clone();
            bad[n] ^= 0xa5;
            if let Ok(runs) = parse(&bad, 4) {
                for run in &runs {
                    for (k, (_, field)) in run.keys.iter().enumerate() {
                        for i in 0..run.count {
                            for j in 0..field.width() {
                                let _ = run.value(i, k, j);
                                let _ = run.list(run.cell(i, k, j));
                                let _ = run.span(run.cell(i, k, j), "x");
                            }
                        }
                    }
                }
            }
        }
        let mut bad_str = Writer::new();
        bad_str.run(0, 1, &[("s", Field::Scalar(Kind::Str))]).unwrap();
        let cell = bad_str.span(&[0xff]).unwrap();
        bad_str.cell(cell);
        let bad_str = bad_str.finish();
        let e = parse(&bad_str, 1).unwrap()[0].value(0, 0, 0).unwrap_err();
        assert_eq!(e.to_string(), "malformed typed infos message from a worker: a string that is not UTF-8");
        assert!(parse(b"", 1).is_err() && parse(b"\x80\x02N.", 1).is_err());
    }

    #[test]
    fn what_the_format_cannot_hold_is_refused_by_the_writer() {
        let mut w = Writer::new();
        assert!(w.run(0, 1, &[]).is_none());
        assert!(w.run(1 << 32, 1, &[("a", Field::List)]).is_none());
        let deep = Field::Array { num: 0, shape: vec![1; MAX_NDIM + 1] };
        assert!(Writer::new().run(0, 1, &[("a", deep)]).is_none());
        assert!(Writer::new().finish().is_empty());
    }
}
