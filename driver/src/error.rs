//! The one error type of tandem.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Which operation an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// A send (blocking or not).
    Send,
    /// A receive (blocking or not).
    Recv,
    /// A synchronous send (completes once the receiver matched it).
    Ssend,
    /// A blocking probe.
    Probe,
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Send => "send",
            Self::Recv => "recv",
            Self::Ssend => "ssend",
            Self::Probe => "probe",
        })
    }
}

/// Everything that can go wrong, with variants a caller can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The message is longer than the receive buffer. The first `got` bytes
    /// were delivered; the rest was discarded and the next message from the
    /// same sender is intact.
    Truncated {
        /// The message length.
        needed: usize,
        /// The receive buffer length.
        got: usize,
        /// The sender's rank (a receive from `ANY_SOURCE` learns it here).
        source: usize,
        /// The message's tag (a receive of `ANY_TAG` learns it here).
        tag: u32,
    },
    /// A tag above `TAG_UB` (or the wildcard on a send).
    InvalidTag {
        /// The tag given.
        tag: u32,
    },
    /// A rank outside `0..size`.
    InvalidRank {
        /// The rank given.
        rank: usize,
        /// The communicator size.
        size: usize,
    },
    /// The peer exited (or was killed), or its connection was closed or
    /// reset, while an operation with it was pending.
    PeerLost {
        /// The peer's rank.
        rank: usize,
    },
    /// The peer fell silent: nothing came from it for the failure-detection
    /// bound ([`Config::failure_timeout`](field@crate::Config::failure_timeout))
    /// although a live rank sends heartbeats on idle connections, or its
    /// process on this host has been stopped (`SIGSTOP`) that long. Its
    /// process may still exist (stopped, or cut off from the network), but
    /// the job treats it as failed: its link is closed and every operation
    /// with it fails with this error.
    PeerSilent {
        /// The peer's rank.
        rank: usize,
        /// Where the peer runs, as far as this rank knows it (its address,
        /// or `this host`).
        host: String,
        /// What was seen ("nothing received for 3.1 s over TCP from
        /// 10.0.0.2:41234; heartbeats are sent every 750 ms").
        evidence: String,
    },
    /// The communicator was revoked ([`Comm::revoke`](crate::Comm::revoke),
    /// here or on another rank): every pending and later operation on it
    /// fails with this error. [`Comm::shrink`](crate::Comm::shrink) and
    /// [`Comm::agree`](crate::Comm::agree) still work on it.
    Revoked {
        /// The revoked communicator's context.
        context: u16,
    },
    /// An operation made no progress for the configured timeout.
    Timeout {
        /// The operation.
        op: OpKind,
        /// The peer it waits on.
        peer: usize,
        /// Its tag.
        tag: u32,
        /// How long it waited without progress.
        waited: Duration,
        /// What this rank could see of why, or empty: the chain of ranks
        /// the peer is itself blocked on, or messages from the awaited
        /// source that arrived and match no receive ("rank 1 sent tag 7
        /// (12 bytes), which no receive matches").
        why: String,
    },
    /// The ranks an operation waits on wait, in a cycle, on this rank, and
    /// the cycle held still for
    /// [`Config::deadlock_after`](field@crate::Config::deadlock_after)
    /// (or the operation reached the timeout with the cycle there), ranks
    /// on other hosts included: none can ever complete (for instance
    /// both ranks in a blocking `ssend` to each other, or three ranks each
    /// in an `ssend` to the next). Every operation of the cycle is named,
    /// as a [`Wait`] a program can inspect; the text reads as
    /// "rank 0: ssend to rank 1 tag 5 waited 2.0s while rank 1: ssend to
    /// rank 0 tag 5".
    Deadlock {
        /// This rank's blocked operation.
        ours: Wait,
        /// The others of the cycle, in order: `theirs[0]` is what `ours`
        /// waits for, and the last waits for `ours`.
        theirs: Vec<Wait>,
        /// How long this rank waited.
        waited: Duration,
    },
    /// The operation was cancelled before it matched.
    Cancelled,
    /// The peer sent bytes that violate the protocol (a corrupt header).
    Protocol {
        /// The peer's rank.
        peer: usize,
        /// What was wrong.
        detail: String,
    },
    /// This process was started for another job (stale environment or a
    /// shared-memory file of another job).
    JobMismatch {
        /// What this rank expected.
        expected: String,
        /// What it found.
        found: String,
    },
    /// The environment does not describe a tandem job.
    NotLaunched(String),
    /// Joining the job failed: a rank never came, left, or could not be
    /// reached, or a connection could not prove it belongs to the job.
    Bootstrap(String),
    /// A configuration value is invalid.
    Config(String),
    /// More operations pending than `max_requests`.
    TooManyRequests {
        /// The configured capacity.
        capacity: usize,
    },
    /// The message is longer than tandem supports.
    MessageTooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A previous failure (a panic inside a request scope, or a timeout in
    /// the middle of a bulk transfer) left the channel to this peer unusable.
    ChannelBroken {
        /// The peer.
        peer: usize,
        /// Why.
        reason: String,
    },
    /// Ranks of one job disagree on a parameter that must be the same
    /// everywhere (found at bootstrap).
    Mismatch {
        /// The parameter, with the variable that sets it.
        parameter: String,
        /// The rank that found the difference.
        rank: usize,
        /// Its value there.
        value: String,
        /// The rank that differs.
        peer: usize,
        /// Its value there.
        peer_value: String,
    },
    /// A call's arguments do not fit together: a collective's buffer
    /// lengths disagree with each other or with the communicator size, or
    /// a reduction does not apply to the element type.
    InvalidArgument(String),
    /// An operating-system call failed: what tandem was doing, and the
    /// `std::io::Error` (also [`std::error::Error::source`], with its
    /// [`std::io::ErrorKind`]).
    Io(IoError),
    /// A bug in tandem: an internal invariant did not hold (a schedule step
    /// beyond its buffer, a collective that stopped without an error).
    /// Please report it.
    Internal(String),
    /// User code panicked inside a rank's closure or a request scope; the
    /// operations it left were cancelled.
    Panicked(String),
    /// A rank of a launched job failed.
    RankFailed {
        /// The rank.
        rank: usize,
        /// Its exit code (128 + signal for a signal).
        code: i32,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated {
                needed,
                got,
                source,
                tag,
            } => {
                write!(
                    f,
                    "message of {needed} bytes from rank {source} (tag {tag}) truncated to a \
                     {got}-byte receive buffer"
                )
            }
            Self::InvalidTag { tag } => write!(
                f,
                "invalid tag {tag:#x}: user tags are 0..={} (ANY_TAG only on receives)",
                tandem_core::proto::TAG_UB
            ),
            Self::InvalidRank { rank, size } => {
                write!(f, "invalid rank {rank}: the communicator has ranks 0..{size}")
            }
            Self::PeerLost { rank } => write!(
                f,
                "peer rank {rank} is gone (its process exited, or its connection was closed or \
                 reset) with operations pending"
            ),
            Self::PeerSilent {
                rank,
                host,
                evidence,
            } => write!(
                f,
                "peer rank {rank} on {host} is silent and treated as failed: {evidence}"
            ),
            Self::Revoked { context } => write!(
                f,
                "the communicator (context {context}) was revoked; shrink it to go on with the \
                 survivors"
            ),
            Self::Timeout {
                op,
                peer,
                tag,
                waited,
                why,
            } => {
                write!(
                    f,
                    "{} made no progress for {:.1}s",
                    Operation(*op, *peer, *tag),
                    waited.as_secs_f64()
                )?;
                if !why.is_empty() {
                    write!(f, "; {why}")?;
                }
                f.write_str(" (raise TANDEM_TIMEOUT if the peer is just slow)")
            }
            Self::Deadlock { ours, theirs, waited } => write!(
                f,
                "deadlock: {ours} waited {:.1}s while {} (each waits for the next; post the operations in a group or reorder them)",
                waited.as_secs_f64(),
                Chain(theirs)
            ),
            Self::Cancelled => f.write_str("operation cancelled before it matched"),
            Self::Protocol { peer, detail } => write!(f, "protocol error from rank {peer}: {detail}"),
            Self::JobMismatch { expected, found } => {
                write!(f, "job mismatch: expected {expected}, found {found}")
            }
            Self::NotLaunched(why) => write!(f, "not started by a tandem launcher: {why}"),
            Self::Bootstrap(why) => write!(f, "bootstrap failed: {why}"),
            Self::Config(why) => write!(f, "invalid configuration: {why}"),
            Self::TooManyRequests { capacity } => write!(
                f,
                "more than {capacity} operations pending (raise TANDEM_MAX_REQUESTS)"
            ),
            Self::MessageTooLarge { len, max } => {
                write!(f, "message of {len} bytes exceeds the {max}-byte limit")
            }
            Self::ChannelBroken { peer, reason } => {
                write!(f, "channel to rank {peer} is unusable: {reason}")
            }
            Self::Mismatch {
                parameter,
                rank,
                value,
                peer,
                peer_value,
            } => write!(
                f,
                "ranks disagree on {parameter}: rank {rank} has {value}, rank {peer} has {peer_value}"
            ),
            Self::InvalidArgument(e) => write!(f, "invalid argument: {e}"),
            Self::Io(e) => write!(f, "I/O error: {e}"),
            Self::Internal(e) => write!(f, "internal error (a bug in tandem, please report it): {e}"),
            Self::Panicked(e) => write!(f, "panicked: {e}"),
            Self::RankFailed { rank, code } => write!(f, "rank {rank} failed with exit code {code}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io(e) => Some(e.get_ref()),
            _ => None,
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Self::Io(IoError::new("", e))
    }
}

impl Error {
    /// An [`Error::Io`]: `error` while `context` ("opening /dev/shm/x").
    pub fn io(context: impl Into<String>, error: std::io::Error) -> Self {
        Self::Io(IoError::new(context, error))
    }

    /// What the error concerns, so that a caller can decide what to do
    /// without matching every variant: a job that could not start, a
    /// call refused for its arguments, a failed peer, an operation that
    /// ended without its result, the operating system, or a bug.
    ///
    /// ```
    /// use tandem_driver::{Error, ErrorClass};
    /// assert_eq!(Error::Config("x".into()).class(), ErrorClass::Setup);
    /// assert_eq!(Error::InvalidRank { rank: 9, size: 2 }.class(), ErrorClass::Argument);
    /// assert_eq!(Error::Cancelled.class(), ErrorClass::Operation);
    /// ```
    #[must_use]
    pub fn class(&self) -> ErrorClass {
        match self {
            Self::NotLaunched(_)
            | Self::Bootstrap(_)
            | Self::Config(_)
            | Self::JobMismatch { .. }
            | Self::Mismatch { .. } => ErrorClass::Setup,
            Self::InvalidTag { .. }
            | Self::InvalidRank { .. }
            | Self::InvalidArgument(_)
            | Self::MessageTooLarge { .. }
            | Self::TooManyRequests { .. } => ErrorClass::Argument,
            Self::PeerLost { .. }
            | Self::PeerSilent { .. }
            | Self::Protocol { .. }
            | Self::ChannelBroken { .. }
            | Self::RankFailed { .. } => ErrorClass::Peer,
            Self::Truncated { .. }
            | Self::Cancelled
            | Self::Revoked { .. }
            | Self::Timeout { .. }
            | Self::Deadlock { .. } => ErrorClass::Operation,
            Self::Io(_) => ErrorClass::System,
            Self::Internal(_) | Self::Panicked(_) => ErrorClass::Bug,
        }
    }
}

/// What an [`Error`] concerns ([`Error::class`]): setup errors stop a job
/// from starting; the others come from one call or operation while the
/// job runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorClass {
    /// The job could not start or join: a setting, the environment, a rank
    /// that never came or disagrees ([`Error::NotLaunched`],
    /// [`Error::Bootstrap`], [`Error::Config`], [`Error::JobMismatch`],
    /// [`Error::Mismatch`]). Change the setting or the launch, and start
    /// again.
    Setup,
    /// The call was refused for its arguments before anything was sent
    /// ([`Error::InvalidTag`], [`Error::InvalidRank`],
    /// [`Error::InvalidArgument`], [`Error::MessageTooLarge`],
    /// [`Error::TooManyRequests`]); nothing changed, other operations go
    /// on.
    Argument,
    /// A peer failed, or the channel to it did ([`Error::PeerLost`],
    /// [`Error::PeerSilent`], [`Error::Protocol`], [`Error::ChannelBroken`],
    /// [`Error::RankFailed`]): operations with that peer fail; those with
    /// others go on.
    Peer,
    /// The operation ended without its full result ([`Error::Truncated`],
    /// [`Error::Cancelled`], [`Error::Revoked`], [`Error::Timeout`],
    /// [`Error::Deadlock`]). The
    /// channel stays usable, except after a timeout in the middle of a
    /// bulk transfer: later operations with that peer then report
    /// [`Error::ChannelBroken`].
    Operation,
    /// An operating-system call failed ([`Error::Io`], its
    /// [`std::io::Error`] as the source).
    System,
    /// A bug: tandem's own ([`Error::Internal`]) or a panic in user code
    /// inside a scope ([`Error::Panicked`]).
    Bug,
}

/// An operating-system error with what tandem was doing when it happened.
/// Cloning shares the `std::io::Error`; two are equal when their context,
/// kind and OS error code are.
#[derive(Debug, Clone)]
pub struct IoError(Arc<IoInner>);

#[derive(Debug)]
struct IoInner {
    context: String,
    error: std::io::Error,
}

impl IoError {
    /// `error`, met while `context`.
    pub fn new(context: impl Into<String>, error: std::io::Error) -> Self {
        Self(Arc::new(IoInner {
            context: context.into(),
            error,
        }))
    }
    /// What tandem was doing (empty when unknown).
    pub fn context(&self) -> &str {
        &self.0.context
    }
    /// The error's kind.
    pub fn kind(&self) -> std::io::ErrorKind {
        self.0.error.kind()
    }
    /// The operating system's error code, where there is one.
    pub fn raw_os_error(&self) -> Option<i32> {
        self.0.error.raw_os_error()
    }
    /// The `std::io::Error` itself.
    pub fn get_ref(&self) -> &std::io::Error {
        &self.0.error
    }
}

impl PartialEq for IoError {
    fn eq(&self, other: &Self) -> bool {
        self.context() == other.context()
            && self.kind() == other.kind()
            && self.raw_os_error() == other.raw_os_error()
    }
}

impl Eq for IoError {}

impl fmt::Display for IoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.context.is_empty() {
            write!(f, "{}", self.0.error)
        } else {
            write!(f, "{}: {}", self.0.context, self.0.error)
        }
    }
}

/// One rank's blocked operation in a [`Error::Deadlock`] report: `rank`
/// waits in `op` on `peer` ([`crate::ANY_SOURCE`] for any rank) with `tag`
/// ([`crate::ANY_TAG`] for any tag). Displays as "rank 1: ssend to rank 2
/// tag 0".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    /// The rank that waits.
    pub rank: usize,
    /// What it waits in.
    pub op: OpKind,
    /// The rank it waits on.
    pub peer: usize,
    /// The tag of its operation.
    pub tag: u32,
}

impl fmt::Display for Wait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rank {}: {}",
            self.rank,
            Operation(self.op, self.peer, self.tag)
        )
    }
}

/// Waits joined as a chain: "a, which waits for b, which waits for c".
pub(crate) struct Chain<'a>(pub &'a [Wait]);

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, w) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", which waits for ")?;
            }
            write!(f, "{w}")?;
        }
        Ok(())
    }
}

/// tandem's result type.
pub type Result<T> = std::result::Result<T, Error>;

/// How every error names an operation: its kind, the direction, the peer
/// and the tag, with the wildcards spelled out (`recv from any rank any
/// tag`, `ssend to rank 1 tag 5`). `peer` [`crate::ANY_SOURCE`] is "any
/// rank" and `tag` [`crate::ANY_TAG`] "any tag".
pub(crate) struct Operation(pub OpKind, pub usize, pub u32);

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Operation(op, peer, tag) = *self;
        let dir = match op {
            OpKind::Send | OpKind::Ssend => "to",
            OpKind::Recv | OpKind::Probe => "from",
        };
        // The public wildcards (`comm` re-states them: usize::MAX and
        // u32::MAX; a test checks they agree).
        match peer {
            usize::MAX => write!(f, "{op} {dir} any rank")?,
            p => write!(f, "{op} {dir} rank {p}")?,
        }
        match tag {
            u32::MAX => f.write_str(" any tag"),
            t => write!(f, " tag {t}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_are_named_not_printed_as_sentinels() {
        assert_eq!(crate::ANY_SOURCE, usize::MAX);
        assert_eq!(crate::ANY_TAG, u32::MAX);
        let e = Error::Timeout {
            op: OpKind::Recv,
            peer: crate::ANY_SOURCE,
            tag: crate::ANY_TAG,
            waited: Duration::from_secs(3),
            why: String::new(),
        };
        let t = e.to_string();
        assert!(
            t.starts_with("recv from any rank any tag made no progress for 3.0s"),
            "{t}"
        );
        assert!(!t.contains(&usize::MAX.to_string()) && !t.contains(&u32::MAX.to_string()));
        let p = Error::Timeout {
            op: OpKind::Probe,
            peer: 2,
            tag: crate::ANY_TAG,
            waited: Duration::from_secs(1),
            why: "rank 2 sent tag 7 (3 bytes), which no receive matches".into(),
        };
        assert!(
            p.to_string().starts_with("probe from rank 2 any tag"),
            "{p}"
        );
        assert!(
            p.to_string().contains("; rank 2 sent tag 7 (3 bytes)"),
            "{p}"
        );
        let s = Operation(OpKind::Ssend, 1, 5).to_string();
        assert_eq!(s, "ssend to rank 1 tag 5");
    }

    /// An OS error keeps its kind and code, is the error's `source()`, and
    /// reads "context: error".
    #[test]
    fn io_errors_keep_the_os_error_as_their_source() {
        use std::error::Error as _;
        let e = Error::io(
            "opening /dev/shm/x",
            std::io::Error::from_raw_os_error(libc::ENOENT),
        );
        let Error::Io(io) = &e else { panic!("{e:?}") };
        assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
        assert_eq!(io.raw_os_error(), Some(libc::ENOENT));
        assert_eq!(io.context(), "opening /dev/shm/x");
        assert!(
            e.to_string()
                .starts_with("I/O error: opening /dev/shm/x: No such file"),
            "{e}"
        );
        let src = e.source().expect("a source");
        assert_eq!(
            src.downcast_ref::<std::io::Error>().map(|x| x.kind()),
            Some(std::io::ErrorKind::NotFound)
        );
        assert_eq!(e.clone(), e);
        let other = Error::io(
            "opening /dev/shm/x",
            std::io::Error::from_raw_os_error(libc::EACCES),
        );
        assert_ne!(other, e);
        let bare = Error::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        assert_eq!(bare.to_string(), "I/O error: timed out");
        assert!(Error::Internal("x".into()).source().is_none());
    }
}
