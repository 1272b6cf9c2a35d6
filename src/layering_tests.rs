//! The shape rules of docs/development.md, kept by tests: every top-level module of src/ is in
//! exactly one layer of the "Layers" table, and its code (comments and test-only modules left
//! out) names, through `crate::` paths, only modules of lower layers (the table is read from the
//! document itself, so the two cannot drift apart); and no function of src/ is over 100 lines.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The layers table of docs/development.md: module -> layer number.
fn documented_layers() -> BTreeMap<String, u32> {
    let doc = std::fs::read_to_string(Path::new(ROOT).join("docs/development.md"))
        .expect("docs/development.md");
    let mut layers = BTreeMap::new();
    let mut in_table = false;
    for line in doc.lines() {
        if line.starts_with("## Layers") {
            in_table = true;
            continue;
        }
        if in_table && line.starts_with("## ") {
            break;
        }
        let Some(row) = line.strip_prefix('|').filter(|_| in_table) else {
            continue;
        };
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let Ok(layer) = cells[0].parse::<u32>() else {
            continue;
        };
        for m in cells[1].split(',') {
            let m = m.trim().trim_matches('`').to_string();
            assert!(
                layers.insert(m.clone(), layer).is_none(),
                "docs/development.md puts `{m}` in two layers"
            );
        }
    }
    assert!(!layers.is_empty(), "no layers table in docs/development.md");
    layers
}

/// The top-level modules that lib.rs declares (test-only ones left out).
fn top_level_modules() -> Vec<String> {
    let lib = std::fs::read_to_string(Path::new(ROOT).join("src/lib.rs")).expect("src/lib.rs");
    let mut mods = Vec::new();
    let mut test_only = false;
    for line in lib.lines().map(str::trim) {
        if line == "#[cfg(test)]" {
            test_only = true;
            continue;
        }
        let name = line
            .strip_prefix("pub mod ")
            .or_else(|| line.strip_prefix("mod "))
            .and_then(|r| r.strip_suffix(';'));
        if let Some(name) = name {
            if !test_only {
                mods.push(name.to_string());
            }
        }
        if !line.starts_with("#[") {
            test_only = false;
        }
    }
    mods
}

/// The .rs files of a top-level module.
fn files_of(module: &str) -> Vec<PathBuf> {
    let src = Path::new(ROOT).join("src");
    let mut files = Vec::new();
    let single = src.join(format!("{module}.rs"));
    if single.exists() {
        files.push(single);
    }
    let mut dirs = vec![src.join(module)];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

/// `file`'s code without comments and without its `#[cfg(test)]` items (inline modules are cut
/// out; the files of out-of-line ones are added to `test_files`).
fn code_of(file: &Path, test_files: &mut BTreeSet<PathBuf>) -> String {
    let text = std::fs::read_to_string(file).unwrap();
    let lines: Vec<String> = text
        .lines()
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => l[..i].to_string(),
            _ => l.to_string(),
        })
        .collect();
    let mut code = String::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim() == "#[cfg(test)]" {
            let mut j = i + 1;
            while j < lines.len() && lines[j].trim().starts_with("#[") {
                j += 1;
            }
            let item = lines.get(j).map(|l| l.trim()).unwrap_or("");
            if let Some(name) = item
                .strip_prefix("mod ")
                .or_else(|| item.strip_prefix("pub mod "))
                .and_then(|r| r.strip_suffix(';'))
            {
                let dir = if file.file_name().is_some_and(|n| n == "mod.rs") {
                    file.parent().unwrap().to_path_buf()
                } else {
                    file.with_extension("")
                };
                test_files.insert(dir.join(format!("{name}.rs")));
                test_files.insert(dir.join(name).join("mod.rs"));
                i = j + 1;
                continue;
            }
            // an inline item: skip to the end of its braces
            let mut depth = 0i64;
            let mut opened = false;
            while j < lines.len() {
                depth += lines[j].matches('{').count() as i64;
                depth -= lines[j].matches('}').count() as i64;
                opened |= lines[j].contains('{');
                j += 1;
                if opened && depth <= 0 {
                    break;
                }
            }
            i = j;
            continue;
        }
        code.push_str(&lines[i]);
        code.push('\n');
        i += 1;
    }
    code
}

/// The top-level modules `code` names through `crate::` (`crate::x::...` and
/// `crate::{x, y::z}`).
fn crate_paths(code: &str) -> BTreeSet<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut found = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // the first identifier of each item at depth 0 of the group
            let mut depth = 0;
            let mut item_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if c.is_whitespace() => {}
                    _ if item_start && depth == 0 => {
                        found.insert(ident(&group[i..]));
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            found.insert(ident(rest));
        }
    }
    found
}

/// (top-level module, file relative to the crate, its code) of every non-test file of src/.
fn source_code() -> Vec<(String, String, String)> {
    let mut test_files = BTreeSet::new();
    let mut code = Vec::new();
    for m in top_level_modules() {
        for f in files_of(&m) {
            let c = code_of(&f, &mut test_files);
            code.push((m.clone(), f, c));
        }
    }
    // test-only files are known once every file declaring them has been read
    code.into_iter()
        .filter(|(_, f, _)| !test_files.contains(f))
        .map(|(m, f, c)| {
            let rel = f.strip_prefix(ROOT).unwrap_or(&f).display().to_string();
            (m, rel, c)
        })
        .collect()
}

/// module -> (module it names -> the files that name it)
fn imports() -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let known: BTreeSet<String> = top_level_modules().into_iter().collect();
    let mut all: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> =
        known.iter().map(|m| (m.clone(), BTreeMap::new())).collect();
    for (m, rel, c) in source_code() {
        for target in crate_paths(&c) {
            if target != m && known.contains(&target) {
                let edges = all.get_mut(&m).expect("every module has an entry");
                edges.entry(target).or_default().insert(rel.clone());
            }
        }
    }
    all
}

#[test]
fn every_top_level_module_is_in_one_documented_layer() {
    let layers = documented_layers();
    let modules: BTreeSet<String> = top_level_modules().into_iter().collect();
    let documented: BTreeSet<String> = layers.keys().cloned().collect();
    let missing: Vec<_> = modules.difference(&documented).collect();
    let stale: Vec<_> = documented.difference(&modules).collect();
    assert!(
        missing.is_empty(),
        "src/ modules not in the layers table of docs/development.md: {missing:?} (add each \
         to the lowest layer above everything it imports)"
    );
    assert!(
        stale.is_empty(),
        "docs/development.md lists modules src/lib.rs does not declare: {stale:?}"
    );
}

#[test]
fn imports_point_down_the_documented_layers() {
    let layers = documented_layers();
    let mut wrong = Vec::new();
    for (m, edges) in imports() {
        let Some(&from) = layers.get(&m) else {
            continue; // the other test names it
        };
        for (target, files) in edges {
            let to = layers[&target];
            if to >= from {
                wrong.push(format!(
                    "{m} (layer {from}) imports {target} (layer {to}) in {}",
                    files.into_iter().collect::<Vec<_>>().join(", ")
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layers of docs/development.md (a module may use only modules of \
         lower layers; move the shared piece down, or the importer up):\n{}",
        wrong.join("\n")
    );
}

/// The scanner itself: what it must see and what it must not.
#[test]
fn the_scanner_reads_paths_groups_and_skips_comments_and_tests() {
    let code = "use crate::a::X;\nuse crate::{b, c::{D, E}, d};\nlet x = crate::e::f();\n";
    let found = crate_paths(code);
    let want: BTreeSet<String> = ["a", "b", "c", "d", "e"].map(String::from).into();
    assert_eq!(found, want);

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("m.rs");
    std::fs::write(
        &file,
        "use crate::kept::X; // crate::comment\n/// [`crate::doc`]\n#[cfg(test)]\nmod tests {\n    \
         use crate::in_test::Y;\n}\n#[cfg(test)]\nmod more;\nfn f() { crate::after::g() }\n",
    )
    .unwrap();
    let mut test_files = BTreeSet::new();
    let code = code_of(&file, &mut test_files);
    let found = crate_paths(&code);
    let want: BTreeSet<String> = ["kept", "after"].map(String::from).into();
    assert_eq!(found, want, "{code}");
    assert!(test_files.contains(&dir.path().join("m/more.rs")));
}

/// `code` with its string and char literals emptied (their braces are not code).
fn without_literals(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut chars = code.chars().peekable();
    let mut in_str = false;
    while let Some(c) = chars.next() {
        if in_str {
            match c {
                '\\' => {
                    chars.next();
                }
                '"' => {
                    in_str = false;
                    out.push('"');
                }
                '\n' => out.push('\n'),
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_str = true;
                out.push('"');
            }
            '\'' => {
                // a char literal ('{', '\'') or a lifetime ('a): only the former is skipped
                let rest: String = chars.clone().take(3).collect();
                if let Some(escaped) = rest.strip_prefix('\\') {
                    let close = escaped.find('\'').map_or(0, |i| i + 2);
                    for _ in 0..close {
                        chars.next();
                    }
                } else if rest.chars().nth(1) == Some('\'') {
                    chars.next();
                    chars.next();
                }
                out.push('\'');
            }
            _ => out.push(c),
        }
    }
    out
}

/// (name, first line, length in lines) of every function in `code`.
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = code.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(at) = words.iter().position(|w| *w == "fn") else {
            continue;
        };
        let qualifiers_only = words[..at].iter().all(|w| {
            w.starts_with("pub") || ["const", "unsafe", "async", "extern", "\"C\""].contains(w)
        });
        if !qualifiers_only || at + 1 >= words.len() {
            continue;
        }
        let name: String = words[at + 1]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let mut depth = 0i64;
        let mut opened = false;
        for (j, l) in lines.iter().enumerate().skip(i) {
            if !opened && l.trim_end().ends_with(';') && !l.contains('{') {
                break; // a declaration without a body
            }
            depth += l.matches('{').count() as i64 - l.matches('}').count() as i64;
            opened |= l.contains('{');
            if opened && depth <= 0 {
                found.push((name.clone(), i + 1, j - i + 1));
                break;
            }
        }
    }
    found
}

#[test]
fn no_function_is_over_100_lines() {
    let mut long = Vec::new();
    for (_, rel, c) in source_code() {
        for (name, line, len) in functions(&without_literals(&c)) {
            if len > 100 {
                long.push(format!("{rel}:{line} fn {name}: {len} lines"));
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions over 100 lines (split them into named steps):\n{}",
        long.join("\n")
    );
}

#[test]
fn the_function_counter_sees_bodies_not_braces_in_strings() {
    let code = "pub(crate) fn a() {\n    let s = \"{{ }\";\n    if x {\n        y();\n    }\n}\nfn b();\nconst fn c() -> char { '{' }\n";
    let found = functions(&without_literals(code));
    assert_eq!(
        found,
        vec![("a".to_string(), 1, 6), ("c".to_string(), 8, 1)],
        "{}",
        without_literals(code)
    );
}
