//! Learning-rate schedules by optimizer step (0-based): linear warmup to `base` over
//! `warmup_steps` (`base * (step + 1) / warmup_steps`), then
//! - poly (MLPerf reference): `end + (base - end) * (1 - p)^power`,
//!   `p = min(step - warmup_steps + 1, decay_steps) / decay_steps`
//! - cosine (Composer `CosineAnnealingWithWarmupScheduler`): `end + (base - end) * (1 + cos(pi p)) / 2`,
//!   `p = min(step - warmup_steps, decay_steps) / decay_steps`

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Decay {
    Poly { power: f64 },
    Cosine,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    pub base: f64,
    pub end: f64,
    pub warmup_steps: u64,
    /// Steps after warmup over which the rate decays to `end`.
    pub decay_steps: u64,
    pub decay: Decay,
}

impl Schedule {
    pub fn lr(&self, step: u64) -> f64 {
        if step < self.warmup_steps {
            return self.base * (step + 1) as f64 / self.warmup_steps as f64;
        }
        let d = self.decay_steps.max(1) as f64;
        match self.decay {
            Decay::Poly { power } => {
                let p = ((step - self.warmup_steps + 1) as f64).min(d) / d;
                self.end + (self.base - self.end) * (1.0 - p).powf(power)
            }
            Decay::Cosine => {
                let p = ((step - self.warmup_steps) as f64).min(d) / d;
                self.end + (self.base - self.end) * (1.0 + (std::f64::consts::PI * p).cos()) / 2.0
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmup_then_poly_to_end() {
        let s = Schedule {
            base: 10.0,
            end: 1e-4,
            warmup_steps: 4,
            decay_steps: 10,
            decay: Decay::Poly { power: 2.0 },
        };
        assert_eq!(s.lr(0), 2.5);
        assert_eq!(s.lr(3), 10.0);
        let mid = s.lr(8);
        assert!((mid - (1e-4 + (10.0 - 1e-4) * 0.25)).abs() < 1e-9, "{mid}");
        assert!((s.lr(13) - 1e-4).abs() < 1e-12);
        assert!((s.lr(100) - 1e-4).abs() < 1e-12);
        let c = Schedule {
            decay: Decay::Cosine,
            end: 0.0,
            ..s
        };
        assert_eq!(c.lr(4), 10.0);
        assert!((c.lr(9) - 5.0).abs() < 1e-9);
        assert!(c.lr(14).abs() < 1e-12);
    }
}
