//! Which path a message between device buffers takes: by where the peer
//! is and how large the message is. Printed at `TANDEM_DEBUG=INFO` by the
//! calls that move device memory.

/// Where the peer's buffer is, from this rank's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// On the same device (another process on this GPU).
    SameDevice,
    /// On another device of this host.
    SameHost,
    /// On another host.
    OtherHost,
}

/// How a message moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// One copy into pinned host memory, sent as a host message (the shm
    /// line ring and cells, or the network), one copy out.
    Staged,
    /// Chunks of `chunk` bytes through two pinned buffers: the copy of one
    /// chunk overlaps the transfer of the one before ([`crate::pipeline`]).
    Pipelined {
        /// Bytes per chunk.
        chunk: usize,
    },
    /// Device to device through the peer's buffer, mapped once with a CUDA
    /// IPC handle ([`crate::ipc`]).
    Ipc,
}

impl std::fmt::Display for Path {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Staged => f.write_str("staged through pinned host memory"),
            Self::Pipelined { chunk } => {
                write!(
                    f,
                    "pipelined through pinned host memory in {chunk}-byte chunks"
                )
            }
            Self::Ipc => f.write_str("device to device (CUDA IPC)"),
        }
    }
}

/// The limits the choice follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Messages up to this many bytes are [`Path::Staged`] on every path:
    /// one copy each way costs less than setting up anything else.
    pub staged_max: usize,
    /// The chunk of [`Path::Pipelined`].
    pub chunk: usize,
    /// Whether [`Path::Ipc`] may be chosen between ranks of one host. Off
    /// by default: the IPC transfer itself is not built yet (the handle
    /// cache and this choice are).
    pub ipc: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            staged_max: 64 << 10,
            chunk: 1 << 20,
            ipc: false,
        }
    }
}

/// The path of a `len`-byte message to `peer`.
pub fn choose(peer: Peer, len: usize, l: &Limits) -> Path {
    if len <= l.staged_max.min(l.chunk) {
        return Path::Staged;
    }
    match peer {
        Peer::SameDevice | Peer::SameHost if l.ipc => Path::Ipc,
        _ if len <= l.chunk => Path::Staged,
        _ => Path::Pipelined { chunk: l.chunk },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_messages_are_staged_on_every_path() {
        let l = Limits {
            ipc: true,
            ..Limits::default()
        };
        for p in [Peer::SameDevice, Peer::SameHost, Peer::OtherHost] {
            for len in [0, 1, 8, 4096, 64 << 10] {
                assert_eq!(choose(p, len, &l), Path::Staged, "{p:?} {len}");
            }
        }
    }

    #[test]
    fn large_messages_go_device_to_device_on_a_host_and_pipelined_between_hosts() {
        let l = Limits {
            ipc: true,
            ..Limits::default()
        };
        assert_eq!(choose(Peer::SameDevice, 64 << 20, &l), Path::Ipc);
        assert_eq!(choose(Peer::SameHost, (64 << 10) + 1, &l), Path::Ipc);
        assert_eq!(
            choose(Peer::OtherHost, 64 << 20, &l),
            Path::Pipelined { chunk: 1 << 20 }
        );
        // Up to one chunk, one staged copy is the pipeline of one chunk.
        assert_eq!(choose(Peer::OtherHost, 1 << 20, &l), Path::Staged);
    }

    #[test]
    fn without_ipc_a_host_pipelines_too() {
        let l = Limits::default();
        assert!(
            !l.ipc,
            "the IPC transfer is not built: never chosen by default"
        );
        assert_eq!(
            choose(Peer::SameDevice, 64 << 20, &l),
            Path::Pipelined { chunk: 1 << 20 }
        );
        assert_eq!(
            Path::Pipelined { chunk: 4096 }.to_string(),
            "pipelined through pinned host memory in 4096-byte chunks"
        );
    }
}
