//! Counter-based random numbers.
//!
//! A draw is a pure function of `(seed, step, draw)`: no generator state is
//! carried between engine steps, so a request's tokens cannot depend on which
//! other requests share its batch, on row order, or on the thread that runs it.

/// Odd constants from splitmix64 / the golden ratio; they decorrelate the three
/// counter words before they are mixed together.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;
const STEP_MUL: u64 = 0xD1B5_4A32_D192_ED03;
const DRAW_MUL: u64 = 0xABC9_8388_FB8F_AC03;

/// The splitmix64 finaliser: a bijective avalanche mix of one 64-bit word.
#[inline]
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Hashes `(seed, step, draw)` to 64 well-mixed bits.
///
/// Each word is folded in with its own multiplier and a full mix in between, so
/// neighbouring seeds, steps and draws give unrelated outputs.
#[inline]
pub fn hash_counter(seed: u64, step: u64, draw: u64) -> u64 {
    let mut x = mix64(seed.wrapping_add(GOLDEN));
    x = mix64(x ^ step.wrapping_mul(STEP_MUL).wrapping_add(GOLDEN));
    mix64(x ^ draw.wrapping_mul(DRAW_MUL).wrapping_add(GOLDEN))
}

/// A uniform number in `[0, 1)` for draw number `draw` of output step `step`.
///
/// Uses the top 53 bits, so every value is an exact multiple of 2^-53 and 1.0
/// can never be produced.
#[inline]
pub fn uniform(seed: u64, step: u64, draw: u64) -> f64 {
    const SCALE: f64 = 1.0 / (1u64 << 53) as f64;
    (hash_counter(seed, step, draw) >> 11) as f64 * SCALE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_not_interchangeable() {
        // A naive `seed ^ step ^ draw` hash would make these equal.
        assert_ne!(hash_counter(1, 2, 0), hash_counter(2, 1, 0));
        assert_ne!(hash_counter(0, 1, 0), hash_counter(0, 0, 1));
    }

    #[test]
    fn uniform_is_in_range_and_has_the_right_mean() {
        let n = 100_000u64;
        let mut sum = 0.0;
        let mut below_tenth = 0u64;
        for step in 0..n {
            let u = uniform(42, step, 0);
            assert!((0.0..1.0).contains(&u));
            sum += u;
            if u < 0.1 {
                below_tenth += 1;
            }
        }
        let mean = sum / n as f64;
        assert!((mean - 0.5).abs() < 0.005, "mean {mean}");
        let frac = below_tenth as f64 / n as f64;
        assert!((frac - 0.1).abs() < 0.005, "P(u<0.1) = {frac}");
    }
}
