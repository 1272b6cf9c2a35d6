//! Packed sequences (`methods.packing`) compute what one sequence per row computes: on the same
//! sequences in fp64, every sequence's masked-LM logits, NSP logits and loss, and the gradients
//! of the batch loss, agree within 1e-6 between the packed rows and the padded batch; a control
//! whose attention crosses the sequence boundaries inside a row fails the same comparison.
#![cfg(feature = "torch")]

use crate::common::rng::seeded;
use mlperf_run::data::bert::packing::{pack, Item, PackSpec, PackedHostBatch, Sequence};
use mlperf_run::methods::BertMethods;
use mlperf_run::models::bert::{pretraining_loss, BertConfig, BertForPreTraining, MlmOn};
use tch::{nn, Device, Kind, Tensor};

const S: usize = 24;
const K: usize = 3;

/// One random sequence: [CLS] (id 2), random tokens, segment A then B, 1-3 masked positions.
struct Seq {
    ids: Vec<i32>,
    segments: Vec<i32>,
    positions: Vec<i32>,
    masked_ids: Vec<i32>,
    nsp: i32,
}

fn sequences(n: usize) -> Vec<Seq> {
    // lengths from tch's (seeded) generator, so the test is one fixed case per seed
    let lens = Vec::<i64>::try_from(Tensor::randint_low(
        3,
        S as i64 + 1,
        [n as i64],
        (Kind::Int64, Device::Cpu),
    ))
    .unwrap();
    lens.iter()
        .map(|&len| {
            let len = len as usize;
            let ids: Vec<i32> = std::iter::once(2)
                .chain(
                    Vec::<i64>::try_from(Tensor::randint_low(
                        5,
                        64,
                        [len as i64 - 1],
                        (Kind::Int64, Device::Cpu),
                    ))
                    .unwrap()
                    .into_iter()
                    .map(|x| x as i32),
                )
                .collect();
            let a = 1 + len / 2;
            let segments = (0..len).map(|t| (t >= a) as i32).collect();
            let preds = (1 + len / 8).min(3);
            let perm =
                Vec::<i64>::try_from(Tensor::randperm(len as i64 - 1, (Kind::Int64, Device::Cpu)))
                    .unwrap();
            let mut positions: Vec<i32> = perm[..preds].iter().map(|&p| p as i32 + 1).collect();
            positions.sort();
            let masked_ids = positions
                .iter()
                .map(|&p| (ids[p as usize] + 7) % 64)
                .collect();
            Seq {
                ids,
                segments,
                positions,
                masked_ids,
                nsp: (len % 2) as i32,
            }
        })
        .collect()
}

fn tiny() -> BertConfig {
    BertConfig {
        vocab_size: 64,
        hidden_size: 32,
        num_layers: 2,
        num_heads: 4,
        intermediate_size: 64,
        max_position: S as i64,
        type_vocab_size: 2,
        hidden_dropout: 0.0,
        attention_dropout: 0.0,
        layer_norm_eps: 1e-12,
    }
}

fn view(q: &Seq) -> Sequence<'_> {
    Sequence {
        ids: &q.ids,
        segments: &q.segments,
        masked_positions: &q.positions,
        masked_ids: &q.masked_ids,
        nsp: q.nsp,
    }
}

fn max_abs(t: &Tensor) -> f64 {
    t.abs().max().double_value(&[])
}

/// The padded batch: `[N, S]` with input_mask, `[N, P]` predictions.
fn padded(seqs: &[Seq]) -> [Tensor; 7] {
    let n = seqs.len();
    let p = seqs.iter().map(|q| q.positions.len()).max().unwrap();
    let (mut ids, mut seg, mut mask) = (vec![0i64; n * S], vec![0i64; n * S], vec![0i64; n * S]);
    let (mut pos, mut mids, mut w) = (vec![0i64; n * p], vec![0i64; n * p], vec![0f64; n * p]);
    for (i, q) in seqs.iter().enumerate() {
        for t in 0..q.ids.len() {
            ids[i * S + t] = q.ids[t] as i64;
            seg[i * S + t] = q.segments[t] as i64;
            mask[i * S + t] = 1;
        }
        for (j, (&mp, &mi)) in q.positions.iter().zip(&q.masked_ids).enumerate() {
            pos[i * p + j] = mp as i64;
            mids[i * p + j] = mi as i64;
            w[i * p + j] = 1.0;
        }
    }
    let t = |v: &[i64], c: usize| Tensor::from_slice(v).view([n as i64, c as i64]);
    [
        t(&ids, S),
        t(&seg, S),
        t(&mask, S),
        t(&pos, p),
        t(&mids, p),
        Tensor::from_slice(&w).view([n as i64, p as i64]),
        Tensor::from_slice(&seqs.iter().map(|q| q.nsp as i64).collect::<Vec<_>>()),
    ]
}

/// Per sequence: its MLM logits `[preds, V]`, NSP logits `[2]` and loss (mean MLM cross-entropy
/// over its predictions + NSP cross-entropy).
struct PerSeq {
    mlm: Vec<Tensor>,
    nsp: Vec<Tensor>,
    loss: Vec<f64>,
}

fn per_seq_loss(mlm: &Tensor, nsp: &Tensor, ids: &[i32], label: i32) -> f64 {
    let ids = Tensor::from_slice(&ids.iter().map(|&x| x as i64).collect::<Vec<_>>());
    let m = mlm.cross_entropy_loss::<Tensor>(&ids, None, tch::Reduction::Mean, -100, 0.0);
    let n = nsp.unsqueeze(0).cross_entropy_loss::<Tensor>(
        &Tensor::from_slice(&[label as i64]),
        None,
        tch::Reduction::Mean,
        -100,
        0.0,
    );
    (m + n).double_value(&[])
}

/// The model's parameters' gradients after one backward of `loss`, sorted by name (then zeroed).
fn grads(vs: &nn::VarStore, loss: Tensor) -> Vec<(String, Tensor)> {
    loss.backward();
    let mut out: Vec<(String, Tensor)> = vs
        .variables()
        .into_iter()
        .map(|(n, v)| {
            let g = v.grad();
            let g = if g.defined() {
                g.copy()
            } else {
                v.zeros_like()
            };
            (n, g)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    for (_, v) in vs.variables() {
        let mut g = v.grad();
        if g.defined() {
            let _ = g.zero_();
        }
    }
    out
}

/// Max differences between the two sides: (MLM logits, NSP logits, per-sequence loss, gradients).
fn compare(methods: &BertMethods, cross_boundaries: bool) -> (f64, f64, f64, f64, usize) {
    let _turn = seeded(20261127);
    let c = tiny();
    let mut vs = nn::VarStore::new(Device::Cpu);
    let model = BertForPreTraining::new(&vs.root(), &c, methods).unwrap();
    vs.double();
    let seqs = sequences(11);

    // unpadded reference: one sequence per row of the padded batch
    let [ids, seg, mask, pos, mids, w, nsp_labels] = padded(&seqs);
    let (mlm_u, nsp_u) = tch::with_grad(|| {
        model
            .forward(&ids, &seg, Some(&mask), MlmOn::Positions(&pos), false)
            .unwrap()
    });
    let loss_u = pretraining_loss(&mlm_u, &nsp_u, &mids, &w, &nsp_labels);
    let unpacked = PerSeq {
        mlm: (0..seqs.len())
            .map(|i| {
                mlm_u
                    .get(i as i64)
                    .narrow(0, 0, seqs[i].positions.len() as i64)
                    .detach()
            })
            .collect(),
        nsp: (0..seqs.len())
            .map(|i| nsp_u.get(i as i64).detach())
            .collect(),
        loss: (0..seqs.len())
            .map(|i| {
                per_seq_loss(
                    &mlm_u
                        .get(i as i64)
                        .narrow(0, 0, seqs[i].positions.len() as i64),
                    &nsp_u.get(i as i64),
                    &seqs[i].masked_ids,
                    seqs[i].nsp,
                )
            })
            .collect(),
    };
    let g_u = grads(&vs, loss_u);

    // packed rows
    let spec = PackSpec::new(S, K, 3).unwrap();
    let items: Vec<Item> = seqs
        .iter()
        .map(|q| Item {
            tokens: q.ids.len(),
            preds: q.positions.len(),
        })
        .collect();
    let rows = pack(&items, &spec).unwrap();
    let multi = rows.iter().filter(|r| r.len() > 1).count();
    let row_seqs: Vec<Vec<Sequence<'_>>> = rows
        .iter()
        .map(|r| r.iter().map(|&i| view(&seqs[i])).collect())
        .collect();
    let host = PackedHostBatch::from_rows(&row_seqs, spec, seqs.len() as u64).unwrap();
    let mut b = host.to_tensors(Device::Cpu);
    if cross_boundaries {
        // the control: every real token of a row in one attention block (the position ids and
        // everything else stay the packed ones)
        b.slots = b.slots.where_scalarother(&b.slots.ge(K as i64), 0);
        let tails: Vec<i32> = Vec::<i32>::try_from(&b.cu_seqlens).unwrap();
        let mut cu = vec![0i32];
        for r in 0..rows.len() {
            cu.extend([
                tails[r * (K + 1) + K],
                tails[r * (K + 1) + K],
                tails[r * (K + 1) + K],
            ]);
            cu.push(tails[(r + 1) * (K + 1)]);
        }
        b.cu_seqlens = Tensor::from_slice(&cu);
    }
    let (mlm_p, nsp_p) = tch::with_grad(|| model.forward_packed(&b.inputs(), false).unwrap());
    let loss_p = pretraining_loss(
        &mlm_p,
        &nsp_p,
        &b.masked_ids,
        &b.masked_weights,
        &b.nsp_labels,
    );
    let mut packed = PerSeq {
        mlm: (0..seqs.len()).map(|_| Tensor::new()).collect(),
        nsp: (0..seqs.len()).map(|_| Tensor::new()).collect(),
        loss: vec![0.0; seqs.len()],
    };
    for (r, row) in rows.iter().enumerate() {
        let mut pred = 0i64;
        for (j, &i) in row.iter().enumerate() {
            let np = seqs[i].positions.len() as i64;
            let m = mlm_p.get(r as i64).narrow(0, pred, np);
            let n = nsp_p.get((r * K + j) as i64);
            packed.loss[i] = per_seq_loss(&m, &n, &seqs[i].masked_ids, seqs[i].nsp);
            packed.mlm[i] = m.detach();
            packed.nsp[i] = n.detach();
            pred += np;
        }
    }
    let g_p = grads(&vs, loss_p);

    let d_mlm = (0..seqs.len())
        .map(|i| max_abs(&(&packed.mlm[i] - &unpacked.mlm[i])))
        .fold(0.0, f64::max);
    let d_nsp = (0..seqs.len())
        .map(|i| max_abs(&(&packed.nsp[i] - &unpacked.nsp[i])))
        .fold(0.0, f64::max);
    let d_loss = (0..seqs.len())
        .map(|i| (packed.loss[i] - unpacked.loss[i]).abs())
        .fold(0.0, f64::max);
    let mut d_grad = 0.0f64;
    for ((na, a), (nb, bb)) in g_u.iter().zip(&g_p) {
        assert_eq!(na, nb);
        d_grad = d_grad.max(max_abs(&(a - bb)));
    }
    // the comparison compares something: logits and gradients are not all zero
    assert!(max_abs(&unpacked.mlm[0]) > 1e-3 && g_u.iter().any(|(_, g)| max_abs(g) > 1e-4));
    (d_mlm, d_nsp, d_loss, d_grad, multi)
}

fn assert_packed_equals_unpacked(what: &str, methods: BertMethods) {
    let (m, n, l, g, multi) = compare(&methods, false);
    eprintln!("{what}: packed vs unpacked max |diff|: mlm {m:.2e}, nsp {n:.2e}, loss {l:.2e}, grads {g:.2e} ({multi} rows of several sequences)");
    assert!(multi >= 2, "the case must pack sequences together");
    for (name, d) in [
        ("MLM logits", m),
        ("NSP logits", n),
        ("per-sequence loss", l),
        ("gradients", g),
    ] {
        assert!(d < 1e-6, "{what}: {name} differ by {d:e}");
    }
}

#[test]
fn packed_rows_compute_what_one_sequence_per_row_computes() {
    assert_packed_equals_unpacked("sdpa", BertMethods::default());
}

#[test]
fn packed_rows_match_with_the_reference_softmax_and_the_fused_ops() {
    assert_packed_equals_unpacked(
        "explicit softmax",
        BertMethods {
            fused_attention: false,
            ..BertMethods::default()
        },
    );
    assert_packed_equals_unpacked(
        "fused epilogues + fused qkv",
        BertMethods {
            fused_epilogues: true,
            fused_qkv: true,
            ..BertMethods::default()
        },
    );
}

#[test]
fn attention_across_the_sequences_of_a_row_fails_the_comparison() {
    let (m, n, l, g, multi) = compare(&BertMethods::default(), true);
    eprintln!("control (attention crosses boundaries): mlm {m:.2e}, nsp {n:.2e}, loss {l:.2e}, grads {g:.2e}");
    assert!(multi >= 2);
    // each quantity misses the 1e-6 of the comparison by at least 10x
    for (name, d) in [
        ("MLM logits", m),
        ("NSP logits", n),
        ("per-sequence loss", l),
        ("gradients", g),
    ] {
        assert!(d > 1e-5, "the control's {name} must differ: {d:e}");
    }
}

/// With packing, the eval (a padded batch, not training) runs on the unpadded path: its padding
/// rows come out as the unpadded path's zeros where the padded path's are not, and its real
/// tokens, masked-LM and NSP logits equal the padded path's (fp64, the same weights).
#[test]
fn with_packing_the_eval_runs_unpadded_and_computes_the_same() {
    let _turn = seeded(20261127);
    let c = tiny();
    let packing = BertMethods {
        packing: true,
        ..BertMethods::default()
    };
    let mut vs = nn::VarStore::new(Device::Cpu);
    let model = BertForPreTraining::new(&vs.root(), &c, &packing).unwrap();
    vs.double();
    let mut vs_padded = nn::VarStore::new(Device::Cpu);
    let padded_model =
        BertForPreTraining::new(&vs_padded.root(), &c, &BertMethods::default()).unwrap();
    vs_padded.double();
    vs_padded.copy(&vs).unwrap();
    assert!(
        model.runs_unpadded(false),
        "packing: the eval runs unpadded"
    );
    assert!(
        !model.runs_unpadded(true),
        "packing: padded training batches stay padded"
    );
    assert!(!padded_model.runs_unpadded(false));

    let seqs = sequences(11);
    let [ids, seg, mask, pos, ..] = padded(&seqs);
    let padding = mask.eq(0).unsqueeze(-1);
    let real = mask.ne(0).unsqueeze(-1);
    assert!(
        padding.any().int64_value(&[]) != 0,
        "the case must have padding"
    );
    let encode =
        |m: &BertForPreTraining| tch::no_grad(|| m.encode(&ids, &seg, Some(&mask), false).unwrap());
    let (unpadded, plain) = (encode(&model), encode(&padded_model));
    assert_eq!(max_abs(&unpadded.masked_select(&padding)), 0.0);
    assert!(
        max_abs(&plain.masked_select(&padding)) > 0.1,
        "the padded path computes padding rows"
    );
    let d = max_abs(&(unpadded.masked_select(&real) - plain.masked_select(&real)));
    assert!(d < 1e-9, "real tokens differ by {d:e}");

    let forward = |m: &BertForPreTraining| {
        tch::no_grad(|| {
            m.forward(&ids, &seg, Some(&mask), MlmOn::Positions(&pos), false)
                .unwrap()
        })
    };
    let ((mlm_u, nsp_u), (mlm_p, nsp_p)) = (forward(&model), forward(&padded_model));
    let (dm, dn) = (max_abs(&(mlm_u - mlm_p)), max_abs(&(nsp_u - nsp_p)));
    eprintln!("packing's eval vs the padded path: mlm {dm:.2e}, nsp {dn:.2e}");
    assert!(
        dm < 1e-9 && dn < 1e-9,
        "logits differ: mlm {dm:e}, nsp {dn:e}"
    );
}
