//! Web origins (`scheme://host[:port]`): this cell's, and the fleet's as named by the signed
//! placement map this edge holds. The browser rules, the CSRF proof, the desk's CSP and the
//! absolute-form target check all compare origins this one way.

use crate::held::state::CellState;

/// The scheme and authority of an endpoint URL, default port dropped, case kept.
fn origin_parts(url: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    if scheme.is_empty() || authority.is_empty() {
        return None;
    }
    let default = if scheme.eq_ignore_ascii_case("https") {
        ":443"
    } else if scheme.eq_ignore_ascii_case("http") {
        ":80"
    } else {
        ""
    };
    Some((scheme, authority.strip_suffix(default).unwrap_or(authority)))
}

/// The origin (`scheme://host[:port]`) of an endpoint URL, lower-cased, default port dropped.
pub(crate) fn origin_of(url: &str) -> Option<String> {
    let (scheme, authority) = origin_parts(url)?;
    Some(format!(
        "{}://{}",
        scheme.to_ascii_lowercase(),
        authority.to_ascii_lowercase()
    ))
}

/// Whether `candidate` (an `Origin` header) is the origin of `url`: equal to [`origin_of`]
/// `url`, compared in place (this runs on every browser request, once per fleet cell).
pub(crate) fn same_origin(candidate: &str, url: &str) -> bool {
    let Some((scheme, authority)) = origin_parts(url) else {
        return false;
    };
    let lowered = |c: &[u8], s: &str| {
        c.len() == s.len()
            && c.iter()
                .zip(s.bytes())
                .all(|(a, b)| *a == b.to_ascii_lowercase())
    };
    let c = candidate.as_bytes();
    c.len() == scheme.len() + 3 + authority.len()
        && lowered(&c[..scheme.len()], scheme)
        && &c[scheme.len()..scheme.len() + 3] == b"://"
        && lowered(&c[scheme.len() + 3..], authority)
}

/// Whether `origin` is one of the fleet's cells in the signed placement map this edge holds.
pub(crate) fn is_fleet_origin(origin: &str, state: Option<&CellState>) -> bool {
    state
        .and_then(CellState::map)
        .is_some_and(|m| m.map.cells.iter().any(|c| same_origin(origin, &c.endpoint)))
}

/// Whether `origin` is this cell's own origin or a fleet cell's.
pub(crate) fn origin_allowed(origin: &str, public_url: &str, state: Option<&CellState>) -> bool {
    same_origin(origin, public_url) || is_fleet_origin(origin, state)
}

/// The fleet's cell origins in the held map that are plain (only characters an origin can
/// have: a `;` or space in a map entry must never reach a header as a separator).
pub(crate) fn fleet_origins(state: Option<&CellState>) -> impl Iterator<Item = String> + '_ {
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

    #[test]
    fn same_origin_is_equality_with_origin_of() {
        let urls = [
            "https://127.0.0.4:8443/",
            "HTTPS://Cell.Example:443/x",
            "http://cell.example:80",
            "https://cell.example:4430",
            "ftp://Cell.Example:21/",
            "https://",
            "no scheme",
            "://x",
        ];
        let candidates = [
            "https://127.0.0.4:8443",
            "https://cell.example",
            "https://Cell.Example",
            "http://cell.example",
            "https://cell.example:4430",
            "https://cell.example:443",
            "ftp://cell.example:21",
            "https://127.0.0.4:8443/",
            "",
        ];
        for url in urls {
            for candidate in candidates {
                assert_eq!(
                    same_origin(candidate, url),
                    origin_of(url).is_some_and(|o| o == candidate),
                    "{candidate} vs {url}"
                );
            }
        }
    }
}
