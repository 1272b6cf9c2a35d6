//! Slurm's compressed host lists (`node[01-04,07],gpu5`, `rack[1-2]-n[1-3]`), as found in
//! SLURM_STEP_NODELIST and SLURM_JOB_NODELIST, and its task counts per node (`8(x2),4`), as
//! found in SLURM_STEP_TASKS_PER_NODE.
use anyhow::{bail, Result};

/// Hosts beyond this many are refused by [`expand`] (a typo such as `n[1-999999999]`).
pub const MAX_HOSTS: usize = 1 << 20;

#[derive(Debug)]
enum Part {
    Lit(String),
    /// (low, high, zero-padded width)
    Ranges(Vec<(u64, u64, usize)>),
}

/// Parses the list into host patterns (one per top-level comma), validating all of it.
fn parse(list: &str) -> Result<Vec<Vec<Part>>> {
    let list = list.trim();
    if list.is_empty() {
        bail!("the Slurm host list is empty");
    }
    let mut items = Vec::new();
    let mut parts = Vec::new();
    let mut lit = String::new();
    let mut chars = list.char_indices();
    while let Some((pos, c)) = chars.next() {
        match c {
            ',' => {
                if !lit.is_empty() {
                    parts.push(Part::Lit(std::mem::take(&mut lit)));
                }
                if parts.is_empty() {
                    bail!("empty host name at byte {pos} of the Slurm host list {list:?}");
                }
                items.push(std::mem::take(&mut parts));
            }
            '[' => {
                if !lit.is_empty() {
                    parts.push(Part::Lit(std::mem::take(&mut lit)));
                }
                let mut body = String::new();
                let mut closed = false;
                for (_, c) in chars.by_ref() {
                    if c == ']' {
                        closed = true;
                        break;
                    }
                    body.push(c);
                }
                if !closed {
                    bail!("unclosed '[' at byte {pos} of the Slurm host list {list:?}");
                }
                parts.push(Part::Ranges(parse_ranges(&body, list)?));
            }
            ']' => bail!("unmatched ']' at byte {pos} of the Slurm host list {list:?}"),
            c if c.is_whitespace() => {
                bail!("whitespace at byte {pos} of the Slurm host list {list:?}")
            }
            c => lit.push(c),
        }
    }
    if !lit.is_empty() {
        parts.push(Part::Lit(lit));
    }
    if parts.is_empty() {
        bail!("the Slurm host list {list:?} ends with an empty host name");
    }
    items.push(parts);
    Ok(items)
}

fn parse_ranges(body: &str, list: &str) -> Result<Vec<(u64, u64, usize)>> {
    let mut out = Vec::new();
    for r in body.split(',') {
        let (lo, hi) = match r.split_once('-') {
            Some((lo, hi)) => (lo, hi),
            None => (r, r),
        };
        let num = |s: &str| -> Result<u64> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                bail!("{r:?} in the Slurm host list {list:?} is not a number or a range a-b");
            }
            s.parse::<u64>()
                .map_err(|_| anyhow::anyhow!("{s:?} in the Slurm host list {list:?} is too large"))
        };
        let (l, h) = (num(lo)?, num(hi)?);
        if l > h {
            bail!("range {r:?} in the Slurm host list {list:?} runs backwards");
        }
        out.push((l, h, lo.len()));
    }
    Ok(out)
}

/// The first host of a Slurm host list (the rendezvous master), without expanding the rest.
pub fn first_host(list: &str) -> Result<String> {
    let items = parse(list)?;
    let mut host = String::new();
    for part in &items[0] {
        match part {
            Part::Lit(s) => host.push_str(s),
            Part::Ranges(r) => {
                let (lo, _, width) = r[0];
                host.push_str(&format!("{lo:0width$}"));
            }
        }
    }
    Ok(host)
}

/// Every host of a Slurm host list, in order.
pub fn expand(list: &str) -> Result<Vec<String>> {
    let mut hosts = Vec::new();
    for item in parse(list)? {
        let mut names = vec![String::new()];
        for part in &item {
            match part {
                Part::Lit(s) => names.iter_mut().for_each(|n| n.push_str(s)),
                Part::Ranges(ranges) => {
                    let count: u64 = ranges.iter().map(|(l, h, _)| h - l + 1).sum();
                    if count.saturating_mul(names.len() as u64) + hosts.len() as u64
                        > MAX_HOSTS as u64
                    {
                        bail!("the Slurm host list {list:?} names more than {MAX_HOSTS} hosts");
                    }
                    let mut next = Vec::new();
                    for n in &names {
                        for &(lo, hi, width) in ranges {
                            for i in lo..=hi {
                                next.push(format!("{n}{i:0width$}"));
                            }
                        }
                    }
                    names = next;
                }
            }
        }
        hosts.extend(names);
    }
    Ok(hosts)
}

/// Slurm's tasks per node, one count per node of the step in order: `8(x2),4` is 8 tasks on
/// each of the first two nodes and 4 on the third. At most [`MAX_HOSTS`] nodes.
pub fn tasks_per_node(list: &str) -> Result<Vec<usize>> {
    let bad = || anyhow::anyhow!("{list:?} is not a Slurm task count per node, such as 8(x2),4");
    let mut counts = Vec::new();
    for item in list.trim().split(',') {
        let (count, reps) = match item.split_once("(x") {
            Some((c, rest)) => (c, rest.strip_suffix(')').ok_or_else(bad)?),
            None => (item, "1"),
        };
        let num = |s: &str| -> Result<usize> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            s.parse().map_err(|_| bad())
        };
        let (count, reps) = (num(count)?, num(reps)?);
        if reps == 0 || counts.len().saturating_add(reps) > MAX_HOSTS {
            return Err(bad());
        }
        counts.extend(std::iter::repeat_n(count, reps));
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_counts_per_node_expand() {
        assert_eq!(tasks_per_node("8(x2),4").unwrap(), [8, 8, 4]);
        assert_eq!(tasks_per_node("2").unwrap(), [2]);
        assert_eq!(tasks_per_node("1,3(x2),1").unwrap(), [1, 3, 3, 1]);
        for bad in ["", "8(x2", "x", "8(x0)", "8,,4", "-1", "8(x99999999)"] {
            let e = tasks_per_node(bad).unwrap_err().to_string();
            assert!(
                e.contains("is not a Slurm task count per node"),
                "{bad:?}: {e}"
            );
        }
    }

    #[test]
    fn expands_ranges_padding_and_plain_hosts() {
        assert_eq!(
            expand("node[01-04,07],gpu5").unwrap(),
            ["node01", "node02", "node03", "node04", "node07", "gpu5"]
        );
        assert_eq!(expand("a[8-11]").unwrap(), ["a8", "a9", "a10", "a11"]);
        assert_eq!(
            expand("n[098-101]").unwrap(),
            ["n098", "n099", "n100", "n101"]
        );
        assert_eq!(expand("single").unwrap(), ["single"]);
        assert_eq!(expand("x1,y2").unwrap(), ["x1", "y2"]);
    }

    #[test]
    fn expands_several_brackets_and_suffixes() {
        assert_eq!(
            expand("rack[1-2]-n[1,3]").unwrap(),
            ["rack1-n1", "rack1-n3", "rack2-n1", "rack2-n3"]
        );
        assert_eq!(expand("dgx[3]-ib").unwrap(), ["dgx3-ib"]);
    }

    #[test]
    fn first_host_matches_expansion() {
        for list in [
            "node[01-04,07],gpu5",
            "gpu5,node[1-2]",
            "rack[2-3]-n[05-06]",
            "h",
        ] {
            assert_eq!(
                first_host(list).unwrap(),
                expand(list).unwrap()[0],
                "{list}"
            );
        }
        assert_eq!(first_host("node[01-04,07],gpu5").unwrap(), "node01");
    }

    #[test]
    fn rejects_malformed_lists() {
        for bad in [
            "",
            "node[1-2",
            "node1-2]",
            "node[a-b]",
            "node[3-1]",
            "a,,b",
            "a,",
            "n[]",
            "a b",
        ] {
            let err = expand(bad).unwrap_err().to_string();
            assert!(err.contains("Slurm host list"), "{bad:?}: {err}");
            assert!(first_host(bad).is_err(), "{bad:?}");
        }
        assert!(expand("n[1-99999999999]").is_err());
    }
}
