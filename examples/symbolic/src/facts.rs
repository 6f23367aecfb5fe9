//! Facts for symbolic envs: a fixed-size bitset of ground facts, predicates that number them, and
//! their observation encoding.
//!
//! A symbolic state is a set of ground facts such as `on(a, b)` or `clear(c)`. A [`Schema`]
//! numbers them: each [`Predicate`] gets a contiguous block of fact indices, one per tuple of
//! arguments (row-major over the argument domains). A [`FactSet`] is a bitset over those indices,
//! allocated once; inserting, testing, union and the observation encoding allocate nothing. The
//! observation of a fact set is one element per fact, 1 when it holds: a `MultiBinary`
//! ([`FactSet::space`], `i8` elements) or a `uint8` / `bool` Box ([`FactSet::write_to`] writes any
//! [`Scalar`] element type).
//!
//! ```
//! use symbolic::facts::Schema;
//! let mut schema = Schema::new();
//! let on = schema.predicate("on", &[3, 3]);     // on(x, y), x and y in 0..3
//! let clear = schema.predicate("clear", &[3]);  // clear(x)
//! let mut facts = schema.facts();
//! facts.insert(on.at(&[0, 1]));
//! facts.insert(clear.at(&[0]));
//! assert!(facts.contains(on.at(&[0, 1])) && !facts.contains(on.at(&[1, 0])));
//! assert_eq!(schema.name_of(clear.at(&[0])), "clear(0)");
//! let mut obs = [0i8; 12];
//! facts.write_to(&mut obs);
//! assert_eq!(obs, [0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0]);
//! ```

use ringenv_worker::{Scalar, Space};

/// A block of fact indices for a predicate of up to 4 arguments.
///
/// ```
/// let mut schema = symbolic::facts::Schema::new();
/// let at = schema.predicate("at", &[3, 4]);
/// assert_eq!((at.at(&[1, 2]), at.len(), at.range()), (6, 12, 0..12));
/// assert_eq!(at.args(6), [1, 2]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Predicate {
    offset: usize,
    arity: usize,
    dims: [usize; 4],
}

impl Predicate {
    /// The fact index of this predicate applied to `args` (one per argument, each below its
    /// domain size).
    ///
    /// # Panics
    /// When `args` has the wrong length or an argument is out of its domain (naming both).
    pub fn at(&self, args: &[usize]) -> usize {
        assert_eq!(args.len(), self.arity, "predicate of arity {} given {} arguments", self.arity, args.len());
        let mut index = 0;
        for (k, (&a, &d)) in args.iter().zip(&self.dims).enumerate() {
            assert!(a < d, "argument {k} is {a}, outside the domain 0..{d}");
            index = index * d + a;
        }
        self.offset + index
    }

    /// The number of ground facts of this predicate (the product of its domain sizes).
    pub fn len(&self) -> usize {
        self.dims[..self.arity].iter().product()
    }

    /// Whether the predicate has no ground fact (a zero-sized domain).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The range of fact indices of this predicate.
    pub fn range(&self) -> std::ops::Range<usize> {
        self.offset..self.offset + self.len()
    }

    /// The arguments of fact `index` of this predicate.
    ///
    /// # Panics
    /// When `index` is not one of this predicate's facts.
    pub fn args(&self, index: usize) -> Vec<usize> {
        assert!(self.range().contains(&index), "fact {index} is not in {:?}", self.range());
        let mut rest = index - self.offset;
        let mut args = vec![0; self.arity];
        for k in (0..self.arity).rev() {
            args[k] = rest % self.dims[k];
            rest /= self.dims[k];
        }
        args
    }
}

/// The numbering of all ground facts: predicates in the order declared.
///
/// ```
/// let mut schema = symbolic::facts::Schema::new();
/// let (a, b) = (schema.predicate("a", &[2]), schema.predicate("b", &[]));
/// assert_eq!((schema.len(), a.range(), b.at(&[])), (3, 0..2, 2));
/// assert_eq!(schema.name_of(1), "a(1)");
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Schema {
    predicates: Vec<(String, Predicate)>,
    len: usize,
}

impl Schema {
    /// An empty schema.
    pub fn new() -> Schema {
        Schema::default()
    }

    /// Declares predicate `name` over arguments with domain sizes `domains` (up to 4), numbered
    /// after the predicates declared before it.
    ///
    /// # Panics
    /// With more than 4 arguments.
    pub fn predicate(&mut self, name: &str, domains: &[usize]) -> Predicate {
        assert!(domains.len() <= 4, "predicate {name:?} has {} arguments; at most 4 are supported", domains.len());
        let mut dims = [1; 4];
        dims[..domains.len()].copy_from_slice(domains);
        let p = Predicate { offset: self.len, arity: domains.len(), dims };
        self.len += p.len();
        self.predicates.push((name.to_string(), p));
        p
    }

    /// The number of ground facts.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no ground facts.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// An empty fact set over this schema.
    pub fn facts(&self) -> FactSet {
        FactSet::new(self.len)
    }

    /// A readable name of fact `index`, such as `on(0, 2)` (for logs and tests; allocates).
    ///
    /// # Panics
    /// When `index >= self.len()`.
    pub fn name_of(&self, index: usize) -> String {
        let (name, p) = self.predicates.iter().find(|(_, p)| p.range().contains(&index)).expect("a fact of the schema");
        let args: Vec<String> = p.args(index).iter().map(ToString::to_string).collect();
        format!("{name}({})", args.join(", "))
    }
}

/// A set of fact indices `0..len`, as a bitset of `u64` words allocated once.
///
/// ```
/// let mut facts = symbolic::facts::FactSet::new(70);
/// assert!(facts.insert(69) && !facts.insert(69));
/// facts.set(3, true);
/// assert_eq!((facts.count(), facts.iter().collect::<Vec<_>>()), (2, vec![3, 69]));
/// let mut obs = [0u8; 4];
/// facts.write_range_to(2..6, &mut obs);
/// assert_eq!(obs, [0, 1, 0, 0]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FactSet {
    words: Vec<u64>,
    len: usize,
}

impl FactSet {
    /// An empty set over facts `0..len`.
    pub fn new(len: usize) -> FactSet {
        FactSet { words: vec![0; len.div_ceil(64)], len }
    }

    /// The number of possible facts (not the number held: see [`FactSet::count`]).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no fact is possible (`len() == 0`).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn bit(&self, fact: usize) -> (usize, u64) {
        assert!(fact < self.len, "fact {fact} is outside the set's 0..{}", self.len);
        (fact / 64, 1 << (fact % 64))
    }

    /// Whether `fact` holds.
    ///
    /// # Panics
    /// When `fact >= len()` (as every method taking a fact).
    pub fn contains(&self, fact: usize) -> bool {
        let (w, b) = self.bit(fact);
        self.words[w] & b != 0
    }

    /// Adds `fact`; returns whether it was new.
    pub fn insert(&mut self, fact: usize) -> bool {
        let (w, b) = self.bit(fact);
        let new = self.words[w] & b == 0;
        self.words[w] |= b;
        new
    }

    /// Removes `fact`; returns whether it was there.
    pub fn remove(&mut self, fact: usize) -> bool {
        let (w, b) = self.bit(fact);
        let had = self.words[w] & b != 0;
        self.words[w] &= !b;
        had
    }

    /// Sets whether `fact` holds.
    pub fn set(&mut self, fact: usize, holds: bool) {
        if holds {
            self.insert(fact);
        } else {
            self.remove(fact);
        }
    }

    /// Removes every fact.
    pub fn clear(&mut self) {
        self.words.fill(0);
    }

    /// Removes the facts in `range` (for example a predicate's [`Predicate::range`]).
    pub fn clear_range(&mut self, range: std::ops::Range<usize>) {
        range.for_each(|f| {
            self.remove(f);
        });
    }

    /// The number of facts held.
    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The facts held, in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.len).filter(|&f| self.contains(f))
    }

    /// Adds every fact of `other`; returns whether any was new.
    ///
    /// # Panics
    /// When the sets have different lengths.
    pub fn union_with(&mut self, other: &FactSet) -> bool {
        assert_eq!(self.len, other.len, "union of fact sets of different lengths");
        let mut changed = false;
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            changed |= *b & !*a != 0;
            *a |= b;
        }
        changed
    }

    /// Makes this set equal to `other` without allocating.
    ///
    /// # Panics
    /// When the sets have different lengths.
    pub fn copy_from(&mut self, other: &FactSet) {
        assert_eq!(self.len, other.len, "copy between fact sets of different lengths");
        self.words.copy_from_slice(&other.words);
    }

    /// Writes the observation encoding: element `f` of `out` is 1 when fact `f` holds, else 0.
    ///
    /// # Panics
    /// When `out.len() != len()`.
    pub fn write_to<T: Scalar>(&self, out: &mut [T]) {
        assert_eq!(out.len(), self.len, "a fact set of {} facts needs as many elements", self.len);
        let (zero, one): (T, T) = (bytemuck::Zeroable::zeroed(), one::<T>());
        for (f, o) in out.iter_mut().enumerate() {
            *o = if self.words[f / 64] >> (f % 64) & 1 == 1 { one } else { zero };
        }
    }

    /// Writes the observation encoding of the facts in `range` (for example the derived
    /// predicates only): element `i` of `out` is 1 when fact `range.start + i` holds.
    ///
    /// # Panics
    /// When `out.len() != range.len()` or the range ends past `len()`.
    pub fn write_range_to<T: Scalar>(&self, range: std::ops::Range<usize>, out: &mut [T]) {
        assert_eq!(out.len(), range.len(), "facts {range:?} need {} elements", range.len());
        assert!(range.end <= self.len, "facts {range:?} end past the set's 0..{}", self.len);
        let (zero, one): (T, T) = (bytemuck::Zeroable::zeroed(), one::<T>());
        for (f, o) in range.zip(out.iter_mut()) {
            *o = if self.words[f / 64] >> (f % 64) & 1 == 1 { one } else { zero };
        }
    }

    /// `MultiBinary(len)`: the space of [`FactSet::write_to`] with `i8` elements.
    pub fn space(&self) -> Space {
        Space::multi_binary(self.len)
    }
}

/// The value 1 of a scalar type (its dtype's one, whatever the width or kind).
fn one<T: Scalar>() -> T {
    let mut bytes = [0u8; 8]; // every Scalar is at most 8 bytes
    ringenv_worker::values::write_f64(&mut bytes, T::DTYPE, 0, 1.0);
    bytemuck::pod_read_unaligned(&bytes[..std::mem::size_of::<T>()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predicates_number_facts_row_major_and_back() {
        let mut s = Schema::new();
        let at = s.predicate("at", &[4, 5]);
        let goal = s.predicate("goal", &[4, 5]);
        let solved = s.predicate("solved", &[]);
        assert_eq!((at.range(), goal.range(), solved.range()), (0..20, 20..40, 40..41));
        assert_eq!(at.at(&[2, 3]), 13);
        assert_eq!(goal.args(33), [2, 3]);
        assert_eq!(solved.at(&[]), 40);
        assert_eq!(s.name_of(33), "goal(2, 3)");
        assert_eq!(s.name_of(40), "solved()");
        let err = std::panic::catch_unwind(|| at.at(&[4, 0])).unwrap_err();
        assert_eq!(err.downcast_ref::<String>().unwrap(), "argument 0 is 4, outside the domain 0..4");
    }

    #[test]
    fn set_operations_cross_word_boundaries() {
        let mut a = FactSet::new(130);
        assert!(a.insert(0) && a.insert(64) && a.insert(129) && !a.insert(64));
        let mut b = FactSet::new(130);
        b.insert(129);
        assert!(!b.union_with(&FactSet::new(130)));
        assert!(b.union_with(&a));
        assert_eq!(b.iter().collect::<Vec<_>>(), [0, 64, 129]);
        assert!(b.remove(64) && !b.remove(64));
        b.clear_range(0..10);
        assert_eq!((b.count(), b.len()), (1, 130));
        a.copy_from(&b);
        assert_eq!(a, b);
        let mut f32s = vec![7.0f32; 130];
        a.write_to(&mut f32s);
        assert_eq!((f32s[129], f32s.iter().sum::<f32>()), (1.0, 1.0));
        let mut tail = [9u8; 3];
        a.write_range_to(127..130, &mut tail);
        assert_eq!(tail, [0, 0, 1]);
        assert_eq!(a.space(), Space::MultiBinary { shape: vec![130] });
    }
}
