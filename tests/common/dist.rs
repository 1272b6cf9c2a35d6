//! The multi-process (c10d over Gloo on localhost) tests: ranks started with torchrun's
//! environment, their output, and their parameter dumps compared.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub const BIN: &str = env!("CARGO_BIN_EXE_mlperf-run");

/// `mlperf-run` as rank `rank` of `world` with the rendezvous at 127.0.0.1:`port`, stdin
/// closed and stdout and stderr piped; the caller adds the arguments and spawns it.
pub fn rank_command(rank: usize, world: usize, port: u16) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("LOCAL_RANK", rank.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// `mlperf-run launch --nproc-per-node N --master-port 0 --`: the caller adds the command that
/// every worker runs.
pub fn launch_command(nproc: usize) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args([
        "launch",
        "--nproc-per-node",
        &nproc.to_string(),
        "--master-port",
        "0",
        "--",
    ]);
    cmd
}

/// A finished process's status, stdout and stderr, for failure messages.
pub fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A safetensors parameter dump, sorted by name.
pub fn load(path: &Path) -> Vec<(String, tch::Tensor)> {
    let mut v = tch::Tensor::read_safetensors(path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// Largest relative difference (per tensor, by norm) between two parameter sets with the same
/// names.
pub fn max_rel_diff(a: &[(String, tch::Tensor)], b: &[(String, tch::Tensor)]) -> f64 {
    assert_eq!(
        a.iter().map(|x| &x.0).collect::<Vec<_>>(),
        b.iter().map(|x| &x.0).collect::<Vec<_>>()
    );
    a.iter()
        .zip(b)
        .map(|((_, x), (_, y))| {
            let d = (x - y).norm().double_value(&[]);
            d / y.norm().double_value(&[]).max(1e-12)
        })
        .fold(0.0, f64::max)
}

/// configs/resnet/tiny_cpu.toml with a smaller training set (5 steps per epoch at the global
/// batch of 64) and `max_epochs` epochs, one eval per epoch.
pub fn tiny_config(dir: &Path, train_per_class: usize, max_epochs: usize) -> PathBuf {
    let base = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs/resnet/tiny_cpu.toml"),
    )
    .unwrap();
    let text = base
        .replace(
            "train_per_class = 128",
            &format!("train_per_class = {train_per_class}"),
        )
        .replace("max_epochs = 24", &format!("max_epochs = {max_epochs}"))
        .replace("eval_period = 4", "eval_period = 1")
        .replace(
            "schedule_epochs = 24.0",
            &format!("schedule_epochs = {max_epochs}.0"),
        );
    assert_ne!(
        text, base,
        "tiny_cpu.toml changed: update this test's edits"
    );
    let path = dir.join("tiny_dp.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `<benchmark> --division open --config CFG --seed SEED --log LOG --dump-params DUMP`, the
/// arguments of a seeded open run whose final parameters the test compares; the caller adds
/// the rest (`--data`, test flags).
pub fn open_run_args(
    benchmark: &str,
    cfg: &Path,
    seed: u64,
    log: &Path,
    dump: &Path,
) -> Vec<String> {
    let path = |p: &Path| p.to_string_lossy().into_owned();
    vec![
        benchmark.to_string(),
        "--division".into(),
        "open".into(),
        "--config".into(),
        path(cfg),
        "--seed".into(),
        seed.to_string(),
        "--log".into(),
        path(log),
        "--dump-params".into(),
        path(dump),
    ]
}

/// Waits at most `limit`, reading the child's output as it comes (a child that writes more
/// than a pipe holds never blocks on it); a worker still running then is killed and the test
/// fails.
pub fn finish(child: std::process::Child, limit: std::time::Duration, what: &str) -> Output {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            // SAFETY: kill(2) on our own child's pid, not yet reaped (its waiter still runs).
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            let out = rx.recv().unwrap().unwrap();
            panic!(
                "{what} still running after {limit:?}; stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}
