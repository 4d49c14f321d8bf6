//! The thread that owns the SQLite connection. Every store call is a job sent to it over a
//! channel and answered over a one-shot channel, so:
//! - the one connection lives on one thread (no mutex; calls run in the order they were sent,
//!   one at a time: the single writer of the file, and reads between writes);
//! - a waiting call parks nothing but its future (a blocking-pool thread per waiting call
//!   would compete with password hashing for that pool);
//! - a job runs to its end even when its caller stopped waiting: a call is never cut off
//!   half-way by a cancelled request (its transaction commits or rolls back whole).
//!
//! A job that panics is answered with an error and the thread goes on; dropping the
//! [`SqliteThread`] lets the queued jobs finish, closes the connection and joins the thread.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc;
use std::thread::JoinHandle;

use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::error::{Error, Result};

/// One store call, run on the connection's thread.
type Job = Box<dyn FnOnce(&mut Connection) + Send>;

/// The connection's thread and the way to it.
#[derive(Debug)]
pub(super) struct SqliteThread {
    /// `None` only while dropping.
    jobs: Option<mpsc::Sender<Job>>,
    /// `None` only while dropping.
    thread: Option<JoinHandle<()>>,
}

/// The error of a call that found the thread gone.
fn stopped() -> Error {
    Error::Internal("the SQLite thread stopped".into())
}

impl SqliteThread {
    /// Starts the thread; `open` makes the connection on it (the schema is brought up to date
    /// there too). Answers once the connection is open, or `open`'s error.
    pub(super) async fn start(
        open: impl FnOnce() -> Result<Connection> + Send + 'static,
    ) -> Result<SqliteThread> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let (opened, is_open) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("cellbind-sqlite".into())
            .spawn(move || {
                let mut conn = match open() {
                    Ok(conn) => conn,
                    Err(e) => {
                        // The caller may have stopped waiting: nothing else to tell.
                        let _ = opened.send(Err(e));
                        return;
                    }
                };
                let _ = opened.send(Ok(()));
                for job in queue {
                    if std::panic::catch_unwind(AssertUnwindSafe(|| job(&mut conn))).is_err() {
                        tracing::error!("a SQLite store call panicked; its caller got an error");
                    }
                }
            })
            .map_err(|e| Error::Internal(format!("start the SQLite thread: {e}")))?;
        is_open.await.map_err(|_| stopped())??;
        Ok(SqliteThread {
            jobs: Some(jobs),
            thread: Some(thread),
        })
    }

    /// Runs `f` on the connection and answers its result.
    pub(super) async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let (answer, answered) = oneshot::channel();
        let job: Job = Box::new(move |conn| {
            // The caller may have stopped waiting; the work is done either way.
            let _ = answer.send(f(conn));
        });
        self.jobs
            .as_ref()
            .ok_or_else(stopped)?
            .send(job)
            .map_err(|_| stopped())?;
        answered.await.map_err(|_| stopped())?
    }
}

impl Drop for SqliteThread {
    fn drop(&mut self) {
        // Closing the channel ends the thread's loop once the queued jobs ran; joining makes
        // the connection closed when the store is gone (a reopen of the file sees it closed).
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
