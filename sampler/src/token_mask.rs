//! A set of allowed token ids over one logits row (structured outputs / constrained decoding).
//!
//! The sampler knows nothing about grammars: whoever computes the constraint (the engine's
//! llguidance backend) fills a [`TokenMask`] and the sampler only applies it. The storage is
//! the same as llguidance's `toktrie::SimpleVob` (u32 words, bit `i % 32` of word `i / 32`)
//! so a computed mask is copied in word by word, with no per-token work.

/// Bitset over the ids of a logits row of `len` entries. Ids `>= len` are never allowed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenMask {
    words: Vec<u32>,
    len: usize,
}

const BITS: usize = 32;

impl TokenMask {
    /// A mask over `len` ids with nothing allowed.
    pub fn none(len: usize) -> Self {
        Self { words: vec![0; len.div_ceil(BITS)], len }
    }

    /// A mask over `len` ids with every id allowed.
    pub fn all(len: usize) -> Self {
        let mut m = Self { words: vec![u32::MAX; len.div_ceil(BITS)], len };
        m.clear_tail();
        m
    }

    /// Number of ids the mask covers (the logits row length it was made for).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Allows `id`; ids outside the mask are ignored (they can never be allowed).
    pub fn allow(&mut self, id: u32) {
        let i = id as usize;
        if i < self.len {
            self.words[i / BITS] |= 1 << (i % BITS);
        }
    }

    /// Disallows `id`; ids outside the mask are already disallowed.
    pub fn disallow(&mut self, id: u32) {
        let i = id as usize;
        if i < self.len {
            self.words[i / BITS] &= !(1 << (i % BITS));
        }
    }

    /// Disallows every id.
    pub fn clear(&mut self) {
        self.words.fill(0);
    }

    pub fn allows(&self, id: u32) -> bool {
        let i = id as usize;
        i < self.len && self.words[i / BITS] & (1 << (i % BITS)) != 0
    }

    pub fn count_allowed(&self) -> usize {
        // Bits past `len` may have been set through `words_mut`; they are not ids.
        let full = self.len / BITS;
        let mut n: usize = self.words[..full].iter().map(|w| w.count_ones() as usize).sum();
        if let Some(&last) = self.words.get(full) {
            n += (last & self.tail_mask()).count_ones() as usize;
        }
        n
    }

    /// Allowed ids in increasing order.
    pub fn allowed_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(move |(wi, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let bit = w.trailing_zeros();
                w &= w - 1;
                Some((wi * BITS) as u32 + bit)
            })
            .take_while(move |&id| (id as usize) < self.len)
        })
    }

    pub fn words(&self) -> &[u32] {
        &self.words
    }

    /// Raw words for bulk copies (`len().div_ceil(32)` of them). Bits at or past `len()` are
    /// ignored by every reader, so a copied-in source may leave garbage there.
    pub fn words_mut(&mut self) -> &mut [u32] {
        &mut self.words
    }

    /// Sets every logit whose id is not allowed to `-inf`, including ids past the mask's
    /// length (a longer row than the mask was made for).
    pub fn apply(&self, logits: &mut [f32]) {
        for (wi, chunk) in logits.chunks_mut(BITS).enumerate() {
            let w = match self.words.get(wi) {
                Some(&w) if wi == self.len / BITS => w & self.tail_mask(),
                Some(&w) => w,
                None => 0,
            };
            // Full words are the common case inside a permissive mask, empty ones in a strict
            // one (most of the vocabulary): neither needs a per-bit test.
            if w == u32::MAX {
                continue;
            }
            if w == 0 {
                chunk.fill(f32::NEG_INFINITY);
                continue;
            }
            for (b, l) in chunk.iter_mut().enumerate() {
                if w & (1 << b) == 0 {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
    }

    /// The allowed id with the greatest logit (lowest id on ties), or `None` when no id of
    /// the row is allowed. An allowed `-inf` still beats any disallowed id: the grammar's
    /// choice wins over penalties. NaN ranks below every number.
    pub fn argmax_allowed(&self, logits: &[f32]) -> Option<u32> {
        let mut best: Option<(u32, f32)> = None;
        for id in self.allowed_ids() {
            let Some(&v) = logits.get(id as usize) else {
                break;
            };
            match best {
                None => best = Some((id, v)),
                Some((_, b)) if v > b || (b.is_nan() && !v.is_nan()) => best = Some((id, v)),
                _ => {}
            }
        }
        best.map(|(id, _)| id)
    }

    /// Bits of the last word that are real ids (all ones when `len` is a multiple of 32).
    fn tail_mask(&self) -> u32 {
        match self.len % BITS {
            0 => u32::MAX,
            r => (1u32 << r) - 1,
        }
    }

    fn clear_tail(&mut self) {
        let mask = self.tail_mask();
        if !self.len.is_multiple_of(BITS) {
            if let Some(last) = self.words.last_mut() {
                *last &= mask;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_and_query() {
        let mut m = TokenMask::none(70);
        assert_eq!(m.len(), 70);
        assert_eq!(m.words().len(), 3);
        assert_eq!(m.count_allowed(), 0);
        for id in [0, 31, 32, 69] {
            m.allow(id);
        }
        // Out of range: ignored, never allowed.
        m.allow(70);
        m.allow(u32::MAX);
        assert!(m.allows(0) && m.allows(31) && m.allows(32) && m.allows(69));
        assert!(!m.allows(1) && !m.allows(70) && !m.allows(95));
        assert_eq!(m.count_allowed(), 4);
        assert_eq!(m.allowed_ids().collect::<Vec<_>>(), vec![0, 31, 32, 69]);
        m.disallow(31);
        assert!(!m.allows(31));
        assert_eq!(m.count_allowed(), 3);
        m.clear();
        assert_eq!(m.count_allowed(), 0);
    }

    #[test]
    fn all_covers_exactly_len() {
        let m = TokenMask::all(70);
        assert_eq!(m.count_allowed(), 70);
        assert!(m.allows(69) && !m.allows(70));
        assert_eq!(TokenMask::all(64).count_allowed(), 64);
        assert_eq!(TokenMask::all(0).count_allowed(), 0);
    }

    #[test]
    fn words_layout_matches_simplevob() {
        // Bit i of word i/32, as toktrie::SimpleVob stores it.
        let mut m = TokenMask::none(100);
        m.words_mut()[1] = 0b101; // ids 32 and 34
        m.words_mut()[3] = u32::MAX; // ids 96..=99 real, 100..=127 past the end
        assert!(m.allows(32) && !m.allows(33) && m.allows(34));
        assert_eq!(m.allowed_ids().collect::<Vec<_>>(), vec![32, 34, 96, 97, 98, 99]);
        assert_eq!(m.count_allowed(), 6, "bits past len must not count");
    }

    #[test]
    fn apply_sets_exactly_disallowed_to_neg_inf() {
        let len = 100;
        let mut m = TokenMask::none(len);
        let allowed = [0u32, 5, 31, 32, 33, 63, 99];
        for &id in &allowed {
            m.allow(id);
        }
        // Word 2 (ids 64..=95) entirely allowed: the skip path.
        for id in 64..96 {
            m.allow(id);
        }
        // Garbage past len in the last word must not leak through.
        m.words_mut()[3] |= 0xFFFF_0000;
        // The row is longer than the mask: the extra ids are never allowed.
        let mut logits: Vec<f32> = (0..140).map(|i| i as f32).collect();
        m.apply(&mut logits);
        for (i, &l) in logits.iter().enumerate() {
            let ok = allowed.contains(&(i as u32)) || (64..96).contains(&i);
            if ok {
                assert_eq!(l, i as f32, "allowed id {i} changed");
            } else {
                assert_eq!(l, f32::NEG_INFINITY, "disallowed id {i} kept");
            }
        }
    }

    #[test]
    fn apply_on_shorter_row_only_touches_the_row() {
        let mut m = TokenMask::none(64);
        m.allow(3);
        let mut logits = vec![1.0f32; 10];
        m.apply(&mut logits);
        let expect: Vec<f32> = (0..10).map(|i| if i == 3 { 1.0 } else { f32::NEG_INFINITY }).collect();
        assert_eq!(logits, expect);
    }

    #[test]
    fn argmax_allowed_picks_best_allowed() {
        let mut m = TokenMask::none(8);
        let logits = [9.0, 1.0, 3.0, 3.0, 7.0, f32::NAN, 0.0, 8.0];
        assert_eq!(m.argmax_allowed(&logits), None);
        m.allow(1);
        m.allow(2);
        m.allow(3);
        m.allow(5);
        // 9.0 at id 0 and 8.0 at id 7 are disallowed; tie 2/3 -> lowest id; NaN never wins.
        assert_eq!(m.argmax_allowed(&logits), Some(2));
        let mut only_nan = TokenMask::none(8);
        only_nan.allow(5);
        only_nan.allow(6);
        assert_eq!(only_nan.argmax_allowed(&logits), Some(6));
        // An allowed -inf still beats a disallowed finite logit.
        let mut m2 = TokenMask::none(3);
        m2.allow(1);
        assert_eq!(m2.argmax_allowed(&[0.0, f32::NEG_INFINITY, 1.0]), Some(1));
        // Ids past the row are not considered.
        let mut m3 = TokenMask::none(8);
        m3.allow(7);
        assert_eq!(m3.argmax_allowed(&[0.0; 4]), None);
    }
}
