//! What each kind matches, and the matcher's index checked against it for one revocation of
//! every kind the wire format knows. A new kind fails to compile in the rules (their matches
//! have no catch-all arm) and fails [`every_kind_of_the_wire_format_is_sampled`] until it has
//! a sample here, which then goes through every property below.

use std::collections::BTreeSet;

use super::*;

const BEFORE: UnixSeconds = 1_000;

fn sub(s: &str) -> SubjectId {
    SubjectId::new(s).unwrap()
}

fn ctr(s: &str) -> ContractorId {
    ContractorId::new(s).unwrap()
}

fn kid(s: &str) -> Kid {
    Kid::new(s).unwrap()
}

fn jti(n: u8) -> SessionId {
    SessionId::from_random([n; 16])
}

/// One revocation of every kind, each aimed at the session `c-1.ann` / `c-1` / `k-1` /
/// `jti(1)` (and cutting at [`BEFORE`] where it cuts by time).
fn one_of_every_kind() -> Vec<RevocationKind> {
    vec![
        RevocationKind::Session {
            jti: jti(1),
            exp: 5_000,
        },
        RevocationKind::Subject {
            sub: sub("c-1.ann"),
            before: BEFORE,
        },
        RevocationKind::Contractor {
            ctr: ctr("c-1"),
            before: BEFORE,
        },
        RevocationKind::Key { kid: kid("k-1") },
        RevocationKind::Cell { before: BEFORE },
    ]
}

/// The kinds the wire format knows (serde's list of `kind` tags, read from its refusal of an
/// unknown one).
fn wire_kinds() -> BTreeSet<String> {
    let refused = serde_json::from_value::<RevocationKind>(serde_json::json!({"kind": "?"}))
        .unwrap_err()
        .to_string();
    let expected = refused
        .split_once("expected")
        .unwrap_or_else(|| panic!("serde's refusal changed: {refused}"))
        .1;
    let kinds: BTreeSet<String> = expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    assert!(kinds.len() >= 5, "read no kinds from: {refused}");
    kinds
}

/// The `kind` tag a revocation is written with.
fn tag(kind: &RevocationKind) -> String {
    serde_json::to_value(kind).unwrap()["kind"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A session to match the samples against (owned parts of a [`SessionRef`]).
struct Probe {
    jti: Option<SessionId>,
    sub: SubjectId,
    ctr: ContractorId,
    kid: Option<Kid>,
    iat: UnixSeconds,
}

impl Probe {
    fn session(&self) -> SessionRef<'_> {
        SessionRef {
            jti: self.jti.as_ref(),
            sub: &self.sub,
            ctr: &self.ctr,
            kid: self.kid.as_ref(),
            iat: self.iat,
        }
    }
}

/// Sessions around the samples: every combination of the same or another id, subject,
/// contractor and key, unknown id and key, and issue times around [`BEFORE`].
fn probes() -> Vec<Probe> {
    let mut out = Vec::new();
    for jti in [Some(jti(1)), Some(jti(2)), None] {
        for (sub, ctr) in [
            (sub("c-1.ann"), ctr("c-1")),
            (sub("c-1.bob"), ctr("c-1")),
            (sub("c-2.ann"), ctr("c-2")),
        ] {
            for kid in [Some(kid("k-1")), Some(kid("k-2")), None] {
                for iat in [0, BEFORE - 1, BEFORE, BEFORE + 1] {
                    out.push(Probe {
                        jti: jti.clone(),
                        sub: sub.clone(),
                        ctr: ctr.clone(),
                        kid: kid.clone(),
                        iat,
                    });
                }
            }
        }
    }
    out
}

#[test]
fn every_kind_of_the_wire_format_is_sampled() {
    let sampled: BTreeSet<String> = one_of_every_kind().iter().map(tag).collect();
    assert_eq!(
        sampled,
        wire_kinds(),
        "add a sample of the new kind to one_of_every_kind"
    );
}

#[test]
fn each_kind_matches_what_its_table_row_says() {
    let (ann, bob, other) = (sub("c-1.ann"), sub("c-1.bob"), sub("c-2.ann"));
    let (c1, c2) = (ctr("c-1"), ctr("c-2"));
    let (k1, k2) = (kid("k-1"), kid("k-2"));
    let (j1, j2) = (jti(1), jti(2));
    let s = |j, sub, ctr, k, iat| SessionRef {
        jti: Some(j),
        sub,
        ctr,
        kid: Some(k),
        iat,
    };
    let [session, subject, contractor, key, cell] = one_of_every_kind().try_into().unwrap();
    // One session, whenever issued.
    assert!(session.matches(&s(&j1, &other, &c2, &k2, BEFORE + 9)));
    assert!(!session.matches(&s(&j2, &ann, &c1, &k1, 0)));
    // A subject's sessions issued strictly before `before`.
    assert!(subject.matches(&s(&j2, &ann, &c1, &k2, BEFORE - 1)));
    assert!(!subject.matches(&s(&j1, &ann, &c1, &k1, BEFORE)));
    assert!(!subject.matches(&s(&j1, &bob, &c1, &k1, 0)));
    // A contractor's sessions issued strictly before `before`.
    assert!(contractor.matches(&s(&j2, &bob, &c1, &k2, BEFORE - 1)));
    assert!(!contractor.matches(&s(&j2, &bob, &c1, &k2, BEFORE)));
    assert!(!contractor.matches(&s(&j1, &other, &c2, &k1, 0)));
    // Every session signed by a key.
    assert!(key.matches(&s(&j2, &other, &c2, &k1, BEFORE + 9)));
    assert!(!key.matches(&s(&j1, &ann, &c1, &k2, 0)));
    // Every session of the cell issued strictly before `before`.
    assert!(cell.matches(&s(&j2, &other, &c2, &k2, BEFORE - 1)));
    assert!(!cell.matches(&s(&j1, &ann, &c1, &k1, BEFORE)));
    // Unknown id and key (a ticket's session, one about to be minted): by owner and time only.
    let unknown = |iat| SessionRef {
        jti: None,
        sub: &ann,
        ctr: &c1,
        kid: None,
        iat,
    };
    assert!(!session.matches(&unknown(0)) && !key.matches(&unknown(0)));
    assert!(subject.matches(&unknown(0)) && cell.matches(&unknown(0)));
}

#[test]
fn the_set_revokes_exactly_what_each_kind_matches() {
    let mut checked = 0;
    for kind in one_of_every_kind() {
        let set: RevocationSet = [&kind].into_iter().collect();
        for p in probes() {
            let session = p.session();
            assert_eq!(
                set.revokes(&session),
                kind.matches(&session),
                "{kind:?} against {session:?}"
            );
            assert_eq!(
                set.latest_before(&p.sub, &p.ctr),
                kind.revokes_issued_before(&p.sub, &p.ctr),
                "{kind:?} for {} of {}",
                p.sub,
                p.ctr
            );
            if let Some(k) = &p.kid {
                assert_eq!(set.is_key_revoked(k), kind.key() == Some(k), "{kind:?}");
            }
            checked += 1;
        }
    }
    println!("checked the set against every kind at {checked} sessions");
}

#[test]
fn a_session_minted_at_the_latest_before_is_revoked_by_no_kind() {
    // What a cell mints at (the auth-service's issue time): a new session has a fresh id and
    // the current key, so only the kinds that cut by time can match it, and
    // `revokes_issued_before` must name every such cut.
    for kind in one_of_every_kind() {
        for Probe { sub, ctr, iat, .. } in probes() {
            let fresh = |iat| SessionRef {
                jti: None,
                sub: &sub,
                ctr: &ctr,
                kid: None,
                iat,
            };
            let floor = kind.revokes_issued_before(&sub, &ctr);
            assert_eq!(
                kind.matches(&fresh(iat)),
                floor.is_some_and(|b| iat < b),
                "{kind:?} at {iat}"
            );
            let minted = floor.unwrap_or(0).max(iat);
            assert!(!kind.matches(&fresh(minted)), "{kind:?} at {minted}");
        }
    }
}

#[test]
fn only_key_revocations_name_a_key_and_only_the_time_cutting_kinds_a_before() {
    for kind in one_of_every_kind() {
        let by_time = kind
            .revokes_issued_before(&sub("c-1.ann"), &ctr("c-1"))
            .is_some();
        assert_eq!(kind.before().is_some(), by_time, "{kind:?}");
        assert_eq!(
            kind.key().is_some(),
            matches!(kind, RevocationKind::Key { .. }),
            "{kind:?}"
        );
    }
}

#[test]
fn a_set_keeps_the_latest_before_of_each_scope() {
    let a = RevocationKind::Subject {
        sub: sub("c-1.ann"),
        before: 10,
    };
    let b = RevocationKind::Subject {
        sub: sub("c-1.ann"),
        before: 30,
    };
    let c = RevocationKind::Cell { before: 20 };
    let set: RevocationSet = [&b, &a, &c].into_iter().collect();
    assert_eq!(set.len(), 3);
    assert_eq!(set.latest_before(&sub("c-1.ann"), &ctr("c-1")), Some(30));
    assert_eq!(set.latest_before(&sub("c-1.bob"), &ctr("c-1")), Some(20));
    assert!(RevocationSet::default().is_empty());
}
