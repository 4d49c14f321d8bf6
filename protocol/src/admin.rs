//! The internal and admin APIs, as types: every request and response body that an operator
//! tool (`cellctl`) or a peer component exchanges with a cell's auth-service, a cell's app or
//! the control plane. The servers and `cellctl` use these same types, so an endpoint's shape
//! is defined once and checked by the compiler on both sides.
//!
//! - [`cell`]: a cell's auth-service admin API (`/admin/v1/*`, internal listener).
//! - [`app`]: a cell app's internal migration interface (`/internal/v1/*`).
//! - [`placement`]: the control plane's admin API (`/admin/v1/placements`, publish).

pub mod app;
pub mod cell;
pub mod placement;
