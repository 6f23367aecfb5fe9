//! Typed views of one env's observation and action arrays ("leaves").
//!
//! An env names the Rust element type of each leaf ([`Space::leaves`](crate::Space::leaves)) in
//! its `Obs` and `Action` types: a [`Scalar`] for one leaf (`f32` gives `&mut [f32]`), a tuple for
//! several (`(u8, i8)` gives `(&mut [u8], &mut [i8])`). The worker checks them against the spaces
//! once, then hands out slices of the shared arrays.
//!
//! ```
//! use ringenv_worker::{DType, Leaves, Scalar};
//! assert_eq!(<(f32, u8) as Leaves>::COUNT, 2);
//! assert!(<(f32, u8) as Leaves>::accepts(1, DType::Bool)); // a bool leaf is viewed as u8 0/1
//! assert!(!<f32 as Leaves>::accepts(0, DType::F64));
//! let mut bytes = [0u8; 8];
//! let obs: &mut [f32] = <f32 as Leaves>::view_mut(&mut std::iter::once(&mut bytes[..]));
//! obs[1] = 1.5;
//! assert_eq!(f32::from_ne_bytes(bytes[4..].try_into().unwrap()), 1.5);
//! assert_eq!(<i64 as Scalar>::DTYPE, DType::I64);
//! ```

use ringenv_runtime::DType;

mod sealed {
    pub trait Sealed {}
}

/// A Rust element type that views a leaf of a given [`DType`] in place.
///
/// Implemented for `i8`, `i16`, `i32`, `i64`, `u8`, `u16`, `u32`, `u64`, `f32` and `f64` (sealed:
/// the segment's bytes must be valid for every bit pattern). `u8` also views `bool` leaves, whose
/// bytes are 0 or 1 (an env must write only those two values); `float16` leaves have no Rust
/// element type.
///
/// ```
/// use ringenv_worker::{DType, Scalar};
/// assert_eq!(<f64 as Scalar>::DTYPE, DType::F64);
/// assert!(u8::views(DType::Bool) && !i8::views(DType::U8));
/// ```
pub trait Scalar: bytemuck::Pod + PartialEq + std::fmt::Debug + Send + Sync + sealed::Sealed {
    /// The dtype this type reads and writes.
    const DTYPE: DType;
    /// Whether this type views a leaf of `dtype` (its own dtype, or `bool` for `u8`).
    fn views(dtype: DType) -> bool {
        dtype == Self::DTYPE
    }
}

macro_rules! scalar {
    ($($t:ty => $d:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl Scalar for $t { const DTYPE: DType = DType::$d; }
    )*};
}
scalar!(i8 => I8, i16 => I16, i32 => I32, i64 => I64, u16 => U16, u32 => U32, u64 => U64, f32 => F32,
        f64 => F64);

impl sealed::Sealed for u8 {}
impl Scalar for u8 {
    const DTYPE: DType = DType::U8;
    fn views(dtype: DType) -> bool {
        matches!(dtype, DType::U8 | DType::Bool)
    }
}

/// The element types of all leaves of one space: a [`Scalar`] (one leaf) or a tuple of up to 8
/// scalars (one per leaf, in leaf order).
///
/// `Mut<'a>` is what `reset` and `step` write the observation into (`&mut [T]`, or a tuple of
/// them); `Ref<'a>` is how `step` reads the action (`&[T]`, or a tuple).
///
/// ```
/// use ringenv_worker::{DType, Leaves};
/// type Obs = (u8, i8); // a Dict of a uint8 (or bool) leaf and an int8 (MultiBinary) leaf
/// assert_eq!(<Obs as Leaves>::COUNT, 2);
/// assert!(<Obs as Leaves>::accepts(0, DType::Bool) && <Obs as Leaves>::accepts(1, DType::I8));
/// let (mut a, mut b) = ([0u8; 2], [0u8; 3]);
/// let (x, y) = <Obs as Leaves>::view_mut(&mut [&mut a[..], &mut b[..]].into_iter());
/// (x[1], y[2]) = (1, -1);
/// assert_eq!((a, b), ([0, 1], [0, 0, 255]));
/// ```
pub trait Leaves: 'static {
    /// Number of leaves.
    const COUNT: usize;
    /// Writable views of the leaves: `&'a mut [T]` or a tuple of them.
    type Mut<'a>;
    /// Read-only views of the leaves: `&'a [T]` or a tuple of them.
    type Ref<'a>;
    /// Whether leaf `k`'s element type views a leaf of `dtype` (false for `k >= COUNT`).
    fn accepts(k: usize, dtype: DType) -> bool;
    /// The Rust element type names, in leaf order (for error messages).
    fn type_names() -> Vec<&'static str>;
    /// Typed views of `COUNT` byte slices taken from `leaves`.
    ///
    /// # Panics
    /// When `leaves` yields fewer than `COUNT` slices, or a slice is not a whole number of
    /// elements or not aligned to its element type (the worker's layout rules this out).
    fn view_mut<'a, I: Iterator<Item = &'a mut [u8]>>(leaves: &mut I) -> Self::Mut<'a>;
    /// Read-only typed views of `COUNT` byte slices taken from `leaves`.
    ///
    /// # Panics
    /// As [`Leaves::view_mut`].
    fn view<'a, I: Iterator<Item = &'a [u8]>>(leaves: &mut I) -> Self::Ref<'a>;
    /// The bytes of leaf `k` of the views `views` (native byte order; `None` for `k >= COUNT`):
    /// the inverse of [`Leaves::view`].
    fn leaf_bytes<'a>(views: &Self::Ref<'a>, k: usize) -> Option<&'a [u8]>;
}

fn next<T>(item: Option<T>) -> T {
    item.expect("fewer leaf buffers than the env's Obs/Action types name")
}

impl<T: Scalar> Leaves for T {
    const COUNT: usize = 1;
    type Mut<'a> = &'a mut [T];
    type Ref<'a> = &'a [T];
    fn accepts(k: usize, dtype: DType) -> bool {
        k == 0 && T::views(dtype)
    }
    fn type_names() -> Vec<&'static str> {
        vec![std::any::type_name::<T>()]
    }
    fn view_mut<'a, I: Iterator<Item = &'a mut [u8]>>(leaves: &mut I) -> &'a mut [T] {
        bytemuck::cast_slice_mut(next(leaves.next()))
    }
    fn view<'a, I: Iterator<Item = &'a [u8]>>(leaves: &mut I) -> &'a [T] {
        bytemuck::cast_slice(next(leaves.next()))
    }
    fn leaf_bytes<'a>(views: &Self::Ref<'a>, k: usize) -> Option<&'a [u8]> {
        (k == 0).then(|| bytemuck::cast_slice(views))
    }
}

macro_rules! tuple_leaves {
    ($count:literal; $($t:ident $k:literal),+) => {
        impl<$($t: Scalar),+> Leaves for ($($t,)+) {
            const COUNT: usize = $count;
            type Mut<'a> = ($(&'a mut [$t],)+);
            type Ref<'a> = ($(&'a [$t],)+);
            fn accepts(k: usize, dtype: DType) -> bool {
                match k {
                    $($k => <$t as Scalar>::views(dtype),)+
                    _ => false,
                }
            }
            fn type_names() -> Vec<&'static str> {
                vec![$(std::any::type_name::<$t>()),+]
            }
            fn view_mut<'a, I: Iterator<Item = &'a mut [u8]>>(leaves: &mut I) -> Self::Mut<'a> {
                ($(bytemuck::cast_slice_mut::<u8, $t>(next(leaves.next())),)+)
            }
            fn view<'a, I: Iterator<Item = &'a [u8]>>(leaves: &mut I) -> Self::Ref<'a> {
                ($(bytemuck::cast_slice::<u8, $t>(next(leaves.next())),)+)
            }
            #[allow(non_snake_case)] // (each leaf's view is bound to its type's name)
            fn leaf_bytes<'a>(views: &Self::Ref<'a>, k: usize) -> Option<&'a [u8]> {
                let ($($t,)+) = *views;
                match k {
                    $($k => Some(bytemuck::cast_slice::<$t, u8>($t)),)+
                    _ => None,
                }
            }
        }
    };
}
tuple_leaves!(1; A 0);
tuple_leaves!(2; A 0, B 1);
tuple_leaves!(3; A 0, B 1, C 2);
tuple_leaves!(4; A 0, B 1, C 2, D 3);
tuple_leaves!(5; A 0, B 1, C 2, D 3, E 4);
tuple_leaves!(6; A 0, B 1, C 2, D 3, E 4, F 5);
tuple_leaves!(7; A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_leaves!(8; A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);

/// A byte buffer for one leaf, aligned to 8 bytes (enough for every [`Scalar`]), allocated once.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct LeafBuf {
    /// Storage in 8-byte words; only the first `len` bytes belong to the leaf.
    words: Vec<u64>,
    len: usize,
}

impl LeafBuf {
    /// A zeroed buffer of `len` bytes.
    pub(crate) fn new(len: usize) -> LeafBuf {
        LeafBuf { words: vec![0; len.div_ceil(8)], len }
    }
    pub(crate) fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..self.len]
    }
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.words)[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tuple_views_split_the_buffers_in_order() {
        let mut bufs = [LeafBuf::new(8), LeafBuf::new(3), LeafBuf::new(16)];
        {
            let (a, b, c) = <(f32, u8, f64)>::view_mut(&mut bufs.iter_mut().map(LeafBuf::bytes_mut));
            assert_eq!((a.len(), b.len(), c.len()), (2, 3, 2));
            a[1] = 2.0;
            b[2] = 1;
            c[0] = -1.0;
        }
        let (a, b, c) = <(f32, u8, f64)>::view(&mut bufs.iter().map(LeafBuf::bytes));
        assert_eq!((a, b, c), (&[0.0, 2.0][..], &[0, 0, 1][..], &[-1.0, 0.0][..]));
        assert_eq!(<(f32, u8, f64)>::type_names(), ["f32", "u8", "f64"]);
        assert!(<(f32, u8, f64)>::accepts(2, DType::F64) && !<(f32, u8, f64)>::accepts(3, DType::F64));
    }

    #[test]
    fn u8_views_bool_leaves_and_nothing_else_crosses_dtypes() {
        assert!(u8::views(DType::Bool) && u8::views(DType::U8) && !u8::views(DType::I8));
        assert!(i8::views(DType::I8) && !i8::views(DType::Bool));
        assert!(!<f32 as Leaves>::accepts(1, DType::F32));
    }

    #[test]
    #[should_panic(expected = "fewer leaf buffers")]
    fn too_few_buffers_panic_with_a_message() {
        let mut one = LeafBuf::new(4);
        let _ = <(f32, f32)>::view_mut(&mut std::iter::once(one.bytes_mut()));
    }
}
