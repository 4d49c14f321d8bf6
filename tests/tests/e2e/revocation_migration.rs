//! Revocation across a migration (DESIGN §5, §6): a technician revoked before a migration, and
//! one revoked at the source while the migration runs, are both revoked at the target once the
//! contractor moved, and neither session can be transferred; an unrevoked colleague's session
//! transfers and is served at the target; the revoked technician can sign in again there.
//! A transfer ticket taken before a revocation is refused at the target afterwards, both for a
//! subject revocation and for `cellctl revoke session JTI --cell SOURCE`, which reaches the
//! target too (ATTACKS A28).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::time::Duration;

use crate::revocation_support::*;
use cellbind_tests::{TestFleet, post_json, session_for, signal};
use cellctl::migrate::{MigrateOptions, Step, migrate};
use cellctl::revoke::{AuditArgs, RevokeCommand, Revoker};
use devfleet::DemoUser;
use nix::sys::signal::Signal;
use protocol::{CellId, SubjectId};
use serde_json::{Value, json};

/// Bound of each migration step.
const STEP_TIMEOUT: Duration = Duration::from_secs(30);

fn subject(u: &DemoUser) -> SubjectId {
    SubjectId::new(format!("{}.{}", u.contractor_id, u.login)).unwrap()
}

fn revoke_subject(u: &DemoUser, reason: &str) -> RevokeCommand {
    RevokeCommand::Subject {
        sub: subject(u),
        audit: AuditArgs {
            reason: reason.into(),
            by: Some("migration-test".into()),
            before: None,
            wait_edges: false,
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revocations_follow_a_contractor_to_its_new_cell() {
    let t = TestFleet::start().await;
    let fleet_path = t.fleet.fleet_file_path();
    let revoker = Revoker::load(&fleet_path).unwrap();
    let users = &t.file().demo;
    let tech1 = users.technicians[0].clone();
    let ctr = tech1.contractor_id.clone();
    let tech2 = users
        .technicians
        .iter()
        .find(|u| u.contractor_id == ctr && u.login != tech1.login)
        .unwrap()
        .clone();
    let dispatcher = users
        .dispatchers
        .iter()
        .find(|u| u.contractor_id == ctr)
        .unwrap()
        .clone();
    let source = tech1.cell_id.clone();
    let target: CellId = t
        .file()
        .cells
        .iter()
        .map(|c| c.id.clone())
        .find(|c| *c != source)
        .unwrap();
    let s1 = session_for(&t, &tech1).await;
    let s2 = session_for(&t, &tech2).await;
    let s3 = session_for(&t, &dispatcher).await;
    // Two more sessions of the dispatcher, each to be transferred once (a session id is
    // transferred at most once): one for a ticket taken before a subject revocation, one for
    // a ticket taken before a revocation of that one session.
    let s3b = session_for(&t, &dispatcher).await;
    let (st, v) = cellbind_tests::sign_in(&t.client, &s3.endpoint, &dispatcher).await;
    assert_eq!(st, 201, "{v}");
    let s3c_token = v["session"].as_str().unwrap().to_owned();
    let s3c_jti = v["session_id"].as_str().unwrap().to_owned();
    for s in [&s1, &s2, &s3, &s3b] {
        assert_eq!(route(&t.client, &s.endpoint, &s.token).await.0, 200);
    }

    // Before the migration: tech-1.
    let r = revoker
        .revoke(&revoke_subject(&tech1, "before the move"))
        .await
        .unwrap();
    assert!(r.ok(), "{r:?}");
    assert_eq!(r.cells.len(), 1, "only the owner holds a record: {r:?}");

    // During it (the source is read-only): tech-2, through the same fan-out.
    let mut during = None;
    let mut opts = MigrateOptions::new(ctr.clone(), target.clone());
    opts.step_timeout = STEP_TIMEOUT;
    let report = migrate(&fleet_path, &opts, |step| {
        if step.step == Step::Handoff {
            let cmd = revoke_subject(&tech2, "during the move");
            let r = tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current().block_on(revoker.revoke(&cmd))
            })
            .unwrap();
            during = Some(r);
        }
    })
    .await
    .expect("the migration completes");
    let during = during.expect("revoked during the migration");
    assert!(during.ok(), "{during:?}");
    assert_eq!(report.target, target);

    // At the target: both revocations are in force.
    // (Read through the audit export: a feed read would register a reader as an edge.)
    let (st, audit) = admin(
        &t.client,
        &t.cell(&target).admin_token,
        reqwest::Method::GET,
        &format!(
            "{}/admin/v1/audit/revocations?format=json",
            t.cell(&target).auth_service.url
        ),
        None,
    )
    .await;
    assert_eq!(st, 200, "{audit}");
    let subs: Vec<String> = audit
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "subject")
        .map(|r| r["sub"].as_str().unwrap().to_owned())
        .collect();
    for u in [&tech1, &tech2] {
        assert!(
            subs.contains(&subject(u).to_string()),
            "{} revoked at the target: {subs:?}",
            subject(u)
        );
    }

    // The revoked sessions cannot follow the contractor: the source refuses a ticket.
    let source_ep = t.cell(&source).endpoint.clone();
    let target_ep = t.cell(&target).endpoint.clone();
    for s in [&s1, &s2] {
        assert_eq!(
            route(&t.client, &source_ep, &s.token).await,
            (401, "SESSION_REVOKED".to_owned())
        );
        let (st, v) = post_json(
            &t.client,
            &format!("{source_ep}/v1/sessions/transfer"),
            Some(&s.token),
            json!({}),
        )
        .await;
        assert_eq!(
            (st, v["error"].as_str()),
            (401, Some("SESSION_REVOKED")),
            "{v}"
        );
    }
    // An unrevoked colleague's session transfers and is served at the target.
    assert_eq!(route(&t.client, &source_ep, &s3.token).await.0, 409);
    let transfer_url = format!("{source_ep}/v1/sessions/transfer");
    let rebind_url = format!("{target_ep}/v1/sessions/rebind");
    let mut tickets = Vec::new();
    for token in [&s3.token, &s3b.token, &s3c_token] {
        let (st, v) = post_json(&t.client, &transfer_url, Some(token), json!({})).await;
        assert_eq!(st, 200, "{v}");
        tickets.push(v["ticket"].as_str().unwrap().to_owned());
    }
    let (st, v) = post_json(
        &t.client,
        &rebind_url,
        None,
        json!({ "ticket": tickets[0] }),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    let moved = v["session"].as_str().unwrap().to_owned();
    assert_eq!(route(&t.client, &target_ep, &moved).await.0, 200);

    // A ticket taken before `cellctl revoke session JTI --cell SOURCE` is refused at the
    // target afterwards: the command looked the session up at the source and revoked it at
    // every cell that holds the contractor, the target included.
    let cellctl = cellbind_tests::bin_dir().join("cellctl");
    let out = std::process::Command::new(&cellctl)
        .arg("--fleet")
        .arg(&fleet_path)
        .args(["revoke", "session", &s3c_jti, "--cell", source.as_str()])
        .args(["--reason", "phone lost after the move"])
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("cellctl revoke session:\n{printed}");
    assert!(
        out.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        printed.contains(&format!("the session's contractor: {ctr}")),
        "{printed}"
    );
    let revoked_at: Vec<&str> = printed
        .lines()
        .filter(|l| l.contains("): revoked, seq "))
        .collect();
    assert!(
        revoked_at
            .iter()
            .any(|l| l.trim_start().starts_with(&format!("{source} (named)"))),
        "{printed}"
    );
    assert!(
        revoked_at
            .iter()
            .any(|l| l.trim_start().starts_with(&format!("{target} ("))),
        "the target is among the cells revoked at: {printed}"
    );
    let (st, v) = post_json(
        &t.client,
        &rebind_url,
        None,
        json!({ "ticket": tickets[2] }),
    )
    .await;
    assert_eq!(
        (st, v["error"].as_str()),
        (401, Some("SESSION_REVOKED")),
        "a ticket minted before the session's revocation: {v}"
    );
    println!(
        "revoke session {s3c_jti} --cell {source}: revoked at {} cells, the ticket taken before it refused at {target} ({st})",
        revoked_at.len()
    );
    // A session id the named cell never minted: revoked there only, and the output says so.
    let out = std::process::Command::new(&cellctl)
        .arg("--fleet")
        .arg(&fleet_path)
        .args(["revoke", "session", "AAAAAAAAAAAAAAAAAAAAAA", "--cell"])
        .arg(source.as_str())
        .args(["--reason", "unknown session"])
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{printed}");
    assert!(
        printed.contains("holds no record of this session"),
        "{printed}"
    );
    assert_eq!(printed.matches("): revoked, seq ").count(), 1, "{printed}");
    // The colleague's moved session is untouched by that one-session revocation.
    assert_eq!(route(&t.client, &target_ep, &moved).await.0, 200);
    // A ticket obtained before the dispatcher was revoked is refused at the target afterwards.
    let r = revoker
        .revoke(&revoke_subject(
            &dispatcher,
            "ticket taken before the revocation",
        ))
        .await
        .unwrap();
    assert!(r.ok(), "{r:?}");
    let (st, v) = post_json(
        &t.client,
        &rebind_url,
        None,
        json!({ "ticket": tickets[1] }),
    )
    .await;
    assert_eq!(
        (st, v["error"].as_str()),
        (401, Some("SESSION_REVOKED")),
        "{v}"
    );
    assert_eq!(
        route(&t.client, &target_ep, &moved).await,
        (401, "SESSION_REVOKED".to_owned())
    );
    // The revoked technician signs in again at the new cell and is served.
    let (st, v) = cellbind_tests::sign_in(&t.client, &target_ep, &tech1).await;
    assert_eq!(st, 201, "{v}");
    let fresh = v["session"].as_str().unwrap().to_owned();
    assert_eq!(route(&t.client, &target_ep, &fresh).await.0, 200);
    // And a later subject revocation goes to both cells (the target owns, the source released).
    let r = revoker
        .revoke(&revoke_subject(&tech1, "after the move"))
        .await
        .unwrap();
    assert!(r.ok(), "{r:?}");
    let cells: Vec<&CellId> = r.cells.iter().map(|c| &c.cell).collect();
    assert!(
        cells.contains(&&source) && cells.contains(&&target),
        "{r:?}"
    );

    // The command itself: `cellctl revoke contractor` exits 0 with every cell confirmed, and
    // non-zero, naming the cell, when a cell that holds a record cannot be reached.
    let run = |extra: &[&str]| {
        let mut args = vec![
            "--fleet".to_owned(),
            fleet_path.display().to_string(),
            "--json".to_owned(),
            "revoke".to_owned(),
            "contractor".to_owned(),
            ctr.to_string(),
            "--reason".to_owned(),
            "contractor offboarded".to_owned(),
        ];
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        std::process::Command::new(&cellctl)
            .args(&args)
            .output()
            .unwrap()
    };
    let out = run(&["--wait-edges"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    let outcomes: Vec<(&str, &str)> = v["report"]["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["cell"].as_str().unwrap(), c["outcome"].as_str().unwrap()))
        .collect();
    assert!(outcomes.contains(&(source.as_str(), "applied")), "{v}");
    assert!(outcomes.contains(&(target.as_str(), "applied")), "{v}");
    for c in v["report"]["cells"].as_array().unwrap() {
        let (live, applied) = (c["edges"]["live"].as_u64(), c["edges"]["applied"].as_u64());
        assert!(
            live >= Some(1) && applied == live,
            "every live edge applied it: {c}"
        );
    }
    // The source cell's auth-service down (every replica of it: cellctl would otherwise be
    // answered by the next one).
    let replicas: Vec<u32> = t.cell(&source).replicas().iter().map(|r| r.pid).collect();
    for pid in &replicas {
        signal(*pid, Signal::SIGKILL);
    }
    assert!(
        cellbind_tests::eventually(Duration::from_secs(5), || replicas
            .iter()
            .all(|p| cellbind_tests::process_gone(*p)))
        .await
    );
    let out = run(&["--before", "1"]);
    assert!(
        !out.status.success(),
        "a cell that did not confirm fails the command"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(source.as_str()),
        "the reason names the cell: {stderr}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], false);
    println!(
        "revocation across a migration {source} → {target}: before and during revoked at the target, transfers refused, migration {} steps",
        report.steps.len()
    );
}
