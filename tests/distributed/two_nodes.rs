//! Two "nodes" on one machine: two network namespaces joined by a veth pair, each with its own
//! address on that link only (no route out: nothing leaves the machine), one Gloo rank in each,
//! started with torchrun's environment as Slurm would set it. Needs root and `ip` (CI runs as
//! root on Linux); skipped with the reason elsewhere.
#![cfg(feature = "torch")]

use crate::common::dist::{finish, text, BIN};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// Two namespaces joined by a veth pair, 10.203.<net>.1 and .2 on that link only; removed on
/// drop. Each bed has its own names (tests run in parallel in one process).
pub struct TwoNodes {
    names: [String; 2],
    veths: [String; 2],
    pub addrs: [String; 2],
}

pub fn ip(args: &[&str]) -> Result<(), String> {
    run_tool("ip", args)
}

fn run_tool(tool: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(tool)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {tool}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{tool} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

static BEDS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl TwoNodes {
    fn new() -> Result<TwoNodes, String> {
        let pid = std::process::id();
        let n = BEDS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let tag = format!("mr{pid}x{n}");
        let net = (pid + 7 * n) % 250 + 1;
        let nodes = TwoNodes {
            names: [format!("{tag}a"), format!("{tag}b")],
            veths: [format!("{tag}va"), format!("{tag}vb")],
            addrs: [format!("10.203.{net}.1"), format!("10.203.{net}.2")],
        };
        for n in &nodes.names {
            ip(&["netns", "add", n])?;
        }
        ip(&[
            "link",
            "add",
            &nodes.veths[0],
            "type",
            "veth",
            "peer",
            "name",
            &nodes.veths[1],
        ])?;
        for i in 0..2 {
            let (n, v, a) = (&nodes.names[i], &nodes.veths[i], &nodes.addrs[i]);
            ip(&["link", "set", v, "netns", n])?;
            ip(&["-n", n, "addr", "add", &format!("{a}/24"), "dev", v])?;
            ip(&["-n", n, "link", "set", v, "up"])?;
            ip(&["-n", n, "link", "set", "lo", "up"])?;
        }
        Ok(nodes)
    }

    /// `dist-selftest` as rank `rank` of 2 in node `rank`, the master on node 0.
    fn rank(&self, rank: usize, port: u16, env: &[(&str, &str)], args: &[&str]) -> Child {
        Command::new("ip")
            .args(["netns", "exec", &self.names[rank], BIN, "dist-selftest"])
            .args(args)
            .env("MASTER_ADDR", &self.addrs[0])
            .env("MASTER_PORT", port.to_string())
            .env("RANK", rank.to_string())
            .env("WORLD_SIZE", "2")
            .env("LOCAL_RANK", "0")
            .env("LOCAL_WORLD_SIZE", "1")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start dist-selftest in a namespace")
    }

    /// `mlperf-run launch` on node `node` of 2 (`per_node` ranks each), with node 0's address
    /// as the master (or `master`), running `worker` in every rank.
    pub fn launch(
        &self,
        node: usize,
        per_node: usize,
        master: Option<&str>,
        env: &[(&str, &str)],
        worker: &[String],
    ) -> Child {
        Command::new("ip")
            .args(["netns", "exec", &self.names[node], BIN, "launch"])
            .args(["--nnodes", "2", "--node-rank", &node.to_string()])
            .args(["--nproc-per-node", &per_node.to_string()])
            .args(["--master-addr", master.unwrap_or(&self.addrs[0])])
            .args(["--master-port", "29500", "--grace-s", "5", "--"])
            .args(worker)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start launch in a namespace")
    }

    /// Both nodes' launchers; waits at most `limit` for each.
    pub fn launch_both(
        &self,
        per_node: usize,
        env: &[(&str, &str)],
        worker: &[String],
        limit: Duration,
    ) -> [Output; 2] {
        let kids: Vec<Child> = (0..2)
            .map(|n| self.launch(n, per_node, None, env, worker))
            .collect();
        let mut outs = kids
            .into_iter()
            .enumerate()
            .map(|(n, k)| finish(k, limit, &format!("node {n}")));
        [outs.next().unwrap(), outs.next().unwrap()]
    }

    /// The link seen from node `node`: up or down (a cut cable).
    pub fn link(&self, node: usize, up: bool) {
        ip(&[
            "-n",
            &self.names[node],
            "link",
            "set",
            &self.veths[node],
            if up { "up" } else { "down" },
        ])
        .unwrap();
    }

    /// Makes the link slow and lossy at both ends; returns what was applied. `tc netem delay
    /// 200ms loss 1%` where the kernel has netem; else (no sch_netem, as in some containers) a
    /// 8 Mbit/s token bucket (`tc tbf`) and 1% of packets dropped at random (`nft numgen`).
    pub fn impair(&self) -> Result<String, String> {
        let netem = (0..2).try_for_each(|i| {
            run_tool(
                "tc",
                &[
                    "-n",
                    &self.names[i],
                    "qdisc",
                    "replace",
                    "dev",
                    &self.veths[i],
                    "root",
                    "netem",
                    "delay",
                    "200ms",
                    "loss",
                    "1%",
                ],
            )
        });
        if netem.is_ok() {
            return Ok("200 ms delay and 1% loss each way (netem)".into());
        }
        for i in 0..2 {
            let (n, v) = (&self.names[i], &self.veths[i]);
            run_tool(
                "tc",
                &[
                    "-n", n, "qdisc", "replace", "dev", v, "root", "tbf", "rate", "8mbit", "burst",
                    "32kbit", "latency", "2s",
                ],
            )?;
            let nft = |args: &[&str]| {
                let mut a = vec!["netns", "exec", n.as_str(), "nft"];
                a.extend_from_slice(args);
                ip(&a)
            };
            nft(&["add", "table", "inet", "impair"])?;
            nft(&[
                "add",
                "chain",
                "inet",
                "impair",
                "out",
                "{ type filter hook output priority 0; }",
            ])?;
            nft(&[
                "add", "rule", "inet", "impair", "out", "numgen", "random", "mod", "100", "<", "1",
                "drop",
            ])?;
        }
        Ok(format!(
            "8 Mbit/s and 1% loss each way (tbf and nft: no netem here: {})",
            netem.unwrap_err()
        ))
    }

    /// SIGKILL to every process in node `node` (the node dies).
    pub fn kill_node(&self, node: usize) {
        let out = Command::new("ip")
            .args(["netns", "pids", &self.names[node]])
            .output()
            .unwrap();
        for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            if let Ok(pid) = pid.parse::<i32>() {
                // SAFETY: kill(2) on a pid of this test's namespace.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

impl Drop for TwoNodes {
    fn drop(&mut self) {
        for i in 0..2 {
            self.kill_node(i);
        }
        // the veth pair goes with its namespaces
        for n in &self.names {
            let _ = ip(&["netns", "del", n]);
        }
    }
}

/// The two-node bed, or None with the reason printed (not root, no `ip`, no namespaces).
pub fn bed(test: &str) -> Option<TwoNodes> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP {test}: network namespaces need root");
        return None;
    }
    match TwoNodes::new() {
        Ok(b) => Some(b),
        Err(e) => {
            eprintln!("SKIP {test}: cannot make two network namespaces: {e}");
            None
        }
    }
}

/// Each node's name resolves to whatever this machine's does (often 127.0.0.1: then Gloo's
/// default device advertised loopback and the group never formed, each rank waiting out its
/// timeout). Gloo binds the address that routes to MASTER_ADDR instead, with no variable set:
/// the collectives pass across the link. The control binds loopback on purpose
/// (GLOO_SOCKET_IFNAME=lo, what the default device did on such hosts): the group must not form
/// and both ranks end with an error naming the group, within their timeout.
#[test]
fn two_nodes_form_a_gloo_group_over_their_link_without_a_socket_variable() {
    let Some(nodes) = bed("two_nodes_form_a_gloo_group_over_their_link_without_a_socket_variable")
    else {
        return;
    };
    let port = 29_400 + (std::process::id() % 500) as u16;
    let kids: Vec<Child> = (0..2)
        .map(|r| nodes.rank(r, port, &[], &["--timeout-s", "30"]))
        .collect();
    for (r, k) in kids.into_iter().enumerate() {
        let out = finish(k, Duration::from_secs(90), &format!("rank {r}"));
        assert!(out.status.success(), "rank {r}: {}", text(&out));
        let s = String::from_utf8_lossy(&out.stdout);
        assert!(
            s.contains(&format!("dist-selftest ok: rank {r} of 2 (gloo)")),
            "{s}"
        );
    }
    // the control: loopback bound on purpose
    let kids: Vec<Child> = (0..2)
        .map(|r| {
            nodes.rank(
                r,
                port + 1,
                &[("GLOO_SOCKET_IFNAME", "lo")],
                &["--timeout-s", "4"],
            )
        })
        .collect();
    for (r, k) in kids.into_iter().enumerate() {
        let out = finish(k, Duration::from_secs(120), &format!("control rank {r}"));
        assert!(
            !out.status.success(),
            "control rank {r} formed a group over loopback"
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("could not form the gloo process group"),
            "{err}"
        );
    }
}
