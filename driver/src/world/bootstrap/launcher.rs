//! Which launcher started this process, and what it tells us.
//!
//! | launcher | rank / size | meeting |
//! | --- | --- | --- |
//! | `tandem-run` (one host) | `TANDEM_RANK` / `TANDEM_SIZE` | the inherited shared-memory file (`TANDEM_SHM_FD`) |
//! | `tandem-run --hosts`, or by hand | `TANDEM_RANK` / `TANDEM_SIZE` | `TANDEM_ROOT=host:port`, else a local socket named by `TANDEM_JOB` |
//! | MPICH / Intel MPI hydra | `PMI_RANK` / `PMI_SIZE` | the PMI-1 key-value space over `PMI_FD` |
//! | Open MPI `mpirun` | `OMPI_COMM_WORLD_RANK` / `_SIZE` / `_LOCAL_SIZE` | `TANDEM_ROOT`, else (one host) a local socket named by `PMIX_NAMESPACE` |
//! | Slurm `srun` | `SLURM_PROCID` / `SLURM_NTASKS` / `SLURM_NNODES` | `TANDEM_ROOT`, else (one node) a local socket named by `SLURM_JOB_ID.SLURM_STEP_ID` |
//! | `torchrun` | `RANK` / `WORLD_SIZE` / `LOCAL_WORLD_SIZE` | one host: a local socket named by `TORCHELASTIC_RUN_ID`; several: `MASTER_ADDR` at port `TANDEM_ROOT_PORT`, default `MASTER_PORT + 1` |
//!
//! `TANDEM_ROOT` always wins over what a launcher implies. torchrun's own
//! store listens on `MASTER_PORT`; tandem never uses that port.

use super::pmi::Pmi;
use crate::error::{Error, Result};

/// How the ranks of a job find each other.
pub(crate) enum Meet {
    /// A key-value space (PMI-1, from hydra).
    Pmi(Box<Pmi>),
    /// A root address (`host:port`) where rank 0 listens.
    Root(String),
    /// A socket on this host named after the job (every rank on one host).
    Local,
}

/// What the environment says about this rank's job.
pub(crate) struct Launch {
    /// This rank.
    pub rank: usize,
    /// Ranks in the job.
    pub size: usize,
    /// Who started us, for messages.
    pub launcher: &'static str,
    /// A string that is the same on every rank of the job and differs
    /// between jobs (names the local socket; binds authentication).
    pub job: String,
    /// How to meet.
    pub meet: Meet,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn num(name: &str) -> Result<Option<usize>> {
    match var(name) {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| Error::NotLaunched(format!("{name}={v:?} is not a number"))),
    }
}

fn need(name: &str, launcher: &str) -> Result<usize> {
    num(name)?.ok_or_else(|| {
        Error::NotLaunched(format!(
            "{launcher}: {name} is not set (an incomplete launcher environment)"
        ))
    })
}

fn root_or_local(single_host: bool, launcher: &str) -> Result<Meet> {
    if let Some(r) = var("TANDEM_ROOT") {
        return Ok(Meet::Root(r));
    }
    if single_host {
        return Ok(Meet::Local);
    }
    Err(Error::NotLaunched(format!(
        "{launcher} started ranks on several hosts: set TANDEM_ROOT=host:port (an address of \
         the host of rank 0 where it may listen) and TANDEM_SECRET on every rank"
    )))
}

/// Whether the environment names a launcher tandem understands.
pub(crate) fn present() -> bool {
    [
        "TANDEM_RANK",
        "PMI_FD",
        "PMI_RANK",
        "OMPI_COMM_WORLD_RANK",
        "SLURM_PROCID",
    ]
    .iter()
    .any(|v| var(v).is_some())
        || (var("RANK").is_some() && var("WORLD_SIZE").is_some())
}

/// Reads the launcher's variables.
pub(crate) fn detect() -> Result<Launch> {
    let explicit_job = var("TANDEM_JOB");
    // tandem-run, a job started by hand, or one of our own test harnesses.
    if let (Some(rank), Some(size)) = (num("TANDEM_RANK")?, num("TANDEM_SIZE")?) {
        let job = explicit_job.unwrap_or_else(|| format!("ppid-{}", crate::sys::parent_pid()));
        return finish(rank, size, "tandem", job, root_or_local(true, "tandem")?);
    }
    // MPICH / Intel MPI hydra: PMI-1 over an inherited descriptor.
    if var("PMI_FD").is_some() {
        let pmi = Pmi::from_env()
            .map_err(|e| Error::NotLaunched(format!("hydra (PMI_FD): {e}")))?
            .ok_or_else(|| Error::NotLaunched("PMI_FD vanished".into()))?;
        let (rank, size) = (pmi.rank(), pmi.size());
        let job = explicit_job.unwrap_or_else(|| pmi.kvsname().to_string());
        let meet = match var("TANDEM_ROOT") {
            Some(r) => Meet::Root(r),
            None => Meet::Pmi(Box::new(pmi)),
        };
        return finish(rank, size, "hydra", job, meet);
    }
    if let Some(rank) = num("OMPI_COMM_WORLD_RANK")? {
        let l = "Open MPI mpirun";
        let size = need("OMPI_COMM_WORLD_SIZE", l)?;
        let local = num("OMPI_COMM_WORLD_LOCAL_SIZE")?.unwrap_or(0);
        let job = explicit_job
            .or_else(|| var("PMIX_NAMESPACE"))
            .or_else(|| var("OMPI_MCA_ess_base_jobid"))
            .unwrap_or_else(|| format!("ppid-{}", crate::sys::parent_pid()));
        return finish(rank, size, l, job, root_or_local(local == size, l)?);
    }
    if let Some(rank) = num("PMI_RANK")? {
        // A PMI launcher without a descriptor (e.g. PMI_PORT): rank and size
        // only; meet at TANDEM_ROOT, or locally.
        let l = "PMI (no PMI_FD)";
        let size = need("PMI_SIZE", l)?;
        let job = explicit_job.unwrap_or_else(|| format!("ppid-{}", crate::sys::parent_pid()));
        return finish(rank, size, l, job, root_or_local(true, l)?);
    }
    if let Some(rank) = num("SLURM_PROCID")? {
        let l = "Slurm";
        let size = need("SLURM_NTASKS", l)?;
        let nodes = num("SLURM_NNODES")?
            .or(num("SLURM_JOB_NUM_NODES")?)
            .unwrap_or(1);
        let job = explicit_job.unwrap_or_else(|| {
            format!(
                "slurm-{}.{}",
                var("SLURM_JOB_ID").unwrap_or_default(),
                var("SLURM_STEP_ID").unwrap_or_default()
            )
        });
        return finish(rank, size, l, job, root_or_local(nodes <= 1, l)?);
    }
    if let (Some(rank), Some(size)) = (num("RANK")?, num("WORLD_SIZE")?) {
        let l = "torchrun";
        let local = num("LOCAL_WORLD_SIZE")?.unwrap_or(0);
        let job = explicit_job.unwrap_or_else(|| {
            format!(
                "torch-{}-{}",
                var("TORCHELASTIC_RUN_ID").unwrap_or_default(),
                var("MASTER_PORT").unwrap_or_default()
            )
        });
        let meet = if let Some(r) = var("TANDEM_ROOT") {
            Meet::Root(r)
        } else if local == size {
            Meet::Local
        } else {
            let addr = var("MASTER_ADDR")
                .ok_or_else(|| Error::NotLaunched("torchrun: MASTER_ADDR is not set".into()))?;
            let port = match num("TANDEM_ROOT_PORT")? {
                Some(p) => p,
                None => torch_port(need("MASTER_PORT", l)?)?,
            };
            Meet::Root(format!("{addr}:{port}"))
        };
        return finish(rank, size, l, job, meet);
    }
    Err(Error::NotLaunched(
        "no launcher found: start the program with tandem-run, mpirun (Open MPI), mpiexec \
         (MPICH hydra), srun or torchrun, or set TANDEM_RANK and TANDEM_SIZE (and TANDEM_ROOT \
         for several hosts)"
            .into(),
    ))
}

/// The port tandem's root listens on under torchrun: the one after
/// torchrun's own store (`MASTER_PORT`), or the one before it at the top
/// of the range.
pub(crate) fn torch_port(master: usize) -> Result<usize> {
    match master {
        1..=65534 => Ok(master + 1),
        65535 => Ok(65534),
        _ => Err(Error::NotLaunched(format!(
            "torchrun: MASTER_PORT={master} is not a port"
        ))),
    }
}

fn finish(
    rank: usize,
    size: usize,
    launcher: &'static str,
    job: String,
    meet: Meet,
) -> Result<Launch> {
    if size == 0 {
        return Err(Error::NotLaunched(format!("{launcher}: a job of 0 ranks")));
    }
    if rank >= size {
        return Err(Error::InvalidRank { rank, size });
    }
    Ok(Launch {
        rank,
        size,
        launcher,
        job,
        meet,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torch_port_never_collides_with_the_store() {
        assert_eq!(torch_port(29500).unwrap(), 29501);
        assert_eq!(torch_port(65535).unwrap(), 65534);
        assert!(torch_port(0).is_err());
        assert!(torch_port(70000).is_err());
    }
}
