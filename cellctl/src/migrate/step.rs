//! The steps of a migration, in order (the diagram is in the `migrate` module).

use serde::{Deserialize, Serialize};

/// The steps, in order (see the module diagram).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    Copy,
    Handoff,
    Drain,
    Sync,
    Placement,
    Activate,
    Release,
    Done,
}

impl Step {
    pub const FIRST: Step = Step::Copy;
    pub const ALL: [Step; 8] = [
        Step::Copy,
        Step::Handoff,
        Step::Drain,
        Step::Sync,
        Step::Placement,
        Step::Activate,
        Step::Release,
        Step::Done,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Step::Copy => "copy",
            Step::Handoff => "handoff",
            Step::Drain => "drain",
            Step::Sync => "sync",
            Step::Placement => "placement",
            Step::Activate => "activate",
            Step::Release => "release",
            Step::Done => "done",
        }
    }

    pub fn parse(s: &str) -> Option<Step> {
        Step::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
