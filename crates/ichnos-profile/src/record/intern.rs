//! Stacks interned: each distinct (address space, stop, frames) gets a
//! number once, and a sample stores only the number.
//!
//! Frames live in one growing array; a table maps a hash of the stack to
//! the first stack with that hash, and stacks with equal hashes are
//! chained. Looking up a stack seen before allocates nothing.

use std::collections::HashMap;

use ichnos_data::StackStop;

/// The interned stacks.
#[derive(Debug, Default)]
pub struct Interner {
    by_hash: HashMap<u64, u32>,
    /// Per stack: the next stack with the same hash, or `u32::MAX`.
    next: Vec<u32>,
    /// Per stack: where its frames start in `frames`, and how many.
    spans: Vec<(usize, u32)>,
    asids: Vec<u64>,
    stops: Vec<StackStop>,
    frames: Vec<u64>,
}

const NONE: u32 = u32::MAX;

fn hash(asid: u64, stop: StackStop, frames: &[u64]) -> u64 {
    // A multiply-rotate hash: return addresses differ in every byte that
    // matters, and this runs once per sample.
    let mut h = asid.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ stop.number();
    for &f in frames {
        h = (h.rotate_left(23) ^ f).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    h
}

impl Interner {
    /// The number of `frames` of address space `asid`, and whether it is
    /// new.
    pub fn intern(&mut self, asid: u64, stop: StackStop, frames: &[u64]) -> (u32, bool) {
        let h = hash(asid, stop, frames);
        let mut at = self.by_hash.get(&h).copied().unwrap_or(NONE);
        let mut last = NONE;
        while at != NONE {
            let i = at as usize;
            let (start, len) = self.spans[i];
            if self.asids[i] == asid
                && self.stops[i] == stop
                && self.frames[start..start + len as usize] == *frames
            {
                return (at, false);
            }
            last = at;
            at = self.next[i];
        }
        let id = self.spans.len() as u32;
        self.spans.push((
            self.frames.len(),
            frames.len().min(u32::MAX as usize) as u32,
        ));
        self.frames.extend_from_slice(frames);
        self.asids.push(asid);
        self.stops.push(stop);
        self.next.push(NONE);
        if last == NONE {
            self.by_hash.insert(h, id);
        } else {
            self.next[last as usize] = id;
        }
        (id, true)
    }

    /// How many stacks.
    #[must_use]
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Stack `id`'s frames.
    #[must_use]
    pub fn frames(&self, id: u32) -> &[u64] {
        let (start, len) = self.spans[id as usize];
        &self.frames[start..start + len as usize]
    }

    /// Stack `id`'s stop.
    #[must_use]
    pub fn stop(&self, id: u32) -> StackStop {
        self.stops[id as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Against a map from the whole key to its number.
        #[test]
        fn agrees_with_a_map_of_whole_stacks(
            stacks in proptest::collection::vec(
                (0u64..3, proptest::bool::ANY, proptest::collection::vec(0u64..4, 0..5)),
                1..200,
            )
        ) {
            let mut interner = Interner::default();
            let mut model: HashMap<(u64, bool, Vec<u64>), u32> = HashMap::new();
            for (asid, complete, frames) in stacks {
                let stop = if complete { StackStop::Complete } else { StackStop::StackEnd };
                let (id, new) = interner.intern(asid, stop, &frames);
                let key = (asid, complete, frames.clone());
                if let Some(&want) = model.get(&key) {
                    proptest::prop_assert_eq!(id, want);
                    proptest::prop_assert!(!new);
                } else {
                    proptest::prop_assert!(new);
                    proptest::prop_assert_eq!(id as usize, model.len());
                    model.insert(key, id);
                }
                proptest::prop_assert_eq!(interner.frames(id), &frames[..]);
                proptest::prop_assert_eq!(interner.stop(id), stop);
            }
        }
    }
}
