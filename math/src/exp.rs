//! `exp` as a polynomial rather than libm's `expf` called per value: a loop over a row of
//! `exp_nonpositive` compiles to vector instructions (floor, fma, shifts), where a call to
//! `expf` per value keeps the loop scalar. The attention kernels run the same operations in
//! explicit AVX2 and AVX-512 registers with these constants, lane for lane.

// Cephes' expf: exp(x) = 2^n * p(r), n = floor(x log2(e) + 1/2), r = x - n ln(2) in two parts.
pub const LOG2E: f32 = std::f32::consts::LOG2_E;
pub const LN2_HI: f32 = 0.693_359_4;
pub const LN2_LO: f32 = -2.121_944_4e-4;
pub const EXP_POLY: [f32; 6] = [1.987_569_1e-4, 1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5];
/// Below this exp(x) would leave f32's normal range; the result is clamped to
/// `f32::MIN_POSITIVE`, so a caller that needs an exact zero (a banned token) sets it itself.
pub const EXP_MIN_ARG: f32 = -87.336_55;

/// `exp(x)` for `x <= 0` within about 2 ulp of libm's, never below `f32::MIN_POSITIVE`.
#[inline]
pub fn exp_nonpositive(x: f32) -> f32 {
    let x = x.max(EXP_MIN_ARG);
    let n = x.mul_add(LOG2E, 0.5).floor();
    let r = n.mul_add(-LN2_LO, n.mul_add(-LN2_HI, x));
    let p = EXP_POLY[1..].iter().fold(EXP_POLY[0], |p, &c| p.mul_add(r, c));
    let y = p.mul_add(r * r, r) + 1.0;
    y * f32::from_bits(((whole_to_i32(n) + 127) << 23) as u32)
}

/// A whole number in [-2^22, 2^22] as an integer: added to 1.5 * 2^23 it lands in the low
/// mantissa bits. `as i32` gives the same integer, but its saturation checks compile to a
/// scalar conversion per lane, which keeps a row's exp loop from running in vector registers.
#[inline]
fn whole_to_i32(n: f32) -> i32 {
    const SHIFTER: f32 = 12_582_912.0;
    (n + SHIFTER).to_bits() as i32 - SHIFTER.to_bits() as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_two_ulp_of_the_exact_value_and_never_zero() {
        for i in 0..20_000 {
            let x = -(i as f32) * 0.004_37 - 1e-4 * (i % 11) as f32;
            let ours = exp_nonpositive(x);
            let exact = f64::from(x).exp();
            if exact >= f64::from(f32::MIN_POSITIVE) {
                let ulp = (exact as f32).to_bits().abs_diff(ours.to_bits());
                assert!(ulp <= 2, "exp({x}): {ours} against {exact} ({ulp} ulp)");
            } else {
                assert!(ours > 0.0 && ours <= 1.2e-38, "exp({x}) = {ours}");
            }
        }
        assert_eq!(exp_nonpositive(0.0), 1.0);
        for n in -200..=200 {
            assert_eq!(whole_to_i32(n as f32), n);
        }
        assert_eq!(exp_nonpositive(f32::NEG_INFINITY), exp_nonpositive(EXP_MIN_ARG));
    }
}
