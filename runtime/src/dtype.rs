//! Element types of the arrays laid out in the segment, with their NumPy names.
//!
//! A [`DType`] is stored in the segment header as its `u32` code, so the codes are part of the
//! layout version: never renumber one. [`Element`] ties a Rust scalar type to its `DType`, so
//! typed views of the byte regions can be checked before they are made.
//!
//! ```
//! use ringenv_runtime::{DType, Element};
//! assert_eq!(DType::F32.size(), 4);
//! assert_eq!(<f64 as Element>::DTYPE, DType::F64);
//! assert_eq!(DType::from_numpy("uint8"), Some(DType::U8));
//! ```

/// The element type of an array in the segment. Sizes are in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum DType {
    /// `numpy.bool_`, one byte holding 0 or 1.
    Bool = 1,
    /// `numpy.int8`.
    I8 = 2,
    /// `numpy.int16`.
    I16 = 3,
    /// `numpy.int32`.
    I32 = 4,
    /// `numpy.int64`.
    I64 = 5,
    /// `numpy.uint8`.
    U8 = 6,
    /// `numpy.uint16`.
    U16 = 7,
    /// `numpy.uint32`.
    U32 = 8,
    /// `numpy.uint64`.
    U64 = 9,
    /// `numpy.float16` (IEEE 754 binary16; Rust has no native type, the bytes are carried as is).
    F16 = 10,
    /// `numpy.float32`.
    F32 = 11,
    /// `numpy.float64`.
    F64 = 12,
}

const ALL: [DType; 12] = [
    DType::Bool,
    DType::I8,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::U8,
    DType::U16,
    DType::U32,
    DType::U64,
    DType::F16,
    DType::F32,
    DType::F64,
];

impl DType {
    /// Size of one element in bytes.
    pub const fn size(self) -> usize {
        match self {
            DType::Bool | DType::I8 | DType::U8 => 1,
            DType::I16 | DType::U16 | DType::F16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::U64 | DType::F64 => 8,
        }
    }

    /// The code stored in the segment header.
    pub const fn code(self) -> u32 {
        self as u32
    }

    /// The `DType` of a header code, or `None` for a code this build does not know.
    pub fn from_code(code: u32) -> Option<DType> {
        ALL.into_iter().find(|d| d.code() == code)
    }

    /// The NumPy name (`numpy.dtype(name)` accepts it), for example `"float32"`.
    pub const fn numpy_name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::U8 => "uint8",
            DType::U16 => "uint16",
            DType::U32 => "uint32",
            DType::U64 => "uint64",
            DType::F16 => "float16",
            DType::F32 => "float32",
            DType::F64 => "float64",
        }
    }

    /// The `DType` of a NumPy name as [`DType::numpy_name`] writes it, or `None`.
    pub fn from_numpy(name: &str) -> Option<DType> {
        ALL.into_iter().find(|d| d.numpy_name() == name)
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.numpy_name())
    }
}

/// A Rust scalar type that can be viewed in place in a segment array of dtype [`Element::DTYPE`].
pub trait Element: bytemuck::Pod {
    /// The segment dtype whose bytes this type reads and writes.
    const DTYPE: DType;
}

macro_rules! element {
    ($($t:ty => $d:ident),*) => { $(impl Element for $t { const DTYPE: DType = DType::$d; })* };
}
element!(i8 => I8, i16 => I16, i32 => I32, i64 => I64, u8 => U8, u16 => U16, u32 => U32,
         u64 => U64, f32 => F32, f64 => F64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_distinct() {
        for d in ALL {
            assert_eq!(DType::from_code(d.code()), Some(d));
            assert_eq!(DType::from_numpy(d.numpy_name()), Some(d));
        }
        assert_eq!(DType::from_code(0), None);
        assert_eq!(DType::from_numpy("complex64"), None);
    }
}
