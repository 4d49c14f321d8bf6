//! The dev fleet: a real local fleet (DESIGN §8), what `cellctl dev` runs and what the
//! end-to-end tests start. One control plane and, per cell, an
//! auth-service, an edge (cell-endpoint) and a demo app, each its own OS process, over TLS from
//! a local CA; cell `n` on `127.0.0.n`. Seeded with contractors, users, ownership records and a
//! signed placement map, described in `fleet.json`.
//!
//! Ports (base B): control plane `127.0.0.1:B`; cell n on `127.0.0.n`: edge B+3, auth-service
//! public listener B+4, app public listener B+5, auth-service internal listener B+6, app
//! internal listener B+7. The edge forwards public traffic to the public listeners only; admin,
//! feed and migration calls go to the internal ones.
//!
//! Secrets are per cell (a token of one cell is refused by every other): `DIR/secrets/<cell>/`
//! holds `admin.token`, `app-internal.token` (the app's own: it never holds the admin token),
//! `feed.token`, `app.token` and `edge.token`; the control plane has its own
//! `DIR/secrets/control-plane.token` and its map key `DIR/secrets/map-key`. Every server has its
//! own TLS key and certificate. Every folder the fleet makes is 0700 (`DIR` itself included)
//! and every secret and data file 0600.
//!
//! With `store = postgres` ([`FleetOptions::store`]) the fleet also runs a private PostgreSQL
//! server ([`PgServer`], `DIR/postgres/`), one database per cell (`cell_01` …, owned by the
//! cell's own role; its URL in `DIR/secrets/<cell>/database.url`), and each cell may run up to
//! four auth-service replicas
//! ([`FleetOptions::auth_replicas`]): replica `r` on `127.0.r.n` with replica 0's ports, each
//! with its own configuration and data directory but the cell's one key-encryption key
//! (`DIR/secrets/<cell>/kek`) and tokens. The edge is given every replica's URLs.
//!
//! Children get a piped stdin and `CELLBIND_EXIT_ON_STDIN_EOF=1`, so they exit when this
//! process goes away, however it goes. A child that dies is reported on stderr and left dead.
//!
//! It spawns the binaries by path (normally the directory of `cellctl`), so it depends on no
//! server's code but the control plane's placement store and map key, which it seeds before the
//! control plane starts (its first published map already holds the seeded placements).
//!
//! - [`fleet`]: [`Fleet::start`] / [`Fleet::stop`]; [`options`]: [`FleetOptions`] and the names
//!   derived from a cell; `prepare`: the files written before any process starts.
//! - `fleet.json` ([`FleetFile`], [`FleetCell`]), the files `cellctl` keeps beside it and
//!   [`client_trusting`], the HTTPS client that trusts only the fleet's CA, are the
//!   `fleet_description` crate's (re-exported here): `cellctl` reads a fleet through that crate
//!   alone.
//! - [`certs`]: the fleet's CA.
//! - [`ports`], [`layout`]: where the fleet listens and where its files are.
//! - [`seed`], [`seeding`]: the seed data and how it reaches the cells.
//! - [`children`], [`configs`]: the child processes and their configuration files.
//! - [`postgres`]: [`PgServer`], the private PostgreSQL server of a fleet or a test.

pub mod certs;
pub mod children;
pub mod configs;
pub mod error;
pub mod fleet;
pub mod layout;
pub mod options;
pub mod ports;
pub mod postgres;
mod prepare;
pub mod seed;
pub mod seeding;

pub use certs::LocalCa;
pub use error::{FleetError, Result};
pub use fleet::{CellTlsFiles, Fleet};
pub use fleet_description::{
    CellManagement, Demo, DemoUser, FLEET_FILE, FleetCell, FleetFile, FleetManagement,
    JOURNAL_FILE, MAP_FILE, PostgresInfo, SESSION_FILE, Service, StoreKind, client_trusting,
    client_trusting_file,
};
pub use layout::{
    CONTROL_PLANE_TOKEN_FILE, CellToken, MAP_KEY_FILE, SECRETS_DIR, cell_token_file,
    edge_feed_credential_file, edge_instance_id, lock_dir, write_edge_feed_credential,
};
pub use options::{
    DEFAULT_DIR, FleetOptions, MAX_AUTH_REPLICAS, TEST_AUTH_REPLICAS_ENV, TEST_STORE_ENV, app_id,
    auth_service_id, database_name, edge_id, test_bin_dir,
};
pub use ports::{DEFAULT_PORT_BASE, Listeners, Ports, cell_id, check_ports_free};
pub use postgres::PgServer;
