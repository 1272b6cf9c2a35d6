//! The documentation points at files that exist: every relative Markdown link in the README and
//! the pages under docs/, results/, compliance/ and scripts/ (an `#anchor` is not checked, web
//! links are not followed), and every repository path those pages name in their text
//! (`tests/numerics/bert_model.rs`, `configs/bert/tiny_cpu.toml`, ...; placeholders such as
//! `configs/resnet/NAME.toml` or `results/<system>` are not paths). A move that leaves a page
//! pointing at the old place fails here.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Markdown pages: README.md and every .md under the documentation folders.
fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let root = repo();
    let mut out = vec![root.join("README.md")];
    for dir in ["docs", "results", "compliance", "scripts"] {
        walk(&root.join(dir), &mut out);
    }
    out.sort();
    out
}

/// The relative targets of the page's Markdown links `[text](target)`, without their anchors.
fn link_targets(text: &str) -> Vec<&str> {
    text.match_indices("](")
        .filter_map(|(i, _)| {
            let rest = &text[i + 2..];
            let end = rest.find([')', ' ', '\n'])?;
            let target = rest[..end].split('#').next()?;
            let web = ["http://", "https://", "mailto:"]
                .iter()
                .any(|s| rest.starts_with(s));
            (!web && !target.is_empty()).then_some(target)
        })
        .collect()
}

/// The repository paths the text names: a top-level folder, then lower-case path characters,
/// ending in a source, script or data extension, and not followed by more of a name (an
/// upper-case placeholder, `<...>`, `*`).
fn named_paths(text: &str) -> Vec<&str> {
    const ROOTS: [&str; 10] = [
        "tests/",
        "src/",
        "scripts/",
        "configs/",
        "benchmarks/",
        "shim/",
        "examples/",
        "compliance/",
        "results/",
        "docs/",
    ];
    const EXTS: [&str; 11] = [
        ".rs", ".sh", ".py", ".toml", ".cpp", ".hpp", ".cu", ".c", ".md", ".csv", ".json",
    ];
    let b = text.as_bytes();
    let path_byte = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit() || b"_./-".contains(&c);
    let mut out = Vec::new();
    for i in 0..b.len() {
        if i > 0 && (b[i - 1].is_ascii_alphanumeric() || b"_./<>-".contains(&b[i - 1])) {
            continue;
        }
        let Some(root) = ROOTS.iter().find(|r| b[i..].starts_with(r.as_bytes())) else {
            continue;
        };
        let mut j = i + root.len();
        while j < b.len() && path_byte(b[j]) {
            j += 1;
        }
        if j < b.len() && (b[j].is_ascii_alphanumeric() || b"_<>*".contains(&b[j])) {
            continue;
        }
        let path = text[i..j].trim_end_matches('.');
        if EXTS.iter().any(|e| path.ends_with(e)) {
            out.push(path);
        }
    }
    out
}

#[test]
fn the_pages_link_and_name_files_that_exist() {
    let root = repo();
    let pages = pages();
    assert!(pages.len() > 10, "found only {} pages", pages.len());
    let mut missing = Vec::new();
    let (mut links, mut paths) = (0, 0);
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        let rel = page.strip_prefix(&root).unwrap().display().to_string();
        for t in link_targets(&text) {
            links += 1;
            if !page.parent().unwrap().join(t).exists() {
                missing.push(format!("{rel}: link to {t}"));
            }
        }
        for p in named_paths(&text) {
            paths += 1;
            if !root.join(p).exists() {
                missing.push(format!("{rel}: names {p}"));
            }
        }
    }
    assert!(
        links > 50 && paths > 50,
        "{links} links, {paths} paths: the scan missed them"
    );
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

#[test]
fn the_scanners_find_paths_and_links_and_skip_placeholders() {
    let text = "See [gpu](docs/gpu.md#cuda-graphs), [web](https://x.org/a.md) and \
                tests/numerics/bert_model.rs. Not configs/resnet/NAME.toml, results/<system>/x.csv, \
                configs/*/bench.toml or mysrc/lib.rs; but (src/lib.rs).";
    assert_eq!(link_targets(text), ["docs/gpu.md"]);
    // a link's target is also a path named from the repository's root when it looks like one
    assert_eq!(
        named_paths(text),
        ["docs/gpu.md", "tests/numerics/bert_model.rs", "src/lib.rs"]
    );
}
