-- The auth-service's PostgreSQL schema, version 1: the tables of the SQLite schema (version 3)
-- with PostgreSQL types (BIGINT for unsigned values, BYTEA for blobs, TEXT for JSON
-- documents), plus the tables the replicas of a cell share at run time.

CREATE TABLE users (
    contractor_id TEXT NOT NULL,
    login TEXT NOT NULL,
    subject TEXT NOT NULL UNIQUE,
    role TEXT NOT NULL,
    password_hash TEXT NOT NULL,
    status TEXT NOT NULL,
    PRIMARY KEY (contractor_id, login)
);

CREATE TABLE keys (
    kid TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    public_key BYTEA NOT NULL,
    sealed_seed BYTEA,
    created_at BIGINT NOT NULL,
    state_at BIGINT NOT NULL
);

CREATE TABLE ownership (
    contractor_id TEXT PRIMARY KEY,
    record TEXT NOT NULL
);

CREATE TABLE revocations (
    seq BIGINT PRIMARY KEY,
    body TEXT NOT NULL
);

CREATE TABLE placement_map (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    version BIGINT NOT NULL,
    body TEXT NOT NULL
);

CREATE TABLE feed (
    seq BIGINT PRIMARY KEY,
    change TEXT NOT NULL
);

-- The feed position. Its one row is inserted by the first replica to start (with a fresh
-- epoch); every commit locks it first (SELECT ... FOR UPDATE), which orders the commits of
-- all replicas.
CREATE TABLE feed_head (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    head BIGINT NOT NULL,
    epoch TEXT NOT NULL
);

-- Every epoch the database has had, in order (the current one last).
CREATE TABLE epochs (
    n BIGSERIAL PRIMARY KEY,
    epoch TEXT NOT NULL UNIQUE
);

-- Per-cell revocation: the audit log (append-only, never compacted) and the sessions minted
-- here (listed by subject; dropped once expired).
CREATE TABLE revocation_audit (
    seq BIGINT PRIMARY KEY,
    at BIGINT NOT NULL,
    body TEXT NOT NULL
);

CREATE TABLE minted_sessions (
    jti TEXT PRIMARY KEY,
    sub TEXT NOT NULL,
    exp BIGINT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX minted_sessions_by_subject ON minted_sessions (sub, exp);
CREATE INDEX minted_sessions_by_expiry ON minted_sessions (exp);

-- Migration: transfer tickets and session ids used at this cell (single use), kept until they
-- expire, and the one ticket issued per transferred session.
CREATE TABLE burned_tickets (
    jti TEXT PRIMARY KEY,
    exp BIGINT NOT NULL
);

CREATE TABLE burned_sessions (
    sid TEXT PRIMARY KEY,
    sexp BIGINT NOT NULL
);

CREATE TABLE transferred_sessions (
    sid TEXT PRIMARY KEY,
    ticket_jti TEXT NOT NULL,
    iat BIGINT NOT NULL,
    exp BIGINT NOT NULL,
    sexp BIGINT NOT NULL
);

-- Shared by the replicas, not part of a backup: the sign-in throttle's GCRA buckets (the
-- theoretical arrival time of the next token, in Unix milliseconds) ...
CREATE TABLE throttle_buckets (
    key TEXT PRIMARY KEY,
    tat_ms BIGINT NOT NULL
);

-- ... and the edge instances the feed has seen (`busy`: a JSON list of contractor ids).
CREATE TABLE feed_instances (
    id TEXT PRIMARY KEY,
    applied_seq BIGINT NOT NULL,
    last_seen BIGINT NOT NULL,
    busy TEXT NOT NULL
);
