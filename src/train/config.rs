//! What every benchmark's run config shares: reading the file (`load_file`) and the batch
//! checks (`check_batch`, and `local_batch` for a world size). Each benchmark's own config is beside its workload
//! (`train::resnet::config`, `train::bert::config`); the `[system]` table is
//! `runs::system::SystemConfig`, the division `rules::Division`.

use anyhow::{bail, Context, Result};
use std::path::Path;

/// Reads the run config at `path` and parses it with `parse` (which validates it); an error
/// names the file.
pub(crate) fn load_file<C>(path: &Path, parse: impl FnOnce(&str) -> Result<C>) -> Result<C> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config {}", path.display()))?;
    parse(&text).with_context(|| format!("invalid config {}", path.display()))
}

/// `train.global_batch_size` and `train.gradient_accumulation_steps`: both at least 1, the
/// first a multiple of the second (a step's micro-batches are equal).
pub(crate) fn check_batch(global_batch_size: u64, gradient_accumulation_steps: u64) -> Result<()> {
    if global_batch_size == 0 || gradient_accumulation_steps == 0 {
        bail!("train.global_batch_size and train.gradient_accumulation_steps must be at least 1");
    }
    if !global_batch_size.is_multiple_of(gradient_accumulation_steps) {
        bail!(
            "train.global_batch_size ({global_batch_size}) must be a multiple of \
             train.gradient_accumulation_steps ({gradient_accumulation_steps})"
        );
    }
    Ok(())
}

/// The per-process micro-batch of `global_batch_size` over `world_size` processes that each
/// accumulate `gradient_accumulation_steps` micro-batches per step (`what` names the batch in
/// the error: "train.global_batch_size (1024)", or BERT's packed rows).
pub(crate) fn local_batch(
    what: &str,
    global_batch_size: u64,
    world_size: u64,
    gradient_accumulation_steps: u64,
) -> Result<u64> {
    let div = world_size * gradient_accumulation_steps;
    if div == 0 || !global_batch_size.is_multiple_of(div) {
        bail!(
            "{what} must divide by world size ({world_size}) x \
             train.gradient_accumulation_steps ({gradient_accumulation_steps})"
        );
    }
    Ok(global_batch_size / div)
}
