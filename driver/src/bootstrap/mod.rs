//! Joining a job: who am I, who are the others, and how to reach each.
//!
//! Rank and size come from the launcher that started the process
//! ([`launcher`]); the ranks then meet (an inherited shared-memory file,
//! a PMI key-value space, a root address, or a local socket), agree on the
//! protocol parameters, and connect: shared memory among the ranks of one
//! host, TCP to the others.

use crate::config::{debug_level, Config, DebugLevel};
use crate::error::{Error, Result};
use crate::progress::{Engine, Protocol, WaitBoard};
use crate::transport::shm::map::JobMap;
use crate::transport::shm::{ShmLink, ShmOptions};
use crate::transport::Link;
use std::sync::Arc;

/// A rank that joined its job: its engine, ready to use.
pub(crate) struct Joined {
    /// The engine, with a link to every rank.
    pub engine: Engine,
    /// This rank.
    pub rank: usize,
    /// Ranks in the job.
    pub size: usize,
}

pub(crate) fn shm_options(cfg: &Config) -> ShmOptions {
    ShmOptions {
        cma: cfg.cma,
        cma_min: cfg.cma_min,
        debug: debug_level() >= DebugLevel::Info,
    }
}

/// A job whose ranks all share `map` (one host): shared memory to every
/// peer.
pub(crate) fn shm_world(map: Arc<JobMap>, rank: usize, cfg: &Config) -> Result<Joined> {
    map.attach(rank, std::process::id());
    let n = map.nranks();
    let opt = shm_options(cfg);
    let links = (0..n)
        .map(|p| Link::Shm(ShmLink::new(map.clone(), rank, p, rank, p, opt)))
        .collect();
    let l = map.layout();
    let protocol = Protocol {
        eager_limit: l.eager_limit,
        credits: l.credits,
        envelopes: l.envelopes,
    };
    let board = WaitBoard {
        map: map.clone(),
        local_of: (0..n).collect(),
    };
    let engine = Engine::new(rank, links, protocol, cfg, Some(board))?;
    Ok(Joined {
        engine,
        rank,
        size: n,
    })
}

fn env_usize(name: &str) -> Result<usize> {
    let v = std::env::var(name).map_err(|_| {
        Error::NotLaunched(format!(
            "{name} is not set (start the program with tandem-run, or use Comm::local)"
        ))
    })?;
    v.parse()
        .map_err(|_| Error::NotLaunched(format!("{name}={v:?} is not a number")))
}

/// Joins the job described by the environment.
pub(crate) fn join(cfg: &Config) -> Result<Joined> {
    let rank = env_usize("TANDEM_RANK")?;
    let size = env_usize("TANDEM_SIZE")?;
    let fd = env_usize("TANDEM_SHM_FD")? as i32;
    let job_s = std::env::var("TANDEM_JOB")
        .map_err(|_| Error::NotLaunched("TANDEM_JOB is not set".into()))?;
    let job = u64::from_str_radix(&job_s, 16)
        .map_err(|_| Error::NotLaunched(format!("TANDEM_JOB={job_s:?} is not a job id")))?;
    if rank >= size {
        return Err(Error::InvalidRank { rank, size });
    }
    let owned = crate::sys::take_inherited_fd(fd).ok_or_else(|| {
        Error::NotLaunched(format!(
            "TANDEM_SHM_FD={fd} is not an open descriptor (stale environment?)"
        ))
    })?;
    let file = std::fs::File::from(owned);
    let map = JobMap::open(&file, job, size)?;
    shm_world(Arc::new(map), rank, cfg)
}
