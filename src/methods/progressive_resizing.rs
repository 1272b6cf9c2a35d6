//! Progressive resizing (Composer's `ProgressiveResizing`): train at `initial_scale` of the full
//! size for the first `delay_fraction` of training, grow linearly to full size, and finish the
//! last `finetune_fraction` at full size; sizes are rounded down to a multiple of
//! `size_increment`. Here the size is chosen per epoch and handed to the data pipeline, which
//! crops and resizes straight to it (the same images a batch resize would give, without the
//! extra resampling pass on the device).

#[derive(Debug, Clone, Copy, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProgressiveResizing {
    pub initial_scale: f64,
    pub delay_fraction: f64,
    pub finetune_fraction: f64,
    pub size_increment: i64,
}

impl Default for ProgressiveResizing {
    /// Composer's defaults as MosaicML's ResNet-50 recipes use them.
    fn default() -> Self {
        ProgressiveResizing {
            initial_scale: 0.5,
            delay_fraction: 0.5,
            finetune_fraction: 0.2,
            size_increment: 4,
        }
    }
}

impl ProgressiveResizing {
    /// The problems with these settings, if any (for config validation).
    pub fn validate(&self) -> Result<(), String> {
        if !(self.initial_scale > 0.0 && self.initial_scale <= 1.0) {
            return Err(format!(
                "initial_scale must be in (0, 1], got {}",
                self.initial_scale
            ));
        }
        for (name, v) in [
            ("delay_fraction", self.delay_fraction),
            ("finetune_fraction", self.finetune_fraction),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("{name} must be in [0, 1], got {v}"));
            }
        }
        if self.delay_fraction + self.finetune_fraction > 1.0 {
            return Err("delay_fraction + finetune_fraction must be at most 1".into());
        }
        if self.size_increment < 1 {
            return Err(format!(
                "size_increment must be at least 1, got {}",
                self.size_increment
            ));
        }
        Ok(())
    }

    /// Scale factor at `elapsed` (fraction of training, 0..=1).
    pub fn scale(&self, elapsed: f64) -> f64 {
        let grow = 1.0 - self.finetune_fraction - self.delay_fraction;
        if elapsed < self.delay_fraction {
            self.initial_scale
        } else if elapsed >= 1.0 - self.finetune_fraction || grow <= 0.0 {
            1.0
        } else {
            let f = (elapsed - self.delay_fraction) / grow;
            self.initial_scale + (1.0 - self.initial_scale) * f
        }
    }

    /// Image size at `elapsed` for full size `full`.
    pub fn size(&self, elapsed: f64, full: i64) -> i64 {
        let raw = (full as f64 * self.scale(elapsed)) as i64;
        let rounded = raw / self.size_increment * self.size_increment;
        rounded.clamp(self.size_increment.min(full), full)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_starts_small_grows_and_finishes_full() {
        let p = ProgressiveResizing::default();
        assert_eq!(p.size(0.0, 176), 88);
        assert_eq!(p.size(0.49, 176), 88);
        let mid = p.size(0.65, 176);
        assert!(mid > 88 && mid < 176 && mid % 4 == 0, "{mid}");
        assert_eq!(p.size(0.8, 176), 176);
        assert_eq!(p.size(1.0, 176), 176);
        assert!(ProgressiveResizing {
            delay_fraction: 0.9,
            ..p
        }
        .validate()
        .is_err());
    }
}
