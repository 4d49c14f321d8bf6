//! Serving the public, internal and management listeners over TLS until a signal (or, when
//! asked, the end of stdin).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum_server::Handle;
use axum_server::tls_rustls::RustlsConfig;
use runtime::listener::{ListenerKind, Protection};
use runtime::management::ManagementListener;
use runtime::{IoContext as _, IoError};

use crate::config::Config;
use crate::error::Result;
use crate::internal::internal_router;
use crate::public::public_router;
use crate::state::AppState;

/// Grace period for in-flight requests at shutdown, in milliseconds.
pub const SHUTDOWN_GRACE_MS: u64 = 2_000;
pub use runtime::{EXIT_ON_STDIN_EOF_ENV, install_crypto_provider, shutdown_signal};

/// Binds `addr`, naming it in the error when that fails.
pub fn bind(addr: SocketAddr) -> Result<std::net::TcpListener> {
    let l = std::net::TcpListener::bind(addr).map_err(|e| {
        let what = if e.kind() == std::io::ErrorKind::AddrInUse {
            format!("address {addr} is already in use")
        } else {
            format!("cannot listen on {addr}")
        };
        IoError::new(what, e)
    })?;
    l.set_nonblocking(true)
        .context("setting the listener non-blocking")?;
    Ok(l)
}

/// Serves `router` on `listener` over `tls` with `protection` until `handle` is shut down.
async fn serve(
    listener: std::net::TcpListener,
    tls: RustlsConfig,
    protection: &Protection,
    handle: Handle<SocketAddr>,
    router: axum::Router,
    what: &str,
) -> Result<()> {
    runtime::listener::https_server(listener, tls, protection)
        .with_context(|| format!("starting the {what} listener"))?
        .handle(handle)
        .serve(router.into_make_service())
        .await
        .with_context(|| format!("serving the {what} listener"))?;
    Ok(())
}

/// Runs the app over TLS, on its public (`listen`), internal (`internal_listen`) and
/// management (`management_listen`) listeners, each with the listener protections of the
/// config (`runtime::listener`), until [`shutdown_signal`]; they stop together, and if one
/// fails the others are stopped too.
pub async fn run(config: Config) -> Result<()> {
    install_crypto_provider();
    config.validate()?;
    let state = AppState::from_config(&config)?;
    let tls = RustlsConfig::from_pem_file(&config.tls_cert, &config.tls_key)
        .await
        .context("loading the TLS certificate and key")?;
    let public = bind(config.listen)?;
    let internal = bind(config.internal_listen)?;
    let management = ManagementListener::bind(config.management_listen)?;
    let protection = |kind: ListenerKind, name: &'static str| {
        config
            .listeners
            .protection(kind, state.metrics().connections_refused(name))
    };
    let (public_p, internal_p, management_p) = (
        protection(ListenerKind::Service, "public"),
        protection(ListenerKind::Service, "internal"),
        protection(ListenerKind::Management, "management"),
    );
    let public_handle: Handle<SocketAddr> = Handle::new();
    let internal_handle: Handle<SocketAddr> = Handle::new();
    let management_handle: Handle<SocketAddr> = Handle::new();
    let (ph, ih, mh) = (
        public_handle.clone(),
        internal_handle.clone(),
        management_handle.clone(),
    );
    let grace = Some(Duration::from_millis(SHUTDOWN_GRACE_MS));
    tokio::spawn(async move {
        shutdown_signal().await;
        ph.graceful_shutdown(grace);
        ih.graceful_shutdown(grace);
        mh.graceful_shutdown(grace);
    });
    tracing::info!(
        cell = %config.cell_id,
        listen = %config.listen,
        internal_listen = %config.internal_listen,
        "demo app serving"
    );
    let served = tokio::try_join!(
        serve(
            public,
            tls.clone(),
            &public_p,
            public_handle.clone(),
            public_router(state.clone()),
            "public",
        ),
        serve(
            internal,
            tls.clone(),
            &internal_p,
            internal_handle.clone(),
            internal_router(state.clone()),
            "internal",
        ),
        async {
            Ok(management
                .serve(
                    tls,
                    management_handle.clone(),
                    Arc::new(Management(state)),
                    &management_p,
                )
                .await?)
        },
    );
    // Whichever way it ended, no listener outlives the others.
    public_handle.shutdown();
    internal_handle.shutdown();
    management_handle.shutdown();
    served.map(|_| ())
}

/// What the management listener serves (`runtime::management`): ready while the database is
/// open; the request metrics.
#[derive(Debug, Clone)]
pub struct Management(pub AppState);

impl runtime::management::Probe for Management {
    fn readiness(&self) -> std::result::Result<(), protocol::ErrorBody> {
        if self.0.store_open() {
            Ok(())
        } else {
            Err(protocol::ErrorBody::new(
                protocol::ErrorCode::NotReady,
                "the app's database failed",
            ))
        }
    }

    fn metrics(&self) -> String {
        self.0.metrics().encode()
    }
}
