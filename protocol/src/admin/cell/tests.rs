//! Wire shapes of the admin API, and its paths: each builder fills in its route.

use serde_json::json;

use super::*;

#[test]
fn wire_shapes_keep_their_member_names() {
    let ctr = ContractorId::new("c-1").unwrap();
    let v = serde_json::to_value(RevokeAnswer {
        seq: 4,
        revoked: true,
        outcome: RevokeOutcome::Applied,
        head: 5,
        kind: RevocationKind::Contractor {
            ctr: ctr.clone(),
            before: 9,
        },
    })
    .unwrap();
    assert_eq!(
        v,
        json!({"seq":4,"revoked":true,"outcome":"applied","head":5,
               "kind":"contractor","ctr":"c-1","before":9})
    );
    let req: RevokeRequest = serde_json::from_value(
        json!({"kind":"subject","sub":"c-1.tech","before":3,"reason":"r","by":"b"}),
    )
    .unwrap();
    assert_eq!(req.by, "b");
    let user: NewUser = serde_json::from_value(
        json!({"contractor_id":"c-1","login":"tech","role":"technician","password":"pw-123456"}),
    )
    .unwrap();
    assert_eq!(user.status, UserStatus::Active);
    assert!(!format!("{user:?}").contains("pw-123456"));
    let exported = ExportedUser {
        login: Login::new("tech").unwrap(),
        role: Role::Technician,
        password_hash: PasswordHash::new("$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA"),
        status: UserStatus::Active,
    };
    assert!(!format!("{exported:?}").contains("argon2"));
    assert_eq!(
        serde_json::to_value(&exported).unwrap()["password_hash"],
        "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA"
    );
    let back = serde_json::to_value(&user).unwrap();
    assert_eq!(back["password"], "pw-123456");
    assert!(back.get("password_hash").is_none());
    assert!(
        serde_json::from_value::<NewUser>(
            json!({"contractor_id":"c-1","login":"t","role":"technician","extra":1})
        )
        .is_err()
    );
    let q: AuditQuery = serde_json::from_value(json!({"format":"json"})).unwrap();
    assert_eq!((q.after, q.format), (0, Some(AuditFormat::Json)));
    for r in [Role::Technician, Role::Dispatcher] {
        assert_eq!(Role::parse(r.as_str()), Some(r));
    }
    for s in [UserStatus::Active, UserStatus::Disabled] {
        assert_eq!(UserStatus::parse(s.as_str()), Some(s));
    }
}

#[test]
fn listed_sessions_flatten_the_record() {
    let rec = SessionRecord {
        session_id: SessionId::from_random([1; 16]),
        subject: SubjectId::new("c-1.tech").unwrap(),
        contractor: ContractorId::new("c-1").unwrap(),
        client: ClientKind::Field,
        kid: Kid::new("k-1").unwrap(),
        generation: Generation(2),
        issued_at: 10,
        expires_at: 20,
        auth_time: 10,
    };
    let v = serde_json::to_value(ListedSession {
        session: rec,
        last_seen: None,
    })
    .unwrap();
    assert_eq!(v["kid"], "k-1");
    assert_eq!(v["generation"], 2);
    assert!(v["last_seen"].is_null());
}

#[test]
fn each_path_is_its_route_with_the_parameter_filled_in() {
    let ctr = ContractorId::new("c-1").unwrap();
    let kid = Kid::new("k-1").unwrap();
    let sub = SubjectId::new("c-1.tech").unwrap();
    let jti = SessionId::from_random([1; 16]);
    let routes = [
        (OWNERSHIP_ROUTE, "{ctr}", ownership_path(&ctr), "c-1"),
        (KEY_REVOKE_ROUTE, "{kid}", key_revoke_path(&kid), "k-1"),
        (
            SUBJECT_SESSIONS_ROUTE,
            "{sub}",
            subject_sessions_path(&sub),
            "c-1.tech",
        ),
        (SESSION_ROUTE, "{jti}", session_path(&jti), jti.as_str()),
        (WITHDRAW_ROUTE, "{seq}", withdraw_path(42), "42"),
        (EXPORT_ROUTE, "{ctr}", export_path(&ctr), "c-1"),
        (IMPORT_ROUTE, "{ctr}", import_path(&ctr), "c-1"),
        (DRAIN_ROUTE, "{ctr}", drain_path(&ctr), "c-1"),
    ];
    for (route, parameter, path, value) in routes {
        assert!(route.starts_with(ADMIN_PREFIX), "{route}");
        assert_eq!(route.matches('{').count(), 1, "{route}");
        assert_eq!(path, route.replace(parameter, value));
    }
    assert_eq!(ownership_path(&ctr), "/admin/v1/ownership/c-1");
    assert_eq!(withdraw_path(7), "/admin/v1/revocations/7/withdraw");
    assert_eq!(drain_path(&ctr), "/admin/v1/drain/c-1");
}
