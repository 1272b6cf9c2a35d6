//! Before the first run of a data-parallel job the ranks compare the jobs they were given
//! ([`compare_jobs`]): a node with another config file, another copy of the data or another
//! binary would otherwise train a different job in step with the others, calling the
//! collectives a different number of times (a timeout minutes later, with an unclear message)
//! or, worse, producing a result. What a job is, the caller says (named items, the same names in
//! the same order on every rank: the binary, the config's keys, the data's counts, the runs);
//! this module only carries them and finds the differences.
//!
//! The exchange goes through the rendezvous and rank 0's store alone (no Gloo mesh, no NCCL
//! communicator, [`StoreGroup`]): rank 0 posts its job's digest and its items; every other rank
//! reads the digest, and only when it differs from its own, the items, and notes the
//! differences; then every rank gets every note ([`StoreGroup::gather_notes`]: a few store calls
//! per rank, not one per rank). The group is left before the first run forms its own, so the
//! rendezvous timeout covers the ranks' start (nodes starting minutes apart) and the first run's
//! group forms at once.
//!
//! In the same exchange each rank claims what it must use alone ([`Claim`]: its GPU, which NCCL
//! refuses to share between ranks, failing late with "invalid usage"): a counter per claim in
//! the store, and a key naming its first claimant, so a claim costs a rank two store calls
//! however many ranks there are. A rank that finds its claim already taken notes the clash
//! ([`Difference::Clash`], naming both ranks), and every rank stops as for another difference.
use super::group::StoreGroup;
use super::rendezvous::{Rendezvous, Timeouts};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// One rank's job as the caller describes it.
#[derive(Debug, Clone, Copy)]
pub enum JobView<'a> {
    /// Named items (item, value), the same names in the same order on every rank.
    Items(&'a [(String, String)]),
    /// This rank cannot run the job: why (its own error, e.g. a config file it cannot read).
    Refused(&'a str),
}

/// How one item of a rank's job differs from rank 0's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemDifference {
    pub item: String,
    /// Rank 0's value; None where rank 0's job has no such item.
    pub root: Option<String>,
    /// This rank's value; None where its job has no such item.
    pub this: Option<String>,
}

/// Something a rank uses alone (its GPU), which no other rank of the job may claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    /// What identifies it across the job (a GPU's UUID; the same on every rank that claims it).
    pub key: String,
    /// How a message names it ("GPU 0000:1B:00.0 on host n1").
    pub what: String,
}

/// How a rank's job differs from rank 0's, or clashes with another rank's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Difference {
    /// The rank refused the job before its start (rank 0 too: then nothing was compared).
    Refused(String),
    /// The items that differ (at most [`MAX_ITEMS`]), and how many more do.
    Items {
        items: Vec<ItemDifference>,
        more: usize,
    },
    /// The rank claims what rank `with` claimed first (the same key): `what` as this rank
    /// names it, `theirs` as rank `with` does.
    Clash {
        what: String,
        with: usize,
        theirs: String,
    },
}

/// Differences a rank reports item by item; the count of the rest follows.
pub const MAX_ITEMS: usize = 16;

/// What every rank finds when the ranks compare their jobs: each rank whose job is not rank
/// 0's, by rank, with how it differs (rank 0 itself when it refused), and each rank whose
/// `claims` clash with a rank that claimed the same first; empty when every rank runs rank 0's
/// job and no claim clashes. A rank may be listed twice (a difference and a clash). The same on
/// every rank. Joins the store of the group `rdv` describes (waiting for every rank at most the
/// rendezvous timeout; every later call at most the collective timeout) and leaves it; a
/// failure is a [`super::GroupFailure`].
pub fn compare_jobs(
    rdv: &Rendezvous,
    timeouts: Timeouts,
    mine: JobView<'_>,
    claims: &[Claim],
) -> Result<Vec<(usize, Difference)>> {
    let mut group = StoreGroup::new(rdv, timeouts)?;
    let posted = Posted::of(mine);
    let text = serde_json::to_string(&posted)?;
    let digest = digest(&text);
    let note = if group.rank() == 0 {
        group.set(VIEW_KEY, &text)?;
        group.set(DIGEST_KEY, &digest)?;
        match mine {
            JobView::Refused(why) => Some(Difference::Refused(why.to_string())),
            JobView::Items(_) => None,
        }
    } else if group.get(DIGEST_KEY)? == digest {
        None
    } else {
        let root: Posted =
            serde_json::from_str(&group.get(VIEW_KEY)?).context("rank 0's job, as it posted it")?;
        difference(&root, mine)
    };
    let mut noted: Vec<Difference> = note.into_iter().collect();
    noted.extend(claim_all(&mut group, claims)?);
    let note = (!noted.is_empty())
        .then(|| serde_json::to_string(&noted))
        .transpose()?;
    let notes = group.gather_notes(note.as_deref())?;
    group.leave()?;
    let mut out = Vec::new();
    for (rank, note) in notes {
        let ds: Vec<Difference> = serde_json::from_str(&note)
            .with_context(|| format!("rank {rank}'s note on its job: {note:?}"))?;
        out.extend(ds.into_iter().map(|d| (rank, d)));
    }
    Ok(out)
}

const VIEW_KEY: &str = "mlperf-run/job/view";
const DIGEST_KEY: &str = "mlperf-run/job/digest";
const CLAIMS_KEY: &str = "mlperf-run/claims";

/// This rank's claims, each once: a clash for each that another rank claimed first. Per claim
/// two store calls: the claim's counter, then (the first) the key naming the first claimant, or
/// (any later one) reading it.
fn claim_all(group: &mut StoreGroup, claims: &[Claim]) -> Result<Vec<Difference>> {
    let mut seen = std::collections::HashSet::new();
    let mut clashes = Vec::new();
    for c in claims.iter().filter(|c| seen.insert(c.key.as_str())) {
        let key = format!("{CLAIMS_KEY}/{}", &digest(&c.key)[..32]);
        let first = format!("{key}/first");
        if group.add(&format!("{key}/count"), 1)? == 1 {
            group.set(&first, &serde_json::to_string(&(group.rank(), &c.what))?)?;
            continue;
        }
        let (with, theirs): (usize, String) = serde_json::from_str(&group.get(&first)?)
            .context("the first claimant's note, as it posted it")?;
        clashes.push(Difference::Clash {
            what: c.what.clone(),
            with,
            theirs,
        });
    }
    Ok(clashes)
}

/// A job as rank 0 posts it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Posted {
    Items(Vec<(String, String)>),
    Refused(String),
}

impl Posted {
    fn of(view: JobView<'_>) -> Posted {
        match view {
            JobView::Items(items) => Posted::Items(items.to_vec()),
            JobView::Refused(why) => Posted::Refused(why.to_string()),
        }
    }
}

fn digest(text: &str) -> String {
    use sha2::{Digest, Sha256};
    format!("{:x}", Sha256::digest(text.as_bytes()))
}

/// What this rank notes, given rank 0's job: its refusal, or the items that differ; None
/// when there is nothing to say (the same job, or rank 0 refused: nothing to compare with).
fn difference(root: &Posted, mine: JobView<'_>) -> Option<Difference> {
    let root = match (root, mine) {
        (_, JobView::Refused(why)) => return Some(Difference::Refused(why.to_string())),
        (Posted::Refused(_), _) => return None,
        (Posted::Items(root), _) => root,
    };
    let JobView::Items(mine) = mine else {
        unreachable!("a refusal returned above")
    };
    let diffs = differing_items(root, mine);
    if diffs.is_empty() {
        return None;
    }
    let more = diffs.len().saturating_sub(MAX_ITEMS);
    Some(Difference::Items {
        items: diffs.into_iter().take(MAX_ITEMS).collect(),
        more,
    })
}

/// The items whose values differ, in rank 0's order, then the items only `mine` has.
fn differing_items(root: &[(String, String)], mine: &[(String, String)]) -> Vec<ItemDifference> {
    use std::collections::HashMap;
    let mine_by_name: HashMap<&str, &str> =
        mine.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let root_by_name: HashMap<&str, &str> =
        root.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut out: Vec<ItemDifference> = root
        .iter()
        .filter(|(k, v)| mine_by_name.get(k.as_str()) != Some(&v.as_str()))
        .map(|(k, v)| ItemDifference {
            item: k.clone(),
            root: Some(v.clone()),
            this: mine_by_name.get(k.as_str()).map(|s| s.to_string()),
        })
        .collect();
    out.extend(
        mine.iter()
            .filter(|(k, _)| !root_by_name.contains_key(k.as_str()))
            .map(|(k, v)| ItemDifference {
                item: k.clone(),
                root: None,
                this: Some(v.clone()),
            }),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn differences_name_the_items_with_both_values_in_rank_0s_order() {
        let root = Posted::Items(items(&[("a", "1"), ("b", "2"), ("c", "3")]));
        let mine = items(&[("c", "3"), ("b", "20"), ("d", "4")]);
        let d = difference(&root, JobView::Items(&mine)).unwrap();
        let Difference::Items { items: found, more } = d else {
            panic!("{d:?}")
        };
        assert_eq!(more, 0);
        let got: Vec<_> = found
            .iter()
            .map(|i| (i.item.as_str(), i.root.as_deref(), i.this.as_deref()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("a", Some("1"), None),
                ("b", Some("2"), Some("20")),
                ("d", None, Some("4"))
            ]
        );
        assert_eq!(
            difference(
                &root,
                JobView::Items(&items(&[("a", "1"), ("b", "2"), ("c", "3")]))
            ),
            None
        );
    }

    #[test]
    fn refusals_are_noted_and_nothing_is_compared_with_a_refused_rank_0() {
        let root = Posted::Refused("no config".into());
        assert_eq!(
            difference(&root, JobView::Items(&items(&[("a", "1")]))),
            None
        );
        assert_eq!(
            difference(&root, JobView::Refused("no data")),
            Some(Difference::Refused("no data".into()))
        );
        let root = Posted::Items(items(&[("a", "1")]));
        assert_eq!(
            difference(&root, JobView::Refused("no data")),
            Some(Difference::Refused("no data".into()))
        );
    }

    #[test]
    fn many_differences_are_cut_at_max_items_with_a_count() {
        let root: Vec<(String, String)> = (0..40).map(|i| (format!("k{i}"), "0".into())).collect();
        let mine: Vec<(String, String)> = (0..40).map(|i| (format!("k{i}"), "1".into())).collect();
        let Some(Difference::Items { items, more }) =
            difference(&Posted::Items(root), JobView::Items(&mine))
        else {
            panic!()
        };
        assert_eq!((items.len(), more), (MAX_ITEMS, 40 - MAX_ITEMS));
    }

    fn gpu(uuid: &str, what: &str) -> Claim {
        Claim {
            key: format!("gpu {uuid}"),
            what: what.into(),
        }
    }

    /// Two ranks, each a thread of this process in a 2-rank group on a free local port, compare
    /// the same job with `claims[rank]`: what each found.
    fn two_ranks_claiming(claims: [Vec<Claim>; 2]) -> Vec<Vec<(usize, Difference)>> {
        let port = crate::launch::free_local_port().unwrap();
        let t = Timeouts::both(std::time::Duration::from_secs(30));
        let ranks: Vec<_> = claims
            .into_iter()
            .enumerate()
            .map(|(rank, claims)| {
                std::thread::spawn(move || {
                    let rdv = Rendezvous {
                        master_port: port,
                        rank,
                        local_rank: rank,
                        world_size: 2,
                        ..Rendezvous::single()
                    };
                    let job = items(&[("a", "1")]);
                    compare_jobs(&rdv, t, JobView::Items(&job), &claims).unwrap()
                })
            })
            .collect();
        ranks.into_iter().map(|r| r.join().unwrap()).collect()
    }

    #[test]
    fn two_ranks_on_one_gpu_clash_on_both_and_name_both() {
        let a = gpu("GPU-aa", "GPU 0000:1B:00.0 on host n1");
        let found = two_ranks_claiming([vec![a.clone()], vec![a]]);
        assert_eq!(found[0], found[1], "every rank finds the same");
        // whichever rank claimed it first, the other notes the clash naming it
        let [(rank, Difference::Clash { what, with, theirs })] = found[0].as_slice() else {
            panic!("one clash, not {:?}", found[0])
        };
        assert_eq!(
            (*rank + *with, what.as_str(), theirs.as_str()),
            (
                1,
                "GPU 0000:1B:00.0 on host n1",
                "GPU 0000:1B:00.0 on host n1"
            ),
            "ranks 0 and 1 named"
        );
    }

    #[test]
    fn ranks_on_their_own_gpus_pass_and_only_the_shared_one_clashes() {
        let (a, b) = (
            gpu("GPU-aa", "GPU 0000:1B:00.0 on host n1"),
            gpu("GPU-bb", "GPU 0000:9A:00.0 on host n1"),
        );
        let found = two_ranks_claiming([vec![a.clone()], vec![b.clone()]]);
        assert_eq!(found, vec![vec![], vec![]]);
        // no claims (a CPU run, or the ranks share GPUs on purpose): nothing to clash
        assert_eq!(two_ranks_claiming([vec![], vec![]]), vec![vec![], vec![]]);
        // one GPU in common, named by each as it sees it (one host's container named it
        // otherwise); a claim made twice by one rank is one claim
        let b_elsewhere = gpu("GPU-bb", "GPU 0000:9A:00.0 on host c2");
        let found = two_ranks_claiming([vec![a.clone(), b.clone(), b], vec![b_elsewhere, a]]);
        assert_eq!(found[0], found[1]);
        let mut clashes: Vec<(String, String)> = found[0]
            .iter()
            .map(|(rank, d)| match d {
                Difference::Clash { what, with, theirs } => {
                    assert_ne!(rank, with, "{d:?}");
                    let mut pair = [what.clone(), theirs.clone()];
                    pair.sort();
                    (pair[0].clone(), pair[1].clone())
                }
                other => panic!("{other:?}"),
            })
            .collect();
        clashes.sort();
        let both = |x: &str, y: &str| (x.to_string(), y.to_string());
        assert_eq!(
            clashes,
            [
                both("GPU 0000:1B:00.0 on host n1", "GPU 0000:1B:00.0 on host n1"),
                both("GPU 0000:9A:00.0 on host c2", "GPU 0000:9A:00.0 on host n1"),
            ]
        );
    }

    /// A group of this process alone: the exchange runs (rank 0 posts, gathers, leaves) and
    /// finds nothing, or its own refusal.
    #[test]
    fn a_world_of_one_compares_with_itself() {
        let rdv = Rendezvous {
            master_port: crate::launch::free_local_port().unwrap(),
            ..Rendezvous::single()
        };
        let t = Timeouts::both(std::time::Duration::from_secs(30));
        let job = items(&[("a", "1")]);
        assert_eq!(
            compare_jobs(&rdv, t, JobView::Items(&job), &[]).unwrap(),
            vec![]
        );
        assert_eq!(
            compare_jobs(&rdv, t, JobView::Refused("x\x1fy"), &[]).unwrap(),
            vec![(0, Difference::Refused("x\x1fy".into()))],
            "a note's JSON escapes the store's separators"
        );
    }
}
