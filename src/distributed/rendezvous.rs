//! Where and who: the rendezvous address, this process's rank, the world size and the local
//! rank (which GPU), from torchrun-style variables or from Slurm's.
use super::hostlist;
use anyhow::{bail, Context, Result};
use std::time::Duration;

/// The default port when neither MASTER_PORT nor a Slurm job id gives one (torchrun's).
pub const DEFAULT_PORT: u16 = 29500;
/// Default collective timeout; MLPERF_RUN_DIST_TIMEOUT_S overrides it.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// Default rendezvous timeout; MLPERF_RUN_RENDEZVOUS_TIMEOUT_S overrides it.
pub const DEFAULT_RENDEZVOUS_TIMEOUT: Duration = Duration::from_secs(600);

/// Which convention the rendezvous came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK (torchrun, `mlperf-run launch`).
    Torchrun,
    /// SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS, first host of SLURM_JOB_NODELIST.
    Slurm,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendezvous {
    /// Host of rank 0, which serves the TCPStore.
    pub master_addr: String,
    pub master_port: u16,
    pub rank: usize,
    pub world_size: usize,
    /// Rank on this node: which of the node's GPUs it uses where it sees them all
    /// ([`super::choose_gpu`]).
    pub local_rank: usize,
    pub source: Source,
    /// Where `master_addr` came from: "MASTER_ADDR", or the Slurm variable whose first host it
    /// is ("SLURM_JOB_NODELIST", "SLURM_NODELIST"), for errors that name what to change.
    pub master_from: &'static str,
}

impl Rendezvous {
    /// A single local process (what a run without any launcher is).
    pub fn single() -> Rendezvous {
        Rendezvous {
            master_addr: "127.0.0.1".into(),
            master_port: DEFAULT_PORT,
            rank: 0,
            world_size: 1,
            local_rank: 0,
            source: Source::Torchrun,
            master_from: "MASTER_ADDR",
        }
    }

    /// How errors name the master's address: `MASTER_ADDR=host`, or `host (the first host of
    /// SLURM_JOB_NODELIST)`.
    pub fn master_named(&self) -> String {
        if self.master_from == "MASTER_ADDR" {
            format!("MASTER_ADDR={}", self.master_addr)
        } else {
            format!(
                "{} (the first host of {})",
                self.master_addr, self.master_from
            )
        }
    }

    /// Reads the process environment; see [`Rendezvous::from_lookup`].
    pub fn from_env() -> Result<Option<Rendezvous>> {
        Self::from_lookup(launcher_var)
    }

    /// `Ok(None)`: no launcher variables at all (a plain single-process run).
    ///
    /// torchrun style when RANK or WORLD_SIZE is set: MASTER_ADDR, MASTER_PORT, RANK,
    /// WORLD_SIZE and LOCAL_RANK are then all required. Otherwise Slurm style when
    /// SLURM_PROCID is set: SLURM_LOCALID and SLURM_NTASKS are required; the master is
    /// MASTER_ADDR if set, else the first host of SLURM_JOB_NODELIST (or SLURM_NODELIST); the
    /// port is MASTER_PORT if set, else 20000 + SLURM_JOB_ID % 10000 (all tasks of a job agree;
    /// concurrent jobs on a node rarely collide), else 29500.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Option<Rendezvous>> {
        let need = |k: &str, why: &str| -> Result<String> {
            get(k).with_context(|| format!("environment variable {k} is not set ({why})"))
        };
        let rdv = if get("RANK").is_some() || get("WORLD_SIZE").is_some() {
            let why = "torchrun-style launch: set MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE and \
                       LOCAL_RANK, or start the workers with `mlperf-run launch`";
            Rendezvous {
                master_addr: need("MASTER_ADDR", why)?,
                master_port: parse_port("MASTER_PORT", &need("MASTER_PORT", why)?)?,
                rank: parse_num("RANK", &need("RANK", why)?)?,
                world_size: parse_num("WORLD_SIZE", &need("WORLD_SIZE", why)?)?,
                local_rank: parse_num("LOCAL_RANK", &need("LOCAL_RANK", why)?)?,
                source: Source::Torchrun,
                master_from: "MASTER_ADDR",
            }
        } else if let Some(procid) = get("SLURM_PROCID") {
            let why = "Slurm launch: run the workers with srun (see scripts/slurm/run.sub)";
            let (master_addr, master_from) = match get("MASTER_ADDR") {
                Some(a) => (a, "MASTER_ADDR"),
                None => {
                    let (list, var) = get("SLURM_JOB_NODELIST")
                        .map(|l| (l, "SLURM_JOB_NODELIST"))
                        .or_else(|| get("SLURM_NODELIST").map(|l| (l, "SLURM_NODELIST")))
                        .context(
                            "environment variables SLURM_JOB_NODELIST and SLURM_NODELIST are \
                             not set (Slurm launch: the first host is the master; or set \
                             MASTER_ADDR)",
                        )?;
                    let host =
                        hostlist::first_host(&list).with_context(|| format!("reading {var}"))?;
                    (host, var)
                }
            };
            let master_port = match (get("MASTER_PORT"), get("SLURM_JOB_ID")) {
                (Some(p), _) => parse_port("MASTER_PORT", &p)?,
                (None, Some(job)) => {
                    let job: u64 = parse_num("SLURM_JOB_ID", &job)? as u64;
                    20000 + (job % 10000) as u16
                }
                (None, None) => DEFAULT_PORT,
            };
            Rendezvous {
                master_addr,
                master_port,
                rank: parse_num("SLURM_PROCID", &procid)?,
                world_size: parse_num("SLURM_NTASKS", &need("SLURM_NTASKS", why)?)?,
                local_rank: parse_num("SLURM_LOCALID", &need("SLURM_LOCALID", why)?)?,
                source: Source::Slurm,
                master_from,
            }
        } else {
            for k in ["MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"] {
                if get(k).is_some() {
                    bail!(
                        "{k} is set but RANK and WORLD_SIZE are not: set all of MASTER_ADDR, \
                         MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK (or none, for one process)"
                    );
                }
            }
            return Ok(None);
        };
        rdv.validate()?;
        if rdv.source == Source::Torchrun {
            rdv.check_local_world_size(get("LOCAL_WORLD_SIZE").as_deref())?;
        }
        Ok(Some(rdv))
    }

    /// torchrun's LOCAL_WORLD_SIZE, when set, agrees with LOCAL_RANK and WORLD_SIZE (the CPU
    /// binding, the decode threads and the node count in sysinfo read it).
    fn check_local_world_size(&self, value: Option<&str>) -> Result<()> {
        let Some(v) = value else {
            return Ok(());
        };
        let local: usize = match v.trim().parse() {
            Ok(n) if n > 0 => n,
            _ => bail!(
                "LOCAL_WORLD_SIZE={v:?} is not a positive integer (the processes on this node)"
            ),
        };
        if self.local_rank >= local {
            bail!(
                "LOCAL_RANK={} is not below LOCAL_WORLD_SIZE={local}: the ranks are inconsistent",
                self.local_rank
            );
        }
        if local > self.world_size {
            bail!(
                "LOCAL_WORLD_SIZE={local} is larger than WORLD_SIZE={}: the ranks are inconsistent",
                self.world_size
            );
        }
        Ok(())
    }

    fn validate(&self) -> Result<()> {
        let (rank_var, world_var, local_var) = match self.source {
            Source::Torchrun => ("RANK", "WORLD_SIZE", "LOCAL_RANK"),
            Source::Slurm => ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
        };
        if self.world_size == 0 {
            bail!("{world_var} is 0; it must be at least 1");
        }
        if self.rank >= self.world_size {
            bail!(
                "{rank_var}={} is not below {world_var}={}",
                self.rank,
                self.world_size
            );
        }
        if self.local_rank > self.rank {
            bail!(
                "{local_var}={} is larger than {rank_var}={}: the ranks are inconsistent",
                self.local_rank,
                self.rank
            );
        }
        if self.master_addr.is_empty() {
            bail!("the master address is empty");
        }
        Ok(())
    }
}

/// How long a data-parallel run waits for its peers, the two settings of
/// docs/distributed.md ("Timeouts").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// Forming the group: connecting to rank 0's store and rank 0's wait for every rank
    /// (MLPERF_RUN_RENDEZVOUS_TIMEOUT_S, default 600 s: nodes of a job start minutes apart).
    pub rendezvous: Duration,
    /// Every collective and store call once the group has formed, and NCCL's watchdog
    /// (MLPERF_RUN_DIST_TIMEOUT_S, default 300 s): a dead, stopped or cut-off peer ends the
    /// run on every rank within it.
    pub collective: Duration,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            rendezvous: DEFAULT_RENDEZVOUS_TIMEOUT,
            collective: DEFAULT_TIMEOUT,
        }
    }
}

impl Timeouts {
    /// Both timeouts the same (tests, `dist-selftest --timeout-s`).
    pub fn both(t: Duration) -> Timeouts {
        Timeouts {
            rendezvous: t,
            collective: t,
        }
    }

    /// From the process environment; see [`Timeouts::from_lookup`].
    pub fn from_env() -> Result<Timeouts> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// MLPERF_RUN_RENDEZVOUS_TIMEOUT_S and MLPERF_RUN_DIST_TIMEOUT_S (seconds), each
    /// defaulting when unset or blank; anything but a positive number is an error naming it.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Timeouts> {
        let secs = |var: &str, default: Duration| -> Result<Duration> {
            match get(var).filter(|v| !v.trim().is_empty()) {
                None => Ok(default),
                Some(v) => v
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|s| *s > 0.0 && s.is_finite() && *s < 1e9)
                    .map(Duration::from_secs_f64)
                    .with_context(|| {
                        format!(
                            "{var}={v:?} is not a positive number of seconds (unset it for \
                             the default of {} s)",
                            default.as_secs()
                        )
                    }),
            }
        };
        Ok(Timeouts {
            rendezvous: secs(
                "MLPERF_RUN_RENDEZVOUS_TIMEOUT_S",
                DEFAULT_RENDEZVOUS_TIMEOUT,
            )?,
            collective: secs("MLPERF_RUN_DIST_TIMEOUT_S", DEFAULT_TIMEOUT)?,
        })
    }
}

/// How many processes of this job run on this node, from the launcher's environment:
/// LOCAL_WORLD_SIZE (torchrun, `mlperf-run launch`), else Slurm's SLURM_NTASKS_PER_NODE, else the
/// first count of SLURM_TASKS_PER_NODE ("8(x2)" is 8 tasks on each of 2 nodes). `None` without
/// a launcher, or when the values do not parse (the caller then assumes one process).
pub fn local_processes_from_lookup(get: impl Fn(&str) -> Option<String>) -> Option<usize> {
    let num = |v: &str| v.trim().parse::<usize>().ok().filter(|&n| n > 0);
    if let Some(v) = get("LOCAL_WORLD_SIZE") {
        return num(&v);
    }
    if let Some(v) = get("SLURM_NTASKS_PER_NODE") {
        return num(&v);
    }
    let v = get("SLURM_TASKS_PER_NODE")?;
    let first = v.split(',').next()?;
    num(first.split('(').next()?)
}

/// [`local_processes_from_lookup`] on the process environment.
pub fn local_processes() -> Option<usize> {
    local_processes_from_lookup(launcher_var)
}

/// A launcher variable from the process environment; set but blank counts as unset.
fn launcher_var(k: &str) -> Option<String> {
    std::env::var(k).ok().filter(|v| !v.trim().is_empty())
}

fn parse_num(var: &str, v: &str) -> Result<usize> {
    v.trim()
        .parse()
        .with_context(|| format!("{var}={v:?} is not a non-negative integer"))
}

fn parse_port(var: &str, v: &str) -> Result<u16> {
    match v.trim().parse::<u16>() {
        Ok(p) if p > 0 => Ok(p),
        _ => bail!("{var}={v:?} is not a TCP port (1-65535)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn rdv(vars: &[(&str, &str)]) -> Result<Option<Rendezvous>> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Rendezvous::from_lookup(|k| m.get(k).cloned())
    }

    const TORCHRUN: &[(&str, &str)] = &[
        ("MASTER_ADDR", "10.0.0.1"),
        ("MASTER_PORT", "1234"),
        ("RANK", "9"),
        ("WORLD_SIZE", "16"),
        ("LOCAL_RANK", "1"),
    ];

    fn local(vars: &[(&str, &str)]) -> Option<usize> {
        let m: HashMap<&str, &str> = vars.iter().copied().collect();
        local_processes_from_lookup(|k| m.get(k).map(|v| v.to_string()))
    }

    #[test]
    fn processes_on_this_node_from_torchrun_or_slurm() {
        assert_eq!(local(&[]), None);
        assert_eq!(
            local(&[("LOCAL_WORLD_SIZE", "8"), ("SLURM_NTASKS_PER_NODE", "4")]),
            Some(8)
        );
        assert_eq!(local(&[("SLURM_NTASKS_PER_NODE", "4")]), Some(4));
        assert_eq!(local(&[("SLURM_TASKS_PER_NODE", "8(x2),4")]), Some(8));
        assert_eq!(local(&[("SLURM_TASKS_PER_NODE", "2")]), Some(2));
        // unparsable or zero: unknown, not a guess
        assert_eq!(local(&[("LOCAL_WORLD_SIZE", "eight")]), None);
        assert_eq!(local(&[("SLURM_NTASKS_PER_NODE", "0")]), None);
    }

    #[test]
    fn nothing_set_is_a_single_process() {
        assert_eq!(rdv(&[]).unwrap(), None);
        assert_eq!(rdv(&[("SLURM_JOB_ID", "5")]).unwrap(), None);
    }

    #[test]
    fn torchrun_variables() {
        let r = rdv(TORCHRUN).unwrap().unwrap();
        assert_eq!(
            r,
            Rendezvous {
                master_addr: "10.0.0.1".into(),
                master_port: 1234,
                rank: 9,
                world_size: 16,
                local_rank: 1,
                source: Source::Torchrun,
                master_from: "MASTER_ADDR",
            }
        );
    }

    #[test]
    fn torchrun_errors_name_the_missing_variable() {
        for missing in ["MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "LOCAL_RANK"] {
            let vars: Vec<_> = TORCHRUN
                .iter()
                .copied()
                .filter(|(k, _)| *k != missing)
                .collect();
            let err = format!("{:#}", rdv(&vars).unwrap_err());
            assert!(err.contains(&format!("{missing} is not set")), "{err}");
        }
        let err = format!("{:#}", rdv(&[("MASTER_ADDR", "h")]).unwrap_err());
        assert!(err.contains("RANK and WORLD_SIZE are not"), "{err}");
    }

    #[test]
    fn torchrun_bad_values() {
        let with = |k: &str, v: &str| -> String {
            let mut vars: Vec<(&str, &str)> = TORCHRUN.to_vec();
            vars.retain(|(kk, _)| *kk != k);
            vars.push((k, v));
            format!("{:#}", rdv(&vars).unwrap_err())
        };
        assert!(with("RANK", "16").contains("RANK=16 is not below WORLD_SIZE=16"));
        assert!(with("RANK", "-1").contains("RANK=\"-1\" is not a non-negative integer"));
        assert!(with("MASTER_PORT", "70000").contains("MASTER_PORT=\"70000\" is not a TCP port"));
        assert!(with("MASTER_PORT", "0").contains("not a TCP port"));
        assert!(with("WORLD_SIZE", "0").contains("WORLD_SIZE is 0"));
        assert!(with("LOCAL_RANK", "12").contains("LOCAL_RANK=12 is larger than RANK=9"));
    }

    #[test]
    fn local_world_size_must_agree_with_the_ranks() {
        let with = |v: &str| {
            let mut vars: Vec<(&str, &str)> = TORCHRUN.to_vec();
            vars.push(("LOCAL_WORLD_SIZE", v));
            rdv(&vars).map_err(|e| format!("{e:#}"))
        };
        assert!(with("8").is_ok());
        assert!(with("eight")
            .unwrap_err()
            .contains("LOCAL_WORLD_SIZE=\"eight\" is not a positive integer"));
        assert!(with("0").unwrap_err().contains("not a positive integer"));
        assert!(with("1")
            .unwrap_err()
            .contains("LOCAL_RANK=1 is not below LOCAL_WORLD_SIZE=1"));
        assert!(with("32")
            .unwrap_err()
            .contains("LOCAL_WORLD_SIZE=32 is larger than WORLD_SIZE=16"));
    }

    #[test]
    fn slurm_variables() {
        let r = rdv(&[
            ("SLURM_PROCID", "11"),
            ("SLURM_LOCALID", "3"),
            ("SLURM_NTASKS", "16"),
            ("SLURM_JOB_NODELIST", "dgx[07-08],login2"),
            ("SLURM_JOB_ID", "123456"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(r.master_addr, "dgx07");
        assert_eq!(r.master_port, 23456);
        assert_eq!((r.rank, r.world_size, r.local_rank), (11, 16, 3));
        assert_eq!(r.source, Source::Slurm);
        assert_eq!(
            r.master_named(),
            "dgx07 (the first host of SLURM_JOB_NODELIST)"
        );
    }

    #[test]
    fn slurm_honours_master_overrides_and_falls_back_to_nodelist() {
        let r = rdv(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_NODELIST", "n[5-6]"),
            ("MASTER_ADDR", "ib0-host"),
            ("MASTER_PORT", "4000"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((r.master_addr.as_str(), r.master_port), ("ib0-host", 4000));
        assert_eq!(r.master_named(), "MASTER_ADDR=ib0-host");
        let r = rdv(&[
            ("SLURM_PROCID", "1"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_NODELIST", "n[5-6]"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            (r.master_addr.as_str(), r.master_port),
            ("n5", DEFAULT_PORT)
        );
        assert_eq!(r.master_from, "SLURM_NODELIST");
    }

    #[test]
    fn slurm_errors_name_the_missing_variable() {
        let base = [
            ("SLURM_PROCID", "0"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_JOB_NODELIST", "n1"),
        ];
        for missing in ["SLURM_LOCALID", "SLURM_NTASKS", "SLURM_JOB_NODELIST"] {
            let vars: Vec<_> = base
                .iter()
                .copied()
                .filter(|(k, _)| *k != missing)
                .collect();
            let err = format!("{:#}", rdv(&vars).unwrap_err());
            assert!(err.contains(missing), "{err}");
        }
        let mut bad = base.to_vec();
        bad[3] = ("SLURM_JOB_NODELIST", "n[1-");
        let err = format!("{:#}", rdv(&bad).unwrap_err());
        assert!(
            err.contains("SLURM_JOB_NODELIST") && err.contains("unclosed"),
            "{err}"
        );
    }

    #[test]
    fn timeouts_default_parse_and_name_a_bad_value() {
        let t = |vars: &[(&str, &str)]| {
            Timeouts::from_lookup(|k| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            })
        };
        assert_eq!(t(&[]).unwrap(), Timeouts::default());
        assert_eq!(
            t(&[("MLPERF_RUN_DIST_TIMEOUT_S", " ")]).unwrap(),
            Timeouts::default()
        );
        assert_eq!(
            t(&[
                ("MLPERF_RUN_DIST_TIMEOUT_S", "12.5"),
                ("MLPERF_RUN_RENDEZVOUS_TIMEOUT_S", "90")
            ])
            .unwrap(),
            Timeouts {
                rendezvous: Duration::from_secs(90),
                collective: Duration::from_millis(12_500)
            }
        );
        for bad in ["0", "-3", "soon", "inf", "NaN"] {
            let e = t(&[("MLPERF_RUN_RENDEZVOUS_TIMEOUT_S", bad)]).unwrap_err();
            let msg = format!("{e:#}");
            assert!(
                msg.contains("MLPERF_RUN_RENDEZVOUS_TIMEOUT_S") && msg.contains("600 s"),
                "{msg}"
            );
        }
    }

    #[test]
    fn torchrun_wins_over_slurm() {
        let mut vars = TORCHRUN.to_vec();
        vars.push(("SLURM_PROCID", "0"));
        assert_eq!(rdv(&vars).unwrap().unwrap().source, Source::Torchrun);
    }
}
