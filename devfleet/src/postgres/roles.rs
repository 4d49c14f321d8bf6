//! A private server's databases and roles (each database owned by its own role, which may
//! log in there only), their URLs, and `psql` as the superuser or as a URL's role.

use std::process::{Command, Stdio};

use runtime::Secret;

use super::tools::{check_db_name, encode_path, run, run_with_input};
use super::{PG_USER, PgServer};
use crate::error::Result;

/// Context of the HMAC that derives a database role's password from the superuser's.
const ROLE_PASSWORD_CONTEXT: &[u8] = b"cellbind-devfleet-role-password-v1:";

impl PgServer {
    /// Creates the database `name` (lower-case letters, digits and `_`) and its own role of
    /// the same name, which owns it and may log in there only (see the module doc).
    pub fn create_database(&self, name: &str) -> Result<()> {
        check_db_name(name)?;
        // One at a time in this process: the `REVOKE` on the shared `postgres` and `template1`
        // rows fails ("tuple concurrently updated") when two fixtures of one test binary
        // create their databases at the same moment on its one server.
        static CREATING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one = CREATING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Through stdin, so that the role's password is on no command line.
        let script = format!(
            "CREATE ROLE {name} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION \
             NOBYPASSRLS PASSWORD '{password}';\n\
             CREATE DATABASE {name} OWNER {name};\n\
             REVOKE ALL ON DATABASE {name} FROM PUBLIC;\n\
             REVOKE CONNECT ON DATABASE postgres, template1 FROM PUBLIC;\n",
            password = self.role_password(name).expose()
        );
        self.psql_script("postgres", &script).map(drop)
    }

    /// The password of the role of database `db` (derived from the superuser's, so that a
    /// server started again in the same folder knows it).
    fn role_password(&self, db: &str) -> Secret {
        let key = ring::hmac::Key::new(
            ring::hmac::HMAC_SHA256,
            self.superuser_password.expose().as_bytes(),
        );
        let mut ctx = ring::hmac::Context::with_key(&key);
        ctx.update(ROLE_PASSWORD_CONTEXT);
        ctx.update(db.as_bytes());
        let tag = ctx.sign();
        Secret::new(
            tag.as_ref()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>(),
        )
    }

    /// The URL of database `db` as its own role (made by [`PgServer::create_database`]):
    /// `postgres://<db>:<password>@localhost/<db>?host=<socket dir>`. A secret: write it 0600.
    pub fn url(&self, db: &str) -> String {
        format!(
            "postgres://{db}:{password}@localhost/{db}?host={}",
            encode_path(&self.socket_dir),
            password = self.role_password(db).expose()
        )
    }

    /// Runs `sql` with `psql` connected by `url` (its user and password, nothing of the
    /// superuser's), and returns its unaligned, tuples-only output: for tests of what a role may
    /// reach.
    pub fn psql_url(&self, url: &str, sql: &str) -> Result<String> {
        let mut cmd = self.psql_command();
        cmd.args(["-d", url, "-c", sql]).stdin(Stdio::null());
        run(cmd, "psql")
    }

    /// Runs `sql` in database `db` as the superuser with `psql` and returns its unaligned,
    /// tuples-only output (for tests: e.g. terminating the connections of one replica).
    pub fn psql(&self, db: &str, sql: &str) -> Result<String> {
        let mut cmd = self.superuser_psql(db)?;
        cmd.args(["-c", sql]).stdin(Stdio::null());
        run(cmd, "psql")
    }

    /// Runs the statements of `script` (given on stdin, so they are on no command line) in
    /// database `db` as the superuser, each in its own transaction.
    fn psql_script(&self, db: &str, script: &str) -> Result<String> {
        let mut cmd = self.superuser_psql(db)?;
        cmd.args(["-f", "-"]);
        run_with_input(cmd, "psql", script)
    }

    /// `psql` connected to `db` as the superuser (its password in the environment, which only
    /// this user can read).
    fn superuser_psql(&self, db: &str) -> Result<Command> {
        check_db_name(db)?;
        let mut cmd = self.psql_command();
        cmd.args(["-U", PG_USER, "-h"])
            .arg(&self.socket_dir)
            .args(["-d", db])
            .env("PGPASSWORD", self.superuser_password.expose());
        Ok(cmd)
    }

    /// `psql` with unaligned, tuples-only output that stops at the first error, never prompts
    /// for a password, and takes none from this process's environment or a password file.
    fn psql_command(&self) -> Command {
        let mut cmd = Command::new(&self.tools.psql);
        cmd.args(["-X", "-q", "-A", "-t", "-w", "-v", "ON_ERROR_STOP=1"])
            .env_remove("PGPASSWORD")
            .env("PGPASSFILE", "/dev/null");
        cmd
    }
}
