//! Cross-entropy with label smoothing (Szegedy et al.; Composer's `LabelSmoothing`, torch's
//! `cross_entropy(label_smoothing=a)`): targets `(1 - a) * onehot + a / K`, so
//! `loss = mean((1 - a) * nll + a * mean_k(-log p_k))`.

use tch::{Kind, Tensor};

pub fn cross_entropy_smoothed(logits: &Tensor, targets: &Tensor, smoothing: f64) -> Tensor {
    let logp = logits.log_softmax(-1, Kind::Float);
    let nll = -logp.gather(1, &targets.unsqueeze(1), false).squeeze_dim(1);
    if smoothing == 0.0 {
        return nll.mean(Kind::Float);
    }
    let uniform = -logp.mean_dim(-1, false, Kind::Float);
    (nll * (1.0 - smoothing) + uniform * smoothing).mean(Kind::Float)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Device;

    #[test]
    fn matches_torch_cross_entropy_with_smoothing() {
        tch::manual_seed(1);
        let logits = Tensor::randn([6, 5], (Kind::Float, Device::Cpu));
        let t = Tensor::from_slice(&[0i64, 1, 2, 3, 4, 0]);
        for a in [0.0, 0.1] {
            let ours = cross_entropy_smoothed(&logits, &t, a).double_value(&[]);
            let torch = logits
                .cross_entropy_loss::<Tensor>(&t, None, tch::Reduction::Mean, -100, a)
                .double_value(&[]);
            assert!((ours - torch).abs() < 1e-6, "a={a}: {ours} vs {torch}");
        }
    }
}
