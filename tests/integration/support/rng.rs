//! Randomness and soak: a seeded generator that prints its seed, and `DXDP_SOAK=1` for longer runs.

/// Whether the longer soak runs: `DXDP_SOAK=1`.
pub fn soak() -> bool {
    std::env::var("DXDP_SOAK").as_deref() == Ok("1")
}

/// A small xorshift generator; the seed is printed, and `DXDP_SEED` replays a run.
pub struct Rng(u64);

impl Rng {
    pub fn seeded(what: &str) -> Self {
        let seed = std::env::var("DXDP_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        eprintln!("{what}: DXDP_SEED={seed}");
        Self(seed | 1)
    }

    /// A generator with this seed, printed by nobody: for callers that report their own seed.
    pub fn from_seed(seed: u64) -> Self {
        Self(seed | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}
