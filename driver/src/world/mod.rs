//! The world: turning an environment or a thread plan into a running job.
//!
//! * [`bootstrap`]: who this process is (the launcher's variables, read in
//!   one place), meeting the other ranks (PMI-1, a root address, a local
//!   socket), the job's secret and each connection's authentication,
//!   agreement on the protocol parameters, routing (same host: shared
//!   memory; otherwise the network) and the links to every peer, for a
//!   launched job, for copies of this program, and for ranks in threads;
//! * [`launch`]: `tandem-run`'s side: creating the job file, spawning the
//!   local ranks and remote hosts' ranks, and watching them;
//! * [`proxy`]: the busy-polling thread that advances a rank's engine
//!   while the user's thread computes;
//! * [`heart`]: the sleeping thread that sends heartbeats and checks the
//!   links while the user's thread computes.
//!
//! The job file itself (its layout, pids, wait board and channels) is the
//! room below the transports, [`crate::job`], since the shared-memory
//! transport and the progress layer's wait board live in it; the world
//! creates, passes on and opens it.

pub(crate) mod bootstrap;
pub(crate) mod heart;
mod helper;
pub mod launch;
pub(crate) mod proxy;
pub(crate) mod report;
