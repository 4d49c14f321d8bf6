//! Loading a server's configuration: one TOML file, then `CELLBIND_<FIELD>` environment
//! overrides (figment), the same way for every Cellbind server, strictly: a key the
//! configuration type does not know (at the top level or inside a table such as the control
//! plane's `[[cells]]`) is an error naming it, the file and the nearest valid key. The known
//! keys come from the type's JSON schema (`schemars`), which also feeds `--check-config`
//! (the effective configuration, secrets redacted) and the generated configuration reference.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use figment::Figment;
use figment::providers::{Env, Format as _, Toml};
use figment::value::{Dict, Value as FigValue};
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// Prefix of the environment variables that override configuration fields.
pub const ENV_PREFIX: &str = "CELLBIND_";

/// Smallest Jaro-Winkler similarity for a valid key to be suggested for an unknown one.
const SUGGESTION_SIMILARITY: f64 = 0.8;

/// Reads `path` (TOML; a missing file is an error), then `CELLBIND_*` overrides, into `T`.
/// A key of the file that `T` does not know is an error; only `CELLBIND_<KEY>` variables of
/// `T`'s own top-level keys are read, so other `CELLBIND_*` variables (process plumbing such
/// as [`crate::EXIT_ON_STDIN_EOF_ENV`], test switches) never break loading.
pub fn load<T: DeserializeOwned + JsonSchema>(path: &Path) -> Result<T, ConfigError> {
    let schema = cached_root_schema::<T>();
    let file = Figment::from(Toml::file_exact(path))
        .extract::<Dict>()
        .map_err(|e| ConfigError(format!("{}: {e}", path.display())))?;
    check_keys(&schema, &file).map_err(|u| ConfigError(u.message(&path.display().to_string())))?;
    let known = top_level_keys(&schema);
    Figment::new()
        .merge(Toml::file_exact(path))
        .merge(Env::prefixed(ENV_PREFIX).filter(move |k| known.iter().any(|n| k == n.as_str())))
        .extract()
        .map_err(|e| ConfigError(format!("{}: {e}", path.display())))
}

/// Parses a TOML string (no environment) into `T`, as strictly as [`load`]; errors name
/// `origin` as the file.
pub fn parse_str<T: DeserializeOwned + JsonSchema>(
    text: &str,
    origin: &str,
) -> Result<T, ConfigError> {
    let schema = cached_root_schema::<T>();
    let table = Figment::from(Toml::string(text))
        .extract::<Dict>()
        .map_err(|e| ConfigError(format!("{origin}: {e}")))?;
    check_keys(&schema, &table).map_err(|u| ConfigError(u.message(origin)))?;
    Figment::from(Toml::string(text))
        .extract()
        .map_err(|e| ConfigError(format!("{origin}: {e}")))
}

/// A configuration file that could not be read or does not describe a valid configuration;
/// the message names the file and the field.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// Refuses two of a server's listeners on one address (port 0, any free port, never clashes):
/// `listeners` names each one by its key, e.g. `[("listen", l), ("management_listen", m)]`.
pub fn distinct_listeners(listeners: &[(&str, std::net::SocketAddr)]) -> Result<(), String> {
    // Each one against those listed before it: the message names the later one first.
    for (i, (key, addr)) in listeners.iter().enumerate() {
        let earlier = listeners.get(..i).unwrap_or_default();
        if let Some((other, _)) = earlier.iter().find(|(_, a)| a == addr && a.port() != 0) {
            return Err(format!("{key} and {other} must differ (both are {addr})"));
        }
    }
    Ok(())
}

/// Serde default of a `u64` field: `#[serde(default = "runtime::config::default_u64::<N>")]`.
pub const fn default_u64<const N: u64>() -> u64 {
    N
}

/// Serde default of a `u32` field: `#[serde(default = "runtime::config::default_u32::<N>")]`.
pub const fn default_u32<const N: u32>() -> u32 {
    N
}

/// Serde default of a `usize` field: `#[serde(default = "runtime::config::default_usize::<N>")]`.
pub const fn default_usize<const N: usize>() -> usize {
    N
}

/// The JSON schema of configuration type `T` (as read: serde defaults make keys optional).
pub fn root_schema<T: JsonSchema>() -> Value {
    schemars::SchemaGenerator::new(schemars::generate::SchemaSettings::draft2020_12())
        .into_root_schema_for::<T>()
        .to_value()
}

/// [`root_schema`] of `T`, generated once per type for the process: it never changes, and the
/// loaders read it on every call (the configuration property tests load 10^5 configurations
/// per server; generating the schema was half of each load).
fn cached_root_schema<T: JsonSchema>() -> Arc<Value> {
    static SCHEMAS: OnceLock<Mutex<HashMap<String, Arc<Value>>>> = OnceLock::new();
    let mut held = SCHEMAS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    held.entry(T::schema_id().into_owned())
        .or_insert_with(|| Arc::new(root_schema::<T>()))
        .clone()
}

/// A key of the file that the configuration type does not know.
#[derive(Debug, Clone, PartialEq, Eq)]
struct UnknownKey {
    /// Where it is: `write_lease_msx`, or `cells[1].endpiont` inside an array of tables.
    path: String,
    /// The nearest valid key at the same place, if any is close.
    suggestion: Option<String>,
}

impl UnknownKey {
    fn message(&self, file: &str) -> String {
        match &self.suggestion {
            Some(s) => format!("unknown key `{}` in {file}; did you mean `{s}`?", self.path),
            None => format!("unknown key `{}` in {file}", self.path),
        }
    }
}

/// The top-level keys `schema` allows.
fn top_level_keys(schema: &Value) -> Vec<String> {
    properties(schema, schema)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

/// Checks every key of `table` (recursively: tables and arrays of tables) against `schema`.
fn check_keys(schema: &Value, table: &Dict) -> Result<(), UnknownKey> {
    check_table(schema, schema, table, "")
}

fn check_table(root: &Value, schema: &Value, table: &Dict, at: &str) -> Result<(), UnknownKey> {
    let Some(props) = properties(root, schema) else {
        // A free-form table (no declared properties): nothing to check.
        return Ok(());
    };
    let mut keys: Vec<&String> = table.keys().collect();
    keys.sort();
    for key in keys {
        let Some(sub) = props.get(key) else {
            return Err(UnknownKey {
                path: format!("{at}{key}"),
                suggestion: nearest(key, props.keys()),
            });
        };
        if let Some(value) = table.get(key) {
            check_value(root, sub, value, &format!("{at}{key}"))?;
        }
    }
    Ok(())
}

fn check_value(root: &Value, schema: &Value, value: &FigValue, at: &str) -> Result<(), UnknownKey> {
    match value {
        FigValue::Dict(_, d) => check_table(root, schema, d, &format!("{at}.")),
        FigValue::Array(_, items) => match items_schema(root, schema) {
            Some(item) => items
                .iter()
                .enumerate()
                .try_for_each(|(i, v)| check_value(root, item, v, &format!("{at}[{i}]"))),
            None => Ok(()),
        },
        _ => Ok(()),
    }
}

/// `schema` with its `$ref` (to `#/$defs/…`) followed.
fn resolve<'a>(root: &'a Value, schema: &'a Value) -> &'a Value {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => r
            .strip_prefix('#')
            .and_then(|p| root.pointer(p))
            .unwrap_or(schema),
        None => schema,
    }
}

/// The declared properties of an object schema (through `$ref`, `anyOf`/`oneOf` such as an
/// `Option`'s).
fn properties<'a>(root: &'a Value, schema: &'a Value) -> Option<&'a Map<String, Value>> {
    let s = resolve(root, schema);
    if let Some(p) = s.get("properties").and_then(Value::as_object) {
        return Some(p);
    }
    alternatives(s).find_map(|a| properties(root, a))
}

/// The item schema of an array schema (through `$ref`, `anyOf`/`oneOf`).
fn items_schema<'a>(root: &'a Value, schema: &'a Value) -> Option<&'a Value> {
    let s = resolve(root, schema);
    if let Some(i) = s.get("items") {
        return Some(i);
    }
    alternatives(s).find_map(|a| items_schema(root, a))
}

fn alternatives(schema: &Value) -> impl Iterator<Item = &Value> {
    ["anyOf", "oneOf"]
        .into_iter()
        .filter_map(|k| schema.get(k).and_then(Value::as_array))
        .flatten()
}

/// The valid key nearest to `key`, when one is close enough to be a likely misspelling.
fn nearest<'a>(key: &str, valid: impl Iterator<Item = &'a String>) -> Option<String> {
    valid
        .map(|v| (strsim::jaro_winkler(key, v), v))
        .filter(|(score, _)| *score >= SUGGESTION_SIMILARITY)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, v)| v.clone())
}

/// The effective configuration `config` as TOML, with every secret-looking value redacted
/// (see [`is_secret_key`]). For `--check-config`.
pub fn effective_toml<T: Serialize>(config: &T) -> Result<String, ConfigError> {
    let mut value = toml::Table::try_from(config)
        .map_err(|e| ConfigError(format!("cannot print the configuration: {e}")))?;
    redact_table(&mut value);
    toml::to_string(&value).map_err(|e| ConfigError(format!("cannot print the configuration: {e}")))
}

/// What a redacted value is printed as.
pub const REDACTED: &str = "<redacted>";

/// Whether a key's value is a secret to keep out of printed configurations: its name ends in a
/// token, password, secret, key or a database URL, and it is not a path (a `*_file`, the TLS
/// key's path) or a public key.
pub fn is_secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    // The last word names what the value is (`admin_token`, `map_key`); a key that merely
    // mentions one (`key_rotation_interval_s`) is not a secret.
    let last = k.rsplit('_').next().unwrap_or_default();
    let secret_like =
        ["token", "password", "secret", "key"].contains(&last) || k.ends_with("database_url");
    let path_or_public = k.ends_with("_file") || k == "tls_key" || k.contains("public_key");
    secret_like && !path_or_public
}

fn redact_table(table: &mut toml::Table) {
    for (k, v) in table.iter_mut() {
        if is_secret_key(k) {
            *v = toml::Value::String(REDACTED.to_owned());
        } else {
            redact_value(v);
        }
    }
}

fn redact_value(v: &mut toml::Value) {
    match v {
        toml::Value::Table(t) => redact_table(t),
        toml::Value::Array(a) => a.iter_mut().for_each(redact_value),
        _ => {}
    }
}

/// The configuration reference of `T` as a Markdown table: key | type | default | meaning
/// (the field's doc comment), then one table per nested table type (e.g. `[[cells]]`).
pub fn reference_markdown<T: JsonSchema>() -> String {
    let root = root_schema::<T>();
    let mut out = String::new();
    let mut nested = Vec::new();
    table_markdown(&root, &root, "", &mut out, &mut nested);
    for (name, schema) in nested {
        out.push_str(&format!("\nEach `{name}` entry:\n\n"));
        let mut deeper = Vec::new();
        table_markdown(&root, &schema, &name, &mut out, &mut deeper);
    }
    out
}

fn table_markdown(
    root: &Value,
    schema: &Value,
    prefix: &str,
    out: &mut String,
    nested: &mut Vec<(String, Value)>,
) {
    let s = resolve(root, schema);
    let required: Vec<&str> = s
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    out.push_str("| key | type | default | meaning |\n|---|---|---|---|\n");
    let Some(props) = properties(root, schema) else {
        return;
    };
    for (key, sub) in props {
        let ty = type_name(root, sub);
        let default = if required.contains(&key.as_str()) {
            "required".to_owned()
        } else {
            match sub.get("default") {
                Some(Value::Null) | None => "unset".to_owned(),
                Some(d) => format!("`{}`", toml_literal(d)),
            }
        };
        let meaning = describe(root, sub);
        out.push_str(&format!(
            "| `{key}` | {ty} | {default} | {} |\n",
            meaning.replace('|', "\\|")
        ));
        if let Some(item) = items_schema(root, sub)
            && properties(root, item).is_some()
        {
            let name = if prefix.is_empty() {
                format!("[[{key}]]")
            } else {
                format!("{prefix}.{key}")
            };
            nested.push((name, item.clone()));
        }
    }
}

/// A field's doc comment on one line (the field's own, else its type's).
fn describe(root: &Value, schema: &Value) -> String {
    let text = schema
        .get("description")
        .or_else(|| resolve(root, schema).get("description"))
        .and_then(Value::as_str)
        .unwrap_or("");
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A short type name for the reference: `string`, `integer`, `boolean`, an enum's values, a
/// list of them.
fn type_name(root: &Value, schema: &Value) -> String {
    let s = resolve(root, schema);
    if let Some(values) = enum_values(s) {
        return values.join(" \\| ");
    }
    let alts: Vec<String> = alternatives(s)
        .filter(|a| a.get("type").and_then(Value::as_str) != Some("null"))
        .map(|a| type_name(root, a))
        .collect();
    if !alts.is_empty() {
        return alts.join(" or ");
    }
    match s.get("type") {
        Some(Value::String(t)) => simple_type(root, s, t),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .filter(|t| *t != "null")
            .map(|t| simple_type(root, s, t))
            .collect::<Vec<_>>()
            .join(" or "),
        _ => "any".to_owned(),
    }
}

fn simple_type(root: &Value, s: &Value, t: &str) -> String {
    match t {
        "array" => match s.get("items") {
            Some(i) if properties(root, i).is_some() => "array of tables".to_owned(),
            Some(i) => format!("list of {}", type_name(root, i)),
            None => "list".to_owned(),
        },
        "object" => "table".to_owned(),
        other => other.to_owned(),
    }
}

/// The values of a string enum (`enum: [...]` or `oneOf` of `const`s).
fn enum_values(s: &Value) -> Option<Vec<String>> {
    if let Some(e) = s.get("enum").and_then(Value::as_array) {
        return Some(e.iter().map(|v| format!("`{}`", toml_literal(v))).collect());
    }
    let consts: Option<Vec<String>> = alternatives(s)
        .map(|a| a.get("const").map(|v| format!("`{}`", toml_literal(v))))
        .collect();
    consts.filter(|c| !c.is_empty())
}

/// A JSON value written as TOML would write it.
fn toml_literal(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(toml_literal).collect::<Vec<_>>().join(", ")
        ),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sample configuration with a nested array of tables.
    #[derive(Debug, serde::Deserialize, serde::Serialize, JsonSchema)]
    struct Sample {
        /// Where to listen.
        listen: String,
        /// Poll interval.
        #[serde(default)]
        poll_ms: u64,
        /// The cells.
        #[serde(default)]
        cells: Vec<Cell>,
        /// A bearer token held inline.
        #[serde(default)]
        admin_token: Option<String>,
        /// A token's path.
        #[serde(default)]
        admin_token_file: Option<String>,
    }

    /// One cell.
    #[derive(Debug, serde::Deserialize, serde::Serialize, JsonSchema)]
    struct Cell {
        /// Its id.
        id: String,
        /// Its endpoint.
        endpoint: String,
    }

    fn write(dir: &tempfile::TempDir, text: &str) -> std::path::PathBuf {
        let p = dir.path().join("c.toml");
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn reads_the_file_and_names_it_on_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(&dir, "listen = \"127.0.0.1:1\"\npoll_ms = 5\n");
        let s: Sample = load(&p).unwrap();
        assert_eq!((s.listen.as_str(), s.poll_ms), ("127.0.0.1:1", 5));

        let missing = dir.path().join("missing.toml");
        let e = load::<Sample>(&missing).unwrap_err();
        assert!(e.0.contains("missing.toml"), "{e}");

        std::fs::write(&p, "poll_ms = 5\n").unwrap();
        let e = load::<Sample>(&p).unwrap_err();
        assert!(e.0.contains("listen"), "{e}");
    }

    #[test]
    fn a_misspelt_top_level_key_is_named_with_the_file_and_the_nearest_key() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(&dir, "listen = \"x\"\npoll_msx = 5\n");
        let e = load::<Sample>(&p).unwrap_err();
        assert_eq!(
            e.0,
            format!(
                "unknown key `poll_msx` in {}; did you mean `poll_ms`?",
                p.display()
            )
        );
    }

    #[test]
    fn a_key_nothing_resembles_gets_no_suggestion() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(&dir, "listen = \"x\"\nzzz = 5\n");
        let e = load::<Sample>(&p).unwrap_err();
        assert_eq!(e.0, format!("unknown key `zzz` in {}", p.display()));
    }

    #[test]
    fn keys_inside_arrays_of_tables_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            &dir,
            "listen = \"x\"\n[[cells]]\nid = \"a\"\nendpoint = \"e\"\n[[cells]]\nid = \"b\"\nendpiont = \"e\"\n",
        );
        let e = load::<Sample>(&p).unwrap_err();
        assert!(
            e.0.contains("unknown key `cells[1].endpiont`") && e.0.contains("`endpoint`?"),
            "{e}"
        );
        let e = parse_str::<Sample>(
            "listen = \"x\"\n[[cells]]\nid = \"a\"\nendpoint = \"e\"\nport = 1\n",
            "inline",
        )
        .unwrap_err();
        assert!(e.0.contains("`cells[0].port` in inline"), "{e}");
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment::Jail's closure type, not ours.
    fn environment_variables_of_unknown_keys_are_ignored_and_known_ones_apply() {
        /// A configuration whose key no other test's type has: the variable this test sets for
        /// the whole process cannot change what the tests loading [`Sample`] read.
        #[derive(Debug, serde::Deserialize, JsonSchema)]
        struct EnvSample {
            /// Where to listen.
            listen: String,
            /// Set from the environment only.
            #[serde(default)]
            env_only_ms: u64,
        }
        let dir = tempfile::tempdir().unwrap();
        let p = write(&dir, "listen = \"x\"\n");
        figment::Jail::expect_with(|jail| {
            jail.set_env("CELLBIND_NOT_A_KEY_OF_SAMPLE", "1");
            jail.set_env("CELLBIND_ENV_ONLY_MS", "9");
            let s: EnvSample = load(&p).map_err(|e| e.0)?;
            assert_eq!((s.listen.as_str(), s.env_only_ms), ("x", 9));
            Ok(())
        });
    }

    #[test]
    fn the_effective_configuration_redacts_secrets_but_not_paths() {
        let s = Sample {
            listen: "x".into(),
            poll_ms: 1,
            cells: vec![],
            admin_token: Some("hunter2".into()),
            admin_token_file: Some("admin.token".into()),
        };
        let text = effective_toml(&s).unwrap();
        assert!(!text.contains("hunter2"), "{text}");
        assert!(
            text.contains("admin.token") && text.contains(REDACTED),
            "{text}"
        );
        let back: toml::Table = toml::from_str(&text).unwrap();
        assert_eq!(back["poll_ms"].as_integer(), Some(1));
        assert!(is_secret_key("database_url") && !is_secret_key("database_url_file"));
        assert!(!is_secret_key("tls_key") && !is_secret_key("map_public_key"));
        // Named for a key, not holding one: printed as they are.
        assert!(
            !is_secret_key("key_rotation_interval_s") && !is_secret_key("kid_refetch_cooldown_ms")
        );
        assert!(is_secret_key("admin_token") && is_secret_key("signing_key"));
    }

    #[test]
    fn the_reference_lists_every_key_with_its_doc_and_the_nested_tables() {
        let md = reference_markdown::<Sample>();
        assert!(
            md.contains("| `listen` | string | required | Where to listen. |"),
            "{md}"
        );
        assert!(
            md.contains("| `poll_ms` | integer | `0` | Poll interval. |"),
            "{md}"
        );
        assert!(md.contains("Each `[[cells]]` entry"), "{md}");
        assert!(
            md.contains("| `endpoint` | string | required | Its endpoint. |"),
            "{md}"
        );
    }

    #[test]
    fn no_two_listeners_share_an_address() {
        let a: std::net::SocketAddr = "127.0.0.1:9101".parse().unwrap();
        let b: std::net::SocketAddr = "127.0.0.1:8443".parse().unwrap();
        let any: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
        assert!(distinct_listeners(&[("listen", b), ("management_listen", a)]).is_ok());
        let e = distinct_listeners(&[
            ("listen", b),
            ("internal_listen", a),
            ("management_listen", b),
        ])
        .unwrap_err();
        assert!(e.contains("management_listen and listen"), "{e}");
        assert!(distinct_listeners(&[("listen", any), ("management_listen", any)]).is_ok());
    }
}
