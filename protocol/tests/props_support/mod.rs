//! What every `props` test target shares (included by path from the other crates' targets):
//! the case count, proptest's configuration, the per-case time bound and the closing line.
//!
//! Each property runs [`cases`] cases (`CELLBIND_PROP_CASES`, default 10^5) through one
//! [`Tally`], which times every case, fails one that takes longer than [`CASE_TIME_BOUND`] (a
//! hang detector, not a performance assertion) and prints, once the property passed:
//! `property <target>: <N> cases, 0 failures, slowest case <ms> ms`.
//! Failure persistence is off: a failing case is printed with its seed and minimal input by
//! proptest, and what it found is pinned as an ordinary regression test beside the fix.
#![allow(dead_code, clippy::panic)] // test code

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Value, json};

/// Cases per property when `CELLBIND_PROP_CASES` is not set.
pub const DEFAULT_CASES: u32 = 100_000;
/// The environment variable that overrides the case count of every property.
pub const CASES_ENV: &str = "CELLBIND_PROP_CASES";
/// Longest one case may take before it counts as a hang: 2 s, generous for a debug build.
pub const CASE_TIME_BOUND: Duration = Duration::from_secs(2);

/// The case count: `CELLBIND_PROP_CASES` when it is a positive integer, else [`DEFAULT_CASES`].
pub fn cases() -> u32 {
    std::env::var(CASES_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(DEFAULT_CASES)
}

/// The runner's configuration: [`cases`] cases and no failure persistence file.
pub fn config() -> Config {
    Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    }
}

/// Counts one property's cases and keeps its slowest.
#[derive(Debug)]
pub struct Tally {
    target: &'static str,
    cases: AtomicU64,
    slowest_us: AtomicU64,
}

impl Tally {
    pub fn new(target: &'static str) -> Self {
        Self {
            target,
            cases: AtomicU64::new(0),
            slowest_us: AtomicU64::new(0),
        }
    }

    /// Runs one case, timed; a case over [`CASE_TIME_BOUND`] fails.
    pub fn case(
        &self,
        body: impl FnOnce() -> Result<(), TestCaseError>,
    ) -> Result<(), TestCaseError> {
        let started = Instant::now();
        let result = body();
        let took = started.elapsed();
        self.cases.fetch_add(1, Ordering::Relaxed);
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.slowest_us.fetch_max(us, Ordering::Relaxed);
        result?;
        if took > CASE_TIME_BOUND {
            return Err(TestCaseError::fail(format!(
                "case took {took:?}, over the {CASE_TIME_BOUND:?} bound"
            )));
        }
        Ok(())
    }

    /// The closing line (after the property passed).
    pub fn report(&self) {
        let slowest_ms = self.slowest_us.load(Ordering::Relaxed) as f64 / 1000.0;
        println!(
            "property {}: {} cases, 0 failures, slowest case {slowest_ms:.1} ms",
            self.target,
            self.cases.load(Ordering::Relaxed)
        );
    }
}

/// Runs property `target`: `test` on [`cases`] inputs of `strategy`, each through
/// [`Tally::case`]; panics with proptest's minimal failing input, else prints the closing line.
pub fn run<S: Strategy>(
    target: &'static str,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) {
    let tally = Tally::new(target);
    let mut runner = TestRunner::new(config());
    let result = runner.run(&strategy, |input| tally.case(|| test(input)));
    if let Err(e) = result {
        panic!("property {target} failed: {e}");
    }
    tally.report();
}

// ---------------------------------------------------------------------------------------------
// Mutations shared by the targets.

/// One change to a byte string; positions are taken modulo the length.
#[derive(Debug, Clone)]
pub enum ByteEdit {
    Flip { at: usize, mask: u8 },
    Truncate { at: usize },
    Insert { at: usize, byte: u8 },
    Delete { at: usize, len: usize },
    Duplicate { at: usize, len: usize },
    Swap { a: usize, b: usize },
}

pub fn byte_edit() -> impl Strategy<Value = ByteEdit> {
    prop_oneof![
        4 => (any::<usize>(), 1..=255u8).prop_map(|(at, mask)| ByteEdit::Flip { at, mask }),
        1 => any::<usize>().prop_map(|at| ByteEdit::Truncate { at }),
        2 => (any::<usize>(), interesting_byte()).prop_map(|(at, byte)| ByteEdit::Insert { at, byte }),
        1 => (any::<usize>(), 1..16usize).prop_map(|(at, len)| ByteEdit::Delete { at, len }),
        1 => (any::<usize>(), 1..64usize).prop_map(|(at, len)| ByteEdit::Duplicate { at, len }),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| ByteEdit::Swap { a, b }),
    ]
}

/// Bytes that mean something to the parsers (separators, quotes, base64url, UTF-8 lead bytes).
pub fn interesting_byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        prop::sample::select(b".;=,\"{}[]:\\ -_+/AZaz09\x00\x7f\xc3\xe2\xf0\xff".to_vec()),
        any::<u8>(),
    ]
}

pub fn apply(input: &[u8], edits: &[ByteEdit]) -> Vec<u8> {
    let mut b = input.to_vec();
    for e in edits {
        let n = b.len();
        match *e {
            ByteEdit::Flip { at, mask } if n > 0 => b[at % n] ^= mask,
            ByteEdit::Truncate { at } => b.truncate(at % (n + 1)),
            ByteEdit::Insert { at, byte } => b.insert(at % (n + 1), byte),
            ByteEdit::Delete { at, len } if n > 0 => {
                let at = at % n;
                b.drain(at..(at + len).min(n));
            }
            ByteEdit::Duplicate { at, len } if n > 0 => {
                let at = at % n;
                let piece = b[at..(at + len).min(n)].to_vec();
                b.splice(at..at, piece);
            }
            ByteEdit::Swap { a, b: c } if n > 0 => b.swap(a % n, c % n),
            _ => {}
        }
    }
    b
}

/// JSON values a parser must survive in any member: huge and negative numbers, floats, unicode,
/// empty and long strings, wrong types.
pub fn hostile_json() -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::sample::select(vec![
            json!(u64::MAX),
            json!(9_007_199_254_740_993u64),
            json!(9_007_199_254_740_992u64),
            json!(-1),
            json!(i64::MIN),
            json!(1.5),
            json!(1e308),
            json!(0),
            json!(""),
            json!("\u{0}"),
            json!("cell-03\u{200b}"),
            json!("ćęłł-03"),
            json!("https://127.0.0.3:8443/"),
            json!("HTTPS://127.0.0.3:8443"),
            json!(null),
            json!(true),
            json!([]),
            json!({}),
            json!(["cell-03"]),
            json!({"$ref": "x"}),
            json!("x".repeat(5000)),
        ]),
        any::<u64>().prop_map(|n| json!(n)),
        any::<i64>().prop_map(|n| json!(n)),
        ".{0,40}".prop_map(|s: String| json!(s)),
    ]
}

// ---------------------------------------------------------------------------------------------
// Configuration texts.

/// One change to a valid TOML configuration, line by line (lines taken modulo their count).
#[derive(Debug, Clone)]
pub enum TomlEdit {
    DropLine(usize),
    DuplicateLine(usize),
    /// The value of a `key = value` line replaced by this TOML text.
    SetValue(usize, String),
    /// A key the configuration does not know, at the end (the top level or the last table).
    AddKey(String, String),
    /// Two characters of a key swapped (a misspelling).
    Misspell(usize, usize),
    Bytes(Vec<ByteEdit>),
}

/// TOML values of every type and size that a configuration key may be handed.
pub fn toml_value() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "0",
            "-1",
            "18446744073709551615",
            "9223372036854775807",
            "9223372036854775808",
            "1e400",
            "nan",
            "inf",
            "1.5",
            "true",
            r#""""#,
            r#""0.0.0.0:0""#,
            r#""127.0.0.1:8443""#,
            r#""[::1]:70000""#,
            r#""https://x""#,
            r#""http://x""#,
            r#""cell-01""#,
            r#""ćęłł""#,
            r#""\u0000""#,
            "[]",
            r#"["a", 1]"#,
            "{}",
            "{ a = 1 }",
            "1979-05-27T07:32:00Z",
            "'''multi\nline'''",
            r#""unterminated"#,
        ])
        .prop_map(String::from),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        "[a-z0-9 ._:/-]{0,30}".prop_map(|s| format!("{s:?}")),
    ]
}

pub fn toml_edit() -> impl Strategy<Value = TomlEdit> {
    prop_oneof![
        2 => any::<usize>().prop_map(TomlEdit::DropLine),
        1 => any::<usize>().prop_map(TomlEdit::DuplicateLine),
        4 => (any::<usize>(), toml_value()).prop_map(|(i, v)| TomlEdit::SetValue(i, v)),
        1 => ("[a-z_]{1,20}", toml_value()).prop_map(|(k, v)| TomlEdit::AddKey(k, v)),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(i, j)| TomlEdit::Misspell(i, j)),
        2 => prop::collection::vec(byte_edit(), 1..4).prop_map(TomlEdit::Bytes),
    ]
}

/// A configuration input: the valid text, edits of it, or arbitrary text.
#[derive(Debug, Clone)]
pub enum TomlInput {
    Valid,
    Edited(Vec<TomlEdit>),
    Arbitrary(Vec<u8>),
}

pub fn toml_input() -> impl Strategy<Value = TomlInput> {
    prop_oneof![
        1 => Just(TomlInput::Valid),
        12 => prop::collection::vec(toml_edit(), 1..4).prop_map(TomlInput::Edited),
        2 => prop_oneof![
            prop::collection::vec(any::<u8>(), 0..200),
            r#"[a-z_]{1,12} = [0-9a-z"\[\]{}., =\n-]{0,60}"#.prop_map(String::into_bytes),
        ]
        .prop_map(TomlInput::Arbitrary),
    ]
}

/// Whether the edits can only have made the configuration invalid: one key it does not know
/// added, or one `key = value` line duplicated.
pub fn must_refuse(valid: &str, edits: &[TomlEdit]) -> bool {
    let lines: Vec<&str> = valid.lines().collect();
    let known = |k: &str| {
        lines
            .iter()
            .any(|l| l.split('=').next().is_some_and(|n| n.trim() == k))
    };
    match edits {
        [TomlEdit::AddKey(k, _)] => !known(k),
        [TomlEdit::DuplicateLine(i)] => lines
            .get(i % lines.len().max(1))
            .is_some_and(|l| l.contains('=')),
        _ => false,
    }
}

/// The verdict every configuration-loading property shares: the valid text loads, edits that
/// can only have made it invalid are refused, and every refusal is the loader's typed one.
pub fn check_config_verdict<T, E: std::fmt::Display + std::fmt::Debug>(
    valid: &str,
    input: &TomlInput,
    loaded: &Result<T, E>,
    typed: impl Fn(&E) -> bool,
) -> Result<(), TestCaseError> {
    match (input, loaded) {
        (TomlInput::Valid, Err(e)) => prop_assert!(false, "the valid configuration: {e}"),
        (TomlInput::Edited(edits), Ok(_)) => {
            prop_assert!(!must_refuse(valid, edits), "accepted {edits:?}");
        }
        (_, Err(e)) => prop_assert!(typed(e), "untyped refusal {e:?}"),
        _ => {}
    }
    Ok(())
}

/// The text of a configuration input.
pub fn toml_text(valid: &str, input: &TomlInput) -> Vec<u8> {
    let edits = match input {
        TomlInput::Valid => return valid.as_bytes().to_vec(),
        TomlInput::Arbitrary(b) => return b.clone(),
        TomlInput::Edited(e) => e,
    };
    let mut lines: Vec<String> = valid.lines().map(String::from).collect();
    let mut raw: Option<Vec<u8>> = None;
    for e in edits {
        let n = lines.len().max(1);
        match e {
            TomlEdit::DropLine(i) if !lines.is_empty() => {
                lines.remove(i % n);
            }
            TomlEdit::DuplicateLine(i) if !lines.is_empty() => {
                let l = lines[i % n].clone();
                lines.insert(i % n, l);
            }
            TomlEdit::SetValue(i, v) if !lines.is_empty() => {
                let l = &mut lines[i % n];
                if let Some((k, _)) = l.split_once('=') {
                    *l = format!("{k}= {v}");
                }
            }
            TomlEdit::AddKey(k, v) => lines.push(format!("{k} = {v}")),
            TomlEdit::Misspell(i, j) if !lines.is_empty() => {
                let l = &mut lines[i % n];
                if let Some((k, v)) = l.split_once('=') {
                    let mut key: Vec<char> = k.trim().chars().collect();
                    if key.len() > 1 {
                        let len = key.len();
                        key.swap(j % len, (j + 1) % len);
                    }
                    *l = format!("{} ={v}", key.into_iter().collect::<String>());
                }
            }
            TomlEdit::Bytes(b) => {
                let text = match raw.take() {
                    Some(r) => r,
                    None => lines.join("\n").into_bytes(),
                };
                let edited = apply(&text, b);
                lines = String::from_utf8_lossy(&edited)
                    .lines()
                    .map(String::from)
                    .collect();
                raw = Some(edited);
            }
            _ => {}
        }
    }
    match raw {
        // The last edit was on bytes: keep them as they are (they may not be UTF-8).
        Some(b) if matches!(edits.last(), Some(TomlEdit::Bytes(_))) => b,
        _ => lines.join("\n").into_bytes(),
    }
}

/// Where a property writes the file it loads each case: a memory file system when there is one
/// (rewriting one file 10^5 times on a disk costs more than loading it), else the temp dir.
pub fn scratch_base() -> std::path::PathBuf {
    let memory = std::path::Path::new(MEMORY_FS);
    if memory.is_dir() {
        memory.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// The memory file system of Linux.
const MEMORY_FS: &str = "/dev/shm";
