//! The I/O error of every Cellbind binary: the `std::io::Error` with what was being done
//! ("reading fleet.json: No such file or directory"). Each crate's error enum carries it in
//! its `Io` variant (`#[from]`), so `io_result.context("what")?` converts.

/// An I/O failure and what was being done when it happened; shown as `{context}: {source}`.
#[derive(Debug, thiserror::Error)]
#[error("{context}: {source}")]
pub struct IoError {
    /// What was being done ("creating /var/lib/cellbind", "bind 0.0.0.0:8443").
    pub context: String,
    /// The failure.
    #[source]
    pub source: std::io::Error,
}

impl IoError {
    /// An I/O error with what was being done.
    pub fn new(context: impl Into<String>, source: std::io::Error) -> Self {
        IoError {
            context: context.into(),
            source,
        }
    }
}

/// Adds what was being done to the error of an `io::Result`.
pub trait IoContext<T> {
    /// The error, if any, as an [`IoError`] with `context`.
    fn context(self, context: impl Into<String>) -> Result<T, IoError>;

    /// [`IoContext::context`] with the context built only on error.
    fn with_context<C: Into<String>>(self, context: impl FnOnce() -> C) -> Result<T, IoError>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn context(self, context: impl Into<String>) -> Result<T, IoError> {
        self.map_err(|source| IoError::new(context, source))
    }

    fn with_context<C: Into<String>>(self, context: impl FnOnce() -> C) -> Result<T, IoError> {
        self.map_err(|source| IoError::new(context(), source))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn shows_the_context_then_the_failure() {
        let e = super::IoError::new(
            "reading x.toml",
            std::io::Error::new(std::io::ErrorKind::NotFound, "gone"),
        );
        assert_eq!(e.to_string(), "reading x.toml: gone");
        assert!(std::error::Error::source(&e).is_some());

        use super::IoContext as _;
        let failed: std::io::Result<()> = Err(std::io::Error::other("full"));
        let e = failed
            .with_context(|| format!("writing {}", "y"))
            .unwrap_err();
        assert_eq!(e.to_string(), "writing y: full");
    }
}
