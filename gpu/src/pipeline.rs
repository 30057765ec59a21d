//! The staging pipeline: a device buffer crosses as messages of `chunk`
//! bytes through two pinned host buffers, the device→host copy of chunk
//! `k + 1` running while chunk `k` is sent, and on the receiving side the
//! host→device copy of chunk `k` running while chunk `k + 1` arrives.
//!
//! The messages: `len / chunk + 1` of them, every one `chunk` bytes but
//! the last, which is shorter (`len % chunk`, possibly empty): a receiver
//! whose buffer is larger than what was sent knows the end by the first
//! short message, without a header. Both sides must use the same chunk.
//!
//! The plans here are the order of each side's steps; [`crate::send`],
//! [`crate::recv`] and a [`crate::Scope`]'s transfers take them in that
//! order as their copies and messages complete, without blocking between
//! them. The tests check the order on the CPU.

use std::ops::Range;

/// Pinned staging buffers per transfer.
pub const BUFFERS: usize = 2;

/// One step of a side of a pipelined transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Start copying chunk `k` from the device into staging buffer
    /// `k % BUFFERS` (asynchronous on the stream).
    StartCopy(usize),
    /// Wait until that copy is done.
    WaitCopy(usize),
    /// Send the staged chunk `k` (returns once its buffer may be reused).
    Send(usize),
    /// Receive message `k` into staging buffer `k % BUFFERS` (a message
    /// shorter than the chunk is the last).
    Recv(usize),
    /// Start copying chunk `k` from its staging buffer to the device.
    StartUpload(usize),
    /// Wait until that copy is done (its staging buffer is free again).
    WaitUpload(usize),
}

/// The messages of a `len`-byte transfer in chunks of `chunk` bytes.
pub fn messages(len: usize, chunk: usize) -> usize {
    assert!(chunk > 0, "a chunk holds at least one byte");
    len / chunk + 1
}

/// The bytes of message `k`.
pub fn range(len: usize, chunk: usize, k: usize) -> Range<usize> {
    let start = (k * chunk).min(len);
    start..(start + chunk).min(len)
}

/// The staging buffer of chunk `k`.
pub fn buffer(k: usize) -> usize {
    k % BUFFERS
}

/// The sender's steps for `m` messages, in order (no allocation).
pub fn sender_steps(m: usize) -> impl Iterator<Item = Step> {
    let first = (m > 0).then_some(Step::StartCopy(0));
    first.into_iter().chain((0..m).flat_map(move |k| {
        // The next chunk's buffer was last sent from two chunks ago, and
        // that send has returned: fill it while this one goes out.
        let next = (k + 1 < m).then_some(Step::StartCopy(k + 1));
        next.into_iter().chain([Step::WaitCopy(k), Step::Send(k)])
    }))
}

/// The receiver's steps around message `k`: what to wait for before
/// receiving it into its buffer, then the receive and the start of its
/// upload (no allocation).
pub fn receiver_steps_for(k: usize) -> impl Iterator<Item = Step> {
    let wait = (k >= BUFFERS).then(|| Step::WaitUpload(k - BUFFERS));
    wait.into_iter()
        .chain([Step::Recv(k), Step::StartUpload(k)])
}

/// The receiver's steps for `m` messages, in order, with the waits for
/// the last uploads at the end.
pub fn receiver_steps(m: usize) -> impl Iterator<Item = Step> {
    (0..m)
        .flat_map(receiver_steps_for)
        .chain((m.saturating_sub(BUFFERS)..m).map(Step::WaitUpload))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &[Step], step: Step) -> usize {
        s.iter()
            .position(|x| *x == step)
            .unwrap_or_else(|| panic!("{step:?} missing in {s:?}"))
    }

    #[test]
    fn the_messages_cover_the_buffer_and_end_short() {
        for (len, chunk) in [
            (0, 4),
            (1, 4),
            (4, 4),
            (5, 4),
            (8, 4),
            (1 << 20, 1 << 18),
            (1000, 7),
        ] {
            let m = messages(len, chunk);
            let ranges: Vec<_> = (0..m).map(|k| range(len, chunk, k)).collect();
            assert_eq!(ranges[0].start, 0);
            assert!(
                ranges.windows(2).all(|w| w[0].end == w[1].start),
                "{ranges:?}"
            );
            assert_eq!(ranges[m - 1].end, len);
            // Every message but the last is whole; the last is short.
            assert!(ranges[..m - 1].iter().all(|r| r.len() == chunk));
            assert!(ranges[m - 1].len() < chunk, "{len} {chunk}");
        }
    }

    #[test]
    fn the_sender_fills_the_next_buffer_while_it_sends_and_never_one_in_use() {
        for m in 1..12 {
            let s: Vec<Step> = sender_steps(m).collect();
            for k in 0..m {
                let (c, w, x) = (
                    at(&s, Step::StartCopy(k)),
                    at(&s, Step::WaitCopy(k)),
                    at(&s, Step::Send(k)),
                );
                assert!(c < w && w < x, "chunk {k} out of order: {s:?}");
                if k + 1 < m {
                    // Overlap: the next copy starts before this send.
                    assert!(at(&s, Step::StartCopy(k + 1)) < x, "{s:?}");
                }
                if k >= BUFFERS {
                    // Its buffer's previous chunk was sent first.
                    assert!(at(&s, Step::Send(k - BUFFERS)) < c, "{s:?}");
                }
            }
            assert_eq!(s.len(), 3 * m);
        }
    }

    #[test]
    fn the_receiver_uploads_while_the_next_chunk_arrives_and_reuses_a_buffer_only_once_free() {
        for m in 1..12 {
            let s: Vec<Step> = receiver_steps(m).collect();
            for k in 0..m {
                let (r, u, w) = (
                    at(&s, Step::Recv(k)),
                    at(&s, Step::StartUpload(k)),
                    at(&s, Step::WaitUpload(k)),
                );
                assert!(r < u && u < w, "chunk {k}: {s:?}");
                if k + 1 < m {
                    assert!(at(&s, Step::Recv(k + 1)) < w, "overlap: {s:?}");
                }
                if k >= BUFFERS {
                    assert!(at(&s, Step::WaitUpload(k - BUFFERS)) < r, "{s:?}");
                }
                assert_eq!(buffer(k), k % BUFFERS);
            }
            // Every upload is waited for exactly once.
            let waits = s
                .iter()
                .filter(|x| matches!(x, Step::WaitUpload(_)))
                .count();
            assert_eq!(waits, m);
        }
    }
}
