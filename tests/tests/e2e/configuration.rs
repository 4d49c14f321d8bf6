//! The servers' configuration as an operator meets it: strict files (a misspelt key stops the
//! binary and names the key, the file and the nearest valid key), `--check-config`, JSON logs,
//! and `docs/CONFIGURATION.md`, generated from the four configuration types (regenerate it
//! with `scripts/gen-config-docs`).
//!
//! The binaries must be built first: `cargo build --workspace --bins`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use runtime::config::reference_markdown;

/// Set to `1` to rewrite `docs/CONFIGURATION.md` instead of checking it.
const BLESS_ENV: &str = "CELLBIND_BLESS";

/// The generated configuration reference.
fn reference() -> String {
    let mut out = String::from(
        "# Configuration reference\n\n\
         <!-- Generated from the servers' configuration types by `scripts/gen-config-docs`; \
         do not edit by hand. -->\n\n\
         Every server reads one TOML file (`--config PATH.toml`), then `CELLBIND_<KEY>` \
         environment variables that override top-level keys (e.g. `CELLBIND_LOG_FORMAT=json`). \
         A key the server does not know is an error naming the key, the file and the nearest \
         valid key. `--check-config` validates the file as a start would, prints the effective \
         configuration (defaults filled in, overrides applied, secrets redacted) as TOML and \
         exits: 0 when valid, 1 otherwise. Every file the configuration names must exist and be \
         readable (but `kek_file` and `map_key_file`, which the first start creates) and a \
         secret file must grant nothing to others, or `--check-config` (and a start) exits 1 \
         with one line naming the key and the file. Keys ending in `_file` name files holding \
         secrets, never the secrets themselves.\n",
    );
    let sections = [
        (
            "cellbind-auth-service",
            reference_markdown::<auth_service::Config>(),
        ),
        (
            "cellbind-cell-endpoint (the edge)",
            reference_markdown::<cell_endpoint::Config>(),
        ),
        (
            "cellbind-control-plane",
            reference_markdown::<control_plane::config::Config>(),
        ),
        (
            "cellbind-demo-app",
            reference_markdown::<demo_app::Config>(),
        ),
    ];
    for (name, table) in sections {
        out.push_str(&format!("\n## {name}\n\n{table}"));
    }
    out
}

fn doc_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/CONFIGURATION.md")
}

#[test]
fn the_configuration_reference_is_current() {
    let text = reference();
    if std::env::var(BLESS_ENV).is_ok_and(|v| v == "1") {
        std::fs::write(doc_path(), &text).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(doc_path()).unwrap_or_default();
    assert!(
        committed == text,
        "docs/CONFIGURATION.md is stale: run scripts/gen-config-docs"
    );
}

#[test]
fn the_reference_documents_every_key() {
    let text = reference();
    for line in text.lines().filter(|l| l.starts_with("| `")) {
        assert!(
            !line.ends_with("|  |"),
            "a key without a doc comment: {line}"
        );
    }
    assert!(text.contains("Each `[[cells]]` entry"), "{text}");
}

/// How a start uses a file a configuration names (as `runtime::server::FileUse`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Use {
    /// Read: must exist (a certificate, a CA).
    Read,
    /// A secret: must exist and grant nothing to others.
    Secret,
    /// A secret the start creates when missing.
    MadeAtStart,
}

/// A server binary and a valid configuration of it.
struct Server {
    bin: &'static str,
    valid: &'static str,
    /// A key of `valid` to misspell, and its misspelling.
    misspelt: (&'static str, &'static str),
    /// Every file `valid` names: its key (as the server names it), its path, its use.
    files: &'static [(&'static str, &'static str, Use)],
}

const SERVERS: [Server; 4] = [
    Server {
        bin: "cellbind-auth-service",
        valid: r#"cell_id = "cell-01"
listen = "127.0.0.1:1"
internal_listen = "127.0.0.1:2"
issuer = "https://127.0.0.1:1"
data_dir = "data"
kek_file = "kek"
admin_token_file = "admin.token"
feed_token_file = "feed.token"
edge_token_file = "edge.token"
tls_cert = "cert.pem"
tls_key = "key.pem"
edge_write_lease_ms = 30000
"#,
        misspelt: ("edge_write_lease_ms", "edge_write_lease_msx"),
        files: &[
            ("kek_file", "kek", Use::MadeAtStart),
            ("admin_token_file", "admin.token", Use::Secret),
            ("feed_token_file", "feed.token", Use::Secret),
            ("edge_token_file", "edge.token", Use::Secret),
            ("tls_cert", "cert.pem", Use::Read),
            ("tls_key", "key.pem", Use::Secret),
        ],
    },
    Server {
        bin: "cellbind-cell-endpoint",
        valid: r#"cell_id = "cell-01"
instance_id = "edge-1"
listen = "127.0.0.1:1"
public_url = "https://127.0.0.1:1"
auth_service_url = ["https://127.0.0.1:2", "https://127.0.0.2:2"]
feed_url = "https://127.0.0.1:3"
app_url = "https://127.0.0.1:4"
feed_token_file = "feed.token"
app_token_file = "app.token"
edge_token_file = "edge.token"
state_dir = "state"
tls_cert = "cert.pem"
tls_key = "key.pem"
ca_cert = "ca.pem"
write_lease_ms = 30000
"#,
        misspelt: ("write_lease_ms", "write_lease_msx"),
        files: &[
            ("feed_token_file", "feed.token", Use::Secret),
            ("app_token_file", "app.token", Use::Secret),
            ("edge_token_file", "edge.token", Use::Secret),
            ("tls_cert", "cert.pem", Use::Read),
            ("tls_key", "key.pem", Use::Secret),
            ("ca_cert", "ca.pem", Use::Read),
        ],
    },
    Server {
        bin: "cellbind-control-plane",
        valid: r#"listen = "127.0.0.1:1"
data_dir = "data"
map_key_file = "map.key"
publish_dir = "publish"
admin_token_file = "admin.token"
tls_cert = "cert.pem"
tls_key = "key.pem"

[[cells]]
id = "cell-01"
endpoint = "https://127.0.0.1:1"
auth_service_url = "https://127.0.0.1:2"
tls_cert_file = "cell-01.pem"
"#,
        // Inside an array of tables.
        misspelt: ("endpoint = ", "endpiont = "),
        files: &[
            ("map_key_file", "map.key", Use::MadeAtStart),
            ("admin_token_file", "admin.token", Use::Secret),
            ("tls_cert", "cert.pem", Use::Read),
            ("tls_key", "key.pem", Use::Secret),
            ("cells[cell-01].tls_cert_file", "cell-01.pem", Use::Read),
        ],
    },
    Server {
        bin: "cellbind-demo-app",
        valid: r#"cell_id = "cell-01"
listen = "127.0.0.1:1"
internal_listen = "127.0.0.1:2"
tls_cert = "cert.pem"
tls_key = "key.pem"
data_dir = "data"
app_token_file = "app.token"
internal_token_file = "app-internal.token"
"#,
        misspelt: ("internal_token_file", "internal_tokn_file"),
        files: &[
            ("app_token_file", "app.token", Use::Secret),
            ("internal_token_file", "app-internal.token", Use::Secret),
            ("tls_cert", "cert.pem", Use::Read),
            ("tls_key", "key.pem", Use::Secret),
        ],
    },
];

/// Writes every file of `server.files` into `dir` (placeholder contents): secrets 0600, the
/// others 0644.
fn write_files(dir: &Path, server: &Server) {
    use std::os::unix::fs::PermissionsExt as _;
    for (_, file, used) in server.files {
        let p = dir.join(file);
        std::fs::write(&p, "placeholder\n").unwrap();
        let mode = if *used == Use::Read { 0o644 } else { 0o600 };
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
}

/// The server whose binary is `bin`.
fn server(bin: &str) -> &'static Server {
    SERVERS.iter().find(|s| s.bin == bin).unwrap()
}

/// Runs `bin` with `args` and `config` written to a fresh directory (its working directory,
/// holding every file the server's valid configuration names), stdin closed.
fn run(bin: &str, config: &str, args: &[&str]) -> (Output, PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    write_files(dir.path(), server(bin));
    let path = dir.path().join("server.toml");
    std::fs::write(&path, config).unwrap();
    let exe = devfleet::test_bin_dir().unwrap().join(bin);
    assert!(
        exe.exists(),
        "{} is missing: run `cargo build --workspace --bins` first",
        exe.display()
    );
    let out = Command::new(&exe)
        .arg("--config")
        .arg(&path)
        .args(args)
        .current_dir(dir.path())
        .env("CELLBIND_EXIT_ON_STDIN_EOF", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (out, path, dir)
}

#[test]
fn a_misspelt_key_stops_every_server_naming_it_the_file_and_the_nearest_key() {
    for s in &SERVERS {
        let bad = s.valid.replace(s.misspelt.0, s.misspelt.1);
        assert_ne!(bad, s.valid, "{}", s.bin);
        for args in [&[][..], &["--check-config"][..]] {
            let (out, path, _dir) = run(s.bin, &bad, args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{} {args:?}: {stderr}", s.bin);
            let wrong = s.misspelt.1.trim_end_matches(" = ");
            let right = s.misspelt.0.trim_end_matches(" = ");
            assert!(
                stderr.contains("unknown key `")
                    && stderr.contains(wrong)
                    && stderr.contains(&format!("did you mean `{right}`?"))
                    && stderr.contains(&path.display().to_string()),
                "{} {args:?}: {stderr}",
                s.bin
            );
        }
    }
}

#[test]
fn a_published_example_map_key_stops_the_auth_service_naming_the_reason() {
    let s = &SERVERS[0];
    for (key, says) in [
        (
            protocol::map_key::RFC8037_EXAMPLE_KEY,
            "map_public_key: RFC 8037's example key",
        ),
        (
            // RFC 8032's TEST 2 key: its private key is published too.
            "PUAXw-hDiVqStwqnTRt-vJyYLM8uxJaMwM1V8Sr0Zgw",
            "map_public_key: RFC 8032's TEST 2 key",
        ),
    ] {
        let config = format!("{}map_public_key = \"{key}\"\n", s.valid);
        for args in [&[][..], &["--check-config"][..]] {
            let (out, _path, _dir) = run(s.bin, &config, args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
            assert!(
                stderr.contains(says) && stderr.contains("private key is published"),
                "{args:?}: {stderr}"
            );
            println!("{} {args:?} with {key}: exit 1, {}", s.bin, stderr.trim());
        }
    }
    // The same through the environment override an orchestrator sets.
    let dir = tempfile::tempdir().unwrap();
    write_files(dir.path(), s);
    let path = dir.path().join("auth.toml");
    std::fs::write(&path, s.valid).unwrap();
    let out = Command::new(devfleet::test_bin_dir().unwrap().join(s.bin))
        .arg("--config")
        .arg(&path)
        .arg("--check-config")
        .current_dir(dir.path())
        .env(
            "CELLBIND_MAP_PUBLIC_KEY",
            protocol::map_key::RFC8037_EXAMPLE_KEY,
        )
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("RFC 8037"), "{stderr}");
}

#[test]
fn the_app_refuses_the_cells_admin_token_naming_its_own_token_key() {
    let s = &SERVERS[3];
    let config = format!("{}admin_token_file = \"admin.token\"\n", s.valid);
    for args in [&[][..], &["--check-config"][..]] {
        let (out, _path, _dir) = run(s.bin, &config, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("admin_token_file is refused")
                && stderr.contains("internal_token_file"),
            "{args:?}: {stderr}"
        );
        println!(
            "{} {args:?} with admin_token_file: exit 1, {}",
            s.bin,
            stderr.trim()
        );
    }
}

#[test]
fn check_config_prints_the_effective_configuration_as_toml() {
    for s in &SERVERS {
        let (out, _path, _dir) = run(s.bin, s.valid, &["--check-config"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}: {}",
            s.bin,
            String::from_utf8_lossy(&out.stderr)
        );
        let effective: toml::Table = toml::from_str(&stdout)
            .unwrap_or_else(|e| panic!("{}: not TOML ({e}): {stdout}", s.bin));
        // Defaults are filled in.
        assert_eq!(
            effective.get("log_format").and_then(|v| v.as_str()),
            Some("text"),
            "{}: {stdout}",
            s.bin
        );
    }
}

#[test]
fn check_config_applies_environment_overrides_of_known_keys_only() {
    let s = &SERVERS[3];
    let dir = tempfile::tempdir().unwrap();
    write_files(dir.path(), s);
    let path = dir.path().join("app.toml");
    std::fs::write(&path, s.valid).unwrap();
    let out = Command::new(devfleet::test_bin_dir().unwrap().join(s.bin))
        .arg("--config")
        .arg(&path)
        .arg("--check-config")
        .current_dir(dir.path())
        .env("CELLBIND_LOG_FORMAT", "json")
        .env("CELLBIND_TEST_STORE", "postgres")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let effective: toml::Table = toml::from_str(&stdout).unwrap();
    assert_eq!(
        effective.get("log_format").and_then(|v| v.as_str()),
        Some("json")
    );
}

#[test]
fn a_json_format_server_writes_json_log_lines() {
    // The demo app cannot load its TLS certificate here (a placeholder), so it logs its failure
    // and stops; every log line before the final `{name}: {error}` line is one JSON object.
    let s = &SERVERS[3];
    let config = format!("{}log_format = \"json\"\n", s.valid);
    let (out, _path, _dir) = run(s.bin, &config, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    let (last, logs) = lines.split_last().unwrap();
    assert!(last.starts_with("cellbind-demo-app: "), "{stderr}");
    assert!(!logs.is_empty(), "no log line: {stderr}");
    for line in logs {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        assert!(
            v.get("level").is_some() && v.get("fields").is_some(),
            "{line}"
        );
    }
    let error: serde_json::Value = serde_json::from_str(logs[logs.len() - 1]).unwrap();
    assert_eq!(error["level"], "ERROR", "{stderr}");
}

/// Runs `bin --config server.toml [args]` in `dir` (its working directory), stdin closed.
fn run_in(dir: &Path, bin: &str, config: &str, args: &[&str]) -> Output {
    let path = dir.join("server.toml");
    std::fs::write(&path, config).unwrap();
    Command::new(devfleet::test_bin_dir().unwrap().join(bin))
        .arg("--config")
        .arg(&path)
        .args(args)
        .current_dir(dir)
        .env("CELLBIND_EXIT_ON_STDIN_EOF", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Runs `server` in `dir` with `args` and asserts its exit code is `code` (`what` says which
/// case, for the failure message); answers its stderr and whether its stdout was empty.
fn exits_with(dir: &Path, server: &Server, args: &[&str], code: i32, what: &str) -> (String, bool) {
    let out = run_in(dir, server.bin, server.valid, args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(code),
        "{} {what} {args:?}: {stderr}",
        server.bin
    );
    (stderr, out.stdout.is_empty())
}

/// ATTACKS A30: for each secret file `server`'s configuration names, made readable by others
/// (the other secrets 0600): `--check-config` and a start exit 1 naming the key and the file;
/// made group-readable (0640, how Kubernetes mounts a secret with an `fsGroup`) it passes.
fn a_secret_file_others_can_read_is_refused(server: &Server, secrets: &[(&str, &str)]) {
    use std::os::unix::fs::PermissionsExt as _;
    for (key, file) in secrets {
        let dir = tempfile::tempdir().unwrap();
        write_files(dir.path(), server);
        let exposed = dir.path().join(file);
        std::fs::set_permissions(&exposed, std::fs::Permissions::from_mode(0o644)).unwrap();
        for args in [&["--check-config"][..], &[][..]] {
            let (stderr, _) = exits_with(dir.path(), server, args, 1, key);
            assert!(
                stderr.contains(&format!("{key}: {file} is readable by others (mode 0644)")),
                "{} {key} {args:?}: {stderr}",
                server.bin
            );
        }
        std::fs::set_permissions(&exposed, std::fs::Permissions::from_mode(0o640)).unwrap();
        exits_with(
            dir.path(),
            server,
            &["--check-config"],
            0,
            &format!("{key} 0640"),
        );
    }
}

#[test]
fn the_auth_service_refuses_a_secret_file_others_can_read() {
    a_secret_file_others_can_read_is_refused(
        &SERVERS[0],
        &[
            ("kek_file", "kek"),
            ("admin_token_file", "admin.token"),
            ("feed_token_file", "feed.token"),
            ("edge_token_file", "edge.token"),
            ("tls_key", "key.pem"),
        ],
    );
}

#[test]
fn the_edge_refuses_a_secret_file_others_can_read() {
    a_secret_file_others_can_read_is_refused(
        &SERVERS[1],
        &[
            ("feed_token_file", "feed.token"),
            ("app_token_file", "app.token"),
            ("edge_token_file", "edge.token"),
            ("tls_key", "key.pem"),
        ],
    );
}

#[test]
fn the_control_plane_refuses_a_secret_file_others_can_read() {
    a_secret_file_others_can_read_is_refused(
        &SERVERS[2],
        &[
            ("map_key_file", "map.key"),
            ("admin_token_file", "admin.token"),
            ("tls_key", "key.pem"),
        ],
    );
}

#[test]
fn the_demo_app_refuses_a_secret_file_others_can_read() {
    a_secret_file_others_can_read_is_refused(
        &SERVERS[3],
        &[
            ("app_token_file", "app.token"),
            ("internal_token_file", "app-internal.token"),
            ("tls_key", "key.pem"),
        ],
    );
}

/// Every file `server`'s valid configuration names that the start reads without creating it,
/// missing (the others in place): `--check-config` and a start exit 1 with one line naming the
/// key and the file; replaced by a folder, the same naming "is not a file". A secret the start
/// creates when it is missing (the key-encryption key, the map signing key) may be missing.
/// With every file in place, `--check-config` exits 0.
fn a_missing_file_is_refused_naming_the_key_and_the_file(server: &Server) {
    let dir = tempfile::tempdir().unwrap();
    write_files(dir.path(), server);
    exits_with(
        dir.path(),
        server,
        &["--check-config"],
        0,
        "with every file",
    );
    for (key, file, used) in server.files {
        let dir = tempfile::tempdir().unwrap();
        write_files(dir.path(), server);
        std::fs::remove_file(dir.path().join(file)).unwrap();
        if *used == Use::MadeAtStart {
            let what = format!("without {key} (made at start)");
            exits_with(dir.path(), server, &["--check-config"], 0, &what);
            println!(
                "{} --check-config without {key}: exit 0 (made at start)",
                server.bin
            );
            continue;
        }
        for args in [&["--check-config"][..], &[][..]] {
            let (stderr, no_stdout) =
                exits_with(dir.path(), server, args, 1, &format!("without {key}"));
            let line = format!("{}: {key}: {file} does not exist", server.bin);
            assert!(
                stderr.lines().any(|l| l == line),
                "{} without {key} {args:?}: wanted the line {line:?} in {stderr}",
                server.bin
            );
            if args.is_empty() {
                // The start stopped before serving: nothing but its failure on stderr.
                assert!(
                    stderr.lines().last() == Some(line.as_str()),
                    "{} without {key}: {stderr}",
                    server.bin
                );
            } else {
                assert_eq!(stderr.trim_end(), line, "{} {args:?}", server.bin);
                assert!(no_stdout, "{} {args:?}", server.bin);
                println!(
                    "{} --check-config without {key}: exit 1, {line}",
                    server.bin
                );
            }
        }
        std::fs::create_dir(dir.path().join(file)).unwrap();
        let (stderr, _) = exits_with(
            dir.path(),
            server,
            &["--check-config"],
            1,
            &format!("{key} a folder"),
        );
        assert!(
            stderr.contains(&format!("{key}: {file} is not a file")),
            "{} {key} a folder: {stderr}",
            server.bin
        );
    }
}

#[test]
fn the_auth_service_refuses_a_missing_file_naming_its_key() {
    a_missing_file_is_refused_naming_the_key_and_the_file(&SERVERS[0]);
}

#[test]
fn the_edge_refuses_a_missing_file_naming_its_key() {
    a_missing_file_is_refused_naming_the_key_and_the_file(&SERVERS[1]);
}

#[test]
fn the_control_plane_refuses_a_missing_file_naming_its_key() {
    a_missing_file_is_refused_naming_the_key_and_the_file(&SERVERS[2]);
}

#[test]
fn the_demo_app_refuses_a_missing_file_naming_its_key() {
    a_missing_file_is_refused_naming_the_key_and_the_file(&SERVERS[3]);
}
