//! Fuzz harnesses for the data readers: the JPEG header reader and region decoder, and the
//! BERT HDF5 shard reader. Shared by the fuzz targets (fuzz/fuzz_targets/) and the replay of
//! their findings in `cargo test` (tests/data/fuzz_regressions.rs). Each returns what the
//! readers answered, one line per call.
#![allow(dead_code)]

use mlperf_run::data::imagenet::{
    center_crop_box, crop_resize_into, decode_jpeg, plan_region, JpegHeader, RandomResizedCrop,
};
use mlperf_run::data::rng::Rng;

/// The JPEG reader as the loader uses it: read the header, choose a crop from the image's size
/// (random-resized for training, centre for eval), plan and decode the region, resize it; or
/// (`cpu-full`) decode the whole image. The first 4 bytes are the parameters: output size - 1,
/// a 16-bit seed, flags (bit 0: eval crop, bit 1: whole-image decoder, bit 2: flip); the rest
/// is the file.
pub fn jpeg_region(data: &[u8]) -> Vec<String> {
    if data.len() < 4 {
        return vec!["short input".into()];
    }
    let (params, bytes) = data.split_at(4);
    let size = u32::from(params[0]) + 1;
    let seed = u64::from(u16::from_le_bytes([params[1], params[2]]));
    let train = params[3] & 1 == 0;
    let flip = params[3] & 4 != 0;
    let mut out = vec![0u8; (size * size * 3) as usize];
    if params[3] & 2 != 0 {
        return vec![match decode_jpeg(bytes) {
            Ok(image) => {
                let crop = center_crop_box(image.width, image.height, size, 0.875);
                match crop_resize_into(&image, crop, size, flip, &mut out) {
                    Ok(()) => format!("full: {}x{} decoded", image.width, image.height),
                    Err(e) => format!("full: resize error: {e}"),
                }
            }
            Err(e) => format!("full: error: {e}"),
        }];
    }
    let header = match JpegHeader::read(bytes) {
        Ok(h) => h,
        Err(e) => return vec![format!("header: error: {e}")],
    };
    let (w, h) = (header.width, header.height);
    let crop = if train {
        RandomResizedCrop::MLPERF.sample(w, h, &mut Rng::keyed(&[seed]))
    } else {
        center_crop_box(w, h, size, 0.875)
    };
    let plan = plan_region(w, h, crop, size);
    match header.decode(&plan) {
        Ok(image) => {
            assert_eq!(
                image.pixels.len(),
                plan.width as usize * plan.height as usize * 3,
                "region of {}x{}",
                plan.width,
                plan.height
            );
            match crop_resize_into(&image, plan.crop, size, flip, &mut out) {
                Ok(()) => vec![format!("region: {w}x{h}, {plan:?} decoded")],
                Err(e) => vec![format!("region: resize error: {e}")],
            }
        }
        Err(e) => vec![format!("region: {w}x{h}: error: {e}")],
    }
}

/// Bytes read in order; 0 once they run out (so a short input is the default layout).
#[cfg(feature = "torch")]
struct Bytes<'a>(&'a [u8]);

#[cfg(feature = "torch")]
impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn i64(&mut self) -> i64 {
        let mut v = [0u8; 8];
        for b in &mut v {
            *b = self.u8();
        }
        i64::from_le_bytes(v)
    }
}

/// One dataset of a generated shard: present or not, its dtype, its shape and its values.
#[cfg(feature = "torch")]
#[derive(Debug, Clone)]
struct Dataset {
    missing: bool,
    /// 0 the reference's i16, then i8, i32, i64, u8, u16, u32, u64, f32, f64, bool, string
    dtype: u8,
    /// 0 the right shape, 1 scalar, 2 flat, 3 transposed, 4 one dimension one too long,
    /// 5 up to 3 dimensions of 0..8
    shape: u8,
    dims: [u8; 3],
    /// cycled; empty: 0, 1, 0, 1, ... (valid for every dataset)
    values: Vec<i64>,
}

#[cfg(feature = "torch")]
impl Dataset {
    fn read(b: &mut Bytes) -> Dataset {
        let flags = b.u8();
        let dims = [b.u8(), b.u8(), b.u8()];
        let n_values = usize::from(b.u8() % 8);
        Dataset {
            missing: flags & 0x80 != 0,
            dtype: (flags & 0x0F) % 12,
            shape: ((flags >> 4) & 0x07) % 6,
            dims,
            values: (0..n_values).map(|_| b.i64()).collect(),
        }
    }

    fn reference() -> Dataset {
        Dataset {
            missing: false,
            dtype: 0,
            shape: 0,
            dims: [0; 3],
            values: vec![],
        }
    }

    fn write(&self, f: &hdf5::File, name: &str, right: &[usize]) -> hdf5::Result<()> {
        if self.missing {
            return Ok(());
        }
        let shape: Vec<usize> = match self.shape {
            0 => right.to_vec(),
            1 => vec![],
            2 => vec![right.iter().product()],
            3 => right.iter().rev().copied().collect(),
            4 => {
                let mut s = right.to_vec();
                let i = usize::from(self.dims[0]) % s.len();
                s[i] += 1;
                s
            }
            _ => {
                let rank = usize::from(self.dims[0] % 3) + 1;
                self.dims[..rank]
                    .iter()
                    .map(|&d| usize::from(d % 9))
                    .collect()
            }
        };
        let len: usize = shape.iter().product();
        let value = |i: usize| -> i64 {
            if self.values.is_empty() {
                (i % 2) as i64
            } else {
                self.values[i % self.values.len()]
            }
        };
        macro_rules! put {
            ($t:ty, $conv:expr) => {{
                let data: Vec<$t> = (0..len).map(|i| $conv(value(i))).collect();
                f.new_dataset::<$t>()
                    .shape(shape.clone())
                    .create(name)?
                    .write_raw(&data)?;
            }};
        }
        match self.dtype {
            0 => put!(i16, |v: i64| v as i16),
            1 => put!(i8, |v: i64| v as i8),
            2 => put!(i32, |v: i64| v as i32),
            3 => put!(i64, |v: i64| v),
            4 => put!(u8, |v: i64| v as u8),
            5 => put!(u16, |v: i64| v as u16),
            6 => put!(u32, |v: i64| v as u32),
            7 => put!(u64, |v: i64| v as u64),
            8 => put!(f32, |v: i64| v as f32 / 3.0),
            9 => put!(f64, |v: i64| v as f64 / 7.0),
            10 => put!(bool, |v: i64| v & 1 == 1),
            _ => {
                use hdf5::types::FixedAscii;
                let data: Vec<FixedAscii<8>> = (0..len)
                    .map(|i| {
                        FixedAscii::<8>::from_ascii(&format!("{}", value(i) % 1000)).expect("ascii")
                    })
                    .collect();
                f.new_dataset::<FixedAscii<8>>()
                    .shape(shape.clone())
                    .create(name)?
                    .write_raw(&data)?;
            }
        }
        Ok(())
    }
}

/// Write a shard of `n` samples, sequence length `seq`, `preds` prediction slots; false when
/// HDF5 refuses the layout (then there is nothing to read).
#[cfg(feature = "torch")]
fn write_shard(
    path: &std::path::Path,
    n: usize,
    seq: usize,
    preds: usize,
    sets: &[Dataset],
) -> bool {
    use mlperf_run::data::bert::DATASETS;
    let Ok(f) = hdf5::File::create(path) else {
        return false;
    };
    let shapes: [Vec<usize>; 6] = [
        vec![n, seq],
        vec![n, seq],
        vec![n, seq],
        vec![n, preds],
        vec![n, preds],
        vec![n],
    ];
    for ((name, ds), shape) in DATASETS.iter().zip(sets).zip(&shapes) {
        if ds.write(&f, name, shape).is_err() {
            return false;
        }
    }
    f.close().is_ok()
}

/// The BERT shard reader (`Shard::read`, `Shard::count`) and what reads shards (the training
/// loader, the eval set) on a shard written from the input: sizes (samples 1..6, sequence
/// length 2..13, predictions 1..4), then per dataset its presence, dtype, shape and values;
/// then whether the file is cut short (and where), a second, well-formed shard of other sizes
/// (so shards disagree), the batch size and the world size. Every choice's 0 is the reference
/// layout, so a short input is a valid shard.
#[cfg(feature = "torch")]
pub fn bert_shard(data: &[u8]) -> Vec<String> {
    use mlperf_run::data::bert::{EvalSet, Shard, TrainLoader};
    let mut b = Bytes(data);
    let n = usize::from(b.u8() % 6) + 1;
    let seq = usize::from(b.u8() % 12) + 2;
    let preds = usize::from(b.u8() % 4) + 1;
    let sets: Vec<Dataset> = (0..6).map(|_| Dataset::read(&mut b)).collect();
    let truncate = b.u8();
    let cut_at = b.u8();
    let second = b.u8();
    let batch = usize::from(b.u8() % 5) + 1;
    let world = usize::from(b.u8() % 3) + 1;

    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("train");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let hide = |s: String| s.replace(&tmp.path().display().to_string(), "TMP");
    let path = dir.join("part-00000-of-00002.hdf5");
    if !write_shard(&path, n, seq, preds, &sets) {
        return vec!["HDF5 refused to write this layout".into()];
    }
    if truncate & 1 != 0 {
        let len = std::fs::metadata(&path).expect("stat").len();
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open");
        f.set_len(len * u64::from(cut_at) / 256).expect("truncate");
    }
    if second & 1 != 0 {
        let good: Vec<Dataset> = (0..6).map(|_| Dataset::reference()).collect();
        write_shard(
            &dir.join("part-00001-of-00002.hdf5"),
            usize::from((second >> 1) % 4),
            usize::from((second >> 3) % 12) + 2,
            usize::from((second >> 5) % 4) + 1,
            &good,
        );
    }
    let mut out = Vec::new();
    match Shard::read(&path) {
        Ok(shard) => {
            let tokens: usize = (0..shard.n).map(|i| shard.tokens(i)).sum();
            out.push(format!(
                "read: {} samples, {tokens} tokens, max token {}",
                shard.n,
                shard.max_token()
            ));
        }
        Err(e) => out.push(hide(format!("read: error: {e:#}"))),
    }
    out.push(hide(match Shard::count(&path) {
        Ok(c) => format!("count: {c}"),
        Err(e) => format!("count: error: {e:#}"),
    }));
    match TrainLoader::new(&dir, 1, 0, world, batch, tch::Device::Cpu) {
        Ok(mut loader) => {
            for _ in 0..3 {
                if let Err(e) = loader.next_host_batch() {
                    out.push(hide(format!("loader: error: {e:#}")));
                    break;
                }
            }
        }
        Err(e) => out.push(hide(format!("loader: error: {e:#}"))),
    }
    match EvalSet::load(&dir, n) {
        Ok(eval) => {
            if let Err(e) = eval.batches(batch, 0, world, tch::Device::Cpu) {
                out.push(hide(format!("eval: error: {e:#}")));
            }
        }
        Err(e) => out.push(hide(format!("eval: error: {e:#}"))),
    }
    out
}
