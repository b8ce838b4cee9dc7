//! One request's compiled constraint: wraps an llguidance `Matcher` and turns its masks into
//! the sampler's [`TokenMask`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use entrobatch_model_runner::Tokenizer;
use entrobatch_sampler::TokenMask;
use llguidance::Matcher;

use super::spec::StructuredError;

/// The grammar state of one request. Owned by the engine loop (it is `Send`); per step:
/// [`mask`](Self::mask) -> sample -> [`commit`](Self::commit).
pub struct Constraint {
    matcher: Matcher,
    eos_token_ids: Arc<[u32]>,
    mask: TokenMask,
    /// `mask` describes the current state (reset by every commit).
    mask_valid: bool,
    /// An EOS id was committed: the output is over.
    ended: bool,
    mask_time: Duration,
    mask_count: u64,
    /// Set when the grammar does not enforce the whole schema: the finished output is
    /// checked against it.
    check: Option<Arc<SchemaCheck>>,
    /// The committed text tokens, kept only for `check`.
    committed: Vec<u32>,
}

/// What a best-effort JSON schema grammar left out, and the validator of the whole schema.
pub(crate) struct SchemaCheck {
    validator: jsonschema::Validator,
    /// llguidance's warnings: the keywords it could not enforce.
    pub(crate) unenforced: Vec<String>,
}

impl SchemaCheck {
    pub(crate) fn new(schema: &serde_json::Value, unenforced: Vec<String>) -> Result<Self, StructuredError> {
        let validator = jsonschema::validator_for(schema)
            .map_err(|e| StructuredError::InvalidSchema(format!("the schema cannot be validated: {e}")))?;
        Ok(Self { validator, unenforced })
    }
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint")
            .field("vocab_size", &self.mask.len())
            .field("ended", &self.ended)
            .field("stopped", &self.matcher.is_stopped())
            .field("error", &self.matcher.get_error())
            .finish_non_exhaustive()
    }
}

impl Constraint {
    pub(crate) fn new(matcher: Matcher, vocab_size: usize, eos_token_ids: Arc<[u32]>) -> Self {
        Self {
            matcher,
            eos_token_ids,
            mask: TokenMask::none(vocab_size),
            mask_valid: false,
            ended: false,
            mask_time: Duration::ZERO,
            mask_count: 0,
            check: None,
            committed: Vec::new(),
        }
    }

    pub(crate) fn with_check(mut self, check: Option<Arc<SchemaCheck>>) -> Self {
        self.check = check;
        self
    }

    /// Checks the output against `schema` (the client's, before anything was left out of the
    /// grammar), keeping the list of what the grammar does not enforce.
    pub(crate) fn recheck_against(&mut self, schema: &serde_json::Value) -> Result<(), StructuredError> {
        let unenforced = self.check.as_ref().map(|c| c.unenforced.clone()).unwrap_or_default();
        self.check = Some(Arc::new(SchemaCheck::new(schema, unenforced)?));
        Ok(())
    }

    /// Keywords of the schema the grammar does not enforce (empty when it enforces all).
    pub fn unenforced(&self) -> &[String] {
        self.check.as_ref().map_or(&[], |c| &c.unenforced)
    }

    /// For a grammar that does not enforce its whole schema, the finished output checked
    /// against it: `Some` of the validator's errors, empty when the output is valid; `None`
    /// when nothing needs checking.
    pub fn check_output(&self, tokenizer: &Tokenizer) -> Option<Vec<String>> {
        let check = self.check.as_ref()?;
        let text = match tokenizer.decode(&self.committed, true) {
            Ok(text) => text,
            Err(e) => return Some(vec![format!("the output could not be decoded: {e}")]),
        };
        let value: serde_json::Value = match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(e) => return Some(vec![format!("the output is not JSON: {e}")]),
        };
        let at = |path: String| if path.is_empty() { "the output".to_string() } else { format!("`{path}`") };
        Some(
            check
                .validator
                .iter_errors(&value)
                .map(|e| format!("{}: {e}", at(e.instance_path().to_string())))
                .collect(),
        )
    }

    /// An independent copy at this constraint's state, without compiling the grammar again
    /// (llguidance's `deep_clone`: the parser and its lexer caches); the copy's mask timings
    /// start at zero.
    pub(crate) fn fork(&self) -> Self {
        let mut copy = Self::new(self.matcher.deep_clone(), self.mask.len(), self.eos_token_ids.clone());
        copy.check = self.check.clone();
        copy.committed = self.committed.clone();
        copy
    }

    /// Allowed next tokens over the full logits row; cached until the next commit. Every EOS
    /// id is allowed iff the grammar may end here (llguidance adds the trie's EOS set when
    /// the grammar accepts); special tokens are never allowed otherwise, unless a Lark grammar
    /// names one explicitly (`<|...|>` syntax). Once the grammar is complete (or ended) only
    /// the EOS ids are allowed.
    pub fn mask(&mut self) -> Result<&TokenMask, StructuredError> {
        if !self.mask_valid {
            self.refresh_mask()?;
            self.mask_valid = true;
        }
        Ok(&self.mask)
    }

    fn refresh_mask(&mut self) -> Result<(), StructuredError> {
        if let Some(e) = self.matcher.get_error() {
            return Err(StructuredError::Internal(clean(e)));
        }
        if self.ended || self.matcher.is_stopped() {
            // llguidance refuses to compute a mask once stopped; the only way on is EOS.
            self.mask.clear();
            for &eos in self.eos_token_ids.iter() {
                self.mask.allow(eos);
            }
            return Ok(());
        }
        let t0 = Instant::now();
        let vob = self
            .matcher
            .compute_mask()
            .map_err(|e| StructuredError::Internal(format!("computing the token mask: {}", clean(e.to_string()))))?;
        // Same word layout, and the trie was built with exactly the row's length: a straight
        // copy. Words the source lacks mean "not allowed".
        let src = vob.as_slice();
        let dst = self.mask.words_mut();
        let n = src.len().min(dst.len());
        dst[..n].copy_from_slice(&src[..n]);
        dst[n..].fill(0);
        self.mask_time += t0.elapsed();
        self.mask_count += 1;
        Ok(())
    }

    /// Advance on a committed token (any EOS id when the grammar accepts ends it). A token
    /// the grammar does not allow here is `Rejected` and leaves the state unchanged.
    pub fn commit(&mut self, token_id: u32) -> Result<(), StructuredError> {
        let reject = |reason: &str| Err(StructuredError::Rejected { token_id, reason: reason.to_string() });
        if token_id as usize >= self.mask.len() {
            return reject("token id is outside the vocabulary");
        }
        let is_eos = self.eos_token_ids.contains(&token_id);
        if self.ended {
            return if is_eos { Ok(()) } else { reject("the output already ended with EOS") };
        }
        if let Some(e) = self.matcher.get_error() {
            return Err(StructuredError::Internal(clean(e)));
        }
        if self.matcher.is_stopped() {
            // Complete grammar (llguidance stopped it after the last byte): only EOS is left.
            if is_eos {
                self.ended = true;
                self.mask_valid = false;
                return Ok(());
            }
            return reject("the output is complete; only EOS may follow");
        }
        let allowed = if self.mask_valid {
            self.mask.allows(token_id)
        } else {
            // No mask computed for this step (e.g. a forced token): check without advancing,
            // so a rejected token cannot put the matcher into its error state.
            let n = self
                .matcher
                .validate_tokens(&[token_id])
                .map_err(|e| StructuredError::Internal(format!("validating a token: {}", clean(e.to_string()))))?;
            n == 1
        };
        if !allowed {
            return reject(if is_eos {
                "EOS before the output is complete"
            } else {
                "the grammar does not allow this token here"
            });
        }
        self.matcher
            .consume_token(token_id)
            .map_err(|e| StructuredError::Internal(format!("committing token {token_id}: {}", clean(e.to_string()))))?;
        self.mask_valid = false;
        if is_eos {
            self.ended = true;
        } else if self.check.is_some() {
            self.committed.push(token_id);
        }
        Ok(())
    }

    /// The grammar is complete and only EOS can follow (also true once EOS was committed).
    pub fn is_finished(&self) -> bool {
        self.ended || (self.matcher.is_stopped() && !self.matcher.is_error())
    }

    /// The output so far is a complete match: EOS would be allowed now.
    pub fn is_accepting(&mut self) -> bool {
        self.is_finished() || self.matcher.is_accepting().unwrap_or(false)
    }

    /// Why the constraint failed, if it did (it then refuses every further step).
    pub fn error(&self) -> Option<String> {
        self.matcher.get_error().map(clean)
    }

    /// Tokens the grammar forces next (llguidance fast-forward); empty when none. They are
    /// not committed: the caller appends them and commits each.
    pub fn forced_tokens(&mut self) -> Vec<u32> {
        if self.ended || self.matcher.is_stopped() {
            return Vec::new();
        }
        self.matcher.compute_ff_tokens()
    }

    /// Total time spent computing masks and how many were computed (cache hits and the
    /// EOS-only masks after the end are not counted).
    pub fn mask_stats(&self) -> (Duration, u64) {
        (self.mask_time, self.mask_count)
    }
}

/// llguidance's refusal of `oneOf` under strict names its own option, which no client of this
/// API can set; what a client does to get the same approximation is to leave strict out.
const LLGUIDANCE_ONE_OF_HINT: &str = "Enable 'coerce_one_of' option to approximate oneOf with anyOf";
/// What a client leaves out to have a schema decoded as best it can and checked after.
macro_rules! without_strict {
    () => {
        "without strict (`json_schema.strict` or the tool's `strict` not true, `run` without `--strict`)"
    };
}
const ONE_OF_UNDER_STRICT: &str = concat!(
    "strict refuses `oneOf`, since an answer may match more than one of its branches; ",
    without_strict!(),
    " it is decoded as `anyOf` and the answer checked against the whole schema after"
);
/// How llguidance opens its refusal of keywords it cannot enforce, which it refuses only when
/// not lenient, i.e. under strict.
const LLGUIDANCE_UNIMPLEMENTED: &str = "Unimplemented keys";
const UNIMPLEMENTED_UNDER_STRICT: &str = concat!(
    "; strict refuses keywords a token grammar cannot enforce; ",
    without_strict!(),
    " the answer is decoded under the rest of the schema and checked against the whole schema after"
);

/// An llguidance message in this API's terms: without the `<non-verbose/>` marker its errors
/// end with (verbose errors are off), and with its option hints replaced by what a client does.
pub(super) fn clean(msg: String) -> String {
    let msg = msg.strip_suffix("<non-verbose/>").map_or(msg.as_str(), str::trim_end);
    let msg = msg.replace(LLGUIDANCE_ONE_OF_HINT, ONE_OF_UNDER_STRICT);
    if msg.contains(LLGUIDANCE_UNIMPLEMENTED) {
        msg + UNIMPLEMENTED_UNDER_STRICT
    } else {
        msg
    }
}

// The engine loop moves constraints between threads.
const _: () = {
    const fn assert_send<T: Send>() {}
    assert_send::<Constraint>();
};
