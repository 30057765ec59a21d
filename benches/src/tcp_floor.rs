//! The raw TCP floor between two ranks of a job, measured in the same run
//! as tandem: an 8-byte `TCP_NODELAY` ping-pong (busy-polling a
//! non-blocking socket, as tandem polls; a blocking read would measure the
//! scheduler's wake-up instead) and one blocking stream,
//! over a fresh connection between the same two hosts' addresses that
//! tandem's own connection uses.

use crate::stats::percentile;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Instant;
use tandem_driver::transport::Route;
use tandem_driver::{Comm, Error, Result};

/// What plain TCP does between the two ranks.
#[derive(Debug, Clone, Copy)]
pub struct TcpFloor {
    /// Median half round trip of an 8-byte ping-pong, in nanoseconds.
    pub half_rtt_ns: f64,
    /// 99th percentile of the same.
    pub half_rtt_p99_ns: f64,
    /// One blocking stream, 1 MiB writes, in GB/s (10^9 B/s).
    pub stream_gbps: f64,
}

fn io(e: std::io::Error) -> Error {
    Error::io("raw TCP floor", e)
}

/// A plain TCP connection between ranks 0 and 1, beside tandem's own,
/// for floors measured right next to each tandem measurement.
pub struct RawTcp {
    sock: TcpStream,
    me: usize,
}

impl RawTcp {
    /// Connects ranks 0 and 1 of `comm` (both call it) between the
    /// addresses of their tandem connection; `None` when they are not
    /// connected by TCP, and on every other rank (which takes no part).
    ///
    /// # Errors
    /// The errors of `comm`'s [`route`](Comm::route) (an
    /// [`Error::InvalidRank`] if it has one rank) and of the tandem send and
    /// receive that pass the port; an [`Error::Io`] if listening, accepting or
    /// connecting fails.
    pub fn connect(comm: &Comm) -> Result<Option<Self>> {
        let me = comm.rank();
        if me > 1 {
            return Ok(None);
        }
        // TCP routes, and RDMA routes that came with a TCP connection (the
        // soft NIC's wire, verbs' bootstrap connection).
        let (local, remote) = match comm.route(1 - me)? {
            Route::Tcp { local, peer } => (local, peer),
            Route::Rdma {
                tcp: Some((local, peer)),
                ..
            } => (local, peer),
            _ => return Ok(None),
        };
        let sock = if me == 1 {
            let l = TcpListener::bind(SocketAddr::new(local.ip(), 0)).map_err(io)?;
            let port = l.local_addr().map_err(io)?.port();
            comm.send(&port.to_le_bytes(), 0, 901)?;
            l.accept().map_err(io)?.0
        } else {
            let mut p = [0u8; 2];
            comm.recv(&mut p, 1, 901)?;
            TcpStream::connect(SocketAddr::new(remote.ip(), u16::from_le_bytes(p))).map_err(io)?
        };
        sock.set_nodelay(true).map_err(io)?;
        Ok(Some(Self { sock, me }))
    }

    /// Median and p99 half round trip (ns) of `iters` 8-byte round trips,
    /// busy-polling.
    ///
    /// # Errors
    /// An [`Error::Io`] if a socket call fails (the other rank gone, for
    /// instance).
    pub fn ping(&mut self, iters: u64) -> Result<(f64, f64)> {
        let me = self.me;
        self.sock.set_nonblocking(true).map_err(io)?;
        let mut b = [0u8; 8];
        let mut rt = |s: &mut TcpStream| -> std::io::Result<()> {
            if me == 0 {
                spin_write(s, &b)?;
                spin_read(s, &mut b)
            } else {
                spin_read(s, &mut b)?;
                spin_write(s, &b)
            }
        };
        for _ in 0..iters / 10 + 1 {
            rt(&mut self.sock).map_err(io)?;
        }
        let batch = 16;
        let mut samples = Vec::with_capacity((iters / batch + 1) as usize);
        for _ in 0..iters.div_ceil(batch) {
            let t = Instant::now();
            for _ in 0..batch {
                rt(&mut self.sock).map_err(io)?;
            }
            samples.push(t.elapsed().as_nanos() as f64 / batch as f64 / 2.0);
        }
        self.sock.set_nonblocking(false).map_err(io)?;
        Ok((
            percentile(&mut samples, 50.0),
            percentile(&mut samples, 99.0),
        ))
    }

    /// One blocking stream of `bytes` from rank 0 to rank 1 in 1 MiB
    /// writes, closed by a one-byte acknowledgement: GB/s (rank 0's view).
    ///
    /// # Errors
    /// An [`Error::Io`] if a socket call fails (the other rank gone, for
    /// instance).
    pub fn stream(&mut self, bytes: usize) -> Result<f64> {
        let mut buf = vec![0u8; 1 << 20];
        let t = Instant::now();
        let mut left = bytes;
        if self.me == 0 {
            while left > 0 {
                let n = left.min(buf.len());
                self.sock.write_all(&buf[..n]).map_err(io)?;
                left -= n;
            }
            self.sock.read_exact(&mut buf[..1]).map_err(io)?;
        } else {
            while left > 0 {
                let n = left.min(buf.len());
                self.sock.read_exact(&mut buf[..n]).map_err(io)?;
                left -= n;
            }
            self.sock.write_all(&buf[..1]).map_err(io)?;
        }
        Ok(bytes as f64 / t.elapsed().as_nanos() as f64)
    }
}

/// Measures the floor between ranks 0 and 1 of `comm` (both call it);
/// `None` when they are not connected by TCP. Rank 0 gets the numbers.
///
/// # Errors
/// Those of [`RawTcp::connect`], [`RawTcp::ping`] and [`RawTcp::stream`].
pub fn measure(comm: &Comm, iters: u64, stream_bytes: usize) -> Result<Option<TcpFloor>> {
    let Some(mut raw) = RawTcp::connect(comm)? else {
        return Ok(None);
    };
    let (p50, p99) = raw.ping(iters)?;
    let mut best: f64 = 0.0;
    for _ in 0..3 {
        best = best.max(raw.stream(stream_bytes)?);
    }
    Ok(Some(TcpFloor {
        half_rtt_ns: p50,
        half_rtt_p99_ns: p99,
        stream_gbps: best,
    }))
}
fn spin_read(s: &mut TcpStream, mut b: &mut [u8]) -> std::io::Result<()> {
    while !b.is_empty() {
        match s.read(b) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => b = &mut b[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn spin_write(s: &mut TcpStream, mut b: &[u8]) -> std::io::Result<()> {
    while !b.is_empty() {
        match s.write(b) {
            Ok(n) => b = &b[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_driver::{Config, Layout, Links};

    /// Ranks 0 and 1 of a TCP world get their raw connection; a third rank
    /// takes no part (it used to compute its peer as `1 - rank`).
    #[test]
    fn only_ranks_0_and_1_connect() {
        let out = Comm::threads_on(
            3,
            Links::Tcp,
            &Layout::default(),
            Config::default(),
            |comm| Ok(RawTcp::connect(&comm)?.is_some()),
        );
        let got: Vec<bool> = out.into_iter().map(|r| r.expect("rank")).collect();
        assert_eq!(got, [true, true, false]);
    }
}
