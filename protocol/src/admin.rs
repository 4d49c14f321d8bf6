//! The internal and admin APIs, as types: every request and response body that an operator
//! tool (`cellctl`) or a peer component exchanges with a cell's auth-service, a cell's app or
//! the control plane. The servers and `cellctl` use these same types, so an endpoint's shape
//! is defined once and checked by the compiler on both sides.
//!
//! - [`cell`]: a cell's auth-service admin API (`/admin/v1/*`, internal listener).
//! - [`app`]: a cell app's internal migration interface (`/internal/v1/*`).
//! - [`placement`]: the control plane's admin API (`/admin/v1/placements`, publish).
//!
//! Every path is written once, here: a route without parameters as a `…_PATH` const, one with
//! a parameter as a `…_ROUTE` const (the pattern the server registers and documents, e.g.
//! `/admin/v1/ownership/{ctr}`) with a builder that fills it in for a client
//! (`cell::ownership_path`).

pub mod app;
pub mod cell;
pub mod placement;

/// `route` with its one `{parameter}` segment replaced by `value` (an id or a number: path-safe
/// by its type).
fn fill(route: &str, value: &str) -> String {
    match (route.find('{'), route.find('}')) {
        (Some(open), Some(close)) if open < close => {
            format!("{}{value}{}", &route[..open], &route[close + 1..])
        }
        // Every route given here has one parameter (the tests check each builder).
        _ => route.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn fill_replaces_the_one_parameter() {
        assert_eq!(super::fill("/a/{x}/b", "7"), "/a/7/b");
        assert_eq!(super::fill("/a/{x}", "c-1"), "/a/c-1");
        assert_eq!(super::fill("/a/b", "7"), "/a/b");
    }
}
