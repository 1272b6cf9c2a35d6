//! Replays the fuzzers' inputs kept under `tests/fuzz_regressions/<target>/` through the same
//! harness the fuzz target runs (`fuzz/harness/*.rs`), so a plain `cargo test` checks every
//! crash, hang or panic they found stays fixed, without a fuzzer (docs/fuzzing.md).
//!
//! Each input must give an answer (an error or a result: the harness's lines) and no panic. An
//! input `NAME` may have a `NAME.expect` beside it: each of its non-empty lines must occur in
//! the answer (e.g. the error message that names the file and what is wrong).

use std::path::{Path, PathBuf};

/// The inputs of `target`, sorted (the `.expect` files and README excluded).
pub fn inputs(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz_regressions")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.is_file()
                && p.extension().is_none_or(|x| x != "expect")
                && p.file_name().is_some_and(|n| n != "README.md")
        })
        .collect();
    files.sort();
    files
}

/// Run `harness` on every input of `target`; panics naming each input that panicked, gave no
/// answer or lacked an expected line. Returns the number of inputs replayed.
pub fn replay(target: &str, harness: fn(&[u8]) -> Vec<String>) -> usize {
    let files = inputs(target);
    assert!(!files.is_empty(), "no inputs for {target}");
    let mut failures = Vec::new();
    for f in &files {
        let data = std::fs::read(f).unwrap_or_else(|e| panic!("cannot read {}: {e}", f.display()));
        let name = f
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let answer = match std::panic::catch_unwind(|| harness(&data)) {
            Ok(lines) => lines,
            Err(_) => {
                failures.push(format!("{target}/{name}: panicked"));
                continue;
            }
        };
        let text = answer.join("\n");
        println!("{target}/{name}:\n  {}", answer.join("\n  "));
        if answer.is_empty() {
            failures.push(format!("{target}/{name}: no answer"));
        }
        let expect = f.with_file_name(format!("{name}.expect"));
        if let Ok(wanted) = std::fs::read_to_string(&expect) {
            for line in wanted.lines().map(str::trim).filter(|l| !l.is_empty()) {
                if !text.contains(line) {
                    failures.push(format!(
                        "{target}/{name}: answer lacks {line:?}; it was:\n{text}"
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    files.len()
}
