//! Collectives the NCCL way, on the progress layer's point-to-point
//! operations: every collective is a fixed schedule of
//! receive-reduce-send steps (`plan`) through fixed scratch slots, run by
//! a table of collectives in flight (`exec`) that any wait on the
//! communicator advances. Transfers use the communicator's own collective
//! context, so they never match user traffic, and go over whatever
//! transport links the two ranks.
//!
//! Layering: `comm` (the public calls) → `coll` (schedules, execution,
//! element types and kernels) → `progress`.

pub(crate) mod exec;
pub(crate) mod plan;
pub(crate) mod types;

pub use plan::Algorithm;
pub use types::{reduce_local, Dtype, Element, ReduceOp};

use crate::config::{debug_level, env_num, DebugLevel};
use crate::error::{Error, Result};

/// A collective operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Collective {
    /// Every rank gets the reduction of every rank's buffer.
    Allreduce,
    /// The root gets the reduction of every rank's buffer.
    Reduce,
    /// Every rank gets the root's buffer.
    Broadcast,
    /// Every rank gets every rank's block, in rank order.
    Allgather,
    /// Rank `r` gets block `r` of the reduction of every rank's buffer.
    ReduceScatter,
    /// Rank `r` gets block `r` of every rank's buffer, in rank order.
    Alltoall,
    /// No rank leaves before every rank entered.
    Barrier,
}

impl Collective {
    /// Every collective, in declaration order.
    pub const ALL: [Collective; 7] = [
        Self::Allreduce,
        Self::Reduce,
        Self::Broadcast,
        Self::Allgather,
        Self::ReduceScatter,
        Self::Alltoall,
        Self::Barrier,
    ];

    /// Its name as `tandem-perf` and `TANDEM_ALGO` spell it (`allreduce`,
    /// `reduce`, `broadcast`, `allgather`, `reduce_scatter`, `alltoall`,
    /// `barrier`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Allreduce => "allreduce",
            Self::Reduce => "reduce",
            Self::Broadcast => "broadcast",
            Self::Allgather => "allgather",
            Self::ReduceScatter => "reduce_scatter",
            Self::Alltoall => "alltoall",
            Self::Barrier => "barrier",
        }
    }

    /// The collective named `s`.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == s)
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// How collectives choose and size their algorithms, from the
/// environment:
///
/// * `TANDEM_ALGO`: `ring` or `tree` for every collective, or a list such
///   as `allreduce=ring,broadcast=tree`; unset (or `auto`): the
///   latency-optimal algorithm up to `TANDEM_COLL_TREE_MAX` bytes, the
///   pipelined ring above.
/// * `TANDEM_COLL_TREE_MAX`: the crossover in bytes for every collective.
///   Default: 2048 for allreduce (measured between two ranks on the
///   machine in BENCHMARKS.md: recursive doubling wins up to 2 KiB, the
///   ring from 4 KiB), 32768 for the others (a tree's log2(n) hops against
///   the chain's n-1; not measurable with the two cores here).
/// * `TANDEM_COLL_CHUNK`: bytes per pipeline chunk (default 1 MiB: fewer,
///   larger rendezvous transfers measured best here from 256 KiB up).
/// * `TANDEM_COLL_LANES`: concurrent pipelines, 1 to 8 (default 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tunables {
    force: [Option<Algorithm>; 7],
    tree_max: [usize; 7],
    chunk: usize,
    lanes: usize,
    info: bool,
}

impl Tunables {
    /// Reads the environment.
    pub(crate) fn from_env() -> Result<Self> {
        let mut t = Self {
            force: [None; 7],
            tree_max: match env_num("TANDEM_COLL_TREE_MAX")? {
                Some(b) => [b; 7],
                None => {
                    let mut d = [32 << 10; 7];
                    d[Collective::Allreduce.index()] = 2 << 10;
                    d
                }
            },
            chunk: env_num("TANDEM_COLL_CHUNK")?.unwrap_or(1 << 20),
            lanes: env_num("TANDEM_COLL_LANES")?.unwrap_or(2),
            info: debug_level() >= DebugLevel::Info,
        };
        if t.chunk == 0 {
            return Err(Error::Config("TANDEM_COLL_CHUNK must be positive".into()));
        }
        if !(1..=exec::MAX_LANES).contains(&t.lanes) {
            return Err(Error::Config(format!(
                "TANDEM_COLL_LANES must be 1..={}, got {}",
                exec::MAX_LANES,
                t.lanes
            )));
        }
        if let Ok(v) = std::env::var("TANDEM_ALGO") {
            t.force = parse_algo(&v)?;
        }
        Ok(t)
    }

    /// Sets the pipeline: chunk bytes and lanes.
    pub(crate) fn pipeline(&mut self, chunk: usize, lanes: usize) -> Result<()> {
        if chunk == 0 || !(1..=exec::MAX_LANES).contains(&lanes) {
            return Err(Error::InvalidArgument(format!(
                "pipeline: chunk must be positive and lanes 1..={} (got {chunk}, {lanes})",
                exec::MAX_LANES
            )));
        }
        (self.chunk, self.lanes) = (chunk, lanes);
        Ok(())
    }

    /// Forces `a` for `c` (`None`: choose by size again).
    pub(crate) fn force(&mut self, c: Collective, a: Option<Algorithm>) {
        self.force[c.index()] = a;
    }

    /// The algorithm for `c` moving `bytes` (the larger of a rank's input
    /// and output) on `n` ranks, and whether it was forced.
    pub(crate) fn choose(&self, c: Collective, bytes: usize) -> (Algorithm, bool) {
        match self.force[c.index()] {
            Some(a) => (a, true),
            None if bytes <= self.tree_max[c.index()] => (Algorithm::Tree, false),
            None => (Algorithm::Ring, false),
        }
    }
}

/// Parses `TANDEM_ALGO`.
fn parse_algo(v: &str) -> Result<[Option<Algorithm>; 7]> {
    let one = |s: &str| match s.trim() {
        "ring" => Ok(Some(Algorithm::Ring)),
        "tree" => Ok(Some(Algorithm::Tree)),
        "auto" | "" => Ok(None),
        other => Err(Error::Config(format!(
            "TANDEM_ALGO: unknown algorithm {other:?} (ring, tree or auto)"
        ))),
    };
    let mut out = [None; 7];
    if !v.contains('=') {
        return Ok([one(v)?; 7]);
    }
    for part in v.split(',').filter(|p| !p.trim().is_empty()) {
        let (c, a) = part.split_once('=').ok_or_else(|| {
            Error::Config(format!("TANDEM_ALGO: {part:?} is not collective=algorithm"))
        })?;
        let c = Collective::parse(c.trim()).ok_or_else(|| {
            Error::Config(format!("TANDEM_ALGO: unknown collective {:?}", c.trim()))
        })?;
        out[c.index()] = one(a)?;
    }
    Ok(out)
}

/// A collective call's shape, as the comm layer validated it.
pub(crate) struct Shape {
    pub coll: Collective,
    pub dtype: Dtype,
    pub op: Option<ReduceOp>,
    pub count: usize,
    pub root: usize,
    pub in_place: bool,
}

/// Plans `s` for rank `r` of `n`, printing the choice at
/// `TANDEM_DEBUG=INFO` whenever it changes for that collective.
pub(crate) fn plan(
    t: &Tunables,
    last: &mut [Option<Algorithm>; 7],
    s: &Shape,
    r: usize,
    n: usize,
) -> plan::Plan {
    let es = s.dtype.size();
    let bytes = match s.coll {
        Collective::Allreduce | Collective::Reduce | Collective::Broadcast => s.count * es,
        Collective::Barrier => 0,
        _ => n * s.count * es,
    };
    let (mut algo, forced) = t.choose(s.coll, bytes);
    if s.coll == Collective::Allgather && algo == Algorithm::Tree && !n.is_power_of_two() {
        algo = Algorithm::Ring; // recursive doubling needs 2^k ranks
    }
    if t.info && last[s.coll.index()] != Some(algo) {
        last[s.coll.index()] = Some(algo);
        eprintln!(
            "tandem[{r}/{n}] {} of {bytes} B ({} x {}{}): {} ({})",
            s.coll.name(),
            s.count,
            s.dtype,
            s.op.map(|o| format!(" {o}")).unwrap_or_default(),
            algo.describe(s.coll),
            if forced {
                "TANDEM_ALGO".to_string()
            } else {
                format!(
                    "auto: latency-optimal up to {} B",
                    t.tree_max[s.coll.index()]
                )
            }
        );
    }
    plan::Plan {
        coll: s.coll,
        algo,
        n,
        r,
        root: s.root,
        count: s.count,
        chunk: (t.chunk / es).max(1),
        lanes: t.lanes,
        in_place: s.in_place,
    }
}

#[cfg(test)]
mod tunable_tests {
    use super::*;

    #[test]
    fn algo_settings_parse() {
        assert_eq!(parse_algo("ring").unwrap(), [Some(Algorithm::Ring); 7]);
        let v = parse_algo("allreduce=tree, broadcast=ring").unwrap();
        assert_eq!(v[0], Some(Algorithm::Tree));
        assert_eq!(v[2], Some(Algorithm::Ring));
        assert_eq!(v[1], None);
        assert!(parse_algo("fast").is_err());
        assert!(parse_algo("allsum=ring").is_err());
        assert!(parse_algo("allreduce").is_err());
    }
}
