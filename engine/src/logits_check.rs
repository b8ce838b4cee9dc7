//! Non-finite logits must never become tokens: a NaN row makes every comparison false, so
//! argmax and top-k/top-p would silently pick arbitrary ids. The engine loop runs this on
//! every row a strategy is about to consume (one vectorized pass over the vocabulary, on the
//! same parallel pass as sampling); the check itself is the sampler's `first_non_finite`,
//! which `sample_row` runs for its own callers too.

use entrobatch_sampler::first_non_finite;

/// `Err` with a message naming the first non-finite value among `rows`, else `Ok`.
pub fn check_logits_finite(rows: &[&[f32]]) -> Result<(), String> {
    for (r, row) in rows.iter().enumerate() {
        if let Some(token) = first_non_finite(row) {
            let value = row[token];
            return Err(format!(
                "the model produced non-finite logits ({value} for token {token} in logits row {r}); \
                 the request was stopped instead of sampling from them"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finite_rows_pass_and_the_first_bad_value_is_named() {
        assert!(check_logits_finite(&[&[0.0, -3.5, 1e30], &[]]).is_ok());
        let err = check_logits_finite(&[&[0.0, 1.0], &[2.0, f32::NAN, f32::INFINITY]]).unwrap_err();
        assert!(err.contains("NaN for token 1 in logits row 1"), "{err}");
        let err = check_logits_finite(&[&[f32::NEG_INFINITY]]).unwrap_err();
        assert!(err.contains("-inf for token 0"), "{err}");
    }
}
