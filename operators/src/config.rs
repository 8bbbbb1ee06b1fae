//! What a build's configuration and its stages' configurations share: which
//! memories are built, and what can be wrong with a size. Apart from `build`,
//! so the stages (segment, paginate, graph, raptor) name their errors without
//! reaching back into the build that uses them.

use serde::{Deserialize, Serialize};

/// Which of the four memories a build makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memories {
    pub memwalker: bool,
    pub readagent: bool,
    pub graph: bool,
    pub raptor: bool,
}

impl Memories {
    pub const ALL: Memories = Memories {
        memwalker: true,
        readagent: true,
        graph: true,
        raptor: true,
    };
    pub const NAMES: [&str; 4] = ["memwalker", "readagent", "graph", "raptor"];

    /// The memories of a comma-separated list of [`Memories::NAMES`].
    pub fn parse(list: &str) -> Result<Memories, BuildConfigError> {
        let mut chosen = Memories {
            memwalker: false,
            readagent: false,
            graph: false,
            raptor: false,
        };
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let flag = match name {
                "memwalker" => &mut chosen.memwalker,
                "readagent" => &mut chosen.readagent,
                "graph" => &mut chosen.graph,
                "raptor" => &mut chosen.raptor,
                other => return Err(BuildConfigError::UnknownMemory(other.to_string())),
            };
            *flag = true;
        }
        if !chosen.any() {
            return Err(BuildConfigError::NoMemory);
        }
        Ok(chosen)
    }

    pub fn any(&self) -> bool {
        self.memwalker || self.readagent || self.graph || self.raptor
    }

    /// Whether the build embeds anything (RAPTOR clusters vectors; the graph's
    /// entities are found by theirs).
    pub fn embeds(&self) -> bool {
        self.graph || self.raptor
    }
}

/// A build configuration that cannot work: what is wrong with which size.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BuildConfigError {
    #[error("segment sizes need 0 < min ({min}) < target ({target})")]
    SegmentMin { min: usize, target: usize },
    #[error("segment sizes need target ({target}) < max ({max})")]
    SegmentMax { target: usize, max: usize },
    #[error("page sizes need 0 < min words ({min}) < max words ({max})")]
    PageWords { min: usize, max: usize },
    #[error("a tree node needs at least 2 children, not {0}")]
    MaxChildren(usize),
    #[error("the relation description budget must be at least one token")]
    NoDescriptionBudget,
    #[error(
        "the same-entity band needs -1 <= apart-below <= same-above <= 1, not {apart_below} and {same_above}"
    )]
    SameEntityBand { apart_below: f32, same_above: f32 },
    #[error("RAPTOR chunks need at least one token")]
    EmptyChunks,
    #[error("a RAPTOR tree needs at least one level above its chunks")]
    NoRaptorLevel,
    #[error("RAPTOR clustering needs at least one dimension and one cluster")]
    NoClustering,
    #[error("the membership threshold must be between 0 and 1, not {0}")]
    MembershipThreshold(f64),
    #[error("unknown memory {0:?}; choose from {names}", names = Memories::NAMES.join(", "))]
    UnknownMemory(String),
    #[error("choose at least one memory of {names}", names = Memories::NAMES.join(", "))]
    NoMemory,
}
