//! The shape rules of docs/development.md, kept by tests: every top-level module of src/ is in
//! exactly one layer of the "Layers" table, and its code (comments and test-only modules left
//! out) names, through `crate::` paths, only modules of lower layers (the table is read from the
//! document itself, so the two cannot drift apart); no modules at any depth use each other
//! (directly or round a loop); and no function of src/ is over 100 lines.

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

/// A file's module path (`src/data/imagenet/loader.rs`: data, imagenet, loader; a `mod.rs`
/// names its folder).
fn module_of(rel: &str) -> Vec<String> {
    let p = rel.strip_prefix("src/").unwrap_or(rel);
    let p = p.strip_suffix(".rs").unwrap_or(p);
    let mut parts: Vec<String> = p.split('/').map(String::from).collect();
    if parts.last().is_some_and(|l| l == "mod") {
        parts.pop();
    }
    parts
}

/// The identifier at the start of `s`.
fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The paths that start at `s` (`a::b::{c, d::{e, f}}` gives a::b::c, a::b::d::e, a::b::d::f;
/// a path ends at its last identifier).
fn paths_at(s: &str) -> Vec<Vec<String>> {
    let mut prefix = Vec::new();
    let mut rest = s;
    loop {
        let id = ident_at(rest);
        if id.is_empty() {
            break;
        }
        prefix.push(id.to_string());
        rest = &rest[id.len()..];
        match rest.strip_prefix("::") {
            Some(r) => rest = r.trim_start(),
            None => return vec![prefix],
        }
    }
    let Some(group) = rest.strip_prefix('{') else {
        return vec![prefix];
    };
    // the items at depth 0 of the group, each a path of its own
    let mut out = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth > 0 => depth -= 1,
            ',' | '}' if depth == 0 => {
                let item = group[start..i].trim();
                for p in paths_at(item).into_iter().filter(|_| !item.is_empty()) {
                    out.push(prefix.iter().cloned().chain(p).collect());
                }
                if c == '}' {
                    break;
                }
                start = i + 1;
            }
            _ => {}
        }
    }
    out
}

/// For each line of `code` (literals emptied), the inline modules it stands in (`mod x { ... }`).
fn inline_modules(code: &str) -> Vec<Vec<String>> {
    let mut stack: Vec<(String, i64)> = Vec::new();
    let mut depth = 0i64;
    let mut per_line = Vec::new();
    for line in code.lines() {
        let t = line.trim_start();
        let t = t
            .strip_prefix("pub(crate) ")
            .or(t.strip_prefix("pub "))
            .unwrap_or(t);
        if let Some(name) = t.strip_prefix("mod ").map(ident_at) {
            if line.contains('{') {
                stack.push((name.to_string(), depth));
            }
        }
        per_line.push(stack.iter().map(|(n, _)| n.clone()).collect());
        depth += line.matches('{').count() as i64 - line.matches('}').count() as i64;
        while stack.last().is_some_and(|&(_, d)| depth <= d) {
            stack.pop();
        }
    }
    per_line
}

/// The absolute paths `code` (of the file of module `module`) names through `crate::`,
/// `super::` and `self::`, and what it re-exports (`pub use`, relative paths included) as
/// (the name's absolute path, the item's absolute path).
type Reexports = Vec<(Vec<String>, Vec<String>)>;
fn named_paths(module: &[String], code: &str) -> (Vec<Vec<String>>, Reexports) {
    let code = without_literals(code);
    let inline = inline_modules(&code);
    let line_of = |at: usize| code[..at].matches('\n').count();
    // where the path starting at byte `at` stands: the file's module and its inline modules
    let here = |at: usize| -> Vec<String> {
        let inner = inline.get(line_of(at)).cloned().unwrap_or_default();
        module.iter().cloned().chain(inner).collect()
    };
    let absolute = |at: usize, mut p: Vec<String>| -> Option<Vec<String>> {
        let mut base = match p.first().map(String::as_str) {
            Some("crate") => Vec::new(),
            Some("self") | Some("super") => here(at),
            _ => return None,
        };
        while p.first().is_some_and(|s| s == "super" || s == "self") {
            if p.remove(0) == "super" {
                base.pop();
            }
        }
        if p.first().is_some_and(|s| s == "crate") {
            p.remove(0);
        }
        base.extend(p);
        Some(base)
    };
    let starts_a_word = |at: usize| {
        let before = code[..at].chars().last();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
    };
    let mut named = Vec::new();
    for key in ["crate::", "super::", "self::"] {
        for (at, _) in code.match_indices(key).filter(|&(at, _)| starts_a_word(at)) {
            named.extend(
                paths_at(&code[at..])
                    .into_iter()
                    .filter_map(|p| absolute(at, p)),
            );
        }
    }
    let mut reexports = Vec::new();
    for key in ["pub use ", "pub(crate) use "] {
        for (at, _) in code.match_indices(key).filter(|&(at, _)| starts_a_word(at)) {
            let from = at + key.len();
            for p in paths_at(&code[from..]) {
                let name = here(at).into_iter().chain(p.last().cloned());
                let full = match p.first().map(String::as_str) {
                    Some("crate" | "self" | "super") => absolute(from, p),
                    _ => Some(here(at).into_iter().chain(p).collect()), // a child's item
                };
                if let Some(full) = full {
                    reexports.push((name.collect(), full));
                }
            }
        }
    }
    (named, reexports)
}

/// The module `path` names: through re-exports to where the item is defined, then the longest
/// prefix that is a module.
fn module_named(
    path: &[String],
    modules: &BTreeSet<Vec<String>>,
    reexports: &BTreeMap<Vec<String>, Vec<String>>,
) -> Option<Vec<String>> {
    let mut path = path.to_vec();
    for _ in 0..8 {
        let Some(k) = (1..path.len())
            .rev()
            .find(|&k| modules.contains(&path[..k]))
        else {
            break;
        };
        match reexports.get(&path[..=k]) {
            Some(target) if target != &path[..=k] => {
                path = target
                    .iter()
                    .cloned()
                    .chain(path[k + 1..].iter().cloned())
                    .collect();
            }
            _ => break,
        }
    }
    (1..=path.len())
        .rev()
        .map(|k| path[..k].to_vec())
        .find(|p| modules.contains(p))
}

/// Between sibling modules at every depth (data::imagenet::cache and data::imagenet::loader,
/// data and train): (from, to) -> the files that make the edge. A module naming its own
/// descendant or ancestor is no edge.
fn sibling_edges(
    files: &[(Vec<String>, String, String)],
) -> BTreeMap<(Vec<String>, Vec<String>), BTreeSet<String>> {
    let modules: BTreeSet<Vec<String>> = files.iter().map(|(m, _, _)| m.clone()).collect();
    let mut named = Vec::new();
    let mut reexports = BTreeMap::new();
    for (m, rel, code) in files {
        let (paths, re) = named_paths(m, code);
        named.push((m, rel, paths));
        reexports.extend(re);
    }
    let mut edges: BTreeMap<_, BTreeSet<String>> = BTreeMap::new();
    for (m, rel, paths) in named {
        for p in paths {
            let Some(t) = module_named(&p, &modules, &reexports) else {
                continue;
            };
            let common = m.iter().zip(&t).take_while(|(a, b)| a == b).count();
            if common == m.len() || common == t.len() {
                continue;
            }
            let key = (m[..=common].to_vec(), t[..=common].to_vec());
            edges.entry(key).or_default().insert(rel.clone());
        }
    }
    edges
}

/// The cycles among `edges`: each as its modules, sorted, with the edges between them.
fn cycles(edges: &BTreeMap<(Vec<String>, Vec<String>), BTreeSet<String>>) -> Vec<String> {
    let reach = |from: &Vec<String>| -> BTreeSet<Vec<String>> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(n) = todo.pop() {
            for ((a, b), _) in edges.range((n.clone(), Vec::new())..) {
                if a != &n {
                    break;
                }
                if seen.insert(b.clone()) {
                    todo.push(b.clone());
                }
            }
        }
        seen
    };
    let mut found = BTreeSet::new();
    for (a, _) in edges.keys() {
        let from_a = reach(a);
        let group: BTreeSet<Vec<String>> = from_a
            .iter()
            .filter(|b| reach(b).contains(a))
            .cloned()
            .collect();
        if group.is_empty() {
            continue;
        }
        let lines: Vec<String> = edges
            .iter()
            .filter(|((x, y), _)| group.contains(x) && group.contains(y))
            .map(|((x, y), f)| {
                let f: Vec<&str> = f.iter().map(String::as_str).collect();
                format!("  {} -> {} in {}", x.join("::"), y.join("::"), f.join(", "))
            })
            .collect();
        found.insert(lines.join("\n"));
    }
    found.into_iter().collect()
}

#[test]
fn no_modules_name_each_other_at_any_depth() {
    let files: Vec<(Vec<String>, String, String)> = source_code()
        .into_iter()
        .map(|(_, rel, code)| (module_of(&rel), rel, code))
        .collect();
    let found = cycles(&sibling_edges(&files));
    assert!(
        found.is_empty(),
        "modules that use each other (directly or round a loop): move what both need into a \
         module below them, or make one a part the other calls:\n{}",
        found.join("\n\n")
    );
}

/// The cycle finder sees a loop through a re-export and through `super::` inside an inline
/// module, and no loop where a module only names its own parts.
#[test]
fn the_cycle_finder_follows_reexports_and_inline_modules() {
    let file = |m: &str, code: &str| {
        let rel = format!("src/{m}.rs");
        (module_of(&rel), rel, code.to_string())
    };
    let files = vec![
        file(
            "d/mod",
            "pub mod a;\npub mod b;\npub use a::{\n    Thing,\n    Other,\n};\n",
        ),
        file(
            "d/a",
            "use super::b::Helper;\npub struct Thing;\npub struct Other;\n",
        ),
        file(
            "d/b",
            "pub struct Helper;\nmod inner {\n    use crate::d::Other;\n}\n",
        ),
        file(
            "d/c",
            "mod inner {\n    use super::super::a::Thing;\n}\nuse super::Thing as T;\n",
        ),
    ];
    let found = cycles(&sibling_edges(&files));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("d::a -> d::b in src/d/a.rs"),
        "{}",
        found[0]
    );
    assert!(
        found[0].contains("d::b -> d::a in src/d/b.rs"),
        "{}",
        found[0]
    );
    // without b's use of the re-exported item there is no loop; c's uses point one way
    let mut one_way = files.clone();
    one_way[2] = file("d/b", "pub struct Helper;\n");
    assert!(cycles(&sibling_edges(&one_way)).is_empty());
}
