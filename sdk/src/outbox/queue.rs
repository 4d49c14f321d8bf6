//! The persisted queue: the writes as the app's store keeps them (one JSON blob in
//! [`StoreSlot::Outbox`](crate::StoreSlot::Outbox)), its owner, its limits, and the blob's
//! encoding.

use bytes::Bytes;
use http::Method;
use serde::{Deserialize, Serialize};

use protocol::time::UnixSeconds;
use protocol::{ContractorId, SubjectId};

use crate::Error;
use crate::request::Request;
use crate::session::Session;

/// The methods that may be queued (writes).
const WRITE_METHODS: [Method; 4] = [Method::POST, Method::PUT, Method::PATCH, Method::DELETE];

/// Schema version of the outbox blob. Bump it when [`QueuedWrite`] or the blob change shape.
pub const OUTBOX_SCHEMA: u32 = 1;
/// Most writes the outbox holds by default.
pub const DEFAULT_OUTBOX_MAX_WRITES: usize = 100;
/// Most body bytes (all writes together) the outbox holds by default.
pub const DEFAULT_OUTBOX_MAX_BYTES: usize = 1024 * 1024;

/// Why the outbox refuses a user's write or holds its writes back.
pub(crate) const OTHER_OWNER: &str =
    "the outbox holds writes of another user: take them with take_undelivered() first";

/// A write waiting in the outbox (or handed back by [`Client::take_undelivered`](crate::Client::take_undelivered)).
/// `Debug` shows no query or header value, no body and no key.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueuedWrite {
    /// Increasing in the order the writes were queued.
    pub id: u64,
    #[serde(with = "method_name")]
    pub method: Method,
    pub path: String,
    /// Query parameters, unencoded, in order.
    pub query: Vec<(String, String)>,
    /// The caller's extra headers, in order.
    pub headers: Vec<(String, String)>,
    #[serde(with = "base64_body")]
    pub body: Option<Vec<u8>>,
    pub content_type: Option<String>,
    /// Sent on every attempt of this write.
    pub idempotency_key: String,
    pub enqueued_at: UnixSeconds,
}

impl std::fmt::Debug for QueuedWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuedWrite")
            .field("id", &self.id)
            .field("method", &self.method)
            .field("path", &self.path)
            .field("query", &self.query.len())
            .field("headers", &self.headers.len())
            .field("body_bytes", &self.body.as_ref().map(Vec::len))
            .field("enqueued_at", &self.enqueued_at)
            .finish_non_exhaustive()
    }
}

impl QueuedWrite {
    /// The request this write sends (with its idempotency key).
    pub(crate) fn request(&self) -> Request {
        Request {
            method: self.method.clone(),
            path: self.path.clone(),
            query: self.query.clone(),
            headers: self.headers.clone(),
            body: self.body.as_ref().map(|b| {
                let ct = self.content_type.as_deref().unwrap_or(crate::request::JSON);
                (Bytes::from(b.clone()), ct.to_owned())
            }),
            idempotency_key: Some(self.idempotency_key.clone()),
        }
    }

    pub(super) fn body_len(&self) -> usize {
        self.body.as_ref().map_or(0, Vec::len)
    }
}

/// The user an outbox belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Owner {
    pub contractor: ContractorId,
    pub subject: SubjectId,
}

impl Owner {
    pub fn of(s: &Session) -> Self {
        Self {
            contractor: s.info.contractor_id.clone(),
            subject: s.info.subject.clone(),
        }
    }
}

/// The persisted outbox.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Outbox {
    schema: u32,
    pub owner: Option<Owner>,
    /// The id of the next write (ids never repeat, also after the outbox emptied).
    next_id: u64,
    pub entries: Vec<QueuedWrite>,
}

impl Default for Outbox {
    fn default() -> Self {
        Self {
            schema: OUTBOX_SCHEMA,
            owner: None,
            next_id: 1,
            entries: vec![],
        }
    }
}

impl Outbox {
    /// Whether the writes (if any) may be sent under `session`.
    pub fn belongs_to(&self, session: &Session) -> bool {
        self.owner.as_ref() == Some(&Owner::of(session))
    }

    /// Queues `request` (already checked, with its key) for `owner`, within the limits: at
    /// most `max_writes` writes and `max_bytes` body bytes in all.
    pub fn push(
        &mut self,
        owner: Owner,
        request: Request,
        idempotency_key: String,
        now: UnixSeconds,
        (max_writes, max_bytes): (usize, usize),
    ) -> Result<QueuedWrite, Error> {
        if !self.entries.is_empty() && self.owner.as_ref() != Some(&owner) {
            return Err(Error::InvalidInput(OTHER_OWNER.into()));
        }
        let (body, content_type) = match request.body {
            Some((b, ct)) => (Some(b.to_vec()), Some(ct)),
            None => (None, None),
        };
        let held: usize = self.entries.iter().map(QueuedWrite::body_len).sum();
        let adding = body.as_ref().map_or(0, Vec::len);
        if self.entries.len() >= max_writes || held.saturating_add(adding) > max_bytes {
            return Err(Error::OutboxFull {
                capacity: max_writes,
                capacity_bytes: max_bytes,
            });
        }
        let write = QueuedWrite {
            id: self.next_id,
            method: request.method,
            path: request.path,
            query: request.query,
            headers: request.headers,
            body,
            content_type,
            idempotency_key,
            enqueued_at: now,
        };
        self.next_id = self.next_id.saturating_add(1);
        self.owner = Some(owner);
        self.entries.push(write.clone());
        Ok(write)
    }

    /// Removes the write `id`; whether it was there.
    pub fn remove(&mut self, id: u64) -> bool {
        let before = self.entries.len();
        self.entries.retain(|w| w.id != id);
        self.entries.len() != before
    }
}

/// Whether `method` may be queued.
pub(crate) fn is_write(method: &Method) -> bool {
    WRITE_METHODS.contains(method)
}

/// Encodes the outbox for the store.
pub(crate) fn encode(outbox: &Outbox) -> Result<String, Error> {
    serde_json::to_string(outbox)
        .map_err(|e| Error::Store(format!("cannot encode the outbox: {e}")))
}

/// Decodes the outbox blob, refusing unknown schemas (never dropping what it cannot read).
pub(crate) fn decode(blob: &str) -> Result<Outbox, Error> {
    #[derive(Deserialize)]
    struct Version {
        schema: u32,
    }
    let unreadable =
        |e: serde_json::Error| Error::Store(format!("stored outbox is not readable: {e}"));
    let v: Version = serde_json::from_str(blob).map_err(unreadable)?;
    if v.schema != OUTBOX_SCHEMA {
        return Err(Error::Store(format!(
            "stored outbox has schema {}, this SDK reads {OUTBOX_SCHEMA}",
            v.schema
        )));
    }
    serde_json::from_str(blob).map_err(unreadable)
}

/// `http::Method` as its name.
mod method_name {
    use http::Method;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(m: &Method, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(m.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Method, D::Error> {
        let name = String::deserialize(d)?;
        Method::from_bytes(name.as_bytes()).map_err(serde::de::Error::custom)
    }
}

/// A body as standard base64 (`null` when there is none).
mod base64_body {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match b {
            Some(b) => s.serialize_str(&STANDARD.encode(b)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|s| STANDARD.decode(s).map_err(serde::de::Error::custom))
            .transpose()
    }
}
