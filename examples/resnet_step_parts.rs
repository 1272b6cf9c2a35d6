//! Where a ResNet-50 CPU training step goes (forward, backward, optimizer), for profiling
//! against scripts/bench/resnet_step.py --parts. Prints one JSON line.
use mlperf_run::models::resnet::{build, ResnetSpec};
use mlperf_run::optim::sgd::{Sgd, SgdConfig};
use mlperf_run::optim::{Optimizer, ParamGroups};
use std::time::Instant;
use tch::nn::ModuleT;
use tch::{Device, Kind, Tensor};

fn main() -> anyhow::Result<()> {
    let threads: i32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1);
    let backward_mode = std::env::args().nth(2).unwrap_or_else(|| "grad".into());
    tch::set_num_threads(threads);
    tch::manual_seed(1);
    let (vs, net) = build(&ResnetSpec::resnet50(1000), Device::Cpu);
    let mut params = ParamGroups::from_var_store(&vs);
    let mut opt = Sgd::new(SgdConfig {
        momentum: 0.9,
        weight_decay: 5e-5,
        nesterov: false,
        decay_bn_bias: false,
    });
    let x = Tensor::randn([8, 3, 112, 112], (Kind::Float, Device::Cpu));
    let y = Tensor::randint(1000, [8], (Kind::Int64, Device::Cpu));
    let (mut f, mut b, mut o) = (0.0, 0.0, 0.0);
    for i in 0..8 {
        let t0 = Instant::now();
        let loss = net.forward_t(&x, true).cross_entropy_for_logits(&y);
        let _ = loss.double_value(&[]);
        let t1 = Instant::now();
        let grads = if backward_mode == "grad" {
            params.gradients_of(&loss)?
        } else {
            params.zero_grad()?;
            loss.backward();
            params.grads()
        };
        let t2 = Instant::now();
        opt.step(&mut params, &grads, 0.1)?;
        let t3 = Instant::now();
        if i >= 3 {
            f += (t1 - t0).as_secs_f64();
            b += (t2 - t1).as_secs_f64();
            o += (t3 - t2).as_secs_f64();
        }
    }
    println!(
        "{}",
        serde_json::json!({"impl": format!("tch-{backward_mode}"), "fwd": f / 5.0, "bwd": b / 5.0, "opt": o / 5.0})
    );
    Ok(())
}
