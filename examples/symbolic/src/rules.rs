//! Forward chaining: derive facts from rules until nothing new appears.
//!
//! A rule reads the facts known so far (and a context `C`, such as a level's walls) and adds the
//! facts it derives to an output set. [`Rules::saturate`] applies all rules together, adds what
//! they derived, and repeats until a round derives nothing new (a fixpoint). Rules only add facts,
//! so this ends after at most `len` rounds; a rule may test the *absence* of a fact only when no
//! rule derives that fact (stratified negation, as `clear(x) :- not on(_, x)` over base facts).
//! The scratch set is allocated once, in [`Rules::new`]: saturating allocates nothing.
//!
//! ```
//! use symbolic::facts::Schema;
//! use symbolic::rules::Rules;
//! // Reachability in a graph: reach(x) :- start(x); reach(y) :- reach(x), edge(x, y).
//! let n = 4;
//! let mut s = Schema::new();
//! let (edge, reach) = (s.predicate("edge", &[n, n]), s.predicate("reach", &[n]));
//! let mut rules = Rules::new(s.len());
//! rules.add("step", move |_: &(), f, out| {
//!     for x in 0..n {
//!         for y in 0..n {
//!             if f.contains(reach.at(&[x])) && f.contains(edge.at(&[x, y])) {
//!                 out.insert(reach.at(&[y]));
//!             }
//!         }
//!     }
//! });
//! let mut facts = s.facts();
//! for (x, y) in [(0, 1), (1, 2)] { facts.insert(edge.at(&[x, y])); }
//! facts.insert(reach.at(&[0]));
//! assert_eq!(rules.saturate(&(), &mut facts), 3); // two rounds add facts, the third adds none
//! assert!(facts.contains(reach.at(&[2])) && !facts.contains(reach.at(&[3])));
//! ```

use crate::facts::FactSet;

/// A rule: reads the context and the known facts, inserts derived facts into the output.
type Rule<C> = Box<dyn Fn(&C, &FactSet, &mut FactSet) + Send>;

/// A set of named rules over fact sets of one length, with their scratch space.
///
/// ```
/// use symbolic::{facts::FactSet, rules::Rules};
/// // Fact i+1 follows from fact i (i < 4), and fact 0 holds: everything up to 4 follows.
/// let mut rules = Rules::new(6);
/// rules.add("next", |_: &(), f: &FactSet, out: &mut FactSet| {
///     (0..4).filter(|&i| f.contains(i)).for_each(|i| { out.insert(i + 1); });
/// });
/// let mut facts = FactSet::new(6);
/// facts.insert(0);
/// rules.saturate(&(), &mut facts);
/// assert_eq!(facts.iter().collect::<Vec<_>>(), [0, 1, 2, 3, 4]);
/// ```
pub struct Rules<C> {
    rules: Vec<(&'static str, Rule<C>)>,
    derived: FactSet,
}

impl<C> Rules<C> {
    /// No rules yet, for fact sets of `len` facts.
    pub fn new(len: usize) -> Rules<C> {
        Rules { rules: Vec::new(), derived: FactSet::new(len) }
    }

    /// Adds rule `name`.
    pub fn add(&mut self, name: &'static str, rule: impl Fn(&C, &FactSet, &mut FactSet) + Send + 'static) -> &mut Self {
        self.rules.push((name, Box::new(rule)));
        self
    }

    /// The rule names, in the order added.
    pub fn names(&self) -> Vec<&'static str> {
        self.rules.iter().map(|(n, _)| *n).collect()
    }

    /// Applies the rules to `facts` until a fixpoint; returns the number of rounds (at least 1:
    /// the last round derives nothing new).
    ///
    /// # Panics
    /// When `facts` has another length than the rules were made for.
    pub fn saturate(&mut self, ctx: &C, facts: &mut FactSet) -> usize {
        let mut rounds = 0;
        loop {
            rounds += 1;
            self.derived.clear();
            for (_, rule) in &self.rules {
                rule(ctx, facts, &mut self.derived);
            }
            if !facts.union_with(&self.derived) {
                return rounds;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::Schema;

    #[test]
    fn transitive_closure_of_a_chain_needs_a_round_per_link() {
        let n = 6;
        let mut s = Schema::new();
        let (on, above) = (s.predicate("on", &[n, n]), s.predicate("above", &[n, n]));
        let mut rules = Rules::new(s.len());
        rules
            .add("above-on", move |_: &usize, f, out| {
                for i in on.range().filter(|&i| f.contains(i)) {
                    let xy = on.args(i);
                    out.insert(above.at(&xy));
                }
            })
            .add("above-chain", move |n: &usize, f, out| {
                for (x, y, z) in (0..*n).flat_map(|x| (0..*n).flat_map(move |y| (0..*n).map(move |z| (x, y, z)))) {
                    if f.contains(on.at(&[x, y])) && f.contains(above.at(&[y, z])) {
                        out.insert(above.at(&[x, z]));
                    }
                }
            });
        assert_eq!(rules.names(), ["above-on", "above-chain"]);
        let mut facts = s.facts();
        (0..n - 1).for_each(|x| {
            facts.insert(on.at(&[x, x + 1]));
        });
        let rounds = rules.saturate(&n, &mut facts);
        assert_eq!(rounds, n); // links 1..n-1 need n-1 rounds, plus one that adds nothing
        for x in 0..n {
            for y in 0..n {
                assert_eq!(facts.contains(above.at(&[x, y])), x < y, "above({x}, {y})");
            }
        }
    }
}
