//! Two "nodes" on one machine: two network namespaces joined by a veth pair, each with its own
//! address on that link only (no route out: nothing leaves the machine), one Gloo rank in each,
//! started with torchrun's environment as Slurm would set it. Needs root and `ip` (CI runs as
//! root on Linux); skipped with the reason elsewhere.
#![cfg(feature = "torch")]

use crate::common::dist::{finish, text, BIN};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Two namespaces `<tag>a` / `<tag>b` joined by a veth pair, 10.203.<net>.1 and .2; removed on
/// drop.
struct TwoNodes {
    names: [String; 2],
    addrs: [String; 2],
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl TwoNodes {
    fn new() -> Result<TwoNodes, String> {
        let pid = std::process::id();
        let tag = format!("mr{pid}");
        let net = pid % 250 + 1;
        let nodes = TwoNodes {
            names: [format!("{tag}a"), format!("{tag}b")],
            addrs: [format!("10.203.{net}.1"), format!("10.203.{net}.2")],
        };
        let (va, vb) = (format!("{tag}va"), format!("{tag}vb"));
        for n in &nodes.names {
            ip(&["netns", "add", n])?;
        }
        ip(&["link", "add", &va, "type", "veth", "peer", "name", &vb])?;
        for (n, (v, a)) in nodes
            .names
            .iter()
            .zip([(&va, &nodes.addrs[0]), (&vb, &nodes.addrs[1])])
        {
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
}

impl Drop for TwoNodes {
    fn drop(&mut self) {
        // the veth pair goes with its namespaces
        for n in &self.names {
            let _ = ip(&["netns", "del", n]);
        }
    }
}

/// The two-node bed, or None with the reason printed (not root, no `ip`, no namespaces).
fn bed(test: &str) -> Option<TwoNodes> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc_geteuid() } != 0 {
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

extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
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
