//! The merge list of a SentencePiece vocabulary, derived from its piece scores.
//!
//! SentencePiece's BPE (and llama.cpp's `llm_tokenizer_spm`) tokenizes by repeatedly joining
//! the two adjacent symbols whose concatenation is the highest-scoring piece, the leftmost
//! first on a tie. A BPE model whose merges are every split of every piece into two pieces,
//! ranked by the joined piece's score, highest first, makes the same choices. That is how
//! Hugging Face's `SentencePieceExtractor` converts these vocabularies, and the order among
//! equal scores is the same as there (joined piece's id, then the halves' ids), so a GGUF
//! vocabulary tokenizes as the tokenizer.json converted from the same model does. The one
//! place the two can differ: two different splits of equal score competing at different
//! positions, which SentencePiece settles by position and a merge list by rank.
//!
//! Every piece is visited once and only its splits are looked up, so the work grows with the
//! total length of the pieces (1.2M splits for Gemma 3's 262k pieces), never with the square
//! of the vocabulary.

use std::cmp::Ordering;

use rayon::prelude::*;
use tokenizers::models::bpe::{Merges, Vocab};

/// `left + right` is the piece `joined`, which scores `score`.
struct Candidate {
    score: f32,
    joined: u32,
    left: u32,
    right: u32,
}

impl Candidate {
    /// Highest score first, then as `SentencePieceExtractor` orders (stable sort of pieces in
    /// id order, each piece's splits by the halves' ids).
    fn rank_order(&self, other: &Self) -> Ordering {
        other
            .score
            .total_cmp(&self.score)
            .then(self.joined.cmp(&other.joined))
            .then(self.left.cmp(&other.left))
            .then(self.right.cmp(&other.right))
    }
}

/// Merges, best first, for the vocabulary `tokens` (with `vocab` its text -> id map and
/// `scores` one per token). This runs at every model load: the pieces are split, the
/// candidates sorted and the merge strings cloned on all cores.
pub(super) fn merges_from_scores(tokens: &[String], scores: &[f32], vocab: &Vocab) -> Merges {
    let mut candidates: Vec<Candidate> = tokens
        .par_iter()
        .zip(scores)
        .enumerate()
        // A duplicated text is one vocabulary entry, owned by the id `vocab` keeps.
        .filter(|&(id, (piece, _))| vocab.get(piece.as_str()) == Some(&(id as u32)))
        .flat_map_iter(|(id, (piece, &score))| {
            piece.char_indices().skip(1).filter_map(move |(split, _)| {
                let (left, right) = piece.split_at(split);
                let &left = vocab.get(left)?;
                let &right = vocab.get(right)?;
                Some(Candidate { score, joined: id as u32, left, right })
            })
        })
        .collect();
    candidates.par_sort_unstable_by(Candidate::rank_order);
    candidates.par_iter().map(|c| (tokens[c.left as usize].clone(), tokens[c.right as usize].clone())).collect()
}

#[cfg(test)]
mod tests {
    use super::merges_from_scores;
    use crate::tokenizer::gguf_vocab::vocab_of;

    fn merges(pieces: &[(&str, f32)]) -> Vec<String> {
        let tokens: Vec<String> = pieces.iter().map(|(p, _)| p.to_string()).collect();
        let scores: Vec<f32> = pieces.iter().map(|(_, s)| *s).collect();
        merges_from_scores(&tokens, &scores, &vocab_of(&tokens)).into_iter().map(|(l, r)| format!("{l} {r}")).collect()
    }

    #[test]
    fn every_split_ranked_by_the_joined_piece_score() {
        let got = merges(&[("a", 0.0), ("b", 0.0), ("c", 0.0), ("ab", -2.0), ("bc", -1.0), ("abc", -3.0)]);
        // "bc" outranks "ab"; "abc" has two splits, ordered by the halves' ids.
        assert_eq!(got, ["b c", "a b", "a bc", "ab c"]);
    }

    #[test]
    fn splits_fall_on_characters_and_need_both_halves() {
        // "▁é" splits only between its two characters; "xyz" has no half in the vocabulary.
        let got = merges(&[("▁", 0.0), ("é", 0.0), ("▁é", -1.0), ("xyz", -2.0), ("x", 0.0)]);
        assert_eq!(got, ["▁ é"]);
    }

    #[test]
    fn equal_scores_keep_piece_order_and_duplicates_count_once() {
        let got = merges(&[("a", 0.0), ("b", 0.0), ("ba", -1.0), ("ab", -1.0), ("ab", 5.0)]);
        assert_eq!(got, ["b a", "a b"]);
    }
}
