//! Run sets across two "nodes" (the network-namespace bed of [`crate::two_nodes`]): each node
//! runs `mlperf-run launch --nnodes 2 --node-rank R --master-addr <node 0>` with Gloo over the
//! virtual link.
//! - A tiny ResNet set and a tiny packed BERT set end as the same world on one host does, bit
//!   for bit; rank 0 writes the results, and the ResNet package passes the official checker.
//! - Faults: a slow, lossy link (netem); the link cut for 30 s mid-run; node 1 killed (-9)
//!   mid-run; node 1 started 60 s late, and never; a wrong master address. A fault that cuts a
//!   run ends the set on every node (exit 130, the cut run's log in interrupted/), the finished
//!   runs stay, and `--resume` on both nodes brings the set to its full count.
//!
//! Needs root and `ip` (CI runs as root); skipped with the reason elsewhere.
#![cfg(feature = "torch")]

use crate::common;
use crate::common::dist::{launch_command, load, max_rel_diff, text, tiny_config, BIN};
use crate::two_nodes::{bed, TwoNodes};
use mlperf_run::mllog::parse_file;
use mlperf_run::rules::{check_log, CheckOptions};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

const SYSTEM: &str = "two_nodes";

/// The worker arguments of a seeded open set of `runs` runs into `results`.
fn set_args(
    benchmark: &str,
    cfg: &Path,
    results: &Path,
    runs: usize,
    extra: &[&str],
) -> Vec<String> {
    let seeds: Vec<String> = (1..=runs).map(|s| (100 + s).to_string()).collect();
    let mut a: Vec<String> = [
        benchmark,
        "--division",
        "open",
        "--config",
        cfg.to_str().unwrap(),
        "--results",
        results.to_str().unwrap(),
        "--system",
        SYSTEM,
        "--runs",
        &runs.to_string(),
        "--seeds",
        &seeds.join(","),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

fn set_dir(results: &Path, benchmark: &str) -> PathBuf {
    results.join(SYSTEM).join(benchmark)
}

/// (epoch_num, accuracy) of every eval, the seed and the run_stop status of a result file.
fn account(log: &Path) -> (Vec<(f64, f64)>, Option<u64>, Option<String>) {
    let l = parse_file(log).unwrap_or_else(|e| panic!("{}: {e:#}", log.display()));
    let evals = l
        .with_key("eval_accuracy")
        .map(|e| (e.epoch_num().unwrap(), e.value.as_f64().unwrap()))
        .collect();
    let seed = l.first("seed").and_then(|e| e.value.as_u64());
    let status = l
        .last("run_stop")
        .and_then(|e| e.status().map(str::to_string));
    (evals, seed, status)
}

/// Our checker (ResNet, 4.0.0) finds `log` compliant.
fn assert_our_checker_passes(log: &Path) {
    let verdict = check_log(
        &parse_file(log).unwrap(),
        &CheckOptions {
            ruleset: Some("4.0.0".into()),
        },
    );
    assert!(
        verdict.compliant(),
        "{}: {:?}",
        log.display(),
        verdict.findings
    );
}

/// Both nodes' outputs succeeded (exit 0, or 1 when a run did not converge: the set finished).
fn assert_set_finished(outs: &[Output], what: &str) {
    for (n, o) in outs.iter().enumerate() {
        assert!(
            matches!(o.status.code(), Some(0 | 1)),
            "{what}, node {n}: {}",
            text(o)
        );
        assert!(
            !String::from_utf8_lossy(&o.stderr).contains("interrupted: continue"),
            "{what}, node {n} stopped early: {}",
            text(o)
        );
    }
}

/// The same set on two nodes and as the same world on one host: every run's evals, seed and
/// status equal, and the last run's parameters bit for bit.
fn same_as_one_host(
    nodes: &TwoNodes,
    benchmark: &str,
    cfg: &Path,
    runs: usize,
    extra: &[&str],
    dir: &Path,
) -> PathBuf {
    let env = [("MLPERF_RUN_DIST_TIMEOUT_S", "60")];
    let (two, one) = (dir.join("two"), dir.join("one"));
    let dump = |r: &Path| r.join("params.safetensors");
    let worker = |r: &Path| {
        let mut a = set_args(benchmark, cfg, r, runs, extra);
        a.extend(["--dump-params".into(), dump(r).to_string_lossy().into()]);
        a
    };
    std::fs::create_dir_all(&two).unwrap();
    std::fs::create_dir_all(&one).unwrap();
    let t0 = Instant::now();
    let outs = nodes.launch_both(1, &env, &worker(&two), Duration::from_secs(900));
    let t_two = t0.elapsed().as_secs_f64();
    assert_set_finished(&outs, "two nodes");
    let t0 = Instant::now();
    let out = launch_command(2)
        .args(worker(&one))
        .envs(env)
        .output()
        .unwrap();
    let t_one = t0.elapsed().as_secs_f64();
    assert_set_finished(std::slice::from_ref(&out), "one host");
    for i in 0..runs {
        let file = format!("result_{i}.txt");
        let (a, b) = (
            account(&set_dir(&two, benchmark).join(&file)),
            account(&set_dir(&one, benchmark).join(&file)),
        );
        assert!(!a.0.is_empty(), "{file}: no evals");
        assert!(a.2.is_some(), "{file}: no run_stop");
        assert_eq!(a, b, "{benchmark} {file}: two nodes vs one host");
    }
    let (p2, p1) = (load(&dump(&two)), load(&dump(&one)));
    assert!(!p2.is_empty());
    let diff = max_rel_diff(&p2, &p1);
    let ranks = max_rel_diff(&p2, &load(&two.join("params.safetensors.rank1")));
    eprintln!(
        "{benchmark}: {runs} runs on two nodes {t_two:.1} s, on one host {t_one:.1} s; last \
         run's parameters: two nodes vs one host {diff:e}, rank 0 vs rank 1 {ranks:e}"
    );
    assert_eq!(diff, 0.0, "two nodes and one host ended apart");
    assert_eq!(ranks, 0.0, "the nodes' parameters differ");
    // rank 0 writes the results; the other node only reads the folder
    let logs: Vec<_> = std::fs::read_dir(set_dir(&two, benchmark))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".txt"))
        .collect();
    assert_eq!(logs.len(), runs, "{logs:?}");
    set_dir(&two, benchmark)
}

#[test]
fn a_tiny_resnet_set_on_two_nodes_ends_as_on_one_host_and_its_package_passes() {
    let test = "a_tiny_resnet_set_on_two_nodes_ends_as_on_one_host_and_its_package_passes";
    let Some(nodes) = bed(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cfg = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs/resnet/tiny_cpu.toml");
    let set = same_as_one_host(&nodes, "resnet", &cfg, 5, &[], dir.path());
    for i in 0..5 {
        assert_our_checker_passes(&set.join(format!("result_{i}.txt")));
    }
    let toml = common::package::write_system_toml(dir.path(), "onprem");
    let out = dir.path().join("package");
    let packaged = Command::new(BIN)
        .args(["package", "--submitter", "Org", "--system", SYSTEM])
        .args(["--division", "open", "--system-config"])
        .arg(&toml)
        .arg("--out")
        .arg(&out)
        .arg(&set)
        .output()
        .unwrap();
    assert!(packaged.status.success(), "{}", text(&packaged));
    if common::oracle(test).is_none() {
        return;
    }
    let (ok, log) = common::package::official_package_check(&out.join("Org"), "4.0.0")
        .expect("package checker ran");
    assert!(ok, "official package checker:\n{log}");
}

#[test]
fn a_tiny_packed_bert_set_on_two_nodes_ends_as_on_one_host() {
    let Some(nodes) = bed("a_tiny_packed_bert_set_on_two_nodes_ends_as_on_one_host") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = crate::dist_bert_packing::synth_data(dir.path());
    let cfg = crate::dist_bert_packing::config(dir.path(), 1);
    let set = same_as_one_host(
        &nodes,
        "bert",
        &cfg,
        2,
        &["--data", data.to_str().unwrap()],
        dir.path(),
    );
    for i in 0..2 {
        common::official::assert_compliant(
            "two-node packed bert",
            &set.join(format!("result_{i}.txt")),
            "5.0.0",
        );
    }
}

/// A one-run set of the small ResNet (10 steps) on both nodes; its seconds.
fn one_run(nodes: &TwoNodes, dir: &Path, name: &str) -> f64 {
    let cfg = tiny_config(dir, 32, 2);
    let results = dir.join(name);
    let t0 = Instant::now();
    let outs = nodes.launch_both(
        1,
        &[("MLPERF_RUN_DIST_TIMEOUT_S", "60")],
        &set_args("resnet", &cfg, &results, 1, &[]),
        Duration::from_secs(600),
    );
    assert_set_finished(&outs, name);
    t0.elapsed().as_secs_f64()
}

#[test]
fn a_slow_lossy_link_slows_the_run_but_it_completes() {
    let Some(nodes) = bed("a_slow_lossy_link_slows_the_run_but_it_completes") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let clean = one_run(&nodes, dir.path(), "clean");
    let how = match nodes.impair() {
        Ok(how) => how,
        Err(e) => {
            eprintln!("SKIP a_slow_lossy_link_slows_the_run_but_it_completes: {e}");
            return;
        }
    };
    let slow = one_run(&nodes, dir.path(), "slow");
    eprintln!("one run on two nodes: {clean:.1} s on a clean link, {slow:.1} s with {how}");
    assert!(
        slow > clean + 2.0,
        "the impaired link did not show: {slow:.1} s vs {clean:.1} s"
    );
}

/// Waits until run `index`'s log in `set` has started training; panics after `limit`.
fn wait_for_run_start(set: &Path, index: usize, limit: Duration) {
    let path = set.join(format!("result_{index}.txt"));
    let t0 = Instant::now();
    while !std::fs::read_to_string(&path).is_ok_and(|t| t.contains("\"run_start\"")) {
        assert!(
            t0.elapsed() < limit,
            "run {index} did not start in {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Each node's launcher output and the seconds from `since` until it ended.
fn ended(kids: Vec<Child>, since: Instant, limit: Duration) -> Vec<(Output, f64)> {
    kids.into_iter()
        .enumerate()
        .map(|(n, k)| {
            let o = crate::common::dist::finish(k, limit, &format!("node {n}"));
            (o, since.elapsed().as_secs_f64())
        })
        .collect()
}

/// After a fault cut run `cut` of a set of `runs`: both nodes stopped the set with 130, the
/// runs before it are kept, the cut run's log (closed aborted) is in interrupted/; then both
/// nodes `--resume` and the set reaches its full count, every log passing our checker and the
/// official one.
fn assert_cut_then_resume(
    nodes: &TwoNodes,
    outs: &[(Output, f64)],
    worker: &[String],
    set: &Path,
    (cut, runs): (usize, usize),
) {
    for (n, (o, _)) in outs.iter().enumerate() {
        assert_eq!(o.status.code(), Some(130), "node {n}: {}", text(o));
    }
    let err0 = String::from_utf8_lossy(&outs[0].0.stderr);
    assert!(
        err0.contains(&format!("run {}/{runs} was cut", cut + 1))
            && err0.contains("continue with the same command and --resume"),
        "{err0}"
    );
    for i in 0..cut {
        assert!(account(&set.join(format!("result_{i}.txt"))).2.is_some());
    }
    assert!(!set.join(format!("result_{cut}.txt")).exists());
    let aside: Vec<PathBuf> = std::fs::read_dir(set.join("interrupted"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(account(&aside[0]).2.as_deref(), Some("aborted"));
    let mut again = worker.to_vec();
    again.push("--resume".into());
    let outs = nodes.launch_both(
        1,
        &[("MLPERF_RUN_DIST_TIMEOUT_S", "60")],
        &again,
        Duration::from_secs(900),
    );
    assert_set_finished(&outs, "resume");
    for i in 0..runs {
        let log = set.join(format!("result_{i}.txt"));
        assert!(account(&log).2.is_some(), "{}", log.display());
        assert_our_checker_passes(&log);
        common::official::assert_compliant("two-node resume", &log, "4.0.0");
    }
}

#[test]
fn a_link_cut_for_30_s_ends_the_set_on_both_nodes_and_resume_completes_it() {
    let Some(nodes) = bed("a_link_cut_for_30_s_ends_the_set_on_both_nodes_and_resume_completes_it")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // 20 epochs of 5 steps: a run lasts long enough to be cut in its middle
    let cfg = tiny_config(dir.path(), 32, 20);
    let results = dir.path().join("results");
    let worker = set_args("resnet", &cfg, &results, 3, &[]);
    let timeout = 10.0;
    let env = [("MLPERF_RUN_DIST_TIMEOUT_S", "10")];
    let kids: Vec<Child> = (0..2)
        .map(|n| nodes.launch(n, 1, None, &env, &worker))
        .collect();
    let set = set_dir(&results, "resnet");
    wait_for_run_start(&set, 1, Duration::from_secs(300));
    let cut = Instant::now();
    nodes.link(1, false);
    let outs = ended(kids, cut, Duration::from_secs(120));
    for (n, (o, secs)) in outs.iter().enumerate() {
        eprintln!(
            "link cut: node {n} ended {secs:.1} s after the cut ({:?})",
            o.status
        );
        assert!(
            *secs < timeout + 20.0,
            "node {n} took {secs:.1} s (timeout {timeout} s): {}",
            text(o)
        );
    }
    let back = Duration::from_secs(30).saturating_sub(cut.elapsed());
    std::thread::sleep(back);
    nodes.link(1, true);
    assert_cut_then_resume(&nodes, &outs, &worker, &set, (1, 3));
}

#[test]
fn node_1_killed_mid_run_ends_the_set_on_node_0_and_resume_completes_it() {
    let Some(nodes) = bed("node_1_killed_mid_run_ends_the_set_on_node_0_and_resume_completes_it")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cfg = tiny_config(dir.path(), 32, 20);
    let results = dir.path().join("results");
    let worker = set_args("resnet", &cfg, &results, 2, &[]);
    let env = [("MLPERF_RUN_DIST_TIMEOUT_S", "30")];
    let node0 = nodes.launch(0, 1, None, &env, &worker);
    let mut node1 = nodes.launch(1, 1, None, &env, &worker);
    let set = set_dir(&results, "resnet");
    wait_for_run_start(&set, 0, Duration::from_secs(300));
    let killed = Instant::now();
    nodes.kill_node(1);
    let _ = node1.kill();
    let _ = node1.wait();
    let outs = ended(vec![node0], killed, Duration::from_secs(120));
    let (o, secs) = &outs[0];
    eprintln!("node 1 killed: node 0 ended {secs:.1} s later");
    assert!(*secs < 60.0, "{secs:.1} s: {}", text(o));
    // node 1's launcher died with its node: only node 0's account is checked
    assert_eq!(o.status.code(), Some(130), "{}", text(o));
    let err0 = String::from_utf8_lossy(&o.stderr);
    assert!(err0.contains("run 1/2 was cut"), "{err0}");
    assert!(!set.join("result_0.txt").exists());
    assert_eq!(
        std::fs::read_dir(set.join("interrupted")).unwrap().count(),
        1
    );
    let mut again = worker.clone();
    again.push("--resume".into());
    let outs = nodes.launch_both(1, &env, &again, Duration::from_secs(900));
    assert_set_finished(&outs, "resume after a killed node");
    for i in 0..2 {
        assert!(account(&set.join(format!("result_{i}.txt"))).2.is_some());
    }
}

#[test]
fn a_late_node_is_waited_for_and_one_that_never_comes_is_named() {
    let Some(nodes) = bed("a_late_node_is_waited_for_and_one_that_never_comes_is_named") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cfg = tiny_config(dir.path(), 32, 2);
    let results = dir.path().join("late");
    let worker = set_args("resnet", &cfg, &results, 1, &[]);
    let env = [
        ("MLPERF_RUN_DIST_TIMEOUT_S", "30"),
        ("MLPERF_RUN_RENDEZVOUS_TIMEOUT_S", "120"),
    ];
    let t0 = Instant::now();
    let node0 = nodes.launch(0, 1, None, &env, &worker);
    std::thread::sleep(Duration::from_secs(60));
    let node1 = nodes.launch(1, 1, None, &env, &worker);
    let outs: Vec<Output> = ended(vec![node0, node1], t0, Duration::from_secs(300))
        .into_iter()
        .map(|(o, _)| o)
        .collect();
    assert_set_finished(&outs, "node 1 60 s late");
    eprintln!(
        "node 1 started 60 s late: the set finished {:.1} s after node 0 started",
        t0.elapsed().as_secs_f64()
    );

    // never: node 0 alone, a 5 s rendezvous
    let results = dir.path().join("never");
    let worker = set_args("resnet", &cfg, &results, 1, &[]);
    let t0 = Instant::now();
    let alone = nodes.launch(
        0,
        1,
        None,
        &[("MLPERF_RUN_RENDEZVOUS_TIMEOUT_S", "5")],
        &worker,
    );
    let o = crate::common::dist::finish(alone, Duration::from_secs(120), "node 0 alone");
    let secs = t0.elapsed().as_secs_f64();
    let err = String::from_utf8_lossy(&o.stderr);
    eprintln!("node 1 never came: node 0 ended after {secs:.1} s");
    assert_eq!(o.status.code(), Some(130), "{}", text(&o));
    assert!(
        err.contains("missing ranks: 1") && err.contains("node rank 1"),
        "{err}"
    );
    assert!(secs < 60.0, "{secs:.1} s");
}

#[test]
fn a_wrong_master_address_is_named_at_once() {
    let Some(nodes) = bed("a_wrong_master_address_is_named_at_once") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cfg = tiny_config(dir.path(), 32, 2);
    let worker = set_args("resnet", &cfg, &dir.path().join("r"), 1, &[]);
    // an address on the link that no node has
    let wrong = format!("{}.9", nodes.addrs[0].rsplit_once('.').unwrap().0);
    let t0 = Instant::now();
    let kids: Vec<Child> = (0..2)
        .map(|n| nodes.launch(n, 1, Some(&wrong), &[], &worker))
        .collect();
    for (n, (o, secs)) in ended(kids, t0, Duration::from_secs(120))
        .into_iter()
        .enumerate()
    {
        let err = String::from_utf8_lossy(&o.stderr);
        eprintln!("wrong master address: node {n} ended after {secs:.1} s");
        assert!(!o.status.success(), "node {n}: {}", text(&o));
        assert!(
            err.contains(&format!("MASTER_ADDR={wrong}")) && err.contains("no host answering"),
            "node {n}: {err}"
        );
        assert!(secs < 30.0, "node {n}: {secs:.1} s");
    }
}
