//! The crates' file-level import graph has no circle: for every crate of the workspace, each
//! `src/` file's references to another file of the same crate (`crate::…`, `super::…`, a child
//! module by name, and `crate::Name` through the crate root's `pub use` re-exports) form a graph
//! whose strongly connected components are single files. Test modules (`tests.rs`, a trailing
//! `#[cfg(test)] mod tests`) are left out: a test may import anything it tests.
//!
//! The edge (`cell-endpoint`) is also built in floors ([`EDGE_FLOORS`]): a file imports files of
//! its own floor or of a lower one, never of a higher one.
//!
//! Run just this check with `cargo test -p cellbind-tests layering`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One crate's files: module path (segments below the crate root) → file.
struct CrateFiles {
    modules: BTreeMap<Vec<String>, PathBuf>,
}

fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap_or(file);
    let mut segs: Vec<String> = rel
        .iter()
        .map(|s| s.to_string_lossy().trim_end_matches(".rs").to_owned())
        .collect();
    if matches!(
        segs.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        segs.pop();
    }
    segs
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            // Binaries under src/bin are separate crates that use the library by name.
            if p.file_name().is_some_and(|n| n == "bin" || n == "tests") {
                continue;
            }
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs")
            && p.file_name().is_some_and(|n| n != "tests.rs")
        {
            out.push(p);
        }
    }
}

/// The file's code without comments and without its trailing test module.
fn code_of(text: &str) -> String {
    let mut out = String::new();
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let t = lines[i].trim();
        if t == "#[cfg(test)]"
            && lines[i + 1..]
                .iter()
                .find(|l| !l.trim().is_empty())
                .is_some_and(|l| l.trim_start().starts_with("mod tests"))
        {
            break;
        }
        let code = match lines[i].find("//") {
            Some(at) if !lines[i][..at].contains('"') => &lines[i][..at],
            _ => lines[i],
        };
        out.push_str(code);
        out.push('\n');
        i += 1;
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Parses a use-tree at `s` (after `crate::` or similar), pushing every full path.
fn parse_tree(
    s: &[char],
    mut pos: usize,
    prefix: Vec<String>,
    out: &mut Vec<Vec<String>>,
) -> usize {
    while pos < s.len() && s[pos].is_whitespace() {
        pos += 1;
    }
    if pos < s.len() && s[pos] == '{' {
        pos += 1;
        loop {
            pos = parse_tree(s, pos, prefix.clone(), out);
            while pos < s.len() && s[pos].is_whitespace() {
                pos += 1;
            }
            match s.get(pos) {
                Some(',') => pos += 1,
                Some('}') => return pos + 1,
                _ => return pos,
            }
            while pos < s.len() && s[pos].is_whitespace() {
                pos += 1;
            }
            if s.get(pos) == Some(&'}') {
                return pos + 1;
            }
        }
    }
    let start = pos;
    while pos < s.len() && is_ident(s[pos]) {
        pos += 1;
    }
    if start == pos {
        if !prefix.is_empty() {
            out.push(prefix);
        }
        return pos + usize::from(s.get(pos) == Some(&'*'));
    }
    let ident: String = s[start..pos].iter().collect();
    let mut path = prefix;
    if ident != "self" {
        path.push(ident);
    }
    if s.get(pos) == Some(&':') && s.get(pos + 1) == Some(&':') {
        return parse_tree(s, pos + 2, path, out);
    }
    out.push(path);
    // A following `as alias` is a plain word, which the caller passes over.
    pos
}

/// Every same-crate path this file's code names, as absolute module paths.
fn references(code: &str, here: &[String], children: &BTreeSet<String>) -> Vec<Vec<String>> {
    let s: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        let boundary = i == 0 || !(is_ident(s[i - 1]) || s[i - 1] == ':');
        if boundary && is_ident(s[i]) {
            let start = i;
            while i < s.len() && is_ident(s[i]) {
                i += 1;
            }
            let word: String = s[start..i].iter().collect();
            let followed = s.get(i) == Some(&':') && s.get(i + 1) == Some(&':');
            if !followed {
                continue;
            }
            let base: Option<Vec<String>> = match word.as_str() {
                "crate" => Some(Vec::new()),
                "super" => {
                    let mut b = here.to_vec();
                    b.pop();
                    // `super::super::…`
                    let mut j = i + 2;
                    loop {
                        let rest: String = s[j..s.len().min(j + 7)].iter().collect();
                        if rest == "super::" {
                            b.pop();
                            j += 7;
                        } else {
                            break;
                        }
                    }
                    i = j - 2;
                    Some(b)
                }
                "self" => Some(here.to_vec()),
                w if children.contains(w) => {
                    let mut b = here.to_vec();
                    b.push(w.to_owned());
                    let mut paths = Vec::new();
                    parse_tree(&s, i + 2, b, &mut paths);
                    out.extend(paths);
                    None
                }
                _ => None,
            };
            if let Some(b) = base {
                let mut paths = Vec::new();
                i = parse_tree(&s, i + 2, b, &mut paths).max(i);
                out.extend(paths);
            }
        } else {
            i += 1;
        }
    }
    out
}

/// Names the crate root re-exports (`pub use a::b::Name;`) → the path they stand for.
fn root_reexports(code: &str, children: &BTreeSet<String>) -> BTreeMap<String, Vec<String>> {
    let mut map = BTreeMap::new();
    for stmt in code.split(';') {
        let t = stmt.trim();
        let Some(rest) = t.strip_prefix("pub use ") else {
            continue;
        };
        let rest = rest
            .trim_start_matches("crate::")
            .trim_start_matches("self::");
        let s: Vec<char> = rest.chars().collect();
        let mut paths = Vec::new();
        parse_tree(&s, 0, Vec::new(), &mut paths);
        for p in paths {
            if p.first().is_some_and(|f| children.contains(f))
                && let Some(last) = p.last()
            {
                map.insert(last.clone(), p.clone());
            }
        }
    }
    map
}

fn resolve(
    files: &CrateFiles,
    reexports: &BTreeMap<String, Vec<String>>,
    path: &[String],
) -> Option<PathBuf> {
    let longest = (0..=path.len())
        .rev()
        .find(|n| files.modules.contains_key(&path[..*n]))?;
    if longest == 0
        && !path.is_empty()
        && let Some(target) = reexports.get(&path[0])
    {
        return resolve(files, &BTreeMap::new(), target);
    }
    files.modules.get(&path[..longest]).cloned()
}

/// Tarjan's strongly connected components with more than one file.
fn circles(graph: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    struct T<'g> {
        g: &'g BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: BTreeMap<&'g PathBuf, usize>,
        low: BTreeMap<&'g PathBuf, usize>,
        stack: Vec<&'g PathBuf>,
        on: BTreeSet<&'g PathBuf>,
        next: usize,
        out: Vec<Vec<PathBuf>>,
    }
    fn visit<'g>(t: &mut T<'g>, v: &'g PathBuf) {
        t.index.insert(v, t.next);
        t.low.insert(v, t.next);
        t.next += 1;
        t.stack.push(v);
        t.on.insert(v);
        let g = t.g;
        for w in g.get(v).into_iter().flatten() {
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low[v];
                t.low.insert(v, lv.min(lw));
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low[v];
                t.low.insert(v, lv.min(iw));
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                comp.push(w.clone());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        g: graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.out
}

/// Every file's imports of other files of the crate: imported file → the paths that name it
/// (`crate::a::b`, absolute, the first few).
type Imports = BTreeMap<PathBuf, BTreeMap<PathBuf, Vec<String>>>;

fn crate_graph(src: &Path) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    crate_imports(src)
        .into_iter()
        .map(|(f, targets)| (f, targets.into_keys().collect()))
        .collect()
}

fn crate_imports(src: &Path) -> Imports {
    let mut list = Vec::new();
    rust_files(src, &mut list);
    let files = CrateFiles {
        modules: list
            .iter()
            .filter(|f| {
                !(f.parent() == Some(src)
                    && f.file_name().is_some_and(|n| n == "main.rs")
                    && src.join("lib.rs").exists())
            })
            .map(|f| (module_path(src, f), f.clone()))
            .collect(),
    };
    let children_of = |m: &[String]| -> BTreeSet<String> {
        files
            .modules
            .keys()
            .filter(|k| k.len() == m.len() + 1 && k[..m.len()] == *m)
            .filter_map(|k| k.last().cloned())
            .collect()
    };
    let root_code = files
        .modules
        .get(&Vec::new())
        .and_then(|f| std::fs::read_to_string(f).ok())
        .map(|t| code_of(&t))
        .unwrap_or_default();
    let reexports = root_reexports(&root_code, &children_of(&[]));
    let mut graph: Imports = BTreeMap::new();
    for (m, f) in &files.modules {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        let code = code_of(&text);
        let kids = children_of(m);
        let edges = graph.entry(f.clone()).or_default();
        for p in references(&code, m, &kids) {
            if let Some(target) = resolve(&files, &reexports, &p)
                && target != *f
            {
                let named = edges.entry(target).or_default();
                let path = format!("crate::{}", p.join("::"));
                if named.len() < 3 && !named.contains(&path) {
                    named.push(path);
                }
            }
        }
    }
    graph
}

/// The edge's floors, lowest first: paths under `cell-endpoint/src/`, a folder ending in `/`.
/// A file may import files of its own floor and of lower ones, never of a higher one. The
/// crate root (`lib.rs`: the front door, which re-exports) and the binary (`main.rs`) stand
/// outside the floors.
const EDGE_FLOORS: &[&[&str]] = &[
    // What a request counts as; every error of the crate and its one answer table.
    &["metrics.rs"],
    &["error.rs"],
    // The keys of the configuration file and their value types.
    &["config.rs"],
    // What the edge holds: state, token cache, revocation rules, writes in flight, origins.
    &["held/"],
    // Client address, connections, targets, upstreams, TLS, rate limits.
    &["net/"],
    // What the request path reads (the configuration, parsed) and shares (`Edge`).
    &["settings.rs"],
    &["edge.rs"],
    // Keeping the held state current: the feed, the revocation handback.
    &["feed/"],
    // The guards, validation, forwarding, the browser rules, the desk, the counter.
    &["request/"],
    // The routes and guards composed once; the binary's life; the API document.
    &["service.rs"],
    &["server.rs", "openapi.rs"],
];

/// The floor of `rel` (a path under `src/`, `/`-separated) among `floors`.
fn floor_of(rel: &str, floors: &[&[&str]]) -> Option<usize> {
    floors.iter().position(|floor| {
        floor.iter().any(|place| {
            place
                .strip_suffix('/')
                .map_or(rel == *place, |dir| rel.starts_with(&format!("{dir}/")))
        })
    })
}

/// Every import of `src` from a lower floor to a higher one, and every file on no floor, as
/// messages naming the file and the import.
fn floor_violations(src: &Path, floors: &[&[&str]]) -> Vec<String> {
    let rel = |p: &Path| {
        p.strip_prefix(src)
            .unwrap_or(p)
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/")
    };
    let outside = |r: &str| r == "lib.rs" || r == "main.rs";
    let mut found = Vec::new();
    for (file, targets) in crate_imports(src) {
        let from = rel(&file);
        if outside(&from) {
            continue;
        }
        let Some(low) = floor_of(&from, floors) else {
            found.push(format!("{from} is on no floor: add it to the floors"));
            continue;
        };
        for (target, paths) in targets {
            let to = rel(&target);
            match floor_of(&to, floors) {
                Some(high) if high > low => found.push(format!(
                    "{from} (floor {low}: {}) imports {to} (floor {high}: {}), a higher floor: {}",
                    floors[low].join(" "),
                    floors[high].join(" "),
                    paths.join(", ")
                )),
                _ => {}
            }
        }
    }
    found
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

#[test]
fn no_crate_has_a_file_level_import_circle() {
    let root = workspace_root();
    let mut found = Vec::new();
    let mut crates = 0;
    for entry in std::fs::read_dir(&root).into_iter().flatten().flatten() {
        let src = entry.path().join("src");
        if !entry.path().join("Cargo.toml").exists() || !src.is_dir() {
            continue;
        }
        crates += 1;
        let graph = crate_graph(&src);
        let edges: usize = graph.values().map(BTreeSet::len).sum();
        let name = entry.file_name().to_string_lossy().into_owned();
        println!(
            "layering: {name}: {} files, {edges} same-crate imports",
            graph.len()
        );
        for c in circles(&graph) {
            let names: Vec<String> = c
                .iter()
                .map(|p| p.strip_prefix(&root).unwrap_or(p).display().to_string())
                .collect();
            found.push(format!("{name}: {}", names.join(" ⇄ ")));
        }
    }
    assert!(
        crates >= 5,
        "found only {crates} crates under {}",
        root.display()
    );
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

#[test]
fn the_checker_sees_a_circle() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("store")).unwrap_or_else(|e| panic!("{e}"));
    let write = |p: &str, t: &str| std::fs::write(src.join(p), t).unwrap_or_else(|e| panic!("{e}"));
    write("lib.rs", "mod a;\nmod b;\nmod store;\npub use a::Thing;\n");
    write("a.rs", "use crate::b::Other;\npub struct Thing;\n");
    write(
        "b.rs",
        "pub struct Other;\nfn f() -> crate::Thing { crate::Thing }\n",
    );
    write("store/mod.rs", "mod sqlite;\npub trait Store {}\n");
    write(
        "store/sqlite.rs",
        "use super::Store;\n#[cfg(test)]\nmod tests {\n use crate::a::Thing;\n}\n",
    );
    let c = circles(&crate_graph(&src));
    assert_eq!(c.len(), 1, "{c:?}");
    assert!(c[0].iter().any(|p| p.ends_with("a.rs")) && c[0].iter().any(|p| p.ends_with("b.rs")));
}

#[test]
fn the_edge_imports_only_from_its_own_floor_or_below() {
    let src = workspace_root().join("cell-endpoint").join("src");
    let imports = crate_imports(&src);
    for (i, floor) in EDGE_FLOORS.iter().enumerate() {
        let files = imports
            .keys()
            .filter(|f| {
                let r = f
                    .strip_prefix(&src)
                    .unwrap_or(f)
                    .to_string_lossy()
                    .replace('\\', "/");
                floor_of(&r, EDGE_FLOORS) == Some(i)
            })
            .count();
        println!(
            "layering: cell-endpoint floor {i} ({}): {files} files",
            floor.join(" ")
        );
    }
    let found = floor_violations(&src, EDGE_FLOORS);
    assert!(
        found.is_empty(),
        "cell-endpoint imports across its floors:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_checker_sees_an_upward_import() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("low")).unwrap_or_else(|e| panic!("{e}"));
    let write = |p: &str, t: &str| std::fs::write(src.join(p), t).unwrap_or_else(|e| panic!("{e}"));
    write(
        "lib.rs",
        "mod high;\nmod low;\nmod stray;\npub use high::Top;\n",
    );
    write("low/mod.rs", "pub mod a;\npub mod b;\n");
    write(
        "low/a.rs",
        "use super::b::Base;\nfn f() -> crate::Top { crate::Top }\n",
    );
    write(
        "low/b.rs",
        "pub struct Base;\n#[cfg(test)]\nmod tests {\n use crate::high::Top;\n}\n",
    );
    write("high.rs", "use crate::low::b::Base;\npub struct Top;\n");
    write("stray.rs", "pub struct Stray;\n");
    let floors: &[&[&str]] = &[&["low/"], &["high.rs"]];
    let found = floor_violations(&src, floors);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found[0].starts_with("low/a.rs (floor 0: low/) imports high.rs (floor 1: high.rs)")
            && found[0].ends_with("crate::Top"),
        "{found:?}"
    );
    assert_eq!(found[1], "stray.rs is on no floor: add it to the floors");
}
