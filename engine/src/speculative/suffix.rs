//! SuffixDecoding's shared draft source (arXiv 2411.04975): recent requests' token sequences, in
//! which a sequence's context suffix is looked up and the continuation seen most often after it
//! proposed. Agentic and templated workloads repeat whole passages across requests, which the
//! request's own prompt (`PromptLookup`) cannot know.

mod nodes;
mod tree;

use std::collections::VecDeque;

use super::drafter::Draft;
use tree::{SuffixTree, Tokens};

/// Shortest context suffix looked up: after a single token almost anything may follow.
const MIN_MATCH: usize = 2;
/// Beyond this a match or draft is no more useful, and paths' lengths stay far inside a `u32`.
const MAX_DEPTH: usize = 1 << 12;
/// Draft tokens allowed per matched token (the paper's α: a draft is at most ⌈α·match⌉ long).
/// A match is evidence of shared text about as long as itself, so 1 drafts a bigram match's 2
/// tokens and fills the default 8-token budget from an 8-token match; it is also
/// ArcticInference's default. Larger α drafts more after coincidental short matches.
const DRAFT_PER_MATCHED_TOKEN: f64 = 1.0;
/// The draft stops where the token most seen next holds less than this share of the occurrences
/// that agree with the draft so far. A draft token costs one more row in a memory-bound step and
/// is kept about as often as its share (models repeat what they wrote), so a fair chance is
/// enough; under 0.3 the history is split three or more ways.
const MIN_SHARE: f64 = 0.3;

fn confident(count: u32, total: u32) -> bool {
    f64::from(count) >= MIN_SHARE * f64::from(total)
}

/// The recent token sequences of every request, oldest evicted first. Owned by the engine loop.
pub struct SuffixIndex {
    tree: SuffixTree,
    tokens: Tokens,
    /// First position and length of each held sequence, oldest first.
    sequences: VecDeque<(u64, usize)>,
    held: usize,
    max_tokens: usize,
    max_depth: usize,
}

impl SuffixIndex {
    /// Holds at most `max_tokens` tokens (under 2^31); matches context suffixes of up to
    /// `max_depth` tokens and drafts up to `max_depth` tokens after them.
    pub fn new(max_tokens: usize, max_depth: usize) -> Self {
        Self {
            tree: SuffixTree::new(MIN_MATCH as u32),
            tokens: Tokens::default(),
            sequences: VecDeque::new(),
            held: 0,
            max_tokens,
            max_depth: max_depth.clamp(MIN_MATCH, MAX_DEPTH),
        }
    }

    /// Tokens held.
    pub fn len(&self) -> usize {
        self.held
    }

    pub fn is_empty(&self) -> bool {
        self.held == 0
    }

    /// Adds a sequence (a finished output, or a prompt), evicting the oldest ones until it fits;
    /// of one longer than the whole index only its end is kept. O(len × max_depth).
    pub fn insert(&mut self, token_ids: &[u32]) {
        let token_ids = &token_ids[token_ids.len().saturating_sub(self.max_tokens)..];
        if token_ids.is_empty() {
            return;
        }
        while self.held + token_ids.len() > self.max_tokens {
            self.evict_oldest();
        }
        let start = self.tokens.end();
        self.tokens.push(token_ids);
        for offset in 0..token_ids.len() {
            self.tree.insert(&self.tokens, start + offset as u64, self.path_len(token_ids.len() - offset));
        }
        self.sequences.push_back((start, token_ids.len()));
        self.held += token_ids.len();
    }

    /// A guess at what follows `context`: the longest suffix of it (`MIN_MATCH..=max_depth`
    /// tokens) that some held sequence has with a token after it, then at each step the token
    /// most of its occurrences still agreeing with the draft go on with. Up to
    /// `min(max_tokens, max_depth, ⌈α·match⌉)` tokens; empty (and `match_len` 0) without a guess.
    /// O(max_depth · log max_depth) table lookups and token comparisons, however much is held.
    pub fn propose(&self, context: &[u32], max_tokens: usize) -> Draft {
        let longest = context.len().min(self.max_depth);
        if max_tokens == 0 || longest < MIN_MATCH {
            return Draft::default();
        }
        let matched = |len: usize| {
            let cursor = self.tree.locate(&self.tokens, &context[context.len() - len..])?;
            self.tree.continues(cursor).then_some(cursor)
        };
        // Whenever a suffix occurs with a token after it, so does every shorter one: bisect.
        let Some(mut cursor) = matched(MIN_MATCH) else {
            return Draft::default();
        };
        let (mut match_len, mut too_long) = (MIN_MATCH, longest + 1);
        while match_len + 1 < too_long {
            let len = (match_len + too_long) / 2;
            match matched(len) {
                Some(found) => (match_len, cursor) = (len, found),
                None => too_long = len,
            }
        }
        let adaptive = (match_len as f64 * DRAFT_PER_MATCHED_TOKEN).ceil() as usize;
        let limit = max_tokens.min(self.max_depth).min(adaptive);
        let mut token_ids = Vec::with_capacity(limit);
        while token_ids.len() < limit {
            let Some(step) = self.tree.step(&self.tokens, cursor) else { break };
            if !confident(step.count, step.total) {
                break;
            }
            token_ids.push(step.token);
            cursor = step.next;
        }
        if token_ids.is_empty() {
            return Draft::default();
        }
        Draft { token_ids, match_len }
    }

    /// A held position's path: room for a full-length match and a full-length draft after it.
    fn path_len(&self, remaining: usize) -> u32 {
        remaining.min(2 * self.max_depth) as u32
    }

    fn evict_oldest(&mut self) {
        let Some((start, len)) = self.sequences.pop_front() else { return };
        for offset in 0..len {
            self.tree.remove(&self.tokens, start + offset as u64, self.path_len(len - offset));
        }
        self.tokens.drop_front(len);
        self.held -= len;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Instant;

    use rand_xoshiro::rand_core::{RngCore, SeedableRng};
    use rand_xoshiro::Xoshiro256PlusPlus;

    use super::*;

    fn holding(sequences: &[&[u32]]) -> SuffixIndex {
        let mut index = SuffixIndex::new(1000, 8);
        sequences.iter().for_each(|s| index.insert(s));
        index
    }

    #[test]
    fn the_continuation_seen_most_often_wins() {
        let index = holding(&[&[5, 6, 7, 8], &[5, 6, 7, 8], &[5, 6, 7, 8], &[5, 6, 9, 9]]);
        assert_eq!(index.propose(&[1, 5, 6], 8), Draft { token_ids: vec![7, 8], match_len: 2 });
        // Once seen each, the newest breaks the tie; under the share threshold nothing is drafted.
        let index = holding(&[&[5, 6, 7], &[5, 6, 9]]);
        assert_eq!(index.propose(&[5, 6], 8).token_ids, vec![9]);
        let index = holding(&[&[5, 6, 1], &[5, 6, 2], &[5, 6, 3], &[5, 6, 4]]);
        assert!(index.propose(&[5, 6], 8).is_empty());
        assert!(index.propose(&[5, 7], 8).is_empty());
        assert_eq!(index.propose(&[5, 6], 0), Draft::default());
    }

    #[test]
    fn the_longest_matching_suffix_decides() {
        // After "2 3" the history says 7 (twice), after "1 2 3" it says 4.
        let index = holding(&[&[9, 2, 3, 7, 7], &[9, 2, 3, 7, 7], &[1, 2, 3, 4, 5]]);
        assert_eq!(index.propose(&[0, 1, 2, 3], 8), Draft { token_ids: vec![4, 5], match_len: 3 });
        assert_eq!(index.propose(&[0, 8, 2, 3], 8), Draft { token_ids: vec![7, 7], match_len: 2 });
    }

    #[test]
    fn longer_matches_draft_more() {
        let text: Vec<u32> = (100..140).collect();
        let index = holding(&[&text]);
        assert_eq!(index.propose(&text[..2], 32), Draft { token_ids: text[2..4].to_vec(), match_len: 2 });
        assert_eq!(index.propose(&text[..5], 32), Draft { token_ids: text[5..10].to_vec(), match_len: 5 });
        // max_depth (8) caps the match and the draft, the caller's budget caps the draft.
        assert_eq!(index.propose(&text[..20], 32), Draft { token_ids: text[20..28].to_vec(), match_len: 8 });
        assert_eq!(index.propose(&text[..20], 3).token_ids, text[20..23].to_vec());
        // A draft stops where the held text ends.
        assert_eq!(index.propose(&text[..37], 32).token_ids, text[37..].to_vec());
    }

    #[test]
    fn eviction_forgets_the_oldest_sequences() {
        let mut index = SuffixIndex::new(10, 8);
        index.insert(&[1, 2, 3, 4, 5]);
        index.insert(&[6, 7, 8, 9, 10]);
        assert_eq!(index.propose(&[1, 2], 8).token_ids, vec![3, 4]);
        index.insert(&[11, 12, 13]);
        assert!(index.propose(&[1, 2], 8).is_empty());
        assert_eq!(index.propose(&[6, 7], 8).token_ids, vec![8, 9]);
        assert_eq!(index.len(), 8);
        // Longer than the whole index: its end replaces everything.
        index.insert(&(20..40).collect::<Vec<_>>());
        assert_eq!(index.len(), 10);
        assert!(index.propose(&[6, 7], 8).is_empty());
        assert_eq!(index.propose(&[30, 31], 8).token_ids, vec![32, 33]);
        assert_eq!(index.tree.node_count(), 1 + 10, "one leaf per position of unrepeated text");
    }

    #[test]
    fn memory_stays_bounded_by_the_tokens_held() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(7);
        let mut index = SuffixIndex::new(500, 6);
        for _ in 0..2000 {
            let len = 1 + rng.next_u32() as usize % 60;
            let sequence: Vec<u32> = (0..len).map(|_| rng.next_u32() % 4).collect();
            index.insert(&sequence);
            assert!(index.len() <= 500);
            // A node per branch or end: at most two per held position.
            assert!(index.tree.node_count() <= 2 * index.len() + 1);
            index.tree.assert_compact();
        }
        index.insert(&[9; 500]);
        // One path per position, each a prefix of the one before it: a node per path end.
        assert_eq!(index.tree.node_count(), 1 + 2 * 6);
    }

    /// `SuffixIndex` by exhaustive scan of the held sequences.
    struct Reference {
        sequences: VecDeque<(u64, Vec<u32>)>,
        next: u64,
        max_tokens: usize,
        max_depth: usize,
    }

    impl Reference {
        fn insert(&mut self, token_ids: &[u32]) {
            let token_ids = &token_ids[token_ids.len().saturating_sub(self.max_tokens)..];
            let held = |r: &Self| r.sequences.iter().map(|s| s.1.len()).sum::<usize>();
            while !token_ids.is_empty() && held(self) + token_ids.len() > self.max_tokens {
                self.sequences.pop_front();
            }
            if !token_ids.is_empty() {
                self.sequences.push_back((self.next, token_ids.to_vec()));
                self.next += token_ids.len() as u64;
            }
        }

        fn propose(&self, context: &[u32], max_tokens: usize) -> Draft {
            for match_len in (MIN_MATCH..=context.len().min(self.max_depth)).rev() {
                let pattern = &context[context.len() - match_len..];
                // Each occurrence: its position, and what follows it in its sequence.
                let mut occurrences: Vec<(u64, &[u32])> = (self.sequences.iter())
                    .flat_map(|(start, s)| {
                        let found = s.windows(match_len).enumerate().filter(|(_, window)| *window == pattern);
                        found.map(move |(i, _)| (start + i as u64, &s[i + match_len..]))
                    })
                    .collect();
                if occurrences.iter().all(|(_, rest)| rest.is_empty()) {
                    continue;
                }
                let adaptive = (match_len as f64 * DRAFT_PER_MATCHED_TOKEN).ceil() as usize;
                let limit = max_tokens.min(self.max_depth).min(adaptive);
                let mut token_ids = Vec::new();
                while token_ids.len() < limit {
                    let k = token_ids.len();
                    let mut next: BTreeMap<u32, (u32, u64)> = BTreeMap::new();
                    for &(position, rest) in &occurrences {
                        if let Some(&token) = rest.get(k) {
                            let seen = next.entry(token).or_default();
                            *seen = (seen.0 + 1, seen.1.max(position));
                        }
                    }
                    let Some((token, (count, _))) = next.into_iter().max_by_key(|&(_, seen)| seen) else { break };
                    if !confident(count, occurrences.len() as u32) {
                        break;
                    }
                    token_ids.push(token);
                    occurrences.retain(|(_, rest)| rest.get(k) == Some(&token));
                }
                return if token_ids.is_empty() { Draft::default() } else { Draft { token_ids, match_len } };
            }
            Draft::default()
        }
    }

    #[test]
    fn agrees_with_an_exhaustive_scan() {
        for (seed, max_tokens, max_depth, vocab) in [(1, 120, 4, 2), (2, 300, 6, 3), (3, 60, 2, 3), (4, 400, 9, 5)] {
            let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
            let mut index = SuffixIndex::new(max_tokens, max_depth);
            let mut reference = Reference { sequences: VecDeque::new(), next: 0, max_tokens, max_depth };
            let mut drafted = 0;
            for round in 0..1500 {
                let len = 1 + rng.next_u32() as usize % 50;
                let sequence: Vec<u32> = (0..len).map(|_| rng.next_u32() % vocab).collect();
                index.insert(&sequence);
                reference.insert(&sequence);
                assert_eq!(index.len(), reference.sequences.iter().map(|s| s.1.len()).sum::<usize>());
                index.tree.assert_compact();
                for _ in 0..4 {
                    let len = rng.next_u32() as usize % 14;
                    let context: Vec<u32> = (0..len).map(|_| rng.next_u32() % vocab).collect();
                    let budget = rng.next_u32() as usize % 12;
                    let draft = index.propose(&context, budget);
                    assert_eq!(draft, reference.propose(&context, budget), "seed {seed} round {round} {context:?}");
                    drafted += usize::from(!draft.is_empty());
                }
            }
            assert!(drafted > 1000, "the comparison exercised drafting ({drafted})");
        }
    }

    #[test]
    fn is_send() {
        fn send<T: Send>() {}
        send::<SuffixIndex>();
    }

    /// Log-uniform over a 32k vocabulary: a few tokens common, most rare, as in text.
    fn text_token(rng: &mut Xoshiro256PlusPlus) -> u32 {
        32_000f64.powf(f64::from(rng.next_u32()) / f64::from(u32::MAX)) as u32
    }

    /// `cargo test -p entrobatch-engine --lib suffix::tests::timing -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn timing() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(11);
        for held in [100_000, 1_000_000] {
            // 500-token outputs, a third of them copying a 200-token passage of an earlier one
            // (SuffixDecoding's agentic workload); twice what is held, so half are evicted.
            let mut outputs: Vec<Vec<u32>> = Vec::new();
            while outputs.len() * 500 < 2 * held {
                let mut output: Vec<u32> = (0..500).map(|_| text_token(&mut rng)).collect();
                if !outputs.is_empty() && rng.next_u32() % 3 == 0 {
                    let from = &outputs[rng.next_u32() as usize % outputs.len()];
                    let at = rng.next_u32() as usize % 300;
                    output[at..at + 200].copy_from_slice(&from[at..at + 200]);
                }
                outputs.push(output);
            }
            let mut index = SuffixIndex::new(held, 32);
            let inserting = Instant::now();
            outputs.iter().for_each(|output| index.insert(output));
            let insert_ns = inserting.elapsed().as_nanos() as f64 / (outputs.len() * 500) as f64;
            let outputs = &outputs[outputs.len() / 2..];
            let contexts: Vec<Vec<u32>> = (0..4000)
                .map(|i| {
                    let from = &outputs[rng.next_u32() as usize % outputs.len()];
                    let end = 40 + rng.next_u32() as usize % 460;
                    let mut context = from[end - 40..end].to_vec();
                    // Half end in fresh text: a short match or none, the usual case.
                    if i % 2 == 0 {
                        context[37..].iter_mut().for_each(|t| *t = text_token(&mut rng));
                    }
                    context
                })
                .collect();
            let proposing = Instant::now();
            let drafted: usize = contexts.iter().map(|c| index.propose(c, 8).token_ids.len()).sum();
            let propose_ns = proposing.elapsed().as_nanos() as f64 / contexts.len() as f64;
            // Matching only the most common bigram: the node with the most children.
            let common = Instant::now();
            (0..1000).for_each(|_| assert!(index.propose(&[32_001, 1, 1], 8).is_empty()));
            let common_ns = common.elapsed().as_nanos() as f64 / 1000.0;
            eprintln!(
                "{held} tokens held, {} nodes: insert and evict {insert_ns:.0} ns/token; propose {propose_ns:.0} ns \
                 ({drafted} tokens drafted in {} calls), {common_ns:.0} ns after the commonest bigram",
                index.tree.node_count(),
                contexts.len()
            );
        }
    }
}
