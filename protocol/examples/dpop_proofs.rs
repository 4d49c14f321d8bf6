//! DPoP proofs in bulk, for `bench/run`'s "bound session" rows (a load generator cannot sign
//! ES256 per request itself; the proofs are made before each run, one per request).
//!
//! ```text
//! dpop_proofs keygen KEY_FILE
//!     a new P-256 key (PKCS#8, written owner-only); prints its thumbprint
//! dpop_proofs batch KEY_FILE METHOD HTU NONCE SESSIONS_FILE COUNT OUT_FILE
//!     COUNT lines `session<TAB>proof`, round-robin over the sessions (the first column of
//!     SESSIONS_FILE), each proof with its own jti, `ath` of its session, this `nonce`;
//!     SESSIONS_FILE `-`: no session (sign-in proofs, no `ath`), lines `-<TAB>proof`
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a bench tool

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;

use cellbind_protocol::dpop::{ProofBuilder, ProofClaims, SoftwareP256Key, token_hash};

fn owner_only(path: &str) -> std::fs::File {
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("keygen") if args.len() == 2 => {
            let key = SoftwareP256Key::generate().expect("a P-256 key");
            owner_only(&args[1])
                .write_all(key.pkcs8())
                .expect("write the key");
            println!("{}", key.public().thumbprint());
        }
        Some("batch") if args.len() == 8 => {
            let key = SoftwareP256Key::from_pkcs8(&std::fs::read(&args[1]).expect("the key"))
                .expect("a P-256 PKCS#8 key");
            let (method, htu, nonce) = (&args[2], &args[3], &args[4]);
            let sessions: Vec<String> = if args[5] == "-" {
                vec!["-".to_owned()]
            } else {
                std::fs::read_to_string(&args[5])
                    .expect("the sessions file")
                    .lines()
                    .filter_map(|l| l.split('\t').next().map(str::to_owned))
                    .filter(|t| !t.is_empty())
                    .collect()
            };
            let count: usize = args[6].parse().expect("COUNT");
            let builder = ProofBuilder::new(key.public());
            let iat = cellbind_protocol::time::system_clock().now();
            let mut out = std::io::BufWriter::new(owner_only(&args[7]));
            for i in 0..count {
                let session = &sessions[i % sessions.len()];
                let claims = ProofClaims {
                    jti: format!("{:032x}", rand_u128()),
                    htm: method.clone(),
                    htu: htu.clone(),
                    iat,
                    ath: (session != "-").then(|| token_hash(session)),
                    nonce: Some(nonce.clone()),
                };
                let input = builder.signing_input(&claims).expect("claims");
                let sig = key.sign(input.as_bytes()).expect("a signature");
                let proof = ProofBuilder::finish(input, &sig).expect("a proof");
                writeln!(out, "{session}\t{proof}").expect("write");
            }
            out.flush().expect("flush");
        }
        _ => {
            eprintln!(
                "usage: dpop_proofs keygen KEY_FILE | batch KEY_FILE METHOD HTU NONCE SESSIONS_FILE COUNT OUT_FILE"
            );
            std::process::exit(2);
        }
    }
}

/// 128 random bits (a jti).
fn rand_u128() -> u128 {
    let mut b = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b).expect("randomness");
    u128::from_le_bytes(b)
}
