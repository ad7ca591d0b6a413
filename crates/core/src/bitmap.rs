//! Hierarchical occupancy bitmap: which slots of a wheel hold packets.
//!
//! Carousel's Algorithm 1 steps through empty slots one at a time; after an idle second at 2 µs
//! that is half a million visits. Like tokio's wheel `occupied` word and Linux's `find_next_bit`,
//! we keep one bit per slot and, above it, one bit per non-zero word of the level below, until a
//! level fits in one word. Finding the next occupied slot costs O(levels) word scans (3 levels for
//! a million slots), whatever the gap.
//!
//! Layout: `levels[0]` holds one bit per slot; `levels[k + 1]` bit `w` is set iff word `w` of
//! `levels[k]` is non-zero.

/// Bits per word.
const W: usize = 64;

/// A bitmap of `len` bits with summary levels for fast forward search.
#[derive(Clone, Debug)]
pub struct OccupancyBitmap {
    len: usize,
    levels: Vec<Vec<u64>>,
}

impl OccupancyBitmap {
    /// An empty bitmap of `len` bits (`len >= 1`).
    pub fn new(len: usize) -> Self {
        let len = len.max(1);
        let mut levels = Vec::new();
        let mut bits = len;
        loop {
            let words = bits.div_ceil(W);
            levels.push(vec![0u64; words]);
            if words == 1 {
                break;
            }
            bits = words;
        }
        OccupancyBitmap { len, levels }
    }

    /// Bytes a bitmap of `len` bits holds, computed without building it.
    pub fn bytes_for(len: usize) -> usize {
        let mut bits = len.max(1);
        let mut bytes = 0;
        loop {
            let words = bits.div_ceil(W);
            bytes += words * 8;
            if words == 1 {
                return bytes;
            }
            bits = words;
        }
    }

    /// Number of bits.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if no bit is set.
    pub fn is_empty(&self) -> bool {
        self.levels.last().is_some_and(|top| top[0] == 0)
    }

    /// Bytes held by the bitmap.
    pub fn memory_bytes(&self) -> usize {
        self.levels.iter().map(|l| l.capacity() * 8).sum()
    }

    /// Whether bit `i` is set.
    #[inline]
    pub fn get(&self, i: usize) -> bool {
        self.levels[0][i / W] & (1 << (i % W)) != 0
    }

    /// Sets bit `i`.
    #[inline]
    pub fn set(&mut self, mut i: usize) {
        for level in &mut self.levels {
            let word = &mut level[i / W];
            let was_zero = *word == 0;
            *word |= 1 << (i % W);
            if !was_zero {
                return;
            }
            i /= W;
        }
    }

    /// Clears bit `i`.
    #[inline]
    pub fn clear(&mut self, mut i: usize) {
        for level in &mut self.levels {
            let word = &mut level[i / W];
            *word &= !(1 << (i % W));
            if *word != 0 {
                return;
            }
            i /= W;
        }
    }

    /// The first set bit at or after `from`, if any (no wrap-around).
    pub fn next_set(&self, from: usize) -> Option<usize> {
        if from >= self.len {
            return None;
        }
        self.next_in_level(0, from)
    }

    /// The first set bit in ring order starting at `from`: `[from, len)` then `[0, from)`.
    pub fn next_set_ring(&self, from: usize) -> Option<usize> {
        self.next_set(from)
            .or_else(|| self.next_set(0).filter(|&i| i < from))
    }

    fn next_in_level(&self, level: usize, from: usize) -> Option<usize> {
        let words = &self.levels[level];
        let w = from / W;
        if w >= words.len() {
            return None;
        }
        let masked = words[w] & (!0u64 << (from % W));
        if masked != 0 {
            return Some(w * W + masked.trailing_zeros() as usize);
        }
        // Ask the level above for the next non-zero word after `w`.
        let next_w = if level + 1 < self.levels.len() {
            self.next_in_level(level + 1, w + 1)?
        } else {
            return None;
        };
        let word = words[next_w];
        debug_assert!(word != 0, "summary bit set over an empty word");
        Some(next_w * W + word.trailing_zeros() as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn finds_across_levels() {
        let mut b = OccupancyBitmap::new(1 << 20);
        assert!(b.is_empty());
        b.set(5);
        b.set(900_000);
        assert_eq!(b.next_set(0), Some(5));
        assert_eq!(b.next_set(6), Some(900_000));
        assert_eq!(b.next_set(900_001), None);
        assert_eq!(b.next_set_ring(900_001), Some(5));
        b.clear(5);
        assert_eq!(b.next_set_ring(900_001), Some(900_000));
        b.clear(900_000);
        assert!(b.is_empty());
        assert_eq!(b.memory_bytes(), OccupancyBitmap::bytes_for(1 << 20));
        assert_eq!(b.next_set_ring(0), None);
    }

    proptest! {
        #[test]
        fn matches_a_plain_vector(len in 1usize..5000, ops in prop::collection::vec((any::<bool>(), 0usize..5000), 0..300), from in 0usize..5000) {
            let mut b = OccupancyBitmap::new(len);
            let mut model = vec![false; len];
            for (set, i) in ops {
                let i = i % len;
                if set { b.set(i) } else { b.clear(i) }
                model[i] = set;
            }
            let from = from % len;
            let want = (from..len).find(|&i| model[i]);
            prop_assert_eq!(b.next_set(from), want);
            let want_ring = want.or_else(|| (0..from).find(|&i| model[i]));
            prop_assert_eq!(b.next_set_ring(from), want_ring);
            prop_assert_eq!(b.is_empty(), !model.iter().any(|&x| x));
        }
    }
}
