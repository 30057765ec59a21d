//! Which path each rendezvous payload from one peer takes, learnt on the
//! link from what the two paths have actually cost there.
//!
//! The host's calibration ([`crate::calibrate`]) measures both paths once,
//! at job start, in a few milliseconds. Two things make that figure go
//! stale. A program that writes its buffer right before each send leaves
//! the lines dirty in the sender's cache, and pulling those across can be
//! slower than having the sender stream them (1.5x on the Intel guest at
//! 64 KiB–1 MiB). And on a virtual machine the hypervisor moves the vCPUs:
//! on the AMD guest the cache line between the two ranks' cores costs
//! 50 ns in one placement and 180 ns in another, and streaming (which hands
//! every slot over through such lines) goes from 3x faster than a pull to
//! slower than one (BENCHMARKS.md, "Paths learnt on the link"). A decision
//! fixed at job start is then wrong for the rest of the job.
//!
//! So each link keeps, per size class (log2 of the payload), the cost of
//! the pulls and of the streams it saw, each a moving average that
//! follows a cheaper sample faster than a dearer one, and takes
//! the path whose cost is lower (a pull wins ties within [`TIE`]: it
//! occupies one core, not two). Until both paths have been seen in a class,
//! the host's calibrated choice stands. After [`FIRST_PROBE`] payloads of
//! a class two payloads take the other path, then one in every
//! [`PROBE`] + 1, so that a path that became cheaper is noticed: at most
//! one payload in `PROBE + 1` pays for the worse path, and two early on.
//! The early ones matter for large payloads, which come few: a
//! `tandem-perf bw` round moves 32 payloads of 64 MiB, and with the vCPUs
//! moved apart during it the calibrated stream ran at 2.7 GB/s without a
//! single probe (a forced pull did 10.7 GB/s at that size in such a
//! placement, BENCHMARKS.md). A path's first payload in a class is not
//! counted: it is often a buffer's first use, whose page faults it pays
//! (a first pull into an untouched 64 MiB buffer measured 0.5-0.7 ns a
//! byte where pulls then cost about 0.1), hence the two early probes.
//! The receiver decides alone, payload by payload (the sender describes
//! every buffer and serves a pull or a clear-to-send alike), so the two
//! ranks never need to agree.
//!
//! The costs are measured where the work is: a pull is timed around the
//! system call; a stream from its first slot taken to its last, and scaled
//! to the whole payload as the calibration models it (a clear-to-send
//! handshake plus the first slot once more for the pipeline's fill).

/// A pull is taken while it costs at most this times the stream.
pub const TIE: f64 = 1.05;
/// Payloads of a class between two that try the other path.
pub const PROBE: u8 = 63;
/// Payloads of a class before the first that tries the other path.
pub const FIRST_PROBE: u8 = 3;
use crate::job::stream_model;

/// The live costs of one link's two rendezvous paths, per size class.
#[derive(Debug, Clone)]
pub struct PathChoice {
    /// ns per byte of this class's pulls, a moving average (0: none yet).
    pull: [f32; 64],
    /// ns per byte of this class's streams, slot to slot (0: none yet).
    stream: [f32; 64],
    /// Payloads of the class left before the next one takes the other path.
    until_probe: [u8; 64],
    /// Per class (bit), the first probe's first payload was taken: the
    /// next payload probes too.
    probed: u64,
    /// Per class (bit), a pull, resp. a stream, was seen and not counted
    /// (a path's first payload in a class).
    pull_seen: u64,
    stream_seen: u64,
    /// The stream being received, timed from its first slot.
    clock: Option<StreamClock>,
}

impl Default for PathChoice {
    fn default() -> Self {
        Self {
            pull: [0.0; 64],
            stream: [0.0; 64],
            until_probe: [FIRST_PROBE; 64],
            probed: 0,
            pull_seen: 0,
            stream_seen: 0,
            clock: None,
        }
    }
}

/// A payload's size class.
fn class(n: usize) -> usize {
    n.max(1).ilog2() as usize
}

/// The new moving average after a sample `x`: half the way down to a
/// cheaper sample, an eighth of the way up to a dearer one. A path's cost
/// is what it can do, and a single sample that a preemption or a busy
/// peer stretched must not flip the choice; a path that really became
/// dearer (every sample so) is followed within about a dozen samples.
fn blend(avg: f32, x: f64) -> f32 {
    let a = f64::from(avg);
    if avg == 0.0 {
        x as f32
    } else if x < a {
        (0.5 * a + 0.5 * x) as f32
    } else {
        (0.875 * a + 0.125 * x) as f32
    }
}

impl PathChoice {
    /// Whether a payload of `n` bytes is pulled: `calibrated` is the host's
    /// choice for it, `slot` the slot ring's slot size.
    pub fn pull_next(&mut self, n: usize, calibrated: bool, slot: usize) -> bool {
        let c = class(n);
        let best = self.cheaper_to_pull(n, slot).unwrap_or(calibrated);
        let probe = &mut self.until_probe[c];
        if *probe == 0 {
            if self.probed & (1 << c) == 0 {
                // The first probe of the class: its first payload will not
                // count, so the next one probes as well.
                self.probed |= 1 << c;
            } else {
                *probe = PROBE;
            }
            return !best;
        }
        *probe -= 1;
        best
    }

    /// Whether pulling `n` bytes costs at most [`TIE`] times streaming them,
    /// by what this link has seen; `None` until both paths were seen in the
    /// class.
    pub fn cheaper_to_pull(&self, n: usize, slot: usize) -> Option<bool> {
        let c = class(n);
        let (p, s) = (f64::from(self.pull[c]), f64::from(self.stream[c]));
        (p > 0.0 && s > 0.0).then(|| p * n as f64 <= TIE * stream_model(n, slot, s))
    }

    /// A pull of `n` bytes took `ns` (a stream being received meanwhile
    /// does not count that time as its own).
    pub fn pulled(&mut self, n: usize, ns: f64) {
        if n > 0 {
            let c = class(n);
            if self.pull_seen & (1 << c) == 0 {
                self.pull_seen |= 1 << c;
            } else {
                self.pull[c] = blend(self.pull[c], ns / n as f64);
            }
        }
        if let Some(c) = self.clock.as_mut() {
            c.paused_ns += ns;
        }
    }

    /// `taken` bytes of a stream with `left` to go were just received: the
    /// first slot starts its clock, the last stops it and counts the
    /// stream.
    pub fn stream_taken(&mut self, left: usize, taken: usize) {
        match self.clock.as_mut() {
            None => {
                if taken < left {
                    self.clock = Some(StreamClock {
                        start: std::time::Instant::now(),
                        len: left,
                        bytes: 0,
                        paused_ns: 0.0,
                    });
                }
            }
            Some(c) => {
                c.bytes += taken;
                if taken >= left {
                    let c = *c;
                    self.clock = None;
                    let ns = c.start.elapsed().as_nanos() as f64 - c.paused_ns;
                    self.streamed(c.len, c.bytes, ns);
                }
            }
        }
    }

    /// A stream of an `n`-byte payload moved `bytes` of it (from its first
    /// slot taken to its last) in `ns`.
    pub fn streamed(&mut self, n: usize, bytes: usize, ns: f64) {
        if bytes > 0 {
            let c = class(n);
            if self.stream_seen & (1 << c) == 0 {
                self.stream_seen |= 1 << c;
            } else {
                self.stream[c] = blend(self.stream[c], ns / bytes as f64);
            }
        }
    }
}

/// The clock of the stream being received on a link: started at its first
/// slot taken.
#[derive(Debug, Clone, Copy)]
struct StreamClock {
    /// When the first slot was taken.
    start: std::time::Instant,
    /// The payload's size.
    len: usize,
    /// Bytes taken since `start` (the first slot's excluded).
    bytes: usize,
    /// Time spent meanwhile pulling other payloads from the same peer, ns:
    /// not the stream's (with many messages in flight, pulls and streams
    /// interleave, and counting the pulls would make streams look slower
    /// the more is pulled).
    paused_ns: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB64: usize = 64 << 10;
    const SLOT: usize = 32 << 10;

    /// `n` payloads of 64 KiB through `c`, each path costing what `cost`
    /// says (ns per byte: pull, stream): `true` = pulled.
    fn run(c: &mut PathChoice, calibrated: bool, n: usize, cost: (f64, f64)) -> Vec<bool> {
        (0..n)
            .map(|_| {
                let p = c.pull_next(KIB64, calibrated, SLOT);
                if p {
                    c.pulled(KIB64, cost.0 * KIB64 as f64);
                } else {
                    c.streamed(KIB64, KIB64 - SLOT, cost.1 * (KIB64 - SLOT) as f64);
                }
                p
            })
            .collect()
    }

    #[test]
    fn the_calibrated_choice_stands_until_the_other_path_is_tried() {
        let mut c = PathChoice::default();
        let d = run(&mut c, false, FIRST_PROBE as usize, (0.03, 0.1));
        assert!(d.iter().all(|&p| !p), "streamed as calibrated");
        assert_eq!(c.cheaper_to_pull(KIB64, SLOT), None, "pulls not seen yet");
    }

    #[test]
    fn a_stream_grown_slow_turns_the_class_to_pulls() {
        // Calibrated to stream; then the vCPUs move apart and the stream
        // costs 0.15 ns a byte against a pull's 0.1.
        let mut c = PathChoice::default();
        let d = run(&mut c, false, 200, (0.1, 0.15));
        let probe = FIRST_PROBE as usize;
        assert!(d[..probe].iter().all(|&p| !p));
        assert!(d[probe] && d[probe + 1], "the first probe pulls twice");
        assert!(d[probe + 2..].iter().filter(|&&p| p).count() >= 200 - probe - 2 - 4);
        assert_eq!(c.cheaper_to_pull(KIB64, SLOT), Some(true));
    }

    #[test]
    fn pulls_grown_slow_turn_the_class_to_streams_and_probes_come_back() {
        // Calibrated to pull (a clean source); the program then writes its
        // buffer before each send and pulls cost 3x the stream.
        let mut c = PathChoice::default();
        let d = run(
            &mut c,
            true,
            FIRST_PROBE as usize + 2 + 2 * (PROBE as usize + 1),
            (0.2, 0.066),
        );
        let probe = FIRST_PROBE as usize;
        assert!(d[..probe].iter().all(|&p| p), "pulled as calibrated");
        assert!(
            !d[probe] && !d[probe + 1],
            "the first probe streams twice, early"
        );
        // From then on, streams, but for one probing pull every PROBE + 1.
        let after: Vec<usize> = (probe + 2..d.len()).filter(|&i| d[i]).collect();
        let every = PROBE as usize + 1;
        assert_eq!(after, [probe + 1 + every, probe + 1 + 2 * every], "{d:?}");
        assert_eq!(c.cheaper_to_pull(KIB64, SLOT), Some(false));
    }

    /// A choice whose first pull and stream of 64 KiB were seen (and, as
    /// every path's first payload in a class, not counted).
    fn warmed() -> PathChoice {
        let mut c = PathChoice::default();
        c.pulled(KIB64, 1e9);
        c.streamed(KIB64, KIB64, 1e9);
        assert_eq!(
            c.cheaper_to_pull(KIB64, SLOT),
            None,
            "first payloads do not count"
        );
        c
    }

    #[test]
    fn a_first_pull_into_an_untouched_buffer_does_not_decide() {
        // Calibrated to stream; the vCPUs are apart and streams cost 0.17
        // ns a byte; the first probing pull lands in a buffer never
        // touched (0.6), the second in a warm one (0.1).
        let mut c = PathChoice::default();
        let n = 64 << 20;
        let mut pulls = 0;
        for i in 0..32 {
            if c.pull_next(n, false, SLOT) {
                let cost = if pulls == 0 { 0.6 } else { 0.1 };
                c.pulled(n, cost * n as f64);
                pulls += 1;
            } else {
                c.streamed(n, n - SLOT, 0.17 * (n - SLOT) as f64);
            }
            if i > FIRST_PROBE as usize {
                assert_eq!(c.cheaper_to_pull(n, SLOT), Some(true), "payload {i}");
            }
        }
        assert!(pulls >= 32 - FIRST_PROBE as usize, "{pulls} of 32 pulled");
    }

    #[test]
    fn a_pull_within_the_tie_is_kept_and_classes_are_apart() {
        let mut c = warmed();
        // 1.03x the modelled stream: a pull still.
        let s = 0.1;
        let model = stream_model(KIB64, SLOT, s) / KIB64 as f64;
        c.streamed(KIB64, KIB64 - SLOT, s * (KIB64 - SLOT) as f64);
        c.pulled(KIB64, 1.03 * model * KIB64 as f64);
        assert_eq!(c.cheaper_to_pull(KIB64, SLOT), Some(true));
        // Another class knows nothing yet.
        assert_eq!(c.cheaper_to_pull(1 << 20, SLOT), None);
        assert!(c.pull_next(1 << 20, true, SLOT));
        assert!(!c.pull_next(1 << 20, false, SLOT));
    }

    #[test]
    fn averages_follow_a_change_in_a_few_samples() {
        let mut c = warmed();
        c.streamed(KIB64, KIB64, 0.05 * KIB64 as f64);
        c.pulled(KIB64, 0.04 * KIB64 as f64);
        assert_eq!(c.cheaper_to_pull(KIB64, SLOT), Some(true));
        // One pull stretched 5x does not flip the class...
        c.pulled(KIB64, 0.2 * KIB64 as f64);
        assert_eq!(c.cheaper_to_pull(KIB64, SLOT), Some(true));
        // ...pulls that stay dearer do, within a dozen.
        for _ in 0..12 {
            c.pulled(KIB64, 0.2 * KIB64 as f64);
        }
        assert_eq!(c.cheaper_to_pull(KIB64, SLOT), Some(false));
        // Empty measurements change nothing.
        c.pulled(0, 1.0);
        c.streamed(KIB64, 0, 1.0);
        assert_eq!(c.cheaper_to_pull(KIB64, SLOT), Some(false));
    }
}
