//! OpenAPI support (feature `openapi`): the schemas of the validated identifiers (their
//! patterns and lengths are the constructors' rules, so a generated request is valid exactly
//! when the server would parse it), the security schemes, and the typed error answers every
//! published document shares.

use std::borrow::Cow;

use serde_json::{Value, json};
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{KnownFormat, RefOr, SchemaFormat};
use utoipa::{PartialSchema, ToSchema};

use crate::error::{ErrorBody, ErrorCode};

use crate::http::SESSION_COOKIE;
use crate::ids::Kid;
use crate::ids::{
    CELL_ID_MAX_BYTES, CONTRACTOR_ID_MAX_BYTES, CellId, ContractorId, KID_MAX_BYTES,
    LOGIN_MAX_BYTES, Login, MAX_TOKEN_HEADER_BYTES, PASSWORD_MAX_BYTES, Password, SESSION_ID_CHARS,
    SUBJECT_ID_MAX_BYTES, SessionId, SessionToken, SubjectId,
};
use crate::map::SpkiPin;

/// Name of the bearer session scheme (`Authorization: Bearer <session>`).
pub const BEARER_SESSION: &str = "bearerSession";
/// Name of the session cookie scheme (the desk).
pub const SESSION_COOKIE_SCHEME: &str = "sessionCookie";
/// Name of the admin token scheme (`Authorization: Bearer <admin token>`).
pub const ADMIN_TOKEN: &str = "adminToken";
/// Name of a cell app's internal token scheme (`Authorization: Bearer <app internal token>`).
pub const APP_INTERNAL_TOKEN: &str = "appInternalToken";

fn string_schema(
    description: &str,
    pattern: Option<&str>,
    min: usize,
    max: usize,
    format: Option<KnownFormat>,
) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(description))
        .pattern(pattern)
        .min_length(Some(min))
        .max_length(Some(max))
        .format(format.map(SchemaFormat::KnownFormat))
        .into()
}

macro_rules! string_schema {
    ($ty:ty, $name:literal, $desc:literal, $pattern:expr, $min:expr, $max:expr, $format:expr) => {
        impl PartialSchema for $ty {
            fn schema() -> RefOr<Schema> {
                string_schema($desc, $pattern, $min, $max, $format)
            }
        }
        impl ToSchema for $ty {
            fn name() -> Cow<'static, str> {
                Cow::Borrowed($name)
            }
        }
    };
}

string_schema!(
    CellId,
    "CellId",
    "A cell id: `cell-` then lowercase letters, digits and `-`.",
    Some("^cell-[a-z0-9-]+$"),
    6,
    CELL_ID_MAX_BYTES,
    None
);
string_schema!(
    ContractorId,
    "ContractorId",
    "A contractor id: `c-` then lowercase letters, digits and `-`.",
    Some("^c-[a-z0-9-]+$"),
    3,
    CONTRACTOR_ID_MAX_BYTES,
    None
);
string_schema!(
    SubjectId,
    "SubjectId",
    "A technician or dispatcher id (the `sub` claim).",
    Some("^[A-Za-z0-9_.@-]+$"),
    1,
    SUBJECT_ID_MAX_BYTES,
    None
);
string_schema!(
    Login,
    "Login",
    "A login name within a contractor: printable ASCII without spaces.",
    Some("^[!-~]+$"),
    1,
    LOGIN_MAX_BYTES,
    None
);
string_schema!(
    Kid,
    "Kid",
    "A signing key id.",
    Some("^[A-Za-z0-9_-]+$"),
    1,
    KID_MAX_BYTES,
    None
);
string_schema!(
    SessionId,
    "SessionId",
    "A session id (`jti`): 128 random bits as base64url without padding.",
    Some("^[A-Za-z0-9_-]{22}$"),
    SESSION_ID_CHARS,
    SESSION_ID_CHARS,
    None
);
string_schema!(
    SessionToken,
    "SessionToken",
    "A compact-JWS session token or transfer ticket. Never log it.",
    Some("^[A-Za-z0-9_.-]+$"),
    1,
    MAX_TOKEN_HEADER_BYTES,
    None
);
string_schema!(
    Password,
    "Password",
    "A password, at most 1024 bytes (UTF-8).",
    None,
    1,
    PASSWORD_MAX_BYTES,
    Some(KnownFormat::Password)
);

string_schema!(
    SpkiPin,
    "SpkiPin",
    "The SHA-256 of a certificate's DER SubjectPublicKeyInfo, base64url without padding.",
    Some("^[A-Za-z0-9_-]{43}$"),
    43,
    43,
    None
);

/// The security schemes of the published documents: the bearer session, the desk's session
/// cookie, the admin token and an app's internal token. Used as `modifiers(&SecuritySchemes)`.
#[derive(Debug, Clone, Copy)]
pub struct SecuritySchemes;

impl utoipa::Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            BEARER_SESSION,
            SecurityScheme::Http(
                Http::builder()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .description(Some(
                        "A session token from sign-in, renewal or rebind (field clients).",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            SESSION_COOKIE_SCHEME,
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
                SESSION_COOKIE,
                "The desk's HttpOnly session cookie; an unsafe method also needs the CSRF \
                 proof (the CSRF cookie echoed in `x-cellbind-csrf`).",
            ))),
        );
        components.add_security_scheme(
            ADMIN_TOKEN,
            SecurityScheme::Http(
                Http::builder()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("The fleet's admin token (operators and cellctl)."))
                    .build(),
            ),
        );
        components.add_security_scheme(
            APP_INTERNAL_TOKEN,
            SecurityScheme::Http(
                Http::builder()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "A cell app's own internal token (its migration interface: cellctl \
                         migrate), never the cell's admin token.",
                    ))
                    .build(),
            ),
        );
    }
}

/// The HTTP methods of an OpenAPI path item, in the order the documents list them.
pub const METHODS: [&str; 7] = ["get", "put", "post", "delete", "options", "head", "patch"];

/// The codes an error answer's description names (each as `` `CODE` ``), in [`ErrorCode::ALL`]
/// order.
fn codes_named(description: &str) -> Vec<ErrorCode> {
    ErrorCode::ALL
        .into_iter()
        .filter(|c| description.contains(&format!("`{}`", c.as_str())))
        .collect()
}

/// The schema of an error answer that may carry exactly `codes`: the [`ErrorBody`] with its
/// `error` member narrowed to them.
fn error_schema(codes: &[ErrorCode]) -> Value {
    json!({
        "allOf": [
            {"$ref": "#/components/schemas/ErrorBody"},
            {
                "type": "object",
                "properties": {
                    "error": {"enum": codes.iter().map(|c| c.as_str()).collect::<Vec<_>>()}
                }
            }
        ]
    })
}

/// Adds an error answer to every operation `select` picks (by path and method): `status` with
/// `codes`, and `why` in its description. An answer already documented for that status gains
/// the codes (its description the sentence).
pub fn add_errors(
    doc: &mut Value,
    select: impl Fn(&str, &str) -> bool,
    status: u16,
    codes: &[ErrorCode],
    why: &str,
) {
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else {
        return;
    };
    let named: String = codes
        .iter()
        .map(|c| format!("`{}`", c.as_str()))
        .collect::<Vec<_>>()
        .join(", ");
    for (path, item) in paths.iter_mut() {
        for method in METHODS {
            if !select(path, method) {
                continue;
            }
            let Some(responses) = item
                .get_mut(method)
                .and_then(|op| op.get_mut("responses"))
                .and_then(Value::as_object_mut)
            else {
                continue;
            };
            let key = status.to_string();
            match responses.get_mut(&key) {
                Some(existing) => {
                    let before = existing
                        .get("description")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    let text = format!("{before} {named}: {why}");
                    existing["description"] = Value::String(text.trim().to_owned());
                }
                None => {
                    responses.insert(key, json!({"description": format!("{named}: {why}")}));
                }
            }
        }
    }
}

/// Unsigned integers (`u-int8` … `u-int64`, what utoipa writes for Rust's unsigned types) as
/// their range instead of a format no tool knows: `int64` would be wrong (a `u64` goes past
/// it), and schemathesis, for one, reads `int64` as that range.
fn unsigned_ranges(value: &mut Value) {
    match value {
        Value::Object(m) => {
            let max = match m.get("format").and_then(Value::as_str) {
                Some("u-int8") => Some(u64::from(u8::MAX)),
                Some("u-int16") => Some(u64::from(u16::MAX)),
                Some("u-int32") => Some(u64::from(u32::MAX)),
                Some("u-int64") => Some(u64::MAX),
                _ => None,
            };
            if let Some(max) = max {
                m.remove("format");
                m.insert("maximum".into(), Value::from(max));
            }
            m.values_mut().for_each(unsigned_ranges);
        }
        Value::Array(a) => a.iter_mut().for_each(unsigned_ranges),
        _ => {}
    }
}

/// Finishes a document for publication: unsigned integers get their range, and every error answer (a status of 400 or more) gets the
/// typed error body as `application/json`, its `error` narrowed to the codes its description
/// names. Returns the statuses of error answers that name no code (`path method status`), which
/// a test refuses: every documented error names the codes it can carry.
pub fn type_error_answers(doc: &mut Value) -> Vec<String> {
    let mut untyped = Vec::new();
    let mut schemas = vec![(ErrorBody::name().into_owned(), ErrorBody::schema())];
    <ErrorBody as ToSchema>::schemas(&mut schemas);
    for (name, schema) in schemas {
        let slot = &mut doc["components"]["schemas"][name.as_str()];
        if slot.is_null() {
            *slot = serde_json::to_value(schema).unwrap_or(Value::Null);
        }
    }
    unsigned_ranges(doc);
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else {
        return untyped;
    };
    for (path, item) in paths.iter_mut() {
        for method in METHODS {
            let Some(responses) = item
                .get_mut(method)
                .and_then(|op| op.get_mut("responses"))
                .and_then(Value::as_object_mut)
            else {
                continue;
            };
            for (status, answer) in responses.iter_mut() {
                if status.as_str() < "400" {
                    continue;
                }
                let description = answer
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let codes = codes_named(description);
                if codes.is_empty() {
                    untyped.push(format!("{path} {method} {status}"));
                    continue;
                }
                answer["content"] = json!({"application/json": {"schema": error_schema(&codes)}});
            }
        }
    }
    untyped
}

/// A document as JSON, ready to be finished and written.
pub fn to_value(doc: &utoipa::openapi::OpenApi) -> Value {
    serde_json::to_value(doc).unwrap_or(Value::Null)
}
