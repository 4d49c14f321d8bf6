//! Web origins (`scheme://host[:port]`): this cell's, and the fleet's as named by the signed
//! placement map this edge holds. The browser rules, the CSRF proof, the desk's CSP and the
//! absolute-form target check all compare origins this one way.

use crate::state::CellState;

/// The origin (`scheme://host[:port]`) of an endpoint URL, lower-cased, default port dropped.
pub fn origin_of(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    if scheme.is_empty() || authority.is_empty() {
        return None;
    }
    let scheme = scheme.to_ascii_lowercase();
    let mut authority = authority.to_ascii_lowercase();
    let default = match scheme.as_str() {
        "https" => Some(":443"),
        "http" => Some(":80"),
        _ => None,
    };
    if let Some(d) = default
        && authority.ends_with(d)
    {
        authority.truncate(authority.len() - d.len());
    }
    Some(format!("{scheme}://{authority}"))
}

/// Whether `candidate` (an `Origin` header) is the origin of `url`.
pub fn same_origin(candidate: &str, url: &str) -> bool {
    origin_of(url).is_some_and(|o| o == candidate)
}

/// Whether `origin` is one of the fleet's cells in the signed placement map this edge holds.
pub fn is_fleet_origin(origin: &str, state: Option<&CellState>) -> bool {
    state
        .and_then(CellState::map)
        .is_some_and(|m| m.map.cells.iter().any(|c| same_origin(origin, &c.endpoint)))
}

/// Whether `origin` is this cell's own origin or a fleet cell's.
pub fn origin_allowed(origin: &str, public_url: &str, state: Option<&CellState>) -> bool {
    same_origin(origin, public_url) || is_fleet_origin(origin, state)
}

/// The fleet's cell origins in the held map that are plain (only characters an origin can
/// have: a `;` or space in a map entry must never reach a header as a separator).
pub fn fleet_origins(state: Option<&CellState>) -> impl Iterator<Item = String> + '_ {
    state
        .and_then(CellState::map)
        .into_iter()
        .flat_map(|m| m.map.cells.iter())
        .filter_map(|c| origin_of(&c.endpoint))
        .filter(|o| {
            o.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-.:/[]".contains(&b))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_normalised() {
        assert_eq!(
            origin_of("https://127.0.0.4:8443/").as_deref(),
            Some("https://127.0.0.4:8443")
        );
        assert_eq!(
            origin_of("HTTPS://Cell.Example:443/x").as_deref(),
            Some("https://cell.example")
        );
        assert_eq!(origin_of("no scheme"), None);
        assert_eq!(origin_of("https://"), None);
    }
}
