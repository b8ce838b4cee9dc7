//! What one token costs a model's projections: the bytes a batch-1 step streams and the
//! multiply-adds, per weight format, so a benchmark can set its rates against the machine's
//! limits (read bandwidth at batch 1, the int8 kernel's peak in batched steps).

use candle_core::quantized::GgmlDType;

/// One projection's cost for one row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProjectionCost {
    /// The GGUF format the int8 kernel was packed from; `None` where candle's matmul runs it
    /// (dense weights, or a format the repack does not support).
    pub int8_format: Option<GgmlDType>,
    /// The lm_head runs only for rows whose logits are sampled, not for every prompt token.
    pub lm_head: bool,
    /// Bytes the weight holds as the step reads it (packed quants, scales and mins).
    pub bytes: usize,
    /// Multiply-adds for one row: `in x out`.
    pub macs: usize,
}

/// The projections of a model, merged by (format, lm_head).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WeightFootprint {
    pub projections: Vec<ProjectionCost>,
}

impl WeightFootprint {
    pub fn from_costs(costs: impl IntoIterator<Item = ProjectionCost>) -> Self {
        let mut projections: Vec<ProjectionCost> = Vec::new();
        for c in costs {
            match projections.iter_mut().find(|p| p.int8_format == c.int8_format && p.lm_head == c.lm_head) {
                Some(p) => {
                    p.bytes += c.bytes;
                    p.macs += c.macs;
                }
                None => projections.push(c),
            }
        }
        Self { projections }
    }

    /// Bytes a batch-1 decode streams per token: every weight once, the lm_head included.
    pub fn bytes_per_token(&self) -> usize {
        self.projections.iter().map(|p| p.bytes).sum()
    }

    /// Multiply-adds of `cache_rows` rows that only fill the cache and `sampled_rows` rows
    /// that also run the lm_head, counting only the projections `filter` selects.
    pub fn macs(&self, cache_rows: usize, sampled_rows: usize, filter: impl Fn(&ProjectionCost) -> bool) -> usize {
        self.projections
            .iter()
            .filter(|p| filter(p))
            .map(|p| p.macs * if p.lm_head { sampled_rows } else { cache_rows + sampled_rows })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(format: Option<GgmlDType>, lm_head: bool, bytes: usize, macs: usize) -> ProjectionCost {
        ProjectionCost { int8_format: format, lm_head, bytes, macs }
    }

    #[test]
    fn merges_by_format_and_counts_the_head_only_for_sampled_rows() {
        let f = WeightFootprint::from_costs([
            cost(Some(GgmlDType::Q4_1), false, 10, 100),
            cost(Some(GgmlDType::Q4_1), false, 5, 50),
            cost(Some(GgmlDType::Q8_0), true, 20, 1000),
            cost(None, false, 7, 3),
        ]);
        assert_eq!(f.projections.len(), 3);
        assert_eq!(f.bytes_per_token(), 42);
        // 4 prompt rows + 2 sampled rows: body 153 x 6, head 1000 x 2.
        assert_eq!(f.macs(4, 2, |_| true), 153 * 6 + 2000);
        assert_eq!(f.macs(4, 2, |p| p.int8_format.is_some()), 150 * 6 + 2000);
    }
}
