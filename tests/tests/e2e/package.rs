//! The release tarball as an operator unpacks it (`scripts/package`): every relative link of
//! the Markdown it ships (its README, the units' README, cellctl's README, the documents)
//! resolves to a file or folder inside the unpacked tarball; every document of `docs/` is
//! shipped; and `scripts/package --help` prints its help only.
//!
//! The tarball holds the debug binaries (`--profile debug --no-build`): build them first,
//! `cargo build --workspace --bins`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The targets of the inline links (`[words](target)`, images too) of a Markdown text, with
/// their line numbers.
fn link_targets(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let end = after
                .find(|c: char| c == ')' || c.is_whitespace())
                .unwrap_or(after.len());
            out.push((n + 1, after[..end].to_owned()));
            rest = &after[end..];
        }
    }
    out
}

/// Whether a link target leaves the document's folder tree by itself: a URL, an anchor of the
/// same document, an absolute path.
fn external(target: &str) -> bool {
    target.starts_with('#')
        || target.starts_with('/')
        || target
            .split_once(':')
            .is_some_and(|(scheme, _)| !scheme.is_empty() && !scheme.contains('/'))
}

/// Every `.md` file under `dir`.
fn markdown(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            markdown(&p, out);
        } else if p.extension().is_some_and(|x| x == "md") {
            out.push(p);
        }
    }
}

#[test]
fn every_link_of_the_tarballs_markdown_resolves_inside_it_and_every_document_is_shipped() {
    let tmp = tempfile::tempdir().unwrap();
    let dist = cellbind_tests::package_and_unpack(tmp.path());

    // Every relative link of every shipped Markdown file names something the tarball holds.
    let mut files = Vec::new();
    markdown(&dist, &mut files);
    files.sort();
    assert!(
        dist.join("README.md").is_file(),
        "the tarball has no README.md"
    );
    let mut checked = 0;
    let mut broken = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let shown = file.strip_prefix(&dist).unwrap().display().to_string();
        for (line, target) in link_targets(&text) {
            if external(&target) {
                continue;
            }
            let path = target.split('#').next().unwrap_or_default();
            if path.is_empty() {
                continue;
            }
            checked += 1;
            match file.parent().unwrap().join(path).canonicalize() {
                Ok(p) if p.starts_with(&dist) => {}
                Ok(p) => broken.push(format!("{shown}:{line}: {target} is outside: {p:?}")),
                Err(e) => broken.push(format!("{shown}:{line}: {target}: {e}")),
            }
        }
    }
    assert!(
        broken.is_empty(),
        "links of the tarball's Markdown that do not resolve inside it:\n{}",
        broken.join("\n")
    );
    // The README links the documents (the configuration reference at least).
    let readme = std::fs::read_to_string(dist.join("README.md")).unwrap();
    assert!(
        link_targets(&readme)
            .iter()
            .any(|(_, t)| t.starts_with("docs/CONFIGURATION.md")),
        "README.md links no docs/CONFIGURATION.md"
    );

    // Every document of docs/ is shipped, as it is named there.
    let mut documents = 0;
    for e in std::fs::read_dir(workspace().join("docs"))
        .unwrap()
        .flatten()
    {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "md") {
            let shipped = dist.join("docs").join(p.file_name().unwrap());
            assert!(
                shipped.is_file(),
                "the tarball has no {}",
                shipped.display()
            );
            documents += 1;
        }
    }
    println!(
        "package: {} Markdown files in the tarball ({documents} from docs/), {checked} relative \
         links, every one resolving inside it",
        files.len()
    );
}

#[test]
fn package_help_prints_the_help_only() {
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("package");
    for args in [&["--help"][..], &["-h"][..], &["--no-build", "--help"][..]] {
        let out = Command::new(workspace().join("scripts/package"))
            .args(args)
            .arg("--out")
            .arg(&out_dir)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stdout}");
        assert!(
            stdout.starts_with("usage: scripts/package ")
                && stdout.contains("--profile")
                && stdout.contains("--out DIR"),
            "{args:?}: {stdout}"
        );
        assert!(
            out.stderr.is_empty(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!stdout.contains(".tar.gz\n"), "{args:?} packaged: {stdout}");
        assert!(!out_dir.exists(), "{args:?} wrote {}", out_dir.display());
    }
}
