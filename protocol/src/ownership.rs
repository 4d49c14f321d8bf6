//! Ownership records and the serving decision (DESIGN §5).
//!
//! ```text
//!                 handoff(g)                release(g → successor, g')
//!   active(g) ─────────────────▶ handoff(g) ─────────────────────────▶ released(g, succ, g')
//!       ▲  ◀──────────────────────   │                                       │
//!       │        abort handoff       │                                       │
//!       └────────── active(g'') with g'' > g (migrated back, re-imported) ◀──┘
//! ```
//! Generations only go up: a record with a lower generation than the one held is refused, and
//! at the same generation only the arrows above are allowed.
//!
//! [`decide`] is the one table every component uses to serve, refuse or redirect a request
//! ([`decide_unbound`] for a sign-in, which carries no session yet), and [`wrong_cell_target`]
//! the one lookup that names the owner in a `409 WRONG_CELL`.

use serde::{Deserialize, Serialize};

use crate::ids::{CellId, ContractorId, Generation};
use crate::map::PlacementMap;

/// What a cell knows about one contractor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "state", rename_all = "snake_case", deny_unknown_fields)]
pub enum OwnershipRecord {
    /// This cell owns the contractor at `gen`.
    Active {
        #[serde(rename = "gen")]
        generation: Generation,
    },
    /// This cell owns the contractor at `gen` but is handing it off: reads only.
    Handoff {
        #[serde(rename = "gen")]
        generation: Generation,
    },
    /// This cell gave the contractor up at `gen`; `successor` owns it at `successor_gen`.
    Released {
        #[serde(rename = "gen")]
        generation: Generation,
        successor: CellId,
        successor_gen: Generation,
    },
}

impl OwnershipRecord {
    pub fn generation(&self) -> Generation {
        match self {
            OwnershipRecord::Active { generation }
            | OwnershipRecord::Handoff { generation }
            | OwnershipRecord::Released { generation, .. } => *generation,
        }
    }
}

/// Why an ownership change was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OwnershipError {
    #[error("generation {new} is lower than the held generation {held}")]
    GenerationWentDown { held: Generation, new: Generation },
    #[error("at generation {generation}, {from} cannot become {to}")]
    IllegalTransition {
        generation: Generation,
        from: &'static str,
        to: &'static str,
    },
    #[error("a release must name a successor generation above the released one")]
    BadSuccessorGeneration,
}

fn name(r: &OwnershipRecord) -> &'static str {
    match r {
        OwnershipRecord::Active { .. } => "active",
        OwnershipRecord::Handoff { .. } => "handoff",
        OwnershipRecord::Released { .. } => "released",
    }
}

/// Checks that `new` may replace `held` (the state machine in the module doc).
pub fn check_transition(
    held: Option<&OwnershipRecord>,
    new: &OwnershipRecord,
) -> Result<(), OwnershipError> {
    use OwnershipRecord::*;
    if let Released {
        generation,
        successor_gen,
        ..
    } = new
        && successor_gen <= generation
    {
        return Err(OwnershipError::BadSuccessorGeneration);
    }
    let Some(held) = held else { return Ok(()) };
    let (hg, ng) = (held.generation(), new.generation());
    if ng < hg {
        return Err(OwnershipError::GenerationWentDown { held: hg, new: ng });
    }
    if ng > hg || held == new {
        return Ok(());
    }
    match (held, new) {
        (Active { .. }, Handoff { .. })
        | (Handoff { .. }, Active { .. })
        | (Active { .. }, Released { .. })
        | (Handoff { .. }, Released { .. }) => Ok(()),
        _ => Err(OwnershipError::IllegalTransition {
            generation: hg,
            from: name(held),
            to: name(new),
        }),
    }
}

/// Whether a request only reads or may change something.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

impl Access {
    /// GET, HEAD and OPTIONS read; every other method writes.
    pub fn of_method(method: &str) -> Access {
        match method {
            "GET" | "HEAD" | "OPTIONS" => Access::Read,
            _ => Access::Write,
        }
    }
}

/// What to do with a request for a contractor, given this cell's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Serve it.
    Serve,
    /// A write during handoff: `409 HANDOFF_IN_PROGRESS` (reads are served).
    HandoffInProgress,
    /// `409 WRONG_CELL` naming this owner.
    WrongCell { owner: CellId },
    /// The session is stale and this cell is still the owner (it moved away and back):
    /// `409 WRONG_CELL` naming this cell, which makes the client sign in again.
    StaleSessionHere,
    /// No record: the caller names the owner from the placement map, or answers
    /// `UNKNOWN_CONTRACTOR`.
    NoRecord,
    /// The session carries a newer generation than this cell's view: the view lags
    /// (`503 CELL_STATE_STALE`, retry).
    ViewBehind,
}

/// The serving decision (DESIGN §5), in one match.
pub fn decide(
    record: Option<&OwnershipRecord>,
    session_gen: Generation,
    access: Access,
) -> Decision {
    use OwnershipRecord::*;
    match record {
        None => Decision::NoRecord,
        Some(Released { successor, .. }) => Decision::WrongCell {
            owner: successor.clone(),
        },
        Some(Active { generation } | Handoff { generation }) if session_gen > *generation => {
            Decision::ViewBehind
        }
        Some(Active { generation } | Handoff { generation }) if session_gen < *generation => {
            Decision::StaleSessionHere
        }
        Some(Active { .. }) => Decision::Serve,
        Some(Handoff { .. }) => match access {
            Access::Read => Decision::Serve,
            Access::Write => Decision::HandoffInProgress,
        },
    }
}

/// The decision for a request that carries no session (a sign-in): a write at the held
/// generation, so an active record serves, a handoff refuses and a release redirects.
pub fn decide_unbound(record: Option<&OwnershipRecord>) -> Decision {
    let generation = record.map_or(Generation::FIRST, OwnershipRecord::generation);
    decide(record, generation, Access::Write)
}

/// The cell a `409 WRONG_CELL` names, with its endpoint when the placement map lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrongCellTarget {
    pub owner: CellId,
    /// The owner's endpoint exactly as the (signed) placement map writes it; `None` when the
    /// map held does not list the owner (the answer then carries `owner_cell` only).
    pub endpoint: Option<String>,
}

/// The owner to redirect to, for the decisions that point away from this cell:
/// - [`Decision::WrongCell`]: the successor the record names, its endpoint from `map`;
/// - [`Decision::NoRecord`]: the cell `map` places the contractor in, when that is not `here`.
///
/// `None` for every other decision, and for `NoRecord` when there is no map or it places the
/// contractor here (the caller answers `UNKNOWN_CONTRACTOR`).
pub fn wrong_cell_target(
    decision: &Decision,
    contractor: &ContractorId,
    here: &CellId,
    map: Option<&PlacementMap>,
) -> Option<WrongCellTarget> {
    match decision {
        Decision::WrongCell { owner } => Some(WrongCellTarget {
            owner: owner.clone(),
            endpoint: map.and_then(|m| m.cell(owner)).map(|c| c.endpoint.clone()),
        }),
        Decision::NoRecord => map
            .and_then(|m| m.cell_for(contractor))
            .filter(|c| &c.id != here)
            .map(|c| WrongCellTarget {
                owner: c.id.clone(),
                endpoint: Some(c.endpoint.clone()),
            }),
        Decision::Serve
        | Decision::HandoffInProgress
        | Decision::StaleSessionHere
        | Decision::ViewBehind => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use OwnershipRecord::*;

    fn g(n: u64) -> Generation {
        Generation(n)
    }
    fn cell(s: &str) -> CellId {
        CellId::new(s).unwrap()
    }
    /// Released at generation `n` to `successor`, which owns it at `n + 1`.
    fn released(n: u64, successor: &str) -> OwnershipRecord {
        Released {
            generation: g(n),
            successor: cell(successor),
            successor_gen: g(n + 1),
        }
    }
    /// A contractor's three records at generation `n`: active, in handoff, released.
    fn records(n: u64, successor: &str) -> [OwnershipRecord; 3] {
        [
            Active { generation: g(n) },
            Handoff { generation: g(n) },
            released(n, successor),
        ]
    }

    #[test]
    fn decision_table() {
        let [a, h, r] = records(2, "cell-04");
        assert_eq!(decide(Some(&a), g(2), Access::Write), Decision::Serve);
        assert_eq!(decide(Some(&h), g(2), Access::Read), Decision::Serve);
        assert_eq!(
            decide(Some(&h), g(2), Access::Write),
            Decision::HandoffInProgress
        );
        assert_eq!(
            decide(Some(&r), g(2), Access::Read),
            Decision::WrongCell {
                owner: cell("cell-04")
            }
        );
        assert_eq!(
            decide(Some(&a), g(1), Access::Read),
            Decision::StaleSessionHere
        );
        assert_eq!(decide(Some(&a), g(3), Access::Read), Decision::ViewBehind);
        assert_eq!(decide(None, g(1), Access::Read), Decision::NoRecord);
    }

    #[test]
    fn unbound_requests_and_the_wrong_cell_lookup() {
        use crate::map::{CellEntry, MAP_SCHEMA};
        let ctr = ContractorId::new("c-9").unwrap();
        let (here, there) = (cell("cell-01"), cell("cell-02"));
        let [a, h, r] = records(3, "cell-07");
        assert_eq!(decide_unbound(Some(&a)), Decision::Serve);
        assert_eq!(decide_unbound(Some(&h)), Decision::HandoffInProgress);
        assert_eq!(decide_unbound(None), Decision::NoRecord);
        let moved = decide_unbound(Some(&r));
        let map = PlacementMap {
            schema: MAP_SCHEMA,
            version: 1,
            issued_at: 0,
            cells: vec![CellEntry {
                id: there.clone(),
                endpoint: "https://two.example".into(),
                tls_pins: None,
            }],
            buckets: vec![0],
            overrides: Default::default(),
        };
        // A successor the map does not list: named without an endpoint.
        assert_eq!(
            wrong_cell_target(&moved, &ctr, &here, Some(&map)),
            Some(WrongCellTarget {
                owner: cell("cell-07"),
                endpoint: None
            })
        );
        // No record: the map's placement, unless it is this cell or there is no map.
        let placed = wrong_cell_target(&Decision::NoRecord, &ctr, &here, Some(&map));
        assert_eq!(
            placed,
            Some(WrongCellTarget {
                owner: there.clone(),
                endpoint: Some("https://two.example".into())
            })
        );
        assert_eq!(
            wrong_cell_target(&Decision::NoRecord, &ctr, &there, Some(&map)),
            None
        );
        assert_eq!(
            wrong_cell_target(&Decision::NoRecord, &ctr, &here, None),
            None
        );
        assert_eq!(
            wrong_cell_target(&Decision::Serve, &ctr, &here, Some(&map)),
            None
        );
    }

    #[test]
    fn generations_only_go_up() {
        let a2 = Active { generation: g(2) };
        assert!(check_transition(Some(&a2), &Active { generation: g(1) }).is_err());
        assert!(check_transition(Some(&a2), &Handoff { generation: g(2) }).is_ok());
        assert!(check_transition(Some(&a2), &a2).is_ok());
        let rel = released(2, "cell-02");
        assert!(check_transition(Some(&a2), &rel).is_ok());
        assert!(check_transition(Some(&rel), &Active { generation: g(2) }).is_err());
        assert!(check_transition(Some(&rel), &Active { generation: g(4) }).is_ok());
        let bad = Released {
            generation: g(2),
            successor: cell("cell-02"),
            successor_gen: g(2),
        };
        assert!(check_transition(None, &bad).is_err());
    }

    #[test]
    fn wire_shape() {
        let v = serde_json::to_value(Active { generation: g(7) }).unwrap();
        assert_eq!(v, serde_json::json!({"state":"active","gen":7}));
    }
}
