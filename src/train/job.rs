//! A training command's job, as the ranks of a data-parallel job compare it before their first
//! run ([`agree`], over [`crate::distributed::compare_jobs`]): every rank must run the same job,
//! or every rank stops at the start, saying which ranks differ from rank 0 and in what.
//!
//! The job is, item by item: the binary (its version and the sha256 of its file); the command's
//! benchmark, division, device kind and recipe; the resolved config (the parsed structs, key by
//! key: not the file's bytes, so comments, layout, key order and the file's path do not matter,
//! and a default counts as if written); the data's shape, what decides the steps and the
//! samples (image and sequence counts, class names, a digest of the file names); the run or the
//! set (seeds, count, `--resume`, the finished runs found in the results folder); the
//! environment that changes the collectives (MLPERF_RUN_GRAD_OVERLAP, the test modes); on a GPU,
//! the GPU's model (name and memory) and the NVIDIA driver's version (the MLPerf system
//! description names one accelerator and one software stack). Not what is each rank's own: its
//! rank, local rank and device index, its log path, where the data and the results are mounted,
//! a fault injected on purpose.
//!
//! On a GPU each rank also claims its GPU (its UUID, said as its PCI bus id and host): two ranks
//! on one GPU (CUDA_VISIBLE_DEVICES=0 exported to every process of a node) stop there, naming
//! both, not at NCCL's first collective with "invalid usage".

use crate::distributed::{Claim, Difference, ItemDifference, JobView};
use crate::util::ExitStatus;
use anyhow::Result;
use serde::Serialize;
use serde_json::Value;

/// A job's items: (item, value), the same items in the same order on every rank.
pub type Items = Vec<(String, String)>;

/// A command's job as a rank prepared it: its items (the binary and, on a GPU, the GPU's are
/// added by [`agree`]) and whether it trains on a GPU.
pub struct Job {
    pub items: Items,
    /// A CUDA run: the rank's GPU (the one the trainer will use) is compared and claimed.
    pub cuda: bool,
}

/// How a training command goes on once its ranks have compared their jobs.
pub enum Start<T> {
    /// Every rank runs this job (or there is one process): go on with it.
    Go(T),
    /// The ranks could not meet to compare (a rank never came, the master cannot be reached):
    /// said on stderr; the command ends with this status, as a run cut that way does.
    Stop(ExitStatus),
}

/// The ranks of a data-parallel job (the launcher's variables, a world of more than one)
/// compare their jobs before the first run: `prepared` is this rank's job (what it prepared and
/// its job) or its refusal (its own error: a config it cannot read, data it cannot list). On a
/// GPU each rank adds its GPU's model and driver to its items and claims its GPU; a rank that
/// cannot tell which GPU it would use refuses. When every rank has rank 0's job and no two
/// claim one GPU: [`Start::Go`]. Otherwise an error on every rank naming the ranks that differ
/// from rank 0 and in what, that clash and on what, or that refused and why (exit status 2, as
/// a refused config; nothing was written: no log, no lock, no set folder). One process:
/// `prepared` as it is.
pub fn agree<T>(prepared: Result<(T, Job)>) -> Result<Start<T>> {
    use crate::distributed::{compare_jobs, GroupFailure, Rendezvous, Timeouts};
    let Some(rdv) = Rendezvous::from_env()?.filter(|r| r.world_size > 1) else {
        return prepared.map(|(t, _)| Start::Go(t));
    };
    let timeouts = Timeouts::from_env()?;
    let t0 = std::time::Instant::now();
    let mine = match &prepared {
        Ok((_, job)) => own_job(job, rdv.local_rank),
        Err(e) => Err(anyhow::anyhow!("{e:#}")),
    };
    let refusal = mine.as_ref().err().map(|e| format!("{e:#}"));
    let (items, claims) = match &mine {
        Ok((items, claims)) => (items.as_slice(), claims.as_slice()),
        Err(_) => (&[][..], &[][..]),
    };
    let view = match &refusal {
        Some(why) => JobView::Refused(why),
        None => JobView::Items(items),
    };
    let differences = match compare_jobs(&rdv, timeouts, view, claims) {
        Ok(d) => d,
        Err(e) if e.downcast_ref::<GroupFailure>().is_some() => {
            // this rank's own refusal says more than the group that could not meet
            prepared?;
            mine?;
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "error: {e:#}\nno run was started: run the same command again once every rank \
                 can start (add --resume to continue a set that has runs)"
            );
            return Ok(Start::Stop(ExitStatus::Interrupted));
        }
        Err(e) => return Err(e.context("comparing the ranks' jobs before the first run")),
    };
    tracing::info!(
        "rank {} of {}: the ranks' jobs compared in {:.0} ms ({} item(s), {} claim(s)): {}",
        rdv.rank,
        rdv.world_size,
        t0.elapsed().as_secs_f64() * 1e3,
        items.len(),
        claims.len(),
        if differences.is_empty() {
            "the same"
        } else {
            "they differ"
        }
    );
    if differences.is_empty() {
        return prepared.map(|(t, _)| Start::Go(t));
    }
    Err(anyhow::anyhow!(render(&differences, rdv.world_size)))
}

/// This rank's items (the binary, the libtorch, the command's, and on a GPU its GPU's) and
/// claims (its GPU), or why it cannot run the job.
fn own_job(job: &Job, local_rank: usize) -> Result<(Items, Vec<Claim>)> {
    let mut items: Items = [binary_item()?, libtorch_item()]
        .into_iter()
        .chain(job.items.iter().cloned())
        .collect();
    let mut claims = Vec::new();
    if job.cuda {
        let (gpu_items, claim) = gpu_job(local_rank)?;
        items.extend(gpu_items);
        claims.extend(claim);
    }
    Ok((items, claims))
}

/// The GPU this rank's runs will use (the trainer's rule, `crate::distributed::choose_gpu`): its
/// model and the NVIDIA driver as items, and the GPU itself as a claim (none where the ranks
/// share GPUs on purpose, `MLPERF_RUN_TEST_SHARE_GPU`, or where the CUDA runtime cannot say which
/// GPU it is: a warning says why). An error where the rule gives this rank no GPU.
fn gpu_job(local_rank: usize) -> Result<(Items, Option<Claim>)> {
    let test_mode = crate::distributed::TestMode::from_env()?;
    let visible = tch::Cuda::device_count();
    let device = test_mode.rank_device(tch::Device::Cuda(0), local_rank, visible)?;
    let tch::Device::Cuda(ordinal) = device else {
        anyhow::bail!("LOCAL_RANK {local_rank}: no CUDA device chosen ({device:?})");
    };
    let id = match crate::gpu::identity::identify(ordinal) {
        Ok(id) => id,
        Err(e) => {
            // a diagnostic that cannot run does not stop a job libtorch can train: the GPU goes
            // unclaimed (two ranks on it would meet NCCL's own refusal at the first collective)
            tracing::warn!(
                "cannot tell which GPU this rank's cuda:{ordinal} is (LOCAL_RANK {local_rank}), \
                 so no check that no other rank uses it: {e}"
            );
            return Ok((vec![item("gpu", "unidentified"), driver_item()], None));
        }
    };
    let host = crate::runs::lock::hostname().unwrap_or_else(|| "(unnamed)".into());
    let items = vec![item("gpu", id.model()), driver_item()];
    Ok((items, (!test_mode.share_gpu).then(|| gpu_claim(&id, &host))))
}

/// A GPU as a rank claims it: its UUID (one physical GPU, or MIG instance, whatever host or
/// container names it), said as its PCI bus id on `host`. Without a UUID, the bus id on the host.
pub fn gpu_claim(id: &crate::gpu::identity::GpuIdentity, host: &str) -> Claim {
    let what = format!("GPU {} on host {host}", id.pci_bus_id);
    Claim {
        key: match &id.uuid {
            Some(uuid) => format!("gpu {uuid}"),
            None => format!("gpu {} on {host}", id.pci_bus_id),
        },
        what,
    }
}

/// The NVIDIA driver's version (NVML), or where NVML cannot say, the CUDA version the driver
/// supports.
fn driver_item() -> (String, String) {
    let version = crate::submission::gpu::driver_version().unwrap_or_else(|_| {
        match crate::gpu::identity::driver_cuda_version() {
            Ok(cuda) => format!("unknown (no NVML), supports {cuda}"),
            Err(_) => "unknown (no NVML)".into(),
        }
    });
    item("NVIDIA driver", version)
}

/// The binary: its version, and the sha256 of its file (the same source built twice may differ
/// here; one build on a shared file system, or one container image, does not).
fn binary_item() -> Result<(String, String)> {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let exe = std::env::current_exe()?;
    let mut file = std::fs::File::open(&exe)
        .map_err(|e| anyhow::anyhow!("cannot read this binary {}: {e}", exe.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    let sha = format!("{:x}", hasher.finalize());
    Ok((
        "binary".into(),
        format!(
            "mlperf-run {} ({} bytes, sha256 {})",
            env!("CARGO_PKG_VERSION"),
            thousands(size),
            &sha[..16]
        ),
    ))
}

/// The libtorch this rank runs with, as its logs record it (the binary links it dynamically, so
/// one binary on a shared file system can still meet another torch on each node's venv).
fn libtorch_item() -> (String, String) {
    let version = crate::submission::framework::find_libtorch()
        .map_or_else(|| "not found".to_string(), |lt| lt.version);
    ("libtorch".into(), version)
}

/// The resolved config, key by key (`config.train.global_batch_size`), values as JSON; the
/// config's `description` left out (it changes nothing).
pub fn config_items(config: &impl Serialize) -> Result<Items> {
    fn flatten(path: &str, v: &Value, out: &mut Items) {
        match v {
            Value::Object(map) if !map.is_empty() => {
                for (k, x) in map {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    flatten(&p, x, out);
                }
            }
            leaf => out.push((format!("config.{path}"), leaf.to_string())),
        }
    }
    let mut out = Items::new();
    flatten("", &serde_json::to_value(config)?, &mut out);
    out.retain(|(k, _)| k != "config.description");
    Ok(out)
}

/// An ImageFolder set's shape: image and class counts, and digests of the class names and of
/// the files' names under the root (not the root itself: each host mounts it where it likes).
pub fn imagenet_items(listed: &crate::data::imagenet::ImagenetDir) -> Items {
    let files = |f: &crate::data::imagenet::ImageFolder| {
        digest(f.samples.iter().map(|s| {
            s.path
                .strip_prefix(&f.root)
                .unwrap_or(&s.path)
                .to_string_lossy()
                .into_owned()
        }))
    };
    vec![
        item("data.training images", thousands(listed.train.len() as u64)),
        item("data.eval images", thousands(listed.val.len() as u64)),
        item("data.classes", thousands(listed.train.classes.len() as u64)),
        item(
            "data.class names",
            digest(listed.train.classes.iter().cloned()),
        ),
        item("data.training image files", files(&listed.train)),
        item("data.eval image files", files(&listed.val)),
    ]
}

/// A BERT data folder's shape: the training shards (file name and sequences), the sequences
/// of the eval set, and the eval shards' names.
pub fn bert_items(train: &[(String, usize)], eval_samples: usize, eval_files: &[String]) -> Items {
    let sequences: usize = train.iter().map(|(_, n)| n).sum();
    vec![
        item("data.training shards", thousands(train.len() as u64)),
        item("data.training sequences", thousands(sequences as u64)),
        item(
            "data.training shard files",
            digest(train.iter().map(|(f, n)| format!("{f} {n}"))),
        ),
        item("data.eval sequences", thousands(eval_samples as u64)),
        item("data.eval shard files", digest(eval_files.iter().cloned())),
    ]
}

pub fn item(name: &str, value: impl Into<String>) -> (String, String) {
    (name.to_string(), value.into())
}

/// "sha256 <16 hex digits>" of `parts`, each ended by a newline.
fn digest(parts: impl Iterator<Item = String>) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update(b"\n");
    }
    format!("sha256 {}", &format!("{:x}", h.finalize())[..16])
}

/// 1281167 as "1,281,167".
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Groups of ranks that differ alike, listed at most.
const MAX_GROUPS: usize = 8;

/// The error every rank stops with: each group of ranks that differ alike from rank 0 (the
/// ranks of a node, typically), and in what.
fn render(differences: &[(usize, Difference)], world: usize) -> String {
    let mut groups: Vec<(&Difference, Vec<usize>)> = Vec::new();
    for (rank, d) in differences {
        match groups.iter_mut().find(|(x, _)| *x == d) {
            Some((_, ranks)) => ranks.push(*rank),
            None => groups.push((d, vec![*rank])),
        }
    }
    let mut lines = Vec::new();
    for (d, ranks) in groups.iter().take(MAX_GROUPS) {
        let who = Who(ranks);
        match d {
            Difference::Refused(why) => lines.push(format!("{who} refused the job: {why}")),
            Difference::Clash { what, with, theirs } => {
                lines.push(clash_line(&who, what, *with, theirs))
            }
            Difference::Items { items, more } => {
                lines.extend(items.iter().map(|i| item_line(&who, i)));
                if *more > 0 {
                    lines.push(format!("{who}: {more} more item(s) differ"));
                }
            }
        }
    }
    if groups.len() > MAX_GROUPS {
        lines.push(format!(
            "and {} more group(s) of ranks",
            groups.len() - MAX_GROUPS
        ));
    }
    format!(
        "the {world} ranks of this job were not given the same job, so none starts it (no run \
         was started, nothing was written):\n  - {}",
        lines.join("\n  - ")
    )
}

/// Ranks that use the GPU another rank claimed first, said with what to do about it.
fn clash_line(who: &Who<'_>, what: &str, with: usize, theirs: &str) -> String {
    let same = if what == theirs {
        format!("{what}, as rank {with} does")
    } else {
        format!("{what}, which rank {with} uses as {theirs}")
    };
    format!(
        "{who} {} {same}: each rank needs a GPU of its own (NCCL cannot run two ranks on one \
         GPU). Start one process per GPU: either every process sees all of the node's GPUs \
         (leave CUDA_VISIBLE_DEVICES alone, or set it alike for all) and local rank r takes the \
         r-th, or each task is bound to a different GPU (srun --gpus-per-task=1; \
         CUDA_VISIBLE_DEVICES set per process); check CUDA_VISIBLE_DEVICES on that host",
        who.verb("use")
    )
}

/// One item that differs, said with what to do about it.
fn item_line(who: &Who<'_>, d: &ItemDifference) -> String {
    let none = "(none)";
    let (this, root) = (
        d.this.as_deref().unwrap_or(none),
        d.root.as_deref().unwrap_or(none),
    );
    let name = d.item.as_str();
    let whose = who.possessive();
    let data_hint = "the data folders differ (--data on each host): give every rank the same \
                     copy of the data";
    if let Some(key) = name.strip_prefix("config.") {
        format!(
            "{whose} config differs from rank 0's at {key}: {this} vs {root} (the --config file \
             on each host, with any --recipe): give every rank the same config"
        )
    } else if let Some(what) = name.strip_prefix("data.") {
        if this.starts_with("sha256") || root.starts_with("sha256") {
            format!("{whose} {what} differ from rank 0's ({this} vs {root}): {data_hint}")
        } else {
            format!(
                "{who} {} {this} {what}, rank 0 {root}: {data_hint}",
                who.verb("see")
            )
        }
    } else if name == "binary" {
        format!(
            "{who} {} another mlperf-run binary than rank 0 ({this} vs {root}): run the same \
             build on every node (one binary on a shared file system, or one container image)",
            who.verb("run")
        )
    } else if name == "libtorch" {
        format!(
            "{who} {} libtorch {this}, rank 0 {root}: install the same torch on every node (the \
             venv MLPERF_RUN_VENV names, or LIBTORCH)",
            who.verb("find")
        )
    } else if name == "gpu" {
        format!(
            "{who} {} on {this}, rank 0 on {root}: one job runs on one GPU model (the MLPerf \
             system description names one accelerator): run every rank on the same GPU model",
            who.verb("train")
        )
    } else if name == "NVIDIA driver" {
        format!(
            "{who} {} NVIDIA driver {this}, rank 0 {root}: install the same driver on every \
             node (the MLPerf system description records one software stack)",
            who.verb("find")
        )
    } else if name == "runs.kept" {
        format!(
            "{who} {} other finished runs in the results folder than rank 0 ({this} vs {root}): \
             --results must be one folder that every rank shares",
            who.verb("find")
        )
    } else if let Some(flag) = name.strip_prefix("runs.") {
        format!(
            "{whose} --{flag} differs from rank 0's: {this} vs {root}: give every rank the same \
             --runs, --seeds, --resume and --system"
        )
    } else {
        format!(
            "{whose} {name} differs from rank 0's: {this} vs {root}: start every rank with the \
             same command line and environment"
        )
    }
}

/// A group of ranks in a sentence: "rank 3", "ranks 8-15, 24".
struct Who<'a>(&'a [usize]);

impl Who<'_> {
    /// "rank 3's", "ranks 8-15's".
    fn possessive(&self) -> String {
        format!("{self}'s")
    }

    /// `verb` agreeing with the group ("sees" for one rank, "see" for several).
    fn verb(&self, verb: &str) -> String {
        if self.0.len() == 1 {
            format!("{verb}s")
        } else {
            verb.to_string()
        }
    }
}

impl std::fmt::Display for Who<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for &r in self.0 {
            match runs.last_mut() {
                Some((_, end)) if *end + 1 == r => *end = r,
                _ => runs.push((r, r)),
            }
        }
        let list: Vec<String> = runs
            .iter()
            .map(|&(a, b)| {
                if a == b {
                    a.to_string()
                } else {
                    format!("{a}-{b}")
                }
            })
            .collect();
        let plural = if self.0.len() == 1 { "rank" } else { "ranks" };
        write!(f, "{plural} {}", list.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn diff(item: &str, this: &str, root: &str) -> ItemDifference {
        ItemDifference {
            item: item.into(),
            root: Some(root.into()),
            this: Some(this.into()),
        }
    }

    #[test]
    fn the_error_names_the_ranks_the_items_and_both_values() {
        let differences = vec![
            (
                3,
                Difference::Items {
                    items: vec![diff("config.train.global_batch_size", "3264", "1632")],
                    more: 0,
                },
            ),
            (
                2,
                Difference::Items {
                    items: vec![diff("data.training images", "1,281,000", "1,281,167")],
                    more: 2,
                },
            ),
            (
                5,
                Difference::Refused("invalid config c.toml: no such file".into()),
            ),
        ];
        let msg = render(&differences, 8);
        for want in [
            "rank 3's config differs from rank 0's at train.global_batch_size: 3264 vs 1632",
            "give every rank the same config",
            "rank 2 sees 1,281,000 training images, rank 0 1,281,167: the data folders differ",
            "rank 2: 2 more item(s) differ",
            "rank 5 refused the job: invalid config c.toml: no such file",
            "the 8 ranks",
        ] {
            assert!(msg.contains(want), "{want:?} not in:\n{msg}");
        }
    }

    #[test]
    fn ranks_on_one_gpu_are_named_with_the_gpu_the_host_and_what_to_do() {
        let on = |with: usize| Difference::Clash {
            what: "GPU 0000:1B:00.0 on host n1".into(),
            with,
            theirs: "GPU 0000:1B:00.0 on host n1".into(),
        };
        // CUDA_VISIBLE_DEVICES=0 exported to 8 processes of node n1
        let differences: Vec<_> = (1..8).map(|r| (r, on(0))).collect();
        let msg = render(&differences, 16);
        for want in [
            "ranks 1-7 use GPU 0000:1B:00.0 on host n1, as rank 0 does",
            "each rank needs a GPU of its own",
            "CUDA_VISIBLE_DEVICES",
            "--gpus-per-task=1",
            "nothing was written",
        ] {
            assert!(msg.contains(want), "{want:?} not in:\n{msg}");
        }
        assert_eq!(msg.matches("as rank 0 does").count(), 1, "{msg}");
        // one GPU that two hosts name otherwise (containers of one node)
        let d = Difference::Clash {
            what: "GPU 0000:1B:00.0 on host c2".into(),
            with: 3,
            theirs: "GPU 0000:1B:00.0 on host c1".into(),
        };
        let msg = render(&[(9, d)], 16);
        assert!(
            msg.contains(
                "rank 9 uses GPU 0000:1B:00.0 on host c2, which rank 3 uses as GPU 0000:1B:00.0 \
                 on host c1"
            ),
            "{msg}"
        );
    }

    #[test]
    fn another_gpu_model_or_driver_is_named_with_both_values() {
        let differences = vec![(
            8,
            Difference::Items {
                items: vec![
                    diff(
                        "gpu",
                        "NVIDIA A100-SXM4-80GB, 79.2 GiB",
                        "NVIDIA H100 80GB HBM3, 79.1 GiB",
                    ),
                    diff("NVIDIA driver", "535.104.05", "550.54.15"),
                ],
                more: 0,
            },
        )];
        let msg = render(&differences, 16);
        for want in [
            "rank 8 trains on NVIDIA A100-SXM4-80GB, 79.2 GiB, rank 0 on NVIDIA H100 80GB HBM3, \
             79.1 GiB",
            "run every rank on the same GPU model",
            "rank 8 finds NVIDIA driver 535.104.05, rank 0 550.54.15",
            "install the same driver on every node",
        ] {
            assert!(msg.contains(want), "{want:?} not in:\n{msg}");
        }
    }

    #[test]
    fn a_gpu_is_claimed_by_its_uuid_and_said_by_its_bus_id_and_host() {
        let id = crate::gpu::identity::GpuIdentity {
            ordinal: 0,
            pci_bus_id: "0000:1B:00.0".into(),
            name: "NVIDIA H100 80GB HBM3".into(),
            memory_bytes: Some(1 << 30),
            uuid: Some("GPU-aa".into()),
        };
        let c = gpu_claim(&id, "n1");
        assert_eq!(c.what, "GPU 0000:1B:00.0 on host n1");
        // the same GPU, whatever its host is called (two containers of one node)
        assert_eq!(gpu_claim(&id, "c2").key, c.key);
        let no_uuid = crate::gpu::identity::GpuIdentity { uuid: None, ..id };
        assert_ne!(gpu_claim(&no_uuid, "n1").key, gpu_claim(&no_uuid, "n2").key);
    }

    #[test]
    fn ranks_that_differ_alike_are_one_line() {
        let d = Difference::Items {
            items: vec![diff("runs.seeds", "1,2", "1,3")],
            more: 0,
        };
        let differences: Vec<_> = [8, 9, 10, 11, 24].iter().map(|&r| (r, d.clone())).collect();
        let msg = render(&differences, 32);
        assert!(
            msg.contains("ranks 8-11, 24's --seeds differs from rank 0's: 1,2 vs 1,3"),
            "{msg}"
        );
        assert_eq!(msg.matches("--seeds differs").count(), 1, "{msg}");
    }

    #[test]
    fn a_config_is_compared_key_by_key_with_defaults_and_without_its_description() {
        #[derive(Serialize)]
        struct Train {
            global_batch_size: u64,
            lr: f64,
        }
        #[derive(Serialize)]
        struct Cfg {
            description: String,
            train: Train,
            blocks: [i64; 2],
            decoder: Option<String>,
        }
        let items = config_items(&Cfg {
            description: "anything".into(),
            train: Train {
                global_batch_size: 3264,
                lr: 0.1,
            },
            blocks: [3, 4],
            decoder: None,
        })
        .unwrap();
        assert_eq!(
            items,
            vec![
                item("config.train.global_batch_size", "3264"),
                item("config.train.lr", "0.1"),
                item("config.blocks", "[3,4]"),
                item("config.decoder", "null"),
            ]
        );
    }

    #[test]
    fn counts_have_thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(1_281_167), "1,281,167");
    }
}
