//! The one random number generator of the tests: seeded, so that every run of one seed is
//! the same, and free of dependencies.

/// xorshift64*.
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator for `seed` (any value, zero included).
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (the tiny modulo bias does not matter here).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
