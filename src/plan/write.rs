//! The closed configs a plan writes: the 8xH100 closed preset of the benchmark
//! (`configs/<benchmark>/closed_8xH100.toml`, the methods and data path of NVIDIA's recipe) with
//! the batch, the hyperparameters of the chosen RCP point and the closed eval cadence put in;
//! each is checked with the closed rules of `resnet`/`bert` before it is written.

use super::choose::{hp, Choice};
use crate::benchmarks::Benchmark;
use crate::rules::Division;
use anyhow::{Context, Result};
use toml::{Table, Value};

const RESNET_TEMPLATE: &str = include_str!("../../configs/resnet/closed_8xH100.toml");
const BERT_TEMPLATE: &str = include_str!("../../configs/bert/closed_8xH100.toml");

fn table<'a>(t: &'a mut Table, name: &str) -> &'a mut Table {
    t.entry(name)
        .or_insert_with(|| Value::Table(Table::new()))
        .as_table_mut()
        .expect("the templates' sections are tables")
}

fn round_to(x: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (x * f).round() / f
}

/// The ResNet config of `c` for `platform`.
fn resnet(c: &Choice, bench: &Benchmark) -> Result<Table> {
    let mut t: Table = toml::from_str(RESNET_TEMPLATE).context("the ResNet template")?;
    let p = &c.point;
    let gbs = c.projection.global_batch;
    let train_samples = bench.train_samples.unwrap_or(1_281_167) as f64;
    // the point's decay steps are of its own batch size: in epochs they hold for ours
    let decay_epochs =
        hp(p, "opt_learning_rate_decay_steps")? / (train_samples / p.batch_size as f64).ceil();
    let warmup = hp(p, "opt_learning_rate_warmup_epochs")?;
    let schedule = round_to(warmup + decay_epochs, 2);
    let mean_epochs = c.convergence.mean_samples / train_samples;
    let high_epochs = c.convergence.high_samples / train_samples;
    let (every, _) = bench.eval_epochs()?;
    // evaluate after the epoch nearest the RCP mean (0-based epoch = epochs - 1)
    let offset = (mean_epochs.round().max(1.0) as u64 - 1) % every;
    let max_epochs = (schedule.max(high_epochs) * 1.25).ceil() as i64;
    let tr = table(&mut t, "train");
    tr.insert("global_batch_size".into(), Value::Integer(gbs as i64));
    tr.insert(
        "gradient_accumulation_steps".into(),
        Value::Integer(c.projection.accum as i64),
    );
    tr.insert("max_epochs".into(), Value::Integer(max_epochs));
    tr.insert("eval_offset".into(), Value::Integer(offset as i64));
    tr.insert("eval_period".into(), Value::Integer(every as i64));
    let o = table(&mut t, "optimizer");
    o.insert(
        "base_lr".into(),
        Value::Float(hp(p, "opt_base_learning_rate")?),
    );
    o.insert("warmup_epochs".into(), Value::Float(warmup));
    o.insert("schedule_epochs".into(), Value::Float(schedule));
    o.insert("momentum".into(), Value::Float(hp(p, "opt_momentum")?));
    o.insert(
        "weight_decay".into(),
        Value::Float(hp(p, "opt_weight_decay")?),
    );
    Ok(t)
}

/// The BERT config of `c`.
fn bert(c: &Choice) -> Result<Table> {
    let mut t: Table = toml::from_str(BERT_TEMPLATE).context("the BERT template")?;
    let p = &c.point;
    let gbs = c.projection.global_batch;
    // the point's steps are of its own batch size: keep the samples they cover
    let steps = (hp(p, "opt_learning_rate_training_steps")? * p.batch_size as f64 / gbs as f64)
        .round()
        .max(1.0) as i64;
    let max_samples = ((steps as u64 * gbs) as f64).max(1.5 * c.convergence.high_samples);
    let tr = table(&mut t, "train");
    tr.insert("global_batch_size".into(), Value::Integer(gbs as i64));
    tr.insert(
        "gradient_accumulation_steps".into(),
        Value::Integer(c.projection.accum as i64),
    );
    tr.insert(
        "max_samples".into(),
        Value::Integer(max_samples.ceil() as i64),
    );
    let o = table(&mut t, "optimizer");
    let int = |k: &str| -> Result<Value> { Ok(Value::Integer(hp(p, k)?.round() as i64)) };
    o.insert(
        "base_learning_rate".into(),
        Value::Float(hp(p, "opt_base_learning_rate")?),
    );
    o.insert("training_steps".into(), Value::Integer(steps));
    o.insert("warmup_steps".into(), int("num_warmup_steps")?);
    o.insert("start_warmup_step".into(), int("start_warmup_step")?);
    o.insert("beta1".into(), Value::Float(hp(p, "opt_lamb_beta_1")?));
    o.insert("beta2".into(), Value::Float(hp(p, "opt_lamb_beta_2")?));
    o.insert("epsilon".into(), Value::Float(hp(p, "opt_epsilon")?));
    o.insert(
        "weight_decay".into(),
        Value::Float(hp(p, "opt_lamb_weight_decay_rate")?),
    );
    Ok(t)
}

/// The config text of `c` for `gpus` x `gpu`, checked against the closed rules.
pub fn config_text(
    c: &Choice,
    bench: &Benchmark,
    gpu: &str,
    round: &str,
    header: &str,
) -> Result<String> {
    let mut t = match bench.name.as_str() {
        "resnet" => resnet(c, bench)?,
        "bert" => bert(c)?,
        other => anyhow::bail!("plan cannot write configs for {other}"),
    };
    // methods.fp8 needs FP8 tensor cores (Hopper): elsewhere the planned config trains in bf16
    if bench.name == "bert" && !has_fp8(gpu) {
        table(&mut t, "methods").remove("fp8");
    }
    let gpus = c.projection.gpus;
    let description = format!(
        "{} closed, planned by mlperf-run plan for {gpus}x{gpu} (round {round}, RCP point {}, \
         GBS {})",
        bench.title, c.point.name, c.projection.global_batch
    );
    t.insert("description".into(), Value::String(description));
    table(&mut t, "system").insert(
        "submission_platform".into(),
        Value::String(format!("{gpus}x{gpu}")),
    );
    let text = format!("{header}{}", toml::to_string(&t)?);
    check(&bench.name, &text)?;
    Ok(text)
}

/// Whether the GPU named `gpu` has FP8 tensor cores (`methods.fp8`: H100, H200, B200).
fn has_fp8(gpu: &str) -> bool {
    let g = gpu.to_ascii_uppercase();
    g.contains("H100") || g.contains("H200") || g.contains("B200")
}

/// The closed rules of the training subcommand (BERT's need libtorch's build).
fn check(benchmark: &str, text: &str) -> Result<()> {
    match benchmark {
        "resnet" => {
            crate::train::resnet::ResnetRunConfig::parse(text, Division::Closed)
                .context("the planned ResNet config fails the closed rules")?;
        }
        #[cfg(feature = "torch")]
        "bert" => {
            crate::train::bert::BertRunConfig::parse(text, Division::Closed)
                .context("the planned BERT config fails the closed rules")?;
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn fp8_is_planned_on_hopper_and_blackwell_only() {
        for g in [
            "H100-SXM-80GB",
            "H200-SXM-141GB",
            "NVIDIA H100 80GB HBM3",
            "B200-180GB",
        ] {
            assert!(super::has_fp8(g), "{g}");
        }
        for g in ["A100-SXM-80GB", "A100-SXM-40GB", "V100"] {
            assert!(!super::has_fp8(g), "{g}");
        }
    }
}
