//! The documents that code and docs cite live in the repository, and what they cite resolves:
//!
//! - every `DESIGN §N` (or `§N.M`, and every further `§M` of the same list) names a section of
//!   `docs/DESIGN.md` (its `## N.` and `### N.M` headings);
//! - every `ATTACKS AN` and `THREAT-MODEL AN` (lists and ranges included: `A5, A6 and A12`,
//!   `A23–A31`) names a row of a table in `docs/THREAT-MODEL.md`;
//! - every mention of a Markdown file named DESIGN, THREAT-MODEL or ATTACKS is a path to a file
//!   of the repository (relative to the mentioning file or to the repository root), so no file
//!   points at a design document outside it;
//! - every test the threat model names in a "Tests" column exists (`fn NAME` in a `.rs` file).
//!
//! Every `.rs` and `.md` file of the repository is scanned (build output, hidden folders and a
//! dev fleet's directory aside). A failure names each `file:line` and what did not resolve.
//! Run with `cargo test -p cellbind-tests --test docs -- --nocapture` (it prints the counts).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Folders never scanned: build output, version control, a dev fleet's files, dependencies.
const SKIPPED_DIRS: &[&str] = &["target", "dev-fleet", "node_modules"];
/// Markdown files (names without `.md`, so this file mentions none) whose mentions must be
/// paths to files of the repository.
const DOCUMENT_NAMES: &[&str] = &["DESIGN", "THREAT-MODEL", "ATTACKS"];
/// How a reference to the design names its sections, and to the threat model its rows.
const DESIGN_PREFIX: &str = "DESIGN §";
const ROW_PREFIXES: &[&str] = &["ATTACKS A", "THREAT-MODEL A"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits in the workspace root")
        .to_path_buf()
}

/// Every `.rs` and `.md` file under `dir`, sorted.
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            if !name.starts_with('.') && !SKIPPED_DIRS.contains(&name.as_str()) {
                files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs" || x == "md") {
            out.push(p);
        }
    }
    out.sort();
}

/// The section numbers of `docs/DESIGN.md`: `N` of every `## N. …` heading and `N.M` of every
/// `### N.M …` heading.
fn design_sections(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("### ").or_else(|| l.strip_prefix("## "))?;
            let number: String = rest
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            let number = number.trim_end_matches('.');
            (!number.is_empty()).then(|| number.to_owned())
        })
        .collect()
}

/// The row ids (`A17`, …) of every table of `docs/THREAT-MODEL.md`: a row's first cell.
fn threat_rows(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let cell = l.strip_prefix("| ")?.split(" |").next()?.trim();
            let digits = cell.strip_prefix('A')?;
            (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
                .then(|| cell.to_owned())
        })
        .collect()
}

/// A number (`4`, `4.2`) at the start of `s`, and what follows it.
fn number(s: &str) -> Option<(&str, &str)> {
    let end = s
        .char_indices()
        .find(|&(i, c)| {
            !(c.is_ascii_digit()
                || (c == '.' && i > 0 && s[i + 1..].starts_with(|d: char| d.is_ascii_digit())))
        })
        .map_or(s.len(), |(i, _)| i);
    (end > 0).then(|| (&s[..end], &s[end..]))
}

/// Separators between the items of one reference list (`§4, §5`, `A5, A6 and A12`, `A23–A31`).
const LIST_SEPARATORS: &[&str] = &[", ", " and ", " or ", "/"];
const RANGE_SEPARATORS: &[&str] = &["–", "-", "..", "…"];

/// The items of the list that starts at `s` right after its first marker: the first number,
/// then every further `marker` + number after a separator; a range (`A23–A31`) yields every
/// number in it when `expand_ranges`.
fn list_items(s: &str, marker: char, expand_ranges: bool) -> Vec<String> {
    let Some((first, mut rest)) = number(s) else {
        return Vec::new();
    };
    let mut items = vec![first.to_owned()];
    loop {
        if let Some(after) = RANGE_SEPARATORS
            .iter()
            .find_map(|sep| rest.strip_prefix(sep))
        {
            let after = after.strip_prefix(marker).unwrap_or(after);
            if let Some((to, tail)) = number(after) {
                let from = items.last().cloned().unwrap_or_default();
                match (from.parse::<u32>(), to.parse::<u32>()) {
                    (Ok(a), Ok(b)) if expand_ranges && a < b && b - a <= 100 => {
                        items.extend((a + 1..=b).map(|n| n.to_string()));
                    }
                    _ => items.push(to.to_owned()),
                }
                rest = tail;
                continue;
            }
        }
        let next = LIST_SEPARATORS.iter().find_map(|sep| {
            let after = rest.strip_prefix(sep)?.strip_prefix(marker)?;
            number(after)
        });
        match next {
            Some((n, tail)) => {
                items.push(n.to_owned());
                rest = tail;
            }
            None => return items,
        }
    }
}

/// What one line cites: design sections and threat-model rows.
#[derive(Debug, Default, PartialEq, Eq)]
struct Cited {
    sections: Vec<String>,
    rows: Vec<String>,
}

fn cited(line: &str) -> Cited {
    let mut c = Cited::default();
    for (at, _) in line.match_indices(DESIGN_PREFIX) {
        c.sections
            .extend(list_items(&line[at + DESIGN_PREFIX.len()..], '§', false));
    }
    for prefix in ROW_PREFIXES {
        for (at, _) in line.match_indices(prefix) {
            c.rows.extend(
                list_items(&line[at + prefix.len()..], 'A', true)
                    .into_iter()
                    .map(|n| format!("A{n}")),
            );
        }
    }
    c
}

/// The path written just before `at` in `line` (path characters back to a delimiter).
fn path_ending_at(line: &str, at: usize) -> &str {
    let start = line[..at]
        .char_indices()
        .rev()
        .find(|&(_, c)| !(c.is_ascii_alphanumeric() || "/._-".contains(c)))
        .map_or(0, |(i, c)| i + c.len_utf8());
    &line[start..at]
}

/// What does not resolve in one file's text: `(line number, what)`.
fn unresolved(
    text: &str,
    sections: &BTreeSet<String>,
    rows: &BTreeSet<String>,
    document_exists: impl Fn(&str) -> bool,
) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let c = cited(line);
        for s in c.sections {
            if !sections.contains(&s) {
                out.push((
                    i + 1,
                    format!("DESIGN §{s}: docs/DESIGN.md has no section {s}"),
                ));
            }
        }
        for r in c.rows {
            if !rows.contains(&r) {
                out.push((i + 1, format!("{r}: docs/THREAT-MODEL.md has no row {r}")));
            }
        }
        for name in DOCUMENT_NAMES.iter().map(|n| format!("{n}.md")) {
            for (at, _) in line.match_indices(&name) {
                // Part of a longer name (`XDESIGN.md`): not a mention of this document.
                if line[..at]
                    .chars()
                    .next_back()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                {
                    continue;
                }
                let path = format!("{}{name}", path_ending_at(line, at));
                if !document_exists(&path) {
                    out.push((i + 1, format!("`{path}` is not a file of this repository")));
                }
            }
        }
    }
    out
}

#[test]
fn every_design_and_threat_model_reference_resolves() {
    let root = root();
    let design = std::fs::read_to_string(root.join("docs/DESIGN.md")).expect("docs/DESIGN.md");
    let threat =
        std::fs::read_to_string(root.join("docs/THREAT-MODEL.md")).expect("docs/THREAT-MODEL.md");
    let sections = design_sections(&design);
    let row_list = threat_rows(&threat);
    let rows: BTreeSet<String> = row_list.iter().cloned().collect();
    assert_eq!(
        rows.len(),
        row_list.len(),
        "a threat-model row id appears twice"
    );
    for n in 1..=9 {
        assert!(
            sections.contains(&n.to_string()),
            "docs/DESIGN.md lost §{n}"
        );
    }

    let mut all = Vec::new();
    files(&root, &mut all);
    let (mut design_refs, mut row_refs, mut failures) = (0, 0, Vec::new());
    for file in &all {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for line in text.lines() {
            let c = cited(line);
            design_refs += c.sections.len();
            row_refs += c.rows.len();
        }
        let dir = file.parent().unwrap_or(&root);
        let exists = |p: &str| dir.join(p).is_file() || root.join(p).is_file();
        let rel = file.strip_prefix(&root).unwrap_or(file).display();
        for (line, what) in unresolved(&text, &sections, &rows, exists) {
            failures.push(format!("{rel}:{line}: {what}"));
        }
    }
    println!(
        "docs: {} files scanned; {design_refs} DESIGN § and {row_refs} threat-model references; \
         {} sections, {} rows; {} unresolved",
        all.len(),
        sections.len(),
        rows.len(),
        failures.len()
    );
    for f in &failures {
        println!("  {f}");
    }
    assert!(
        failures.is_empty(),
        "{} references do not resolve to docs/DESIGN.md or docs/THREAT-MODEL.md:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Each backticked name in a "Tests" cell that names a test: the last `::` segment of its last
/// word, snake case with an underscore; `{a,b}` alternatives expanded; spans with `…` or `*`
/// (a family of tests) skipped.
fn cited_tests(cell: &str) -> Vec<String> {
    let mut names = Vec::new();
    for (i, span) in cell.split('`').enumerate() {
        if i % 2 == 0 || span.contains('…') || span.contains('*') || span.contains('/') {
            continue;
        }
        let word = span.split_whitespace().last().unwrap_or_default();
        let last = word.rsplit("::").next().unwrap_or_default();
        for name in expand_braces(last) {
            let snake = name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            if snake && name.contains('_') && name.starts_with(|c: char| c.is_ascii_lowercase()) {
                names.push(name);
            }
        }
    }
    names
}

/// `a_{x,y}_b` → `a_x_b`, `a_y_b` (one brace group).
fn expand_braces(s: &str) -> Vec<String> {
    match (s.find('{'), s.find('}')) {
        (Some(open), Some(close)) if open < close => s[open + 1..close]
            .split(',')
            .map(|alt| format!("{}{alt}{}", &s[..open], &s[close + 1..]))
            .collect(),
        _ => vec![s.to_owned()],
    }
}

/// The last cell of every body row of every table of `text` whose header's last cell is
/// "Tests".
fn tests_cells(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut in_tests_table = false;
    let mut previous_was_row = false;
    for (i, line) in text.lines().enumerate() {
        let is_row = line.starts_with('|');
        if !is_row {
            in_tests_table = false;
        } else if !previous_was_row {
            in_tests_table = line
                .trim_end()
                .trim_end_matches('|')
                .trim_end()
                .ends_with("Tests");
        } else if in_tests_table && !line.starts_with("|---") {
            let cells: Vec<&str> = line.trim_end().trim_end_matches('|').split(" | ").collect();
            if let Some(last) = cells.last() {
                out.push((i + 1, (*last).to_owned()));
            }
        }
        previous_was_row = is_row;
    }
    out
}

/// Every `fn NAME` in the given files.
fn function_names(files: &[PathBuf]) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for f in files
        .iter()
        .filter(|f| f.extension().is_some_and(|x| x == "rs"))
    {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        for (at, _) in text.match_indices("fn ") {
            let name: String = text[at + 3..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                names.insert(name);
            }
        }
    }
    names
}

#[test]
fn every_test_the_threat_model_names_exists() {
    let root = root();
    let threat =
        std::fs::read_to_string(root.join("docs/THREAT-MODEL.md")).expect("docs/THREAT-MODEL.md");
    let mut all = Vec::new();
    files(&root, &mut all);
    let defined = function_names(&all);
    let mut cited = 0;
    let mut missing = Vec::new();
    for (line, cell) in tests_cells(&threat) {
        for name in cited_tests(&cell) {
            cited += 1;
            if !defined.contains(&name) {
                missing.push(format!("docs/THREAT-MODEL.md:{line}: no test `{name}`"));
            }
        }
    }
    println!(
        "threat model: {cited} test names cited, {} missing",
        missing.len()
    );
    assert!(
        cited > 100,
        "the Tests columns were not found ({cited} names)"
    );
    assert!(
        missing.is_empty(),
        "tests named in docs/THREAT-MODEL.md do not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_checker_sees_what_does_not_resolve() {
    let sections: BTreeSet<String> = ["4", "5", "5.2"].map(String::from).into();
    let rows: BTreeSet<String> = ["A5", "A6", "A12", "A23", "A24"].map(String::from).into();
    let exists = |p: &str| p == "docs/DESIGN.md";
    // Built at run time, so this file itself cites nothing.
    let design = DESIGN_PREFIX;
    let attacks = ROW_PREFIXES[0];
    let text = [
        format!("ok: {design}4, §5 and {attacks}5, A6 and A12; see docs/DESIGN.md §5.2"),
        format!("bad section: {design}7"),
        format!("bad listed section: {design}4, §9"),
        format!("bad subsection: {design}5.3"),
        format!("bad row: {attacks}7"),
        format!("bad range: {attacks}23–A25"),
        format!(
            "bad file: the {}.md table, ../shared/{}.md",
            "ATTACKS", "DESIGN"
        ),
    ]
    .join("\n");
    let found: Vec<(usize, String)> = unresolved(&text, &sections, &rows, exists);
    let lines: Vec<usize> = found.iter().map(|(l, _)| *l).collect();
    assert_eq!(lines, [2, 3, 4, 5, 6, 7, 7], "{found:#?}");
    assert!(found[4].1.starts_with("A25:"), "{found:#?}");
    assert!(found[5].1.contains("`../shared/"), "{found:#?}");
    assert!(found[6].1.starts_with("`ATTACKS."), "{found:#?}");
    assert_eq!(
        cited_tests("`crate it::a::one_test`, `e2e::b::the_{x,y}_test`, `m::tests::*`, `sdk`"),
        ["one_test", "the_x_test", "the_y_test"]
    );
}

/// The lines of `text` strictly between the line `begin` and the next line `end`.
fn between<'a>(text: &'a str, begin: &str, end: &str) -> Option<Vec<&'a str>> {
    let mut lines = text.lines().skip_while(|l| *l != begin);
    lines.next()?;
    let inside: Vec<&str> = lines.by_ref().take_while(|l| *l != end).collect();
    Some(inside)
}

/// The README's walkthrough block is `scripts/walkthrough`'s body between its markers, line for
/// line, so the commands a reader pastes are the ones the walkthrough test runs.
#[test]
fn the_readme_walkthrough_is_the_scripts_body() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let script = std::fs::read_to_string(root().join("scripts/walkthrough")).unwrap();
    let body = between(
        &script,
        "# --- walkthrough begin ---",
        "# --- walkthrough end ---",
    )
    .expect("scripts/walkthrough has its begin and end markers");
    let section = readme
        .split_once("\n## Walkthrough with curl\n")
        .expect("README.md has the section \"Walkthrough with curl\"")
        .1;
    let block = between(section, "```sh", "```").expect("the section has a ```sh block");
    assert!(
        body.len() > 20,
        "the script's body is only {} lines",
        body.len()
    );
    let first_difference =
        body.iter()
            .zip(&block)
            .position(|(a, b)| a != b)
            .map_or(String::new(), |i| {
                format!(
                    "; first difference at body line {}:\n  script: {}\n  README: {}",
                    i + 1,
                    body[i],
                    block[i]
                )
            });
    assert!(
        body == block,
        "README.md's walkthrough block ({} lines) is not scripts/walkthrough's body between its \
         markers ({} lines){first_difference}",
        block.len(),
        body.len()
    );
    println!(
        "README walkthrough: {} lines, the same as scripts/walkthrough's body",
        body.len()
    );
}
