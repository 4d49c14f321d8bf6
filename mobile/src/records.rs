//! The records' conversions from and to the SDK's types, and their `Debug` (which never shows
//! a query or header value, a body or a key: any may be secret).

use crate::{
    CellbindConfig, CellbindError, FlushReport, Header, QueryParam, QueuedWrite, Request,
    RequestEvent, RequestOutcome, SessionInfo, WriteRejection, http_method,
};

impl std::fmt::Debug for CellbindConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CellbindConfig")
            .field("map_bytes", &self.map.len())
            .field("map_public_key", &self.map_public_key)
            .field("extra_ca_pem", &self.extra_ca_pem.is_some())
            .field("observer", &self.observer.is_some())
            .field("outbox_observer", &self.outbox_observer.is_some())
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("request_timeout_ms", &self.request_timeout_ms)
            .field("device_key", &self.device_key.is_some())
            .finish_non_exhaustive()
    }
}

/// Names only: a value may be secret.
impl std::fmt::Debug for QueryParam {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryParam")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Names only: a value may be secret.
impl std::fmt::Debug for Header {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Header")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Never shows query or header values, the body or the key (any may be secret).
impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("method", &self.method)
            .field("path", &self.path)
            .field("query", &self.query.len())
            .field("headers", &self.headers.len())
            .field("body_bytes", &self.body.as_ref().map(Vec::len))
            .field("idempotency_key", &self.idempotency_key.is_some())
            .finish()
    }
}

/// Never shows query or header values, the body or the key (any may be secret).
impl std::fmt::Debug for QueuedWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "QueuedWrite#{} {} {}", self.id, self.method, self.path)
    }
}

impl From<&sdk::QueuedWrite> for QueuedWrite {
    fn from(w: &sdk::QueuedWrite) -> Self {
        QueuedWrite {
            id: w.id,
            method: w.method.as_str().to_owned(),
            path: w.path.clone(),
            query: w
                .query
                .iter()
                .map(|(name, value)| QueryParam {
                    name: name.clone(),
                    value: value.clone(),
                })
                .collect(),
            headers: w
                .headers
                .iter()
                .map(|(name, value)| Header {
                    name: name.clone(),
                    value: value.clone(),
                })
                .collect(),
            body: w.body.clone(),
            content_type: w.content_type.clone(),
            idempotency_key: w.idempotency_key.clone(),
            enqueued_at: w.enqueued_at,
        }
    }
}

pub(crate) fn rejection(r: &sdk::WriteRejection) -> WriteRejection {
    WriteRejection {
        write: QueuedWrite::from(&r.write),
        status: r.status,
        code: r.code.clone().unwrap_or_default(),
        detail: r.refusal.detail(),
    }
}

impl From<sdk::FlushReport> for FlushReport {
    fn from(r: sdk::FlushReport) -> Self {
        FlushReport {
            delivered: r
                .delivered
                .iter()
                .map(|d| QueuedWrite::from(&d.write))
                .collect(),
            rejected: r.rejected.iter().map(rejection).collect(),
            remaining: r.remaining as u64,
            stopped: r.stopped.map(|e| CellbindError::from(e).to_string()),
            session_ended: r.session_ended,
        }
    }
}

pub(crate) fn event(e: &sdk::RequestEvent) -> RequestEvent {
    RequestEvent {
        cell_id: e.cell_id.to_string(),
        method: e.method.as_str().to_owned(),
        path: e.path.clone(),
        outcome: match &e.outcome {
            sdk::RequestOutcome::Answered => RequestOutcome::Answered,
            sdk::RequestOutcome::Network { kind } => RequestOutcome::Network {
                kind: (*kind).into(),
            },
            sdk::RequestOutcome::Refused { code } => RequestOutcome::Refused { code: code.clone() },
            // an outcome the SDK gained after this table was written
            _ => RequestOutcome::Refused { code: None },
        },
        status: e.status,
        reached_cell: e.reached_cell,
        attempts: e.attempts,
        duration_ms: u64::try_from(e.duration.as_millis()).unwrap_or(u64::MAX),
    }
}

/// The SDK's request for a foreign one (the SDK checks it when it is sent).
impl TryFrom<Request> for sdk::Request {
    type Error = CellbindError;

    fn try_from(r: Request) -> Result<sdk::Request, CellbindError> {
        let mut out = sdk::Request::new(http_method(&r.method)?, r.path);
        for q in r.query {
            out = out.query(q.name, q.value);
        }
        for h in r.headers {
            out = out.header(h.name, h.value);
        }
        out = match (r.body, r.content_type) {
            (Some(b), Some(ct)) => out.body(b, ct),
            (Some(b), None) => out.json(b),
            (None, None) => out,
            (None, Some(_)) => {
                return Err(CellbindError::InvalidInput {
                    detail: "a content type without a body".into(),
                });
            }
        };
        if let Some(k) = r.idempotency_key {
            out = out.idempotency_key(k);
        }
        Ok(out)
    }
}

impl From<sdk::SessionInfo> for SessionInfo {
    fn from(s: sdk::SessionInfo) -> Self {
        SessionInfo {
            session_id: s.session_id.to_string(),
            contractor_id: s.contractor_id.to_string(),
            subject: s.subject.to_string(),
            cell_id: s.cell_id.to_string(),
            endpoint: s.endpoint.into(),
            generation: s.generation.get(),
            expires_at: s.expires_at,
            key_thumbprint: s.key_thumbprint.map(|j| j.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use protocol::ErrorCode;

    use super::*;

    #[test]
    fn foreign_requests_convert_field_by_field() {
        let r = sdk::Request::try_from(Request {
            method: "post".into(),
            path: "/api/jobs/j-1/complete".into(),
            query: vec![QueryParam {
                name: "a".into(),
                value: "b c".into(),
            }],
            headers: vec![Header {
                name: "X-Request-Id".into(),
                value: "r-1".into(),
            }],
            body: Some(b"x".to_vec()),
            content_type: Some("text/plain".into()),
            idempotency_key: Some("k-1".into()),
        })
        .unwrap();
        assert_eq!(r.method(), http::Method::POST);
        assert_eq!(r.path(), "/api/jobs/j-1/complete");
        let shown = format!("{r:?}");
        for part in [
            "query_names: [\"a\"]",
            "header_names: [\"X-Request-Id\"]",
            "body_bytes: Some(1)",
            "idempotency_key: true",
        ] {
            assert!(shown.contains(part), "{part} in {shown}");
        }
        assert!(matches!(
            sdk::Request::try_from(Request {
                method: "GET".into(),
                path: "/a".into(),
                query: vec![],
                headers: vec![],
                body: None,
                content_type: Some("text/plain".into()),
                idempotency_key: None,
            }),
            Err(CellbindError::InvalidInput { .. })
        ));
    }

    fn sample_write() -> sdk::QueuedWrite {
        sdk::QueuedWrite {
            id: 7,
            method: http::Method::PUT,
            path: "/api/jobs/j-1".into(),
            query: vec![("a".into(), "b c".into())],
            headers: vec![("X-Request-Id".into(), "r-1".into())],
            body: Some(b"{}".to_vec()),
            content_type: Some("application/json".into()),
            idempotency_key: "k-7".into(),
            enqueued_at: 1_800_000_000,
        }
    }

    #[test]
    fn queued_writes_convert_field_by_field() {
        let w = QueuedWrite::from(&sample_write());
        assert_eq!(
            (w.id, w.method.as_str(), w.path.as_str()),
            (7, "PUT", "/api/jobs/j-1")
        );
        assert_eq!(
            (w.query[0].name.as_str(), w.query[0].value.as_str()),
            ("a", "b c")
        );
        assert_eq!(
            (w.headers[0].name.as_str(), w.headers[0].value.as_str()),
            ("X-Request-Id", "r-1")
        );
        assert_eq!(w.body.as_deref(), Some(&b"{}"[..]));
        assert_eq!(w.content_type.as_deref(), Some("application/json"));
        assert_eq!(
            (w.idempotency_key.as_str(), w.enqueued_at),
            ("k-7", 1_800_000_000)
        );
        let shown = format!("{w:?}");
        assert!(!shown.contains("k-7") && !shown.contains("r-1"), "{shown}");
    }

    #[test]
    fn flush_reports_and_rejections_convert() {
        let answer = |status: u16, body: &str| sdk::Response {
            status,
            body: body.to_owned().into(),
        };
        let r = FlushReport::from(sdk::FlushReport {
            delivered: vec![sdk::Delivered {
                write: sample_write(),
                response: answer(201, "{}"),
            }],
            rejected: vec![
                sdk::WriteRejection {
                    write: sample_write(),
                    status: 400,
                    code: Some("INVALID_REQUEST".into()),
                    refusal: sdk::Refusal::Error(sdk::Error::Rejected {
                        code: ErrorCode::InvalidRequest,
                        status: 400,
                        message: "bad job id".into(),
                    }),
                },
                sdk::WriteRejection {
                    write: sample_write(),
                    status: 404,
                    code: None,
                    refusal: sdk::Refusal::Answer(answer(404, "no such job")),
                },
            ],
            remaining: 3,
            stopped: Some(sdk::Error::Network {
                kind: sdk::NetworkErrorKind::TimeoutBeforeSend,
                reached_cell: false,
                detail: "connect timeout".into(),
            }),
            session_ended: false,
        });
        assert_eq!(r.delivered.len(), 1);
        assert_eq!(r.delivered[0].id, 7);
        assert_eq!(
            (r.rejected[0].status, r.rejected[0].code.as_str()),
            (400, "INVALID_REQUEST")
        );
        assert!(
            r.rejected[0].detail.contains("bad job id"),
            "{}",
            r.rejected[0].detail
        );
        assert_eq!(
            (
                r.rejected[1].status,
                r.rejected[1].code.as_str(),
                r.rejected[1].detail.as_str()
            ),
            (404, "", "no such job")
        );
        assert_eq!(r.remaining, 3);
        let stopped = r.stopped.unwrap();
        assert!(
            stopped.starts_with("network (TimeoutBeforeSend)"),
            "{stopped}"
        );
        assert!(!r.session_ended);
        let ended = FlushReport::from(sdk::FlushReport {
            stopped: Some(sdk::Error::SessionRevoked),
            session_ended: true,
            ..Default::default()
        });
        assert!(ended.session_ended && ended.stopped.unwrap().starts_with("SESSION_REVOKED"));
        assert_eq!(FlushReport::from(sdk::FlushReport::default()).stopped, None);
    }

    #[test]
    fn methods_parse_case_insensitively() {
        assert_eq!(http_method("get").unwrap(), http::Method::GET);
        assert!(matches!(
            http_method("GE T"),
            Err(CellbindError::InvalidInput { .. })
        ));
    }
}
