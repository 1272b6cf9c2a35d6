//! Dynamic loss scaling for fp16 mixed precision (`methods.amp = "fp16"`): what
//! `torch.amp.GradScaler` does when `unscale_` runs before a fused optimizer's step (the step
//! gets only the overflow flag), with every piece of state on the device.
//!
//! ```text
//! backward of  loss * S                       (S: the scale, a 0-dim f32 device tensor)
//! grad      = grad / S, found_inf = any gradient is inf or NaN
//!                                             (one multi-tensor pass, after the all-reduce)
//! update    = the optimizer's step; nothing changes where found_inf (on the device)
//! S         = S * backoff after an overflow, S * growth after `growth_interval` clean steps
//! ```
//!
//! fp16 keeps 10 mantissa bits but only 5 exponent bits: small gradients underflow to zero
//! unless the loss is scaled up first, and a scale that is too large overflows. The scale
//! searches its way down from `init_scale` on overflows (those steps are skipped) and back up
//! after clean runs. Scales are powers of two, so scaling and unscaling are exact.
//!
//! Unlike `GradScaler.step` with a non-fused optimizer, nothing is read back to the host: the
//! skip happens on the device (inside SGD's fused kernel; LARS folds the flag into its
//! factors), so the step stays asynchronous and can be captured in a CUDA
//! graph. The counters ([`DynamicLossScale::report`]) are read once, at the end.

#[cfg(feature = "torch")]
use super::foreach;
#[cfg(feature = "torch")]
use anyhow::Result;
#[cfg(feature = "torch")]
use tch::{Device, Kind, Tensor};

/// `torch.amp.GradScaler`'s knobs; [`Default`] is its defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossScaleConfig {
    pub init_scale: f64,
    pub growth_factor: f64,
    pub backoff_factor: f64,
    pub growth_interval: i64,
}

impl Default for LossScaleConfig {
    fn default() -> Self {
        LossScaleConfig {
            init_scale: 65536.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2000,
        }
    }
}

/// What a run's loss scale did (read back from the device).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossScaleReport {
    /// The scale now.
    pub scale: f64,
    /// Steps skipped because a gradient overflowed.
    pub skipped_steps: u64,
}

/// Whether `s` is a usable initial scale: a power of two (scaling and unscaling stay exact,
/// as GradScaler's multiply by 1/S) from 1 to 2^24 (an f32 on the device; fp16's largest
/// finite value is under 2^16, so more only costs skipped steps at the start).
pub fn init_scale_ok(s: f64) -> bool {
    (1.0..=16777216.0).contains(&s) && s.log2().fract() == 0.0
}

impl LossScaleConfig {
    /// Refuses settings GradScaler's rules cannot run with (see [`init_scale_ok`]).
    pub fn validate(&self) -> anyhow::Result<()> {
        let ok = init_scale_ok(self.init_scale)
            && self.growth_factor > 1.0
            && self.backoff_factor > 0.0
            && self.backoff_factor < 1.0
            && self.growth_interval >= 1;
        if !ok {
            anyhow::bail!(
                "init_scale must be a power of two from 1 to 16777216 (2^24), growth_factor > 1, \
                 0 < backoff_factor < 1 and growth_interval >= 1, got init_scale {}, \
                 growth_factor {}, backoff_factor {}, growth_interval {}",
                crate::util::output::number(self.init_scale),
                crate::util::output::number(self.growth_factor),
                crate::util::output::number(self.backoff_factor),
                self.growth_interval
            );
        }
        Ok(())
    }
}

#[cfg(feature = "torch")]
pub struct DynamicLossScale {
    cfg: LossScaleConfig,
    scale: Tensor,
    /// Clean steps in a row since the last change of the scale (int32, as GradScaler's).
    growth_tracker: Tensor,
    found_inf: Tensor,
    /// `1 / scale`, the multiplier of the unscale pass (recomputed on the device every step).
    inv_scale: Tensor,
    skipped: Tensor,
}

#[cfg(feature = "torch")]
impl DynamicLossScale {
    pub fn new(device: Device, cfg: LossScaleConfig) -> Result<DynamicLossScale> {
        cfg.validate()
            .map_err(|e| anyhow::anyhow!("loss scale: {e}"))?;
        let f32_scalar = |v: f64| Tensor::f_full([], v, (Kind::Float, device));
        Ok(DynamicLossScale {
            cfg,
            scale: f32_scalar(cfg.init_scale)?,
            growth_tracker: Tensor::f_zeros([], (Kind::Int, device))?,
            found_inf: f32_scalar(0.0)?,
            inv_scale: f32_scalar(1.0 / cfg.init_scale)?,
            skipped: f32_scalar(0.0)?,
        })
    }

    pub fn config(&self) -> LossScaleConfig {
        self.cfg
    }

    /// `loss * S`, the tensor to run the backward from.
    pub fn scale_loss(&self, loss: &Tensor) -> Result<Tensor> {
        Ok(loss.f_mul(&self.scale)?)
    }

    /// After the backward (and the all-reduce) of a scaled loss, in one pass over `grads`
    /// (undefined ones are skipped): divides them by the scale in place (exact: a power of two)
    /// and sets the overflow flag if any element is inf or NaN. Returns the flag (0-dim f32,
    /// 1 = skip this step) for [`super::Optimizer::apply_or_skip`]. Kernels only.
    pub fn unscale(&self, grads: &[Tensor]) -> Result<&Tensor> {
        let defined: Vec<Tensor> = grads
            .iter()
            .filter(|g| g.defined())
            .map(|g| g.shallow_clone())
            .collect();
        let mut flag = self.found_inf.shallow_clone();
        tch::no_grad(|| -> Result<()> {
            let _ = flag.f_zero_()?;
            let _ = self.scale.f_reciprocal_out(&self.inv_scale)?;
            foreach::non_finite_check_and_unscale_(&defined, &self.found_inf, &self.inv_scale)
        })?;
        Ok(&self.found_inf)
    }

    /// After the optimizer: counts a skipped step and moves the scale
    /// (`torch._amp_update_scale_`). Kernels only: a replayed CUDA graph repeats it.
    pub fn update(&mut self) -> Result<()> {
        let c = self.cfg;
        tch::no_grad(|| -> Result<()> {
            let _ = self.skipped.f_add_(&self.found_inf)?;
            let _ = self.scale.f_internal_amp_update_scale_(
                &self.growth_tracker,
                &self.found_inf,
                c.growth_factor,
                c.backoff_factor,
                c.growth_interval,
            )?;
            Ok(())
        })
    }

    /// The scale and the skipped steps so far (reads the device: call it rarely).
    pub fn report(&self) -> Result<LossScaleReport> {
        Ok(LossScaleReport {
            scale: self.scale.f_double_value(&[])?,
            skipped_steps: self.skipped.f_double_value(&[])?.round() as u64,
        })
    }

    /// Whether the last [`DynamicLossScale::unscale`] found an overflow (reads the device).
    pub fn overflowed(&self) -> Result<bool> {
        Ok(self.found_inf.f_double_value(&[])? != 0.0)
    }
}

#[cfg(all(test, feature = "torch"))]
mod tests {
    use super::*;

    fn scalar(t: &Tensor) -> f64 {
        t.double_value(&[])
    }

    #[test]
    fn overflow_halves_the_scale_and_clean_runs_double_it() {
        let cfg = LossScaleConfig {
            init_scale: 1024.0,
            growth_interval: 3,
            ..Default::default()
        };
        let mut ls = DynamicLossScale::new(Device::Cpu, cfg).unwrap();
        let clean = vec![Tensor::from_slice(&[1.0f32, -2.0])];
        let bad = vec![Tensor::from_slice(&[1.0f32, f32::INFINITY])];
        let nan = vec![Tensor::from_slice(&[f32::NAN, 0.0f32])];
        let mut seen = Vec::new();
        for grads in [&bad, &clean, &clean, &clean, &nan, &clean] {
            ls.unscale(grads).unwrap();
            let over = ls.overflowed().unwrap();
            ls.update().unwrap();
            seen.push((over, scalar(&ls.scale)));
        }
        assert_eq!(
            seen,
            vec![
                (true, 512.0),
                (false, 512.0),
                (false, 512.0),
                (false, 1024.0),
                (true, 512.0),
                (false, 512.0),
            ]
        );
        let r = ls.report().unwrap();
        assert_eq!((r.skipped_steps, r.scale), (2, 512.0));
        // each of the four passes over the clean gradients divided them by that step's scale:
        // 512 every time (exactly: 2^-36)
        let k = 512f32.powi(4);
        assert_eq!(
            Vec::<f32>::try_from(&clean[0]).unwrap(),
            vec![1.0 / k, -2.0 / k]
        );
    }

    #[test]
    fn bad_settings_are_refused() {
        for cfg in [
            LossScaleConfig {
                init_scale: 0.0,
                ..Default::default()
            },
            LossScaleConfig {
                init_scale: 3000.0,
                ..Default::default()
            },
            LossScaleConfig {
                init_scale: f64::INFINITY,
                ..Default::default()
            },
            LossScaleConfig {
                init_scale: 2f64.powi(40),
                ..Default::default()
            },
            LossScaleConfig {
                backoff_factor: 1.0,
                ..Default::default()
            },
            LossScaleConfig {
                growth_interval: 0,
                ..Default::default()
            },
        ] {
            assert!(DynamicLossScale::new(Device::Cpu, cfg).is_err(), "{cfg:?}");
        }
    }
}
