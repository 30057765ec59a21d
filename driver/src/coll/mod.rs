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

pub use crate::config::{Algorithm, CollConfig, Collective};
pub use types::{reduce_local, Dtype, Element, ReduceOp};

/// A collective call's shape, as the comm layer validated it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    t: &CollConfig,
    info: bool,
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
    if info && last[s.coll.index()] != Some(algo) {
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
