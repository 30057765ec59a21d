//! A client for the PMI-1 wire protocol.
//!
//! This is what a process manager such as MPICH's hydra `mpiexec` speaks to
//! each process it starts, over an inherited socket whose descriptor number
//! it puts in `PMI_FD` (with the rank in `PMI_RANK` and the job's size in
//! `PMI_SIZE`). It gives the job a key-value space (KVS) and a barrier,
//! which is enough to exchange addresses: every rank puts its own, all
//! meet at the barrier, then each gets the others' ([`Pmi::allgather`]).
//!
//! # The protocol
//!
//! Text lines, one command each way at a time:
//! `cmd=NAME key=value key=value\n`. The client sends a request and reads
//! the one line that answers it:
//!
//! | request                                      | answer                                                  |
//! |----------------------------------------------|---------------------------------------------------------|
//! | `cmd=init pmi_version=1 pmi_subversion=1`    | `cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0` |
//! | `cmd=get_maxes`                              | `cmd=maxes kvsname_max=N keylen_max=N vallen_max=N`     |
//! | `cmd=get_my_kvsname`                         | `cmd=my_kvsname kvsname=NAME`                           |
//! | `cmd=put kvsname=NAME key=K value=V`         | `cmd=put_result rc=0 msg=...`                           |
//! | `cmd=barrier_in`                             | `cmd=barrier_out`                                       |
//! | `cmd=get kvsname=NAME key=K`                 | `cmd=get_result rc=0 msg=... value=V`                   |
//! | `cmd=finalize`                               | `cmd=finalize_ack`                                      |
//!
//! Answers are parsed leniently: fields may come in any order, unknown
//! fields are ignored, and words without `=` (as in a `msg` with spaces)
//! are joined to the field before them. A non-zero `rc` is an error that
//! carries the server's `msg`. A line longer than 64 KiB, a line that is not
//! UTF-8, an answer to another command, and end of file are errors.
//!
//! Keys and values are single words: they may not contain whitespace, and
//! keys may not contain `=`. [`Pmi::allgather`] hex-encodes its data, so it
//! carries arbitrary bytes.

use super::auth::to_hex;
use std::env::{self, VarError};
use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::fd::{OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::Mutex;

/// Longest answer line accepted from the server, newline included.
const MAX_LINE: usize = 64 * 1024;

/// Whether [`Pmi::from_env`] already took ownership of `PMI_FD` in this
/// process (taking it twice would close one descriptor twice).
static FD_TAKEN: Mutex<bool> = Mutex::new(false);

/// A byte stream to the PMI server.
trait Channel: Read + Write + Send {}

impl<T: Read + Write + Send> Channel for T {}

/// A connection to a PMI-1 server: this process's rank, the job's size,
/// the job's KVS name and the server's limits.
pub struct Pmi {
    /// The stream; reads are buffered (the server only ever sends the
    /// answer to our latest request, so nothing is read ahead of time).
    conn: BufReader<Box<dyn Channel>>,
    /// The job's key-value space (`kvsname`), unique to one run.
    kvsname: String,
    /// This process's rank, from 0.
    rank: usize,
    /// Number of ranks in the job.
    size: usize,
    /// The server's `kvsname_max`.
    kvsname_max: usize,
    /// The server's `keylen_max`.
    keylen_max: usize,
    /// The server's `vallen_max`.
    vallen_max: usize,
    /// Set once `finalize` was sent; every later command is refused.
    finalized: bool,
}

impl fmt::Debug for Pmi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pmi")
            .field("kvsname", &self.kvsname)
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("kvsname_max", &self.kvsname_max)
            .field("keylen_max", &self.keylen_max)
            .field("vallen_max", &self.vallen_max)
            .field("finalized", &self.finalized)
            .finish_non_exhaustive()
    }
}

/// One answer line from the server, split into its fields.
struct Reply {
    /// The line as it came, without the newline (for error messages).
    line: String,
    /// `(name, value)` pairs in the order they came.
    fields: Vec<(String, String)>,
}

impl Reply {
    /// Splits `line` into `name=value` fields.
    fn parse(line: String) -> Reply {
        let mut fields: Vec<(String, String)> = Vec::new();
        for word in line.split_ascii_whitespace() {
            match word.split_once('=') {
                Some((name, value)) => fields.push((name.to_owned(), value.to_owned())),
                // A word without '=' continues the previous value (a
                // `msg` with spaces in it); before any field it is noise.
                None => {
                    if let Some((_, value)) = fields.last_mut() {
                        value.push(' ');
                        value.push_str(word);
                    }
                }
            }
        }
        Reply { line, fields }
    }

    /// The value of the first field called `name`.
    fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The value of field `name`, or an error naming the command `what`.
    fn required(&self, name: &str, what: &str) -> io::Result<&str> {
        self.field(name).ok_or_else(|| {
            invalid(format!(
                "PMI server's answer to {what} lacks `{name}=`: `{}`",
                self.line
            ))
        })
    }

    /// Field `name` as a number, or an error naming the command `what`.
    fn number(&self, name: &str, what: &str) -> io::Result<usize> {
        let text = self.required(name, what)?;
        text.parse().map_err(|_| {
            invalid(format!(
                "PMI server's answer to {what} has {name}={text:?}, expected a \
                 non-negative number: `{}`",
                self.line
            ))
        })
    }

    /// Ok if `rc` is absent or 0; otherwise an error of `kind` with the
    /// server's `msg`.
    fn check_rc(&self, what: &str, kind: io::ErrorKind) -> io::Result<()> {
        let Some(rc) = self.field("rc") else {
            return Ok(());
        };
        match rc.parse::<i64>() {
            Ok(0) => Ok(()),
            Ok(_) => Err(io::Error::new(
                kind,
                format!(
                    "PMI {what} failed: rc={rc} msg={:?} (server sent `{}`)",
                    self.field("msg").unwrap_or(""),
                    self.line
                ),
            )),
            Err(_) => Err(invalid(format!(
                "PMI server's answer to {what} has rc={rc:?}, expected a \
                 number: `{}`",
                self.line
            ))),
        }
    }
}

impl Pmi {
    /// Connects from the environment that a PMI-1 process manager (such as
    /// hydra's `mpiexec`) sets: `PMI_FD` (the number of an inherited,
    /// connected socket), `PMI_RANK` and `PMI_SIZE`.
    ///
    /// Returns `Ok(None)` if `PMI_FD` is not set. Otherwise takes
    /// ownership of the descriptor (setting `FD_CLOEXEC` on it, so that
    /// programs this process starts do not inherit it) and runs the
    /// opening exchange of [`Pmi::from_stream`]. The descriptor can be
    /// taken only once per process.
    ///
    /// # Errors
    /// Errors name the variable or the command that failed and, for the
    /// latter, the line the server sent:
    /// * [`io::ErrorKind::InvalidInput`]: `PMI_FD` is not a descriptor
    ///   number, not open, or neither a Unix nor a TCP socket; `PMI_RANK`
    ///   or `PMI_SIZE` is missing or not a number; the rank is not below
    ///   the size;
    /// * [`io::ErrorKind::AlreadyExists`]: an earlier call took the
    ///   descriptor;
    /// * the errors of [`Pmi::from_stream`]'s exchange.
    pub fn from_env() -> io::Result<Option<Pmi>> {
        let fd_text = match env::var("PMI_FD") {
            Ok(text) => text,
            Err(VarError::NotPresent) => return Ok(None),
            Err(VarError::NotUnicode(raw)) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("PMI_FD={raw:?} is not a descriptor number"),
                ))
            }
        };
        let fd: RawFd = match fd_text.trim().parse() {
            Ok(fd) if fd >= 0 => fd,
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("PMI_FD={fd_text:?} is not a descriptor number"),
                ))
            }
        };
        let rank = env_number("PMI_RANK")?;
        let size = env_number("PMI_SIZE")?;
        check_rank(rank, size)
            .map_err(|e| io::Error::new(e.kind(), format!("PMI_RANK/PMI_SIZE: {e}")))?;
        let stream = take_fd(fd)?;
        Pmi::connect(stream, rank, size)
            .map(Some)
            .map_err(|e| io::Error::new(e.kind(), format!("PMI_FD={fd}: {e}")))
    }

    /// Runs the opening exchange over any connected stream to a PMI-1
    /// server (used by [`Pmi::from_env`], and by tests with a fake
    /// server): `init` with `pmi_version=1 pmi_subversion=1` (a non-zero
    /// `rc` is an error), then `get_maxes` and `get_my_kvsname`.
    ///
    /// `rank` and `size` are this process's rank and the job's size, which
    /// PMI-1 hands over in the environment rather than on the wire;
    /// `rank < size` is required.
    ///
    /// # Errors
    /// * [`io::ErrorKind::InvalidInput`]: `rank` is not below `size`;
    /// * [`io::ErrorKind::Other`], with the server's `msg`: a non-zero `rc`
    ///   in an answer;
    /// * [`io::ErrorKind::InvalidData`]: an answer to another command, a
    ///   field missing or not a number, an unusable `kvsname`, or a line
    ///   longer than 64 KiB or not UTF-8;
    /// * [`io::ErrorKind::UnexpectedEof`]: the server closed the
    ///   connection;
    /// * the stream's own errors, their kind kept and the command added to
    ///   the message.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn from_stream<S: Read + Write + Send + 'static>(
        stream: S,
        rank: usize,
        size: usize,
    ) -> io::Result<Pmi> {
        check_rank(rank, size)?;
        Pmi::connect(Box::new(stream), rank, size)
    }

    /// The opening exchange over a boxed stream.
    fn connect(stream: Box<dyn Channel>, rank: usize, size: usize) -> io::Result<Pmi> {
        let mut pmi = Pmi {
            conn: BufReader::new(stream),
            kvsname: String::new(),
            rank,
            size,
            kvsname_max: 0,
            keylen_max: 0,
            vallen_max: 0,
            finalized: false,
        };
        let init = "cmd=init pmi_version=1 pmi_subversion=1";
        let reply = pmi.request(init, "init", "response_to_init")?;
        reply.check_rc(
            "init (pmi_version=1 pmi_subversion=1)",
            io::ErrorKind::Other,
        )?;

        let reply = pmi.request("cmd=get_maxes", "get_maxes", "maxes")?;
        reply.check_rc("get_maxes", io::ErrorKind::Other)?;
        pmi.kvsname_max = reply.number("kvsname_max", "get_maxes")?;
        pmi.keylen_max = reply.number("keylen_max", "get_maxes")?;
        pmi.vallen_max = reply.number("vallen_max", "get_maxes")?;

        let reply = pmi.request("cmd=get_my_kvsname", "get_my_kvsname", "my_kvsname")?;
        reply.check_rc("get_my_kvsname", io::ErrorKind::Other)?;
        let kvsname = reply.required("kvsname", "get_my_kvsname")?;
        if kvsname.is_empty() || kvsname.contains(' ') {
            return Err(invalid(format!(
                "PMI server's answer to get_my_kvsname has an unusable \
                 kvsname {kvsname:?}: `{}`",
                reply.line
            )));
        }
        pmi.kvsname = kvsname.to_owned();
        Ok(pmi)
    }

    /// This process's rank, from 0.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks in the job.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The job's KVS name, as the server gave it. All ranks of one job see
    /// the same name; hydra makes it unique to one run of `mpiexec`.
    pub fn kvsname(&self) -> &str {
        &self.kvsname
    }

    /// Max value length the server accepts, in bytes: its `vallen_max`
    /// less one. The server's limits are C buffer sizes that count the
    /// terminating NUL; hydra silently cuts a value of `vallen_max` bytes to
    /// one byte less.
    pub fn max_value(&self) -> usize {
        self.vallen_max.saturating_sub(1)
    }

    /// Max key length the server accepts, in bytes: its `keylen_max` less
    /// one (hydra cuts longer keys, and a get of the full key then fails).
    pub fn max_key(&self) -> usize {
        self.keylen_max.saturating_sub(1)
    }

    /// Stores `value` under `key` in the job's KVS. Other ranks can get it
    /// after the next [`Pmi::barrier`].
    ///
    /// `key` must be non-empty, without whitespace or `=`, and at most
    /// [`Pmi::max_key`] bytes; `value` without whitespace and at most
    /// [`Pmi::max_value`] bytes.
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] for a key or value that breaks these
    /// rules (nothing is sent); [`io::ErrorKind::Other`] with the server's
    /// `msg` if it refuses the put; [`io::ErrorKind::NotConnected`] after
    /// [`finalize`](Self::finalize); the errors of talking to the server,
    /// as in [`from_stream`](Self::from_stream).
    pub fn put(&mut self, key: &str, value: &str) -> io::Result<()> {
        self.check_key(key)?;
        if value.len() > self.max_value() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "PMI value for key {key:?} is {} bytes, the server accepts \
                     at most {} (vallen_max={} less the NUL)",
                    value.len(),
                    self.max_value(),
                    self.vallen_max
                ),
            ));
        }
        if let Some(c) = value.chars().find(|c| c.is_whitespace()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "PMI value for key {key:?} contains whitespace {c:?}; PMI-1 \
                     values must be single words"
                ),
            ));
        }
        let line = format!("cmd=put kvsname={} key={key} value={value}", self.kvsname);
        let what = format!("put of key {key:?}");
        let reply = self.request(&line, &what, "put_result")?;
        reply.check_rc(&what, io::ErrorKind::Other)
    }

    /// Waits until every rank of the job has entered the barrier. Puts made
    /// before it are visible to every rank's gets after it.
    ///
    /// # Errors
    /// [`io::ErrorKind::Other`] with the server's `msg` if it answers with
    /// a non-zero `rc`; [`io::ErrorKind::NotConnected`] after
    /// [`finalize`](Self::finalize); the errors of talking to the server,
    /// as in [`from_stream`](Self::from_stream).
    pub fn barrier(&mut self) -> io::Result<()> {
        let reply = self.request("cmd=barrier_in", "barrier", "barrier_out")?;
        reply.check_rc("barrier", io::ErrorKind::Other)
    }

    /// Gets the value stored under `key` in the job's KVS.
    ///
    /// # Errors
    /// [`io::ErrorKind::NotFound`] with the server's `msg` for a key that is
    /// not there (or any other refusal by the server);
    /// [`io::ErrorKind::InvalidInput`] for a key that breaks
    /// [`put`](Self::put)'s rules; [`io::ErrorKind::InvalidData`] for an
    /// answer without a `value`; [`io::ErrorKind::NotConnected`] after
    /// [`finalize`](Self::finalize); the errors of talking to the server,
    /// as in [`from_stream`](Self::from_stream).
    pub fn get(&mut self, key: &str) -> io::Result<String> {
        self.check_key(key)?;
        let line = format!("cmd=get kvsname={} key={key}", self.kvsname);
        let what = format!("get of key {key:?}");
        let reply = self.request(&line, &what, "get_result")?;
        reply.check_rc(&what, io::ErrorKind::NotFound)?;
        reply.required("value", &what).map(str::to_owned)
    }

    /// Every rank contributes `mine` and gets everybody's contributions, in
    /// rank order (entry `rank()` is `mine`). This is a collective: every
    /// rank of the job must call it, with the same `prefix`.
    ///
    /// `mine` may be any bytes of any length: it is hex-encoded and, when
    /// longer than [`Pmi::max_value`] allows, split across several keys.
    /// `prefix` namespaces the keys (`PREFIX-RANK`, then `PREFIX-RANK-1`,
    /// `PREFIX-RANK-2`, ... for the further pieces), so that it can be
    /// called more than once: give each call its own prefix (hydra
    /// overwrites a key that is put again, other servers refuse it; either
    /// way a reused prefix can mix two calls' data). It must be a short
    /// word without whitespace or `=`.
    ///
    /// Cost: one put per piece, one barrier, and one get per piece of every
    /// other rank, each a round trip to the server. An error on one rank
    /// after others reached the barrier leaves them waiting there, so a
    /// failed allgather should end the job.
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] for a `prefix` that is empty or not
    /// one word, or too long for the server's `keylen_max` with this many
    /// ranks, or a `vallen_max` too small to hold a piece (checked alike on
    /// every rank before anything is put); [`io::ErrorKind::InvalidData`]
    /// for another rank's data that does not decode; and the errors of
    /// [`put`](Self::put), [`barrier`](Self::barrier) and
    /// [`get`](Self::get).
    pub fn allgather(&mut self, prefix: &str, mine: &[u8]) -> io::Result<Vec<Vec<u8>>> {
        if prefix.is_empty() || prefix.contains(|c: char| c == '=' || c.is_whitespace()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("allgather prefix {prefix:?} must be a non-empty word without whitespace or '='"),
            ));
        }
        // Every rank checks the longest key any rank uses (the last rank's,
        // with a piece number of up to 6 digits), so that all fail alike
        // here instead of some waiting forever at the barrier.
        let longest = prefix.len() + 1 + self.size.saturating_sub(1).to_string().len() + 7;
        if longest > self.max_key() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "allgather prefix {prefix:?} is too long: with {} ranks its keys \
                     take up to {longest} bytes, the server accepts at most {}",
                    self.size,
                    self.max_key()
                ),
            ));
        }
        let hex = to_hex(mine);
        // The first key holds "LEN." and the start of the hex; the others
        // hold the rest, `room` hex digits each.
        let head = format!("{}.", mine.len());
        let room = self.max_value();
        if room <= head.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "the PMI server's vallen_max={} is too small for allgather \
                     of {} bytes",
                    self.vallen_max,
                    mine.len()
                ),
            ));
        }
        let (first, mut rest) = hex.split_at(hex.len().min(room - head.len()));
        self.put(&piece_key(prefix, self.rank, 0), &format!("{head}{first}"))?;
        let mut piece = 1;
        while !rest.is_empty() {
            let (this, more) = rest.split_at(rest.len().min(room));
            self.put(&piece_key(prefix, self.rank, piece), this)?;
            rest = more;
            piece += 1;
        }

        self.barrier()?;

        let mut all = Vec::new();
        for r in 0..self.size {
            if r == self.rank {
                all.push(mine.to_vec());
            } else {
                all.push(self.gather_one(prefix, r)?);
            }
        }
        Ok(all)
    }

    /// Gets and decodes rank `r`'s contribution to the allgather `prefix`.
    fn gather_one(&mut self, prefix: &str, r: usize) -> io::Result<Vec<u8>> {
        let key = piece_key(prefix, r, 0);
        let first = self.get(&key)?;
        let bad = |why: &str| {
            invalid(format!(
                "allgather {prefix:?}: rank {r}'s data is damaged ({why})"
            ))
        };
        let (len, start) = first
            .split_once('.')
            .ok_or_else(|| bad(&format!("key {key:?} lacks the length header")))?;
        let len: usize = len
            .parse()
            .map_err(|_| bad(&format!("key {key:?} has length {len:?}")))?;
        let want = len
            .checked_mul(2)
            .ok_or_else(|| bad(&format!("length {len} is too large")))?;
        let mut hex = start.to_owned();
        let mut piece = 1;
        while hex.len() < want {
            let more = self.get(&piece_key(prefix, r, piece))?;
            if more.is_empty() {
                return Err(bad(&format!("piece {piece} is empty")));
            }
            hex.push_str(&more);
            piece += 1;
        }
        if hex.len() != want {
            return Err(bad(&format!(
                "{} hex digits for a length of {len} bytes",
                hex.len()
            )));
        }
        from_hex(&hex).ok_or_else(|| bad("not hex"))
    }

    /// Tells the server this process is done with PMI (best effort: the
    /// error, if any, is returned, but the connection is finished either
    /// way). Calling it again does nothing; every other call after it
    /// fails.
    ///
    /// # Errors
    /// [`io::ErrorKind::Other`] with the server's `msg` if it refuses, or
    /// the errors of talking to the server, as in
    /// [`from_stream`](Self::from_stream).
    pub fn finalize(&mut self) -> io::Result<()> {
        if self.finalized {
            return Ok(());
        }
        let result = self
            .request("cmd=finalize", "finalize", "finalize_ack")
            .and_then(|reply| reply.check_rc("finalize", io::ErrorKind::Other));
        self.finalized = true;
        result
    }

    /// Checks a key against PMI-1's rules and the server's `keylen_max`.
    fn check_key(&self, key: &str) -> io::Result<()> {
        if key.is_empty() || key.contains(|c: char| c == '=' || c.is_whitespace()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("PMI key {key:?} must be a non-empty word without whitespace or '='"),
            ));
        }
        if key.len() > self.max_key() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "PMI key {key:?} is {} bytes, the server accepts at most {} \
                     (keylen_max={} less the NUL)",
                    key.len(),
                    self.max_key(),
                    self.keylen_max
                ),
            ));
        }
        Ok(())
    }

    /// Sends `line` (the command `what`) and reads the answer, which must be
    /// `cmd=expect`.
    fn request(&mut self, line: &str, what: &str, expect: &str) -> io::Result<Reply> {
        if self.finalized {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                format!("PMI {what} after finalize"),
            ));
        }
        let conn = self.conn.get_mut();
        conn.write_all(line.as_bytes())
            .and_then(|()| conn.write_all(b"\n"))
            .and_then(|()| conn.flush())
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot send PMI {what} to the server: {e}"),
                )
            })?;
        let reply = Reply::parse(read_line(&mut self.conn, what)?);
        match reply.field("cmd") {
            Some(cmd) if cmd == expect => Ok(reply),
            _ => Err(invalid(format!(
                "PMI server answered {what} with `{}`, expected cmd={expect}",
                reply.line
            ))),
        }
    }
}

/// Reads one line (without its newline, or its `\r\n`), at most
/// [`MAX_LINE`] bytes, as the answer to the command `what`.
fn read_line<R: BufRead>(r: &mut R, what: &str) -> io::Result<String> {
    let mut line = Vec::new();
    loop {
        let buf = match r.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("cannot read the PMI server's answer to {what}: {e}"),
                ))
            }
        };
        if buf.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "PMI server closed the connection before answering {what}{}",
                    if line.is_empty() {
                        String::new()
                    } else {
                        format!(
                            " (it sent {:?} and no newline)",
                            String::from_utf8_lossy(&line)
                        )
                    }
                ),
            ));
        }
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        let room = MAX_LINE.saturating_sub(line.len());
        line.extend_from_slice(&buf[..take.min(room)]);
        r.consume(take.min(room));
        if line.len() >= MAX_LINE && !(done && take <= room) {
            return Err(invalid(format!(
                "PMI server's answer to {what} is longer than {MAX_LINE} bytes \
                 (starts {:?})",
                String::from_utf8_lossy(&line[..line.len().min(80)])
            )));
        }
        if done {
            break;
        }
    }
    line.pop(); // the '\n'
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    String::from_utf8(line).map_err(|e| {
        invalid(format!(
            "PMI server's answer to {what} is not UTF-8: {:?}",
            String::from_utf8_lossy(e.as_bytes())
        ))
    })
}

/// The key of piece `piece` of rank `rank`'s allgather data.
fn piece_key(prefix: &str, rank: usize, piece: usize) -> String {
    if piece == 0 {
        format!("{prefix}-{rank}")
    } else {
        format!("{prefix}-{rank}-{piece}")
    }
}

/// `rank < size`, else an error.
fn check_rank(rank: usize, size: usize) -> io::Result<()> {
    if rank < size {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("rank {rank} is not below the job size {size}"),
        ))
    }
}

/// The environment variable `name` as a number.
fn env_number(name: &str) -> io::Result<usize> {
    let text = env::var(name).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("PMI_FD is set but {name} is not usable: {e}"),
        )
    })?;
    text.trim().parse().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name}={text:?} is not a non-negative number"),
        )
    })
}

/// Takes ownership of the inherited descriptor `fd` (once per process):
/// checks it is open, sets `FD_CLOEXEC`, and wraps it as the socket it is.
fn take_fd(fd: RawFd) -> io::Result<Box<dyn Channel>> {
    let mut taken = FD_TAKEN.lock().unwrap_or_else(|poison| poison.into_inner());
    if *taken {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("PMI_FD={fd} was already taken by an earlier Pmi::from_env in this process"),
        ));
    }
    // The descriptor the process manager passed to this process for PMI
    // alone; FD_TAKEN makes sure we take it only once.
    let owned = crate::sys::take_inherited_fd(fd).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("PMI_FD={fd} is not an open descriptor"),
        )
    })?;
    *taken = true;
    let unix = UnixStream::from(owned);
    if unix.local_addr().is_ok() {
        return Ok(Box::new(unix));
    }
    let tcp = TcpStream::from(OwnedFd::from(unix));
    match tcp.local_addr() {
        Ok(_) => Ok(Box::new(tcp)),
        Err(e) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("PMI_FD={fd} is neither a Unix nor a TCP socket: {e}"),
        )),
    }
}

/// An error of kind [`io::ErrorKind::InvalidData`].
fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

/// The bytes of an even-length hex string (either case), or `None`.
fn from_hex(hex: &str) -> Option<Vec<u8>> {
    fn digit(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    let bytes = hex.as_bytes();
    if bytes.len() % 2 != 0 {
        return None;
    }
    bytes
        .chunks_exact(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::{Arc, Barrier};
    use std::thread::{self, JoinHandle};

    /// A fake server that answers each request line with the reply of the
    /// first rule whose command prefix matches it (and records the lines).
    fn scripted(rules: Vec<(&'static str, String)>) -> (UnixStream, JoinHandle<Vec<String>>) {
        let (client, server) = UnixStream::pair().unwrap();
        let t = thread::spawn(move || {
            let mut seen = Vec::new();
            let mut w = server.try_clone().unwrap();
            for line in BufReader::new(server).lines() {
                let Ok(line) = line else { break };
                let Some((_, reply)) = rules.iter().find(|(p, _)| line.starts_with(p)) else {
                    break;
                };
                seen.push(line);
                if w.write_all(reply.as_bytes()).is_err() {
                    break;
                }
            }
            seen
        });
        (client, t)
    }

    fn basic_rules() -> Vec<(&'static str, String)> {
        vec![
            (
                "cmd=init ",
                "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n".into(),
            ),
            (
                "cmd=get_maxes",
                "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n".into(),
            ),
            (
                "cmd=get_my_kvsname",
                "cmd=my_kvsname kvsname=kvs_42_0\n".into(),
            ),
        ]
    }

    #[test]
    fn opening_exchange_and_commands() {
        let mut rules = basic_rules();
        rules.push(("cmd=put ", "cmd=put_result rc=0 msg=success\n".into()));
        rules.push(("cmd=barrier_in", "cmd=barrier_out\n".into()));
        rules.push((
            "cmd=get kvsname=kvs_42_0 key=missing",
            "cmd=get_result rc=-1 msg=key_missing_not_found\n".into(),
        ));
        // Unknown fields, odd order, extra spaces and a CR are tolerated.
        rules.push((
            "cmd=get ",
            "  extra=1 rc=0   value=hello cmd=get_result msg=success junk\r\n".into(),
        ));
        rules.push(("cmd=finalize", "cmd=finalize_ack\n".into()));
        let (client, server) = scripted(rules);
        let mut pmi = Pmi::from_stream(client, 2, 4).unwrap();
        assert_eq!((pmi.rank(), pmi.size()), (2, 4));
        assert_eq!(pmi.max_value(), 1023);
        assert_eq!(pmi.max_key(), 63);
        assert_eq!(pmi.kvsname(), "kvs_42_0");
        pmi.put("k", "v").unwrap();
        pmi.barrier().unwrap();
        assert_eq!(pmi.get("k").unwrap(), "hello");
        let e = pmi.get("missing").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("key_missing_not_found"), "{e}");
        pmi.finalize().unwrap();
        pmi.finalize().unwrap();
        assert!(pmi.barrier().is_err());
        drop(pmi);
        let seen = server.join().unwrap();
        assert_eq!(
            seen,
            [
                "cmd=init pmi_version=1 pmi_subversion=1",
                "cmd=get_maxes",
                "cmd=get_my_kvsname",
                "cmd=put kvsname=kvs_42_0 key=k value=v",
                "cmd=barrier_in",
                "cmd=get kvsname=kvs_42_0 key=k",
                "cmd=get kvsname=kvs_42_0 key=missing",
                "cmd=finalize",
            ]
        );
    }

    #[test]
    fn init_refused_carries_message() {
        let (client, _t) = scripted(vec![(
            "cmd=init",
            "cmd=response_to_init rc=-1 msg=version mismatch here\n".into(),
        )]);
        let e = Pmi::from_stream(client, 0, 1).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("init"), "{msg}");
        assert!(msg.contains("version mismatch here"), "{msg}");
    }

    #[test]
    fn put_rc_and_wrong_answer() {
        let mut rules = basic_rules();
        rules.push((
            "cmd=put kvsname=kvs_42_0 key=dup",
            "cmd=put_result rc=-1 msg=duplicate_key\n".into(),
        ));
        rules.push(("cmd=put", "cmd=barrier_out\n".into()));
        let (client, _t) = scripted(rules);
        let mut pmi = Pmi::from_stream(client, 0, 1).unwrap();
        let e = pmi.put("dup", "x").unwrap_err();
        assert!(e.to_string().contains("duplicate_key"), "{e}");
        let e = pmi.put("other", "x").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("expected cmd=put_result"), "{e}");
    }

    #[test]
    fn bad_keys_and_values_are_refused_locally() {
        let (client, _t) = scripted(basic_rules());
        let mut pmi = Pmi::from_stream(client, 0, 1).unwrap();
        for (k, v) in [
            ("", "x"),
            ("a b", "x"),
            ("a=b", "x"),
            ("k", "two words"),
            ("k", "nl\n"),
        ] {
            let e = pmi.put(k, v).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{k:?} {v:?}");
        }
        let e = pmi.put(&"k".repeat(64), "x").unwrap_err();
        assert!(e.to_string().contains("keylen_max"), "{e}");
        let e = pmi.put("k", &"v".repeat(1024)).unwrap_err();
        assert!(e.to_string().contains("vallen_max"), "{e}");
        assert!(pmi.allgather("a b", b"x").is_err());
        let e = pmi.allgather(&"p".repeat(55), b"x").unwrap_err();
        assert!(e.to_string().contains("too long"), "{e}");
    }

    #[test]
    fn maxes_missing_or_garbled() {
        for maxes in [
            "cmd=maxes kvsname_max=256 keylen_max=64\n",
            "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=-5\n",
        ] {
            let mut rules = basic_rules();
            rules[1].1 = maxes.into();
            let (client, _t) = scripted(rules);
            let e = Pmi::from_stream(client, 0, 1).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData);
            assert!(e.to_string().contains("vallen_max"), "{e}");
        }
    }

    #[test]
    fn eof_is_an_error() {
        let (client, server) = UnixStream::pair().unwrap();
        drop(server);
        let e = Pmi::from_stream(client, 0, 1).unwrap_err();
        assert!(
            matches!(
                e.kind(),
                io::ErrorKind::UnexpectedEof | io::ErrorKind::BrokenPipe
            ),
            "{e}"
        );
        // EOF in the middle of an answer.
        let (client, server) = UnixStream::pair().unwrap();
        let t = thread::spawn(move || {
            let mut line = String::new();
            let mut r = BufReader::new(server);
            r.read_line(&mut line).unwrap();
            r.get_mut().write_all(b"cmd=response_to").unwrap();
        });
        let e = Pmi::from_stream(client, 0, 1).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert!(e.to_string().contains("closed the connection"), "{e}");
        assert!(e.to_string().contains("cmd=response_to"), "{e}");
        t.join().unwrap();
    }

    #[test]
    fn overlong_line_is_an_error() {
        let (client, mut server) = UnixStream::pair().unwrap();
        let t = thread::spawn(move || {
            let huge = vec![b'x'; MAX_LINE + 10];
            let _ = server.write_all(&huge);
            let _ = server.write_all(b"\n");
            server
        });
        let e = Pmi::from_stream(client, 0, 1).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("longer than"), "{e}");
        drop(t.join().unwrap());
    }

    #[test]
    fn read_line_limits() {
        let mut ok = vec![b'a'; MAX_LINE - 1];
        ok.push(b'\n');
        let got = read_line(&mut io::BufReader::with_capacity(7, &ok[..]), "x").unwrap();
        assert_eq!(got.len(), MAX_LINE - 1);
        let mut long = vec![b'a'; MAX_LINE];
        long.push(b'\n');
        assert!(read_line(&mut &long[..], "x").is_err());
        assert!(read_line(&mut &b"\xff\xfe\n"[..], "x").is_err());
        assert_eq!(read_line(&mut &b"a=1\r\n"[..], "x").unwrap(), "a=1");
    }

    #[test]
    fn reply_parsing() {
        let r = Reply::parse("cmd=x rc=3 msg=two words =odd a==b".into());
        assert_eq!(r.field("cmd"), Some("x"));
        assert_eq!(r.field("msg"), Some("two words"));
        assert_eq!(r.field(""), Some("odd"));
        assert_eq!(r.field("a"), Some("=b"));
        assert!(r.check_rc("x", io::ErrorKind::Other).is_err());
        let r = Reply::parse("cmd=x rc=zero".into());
        assert_eq!(
            r.check_rc("x", io::ErrorKind::Other).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        assert!(Reply::parse("cmd=x".into())
            .check_rc("x", io::ErrorKind::Other)
            .is_ok());
    }

    #[test]
    fn hex_round_trip() {
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(from_hex(&to_hex(&all)).unwrap(), all);
        assert_eq!(from_hex("0A0b").unwrap(), [10, 11]);
        assert!(from_hex("abc").is_none());
        assert!(from_hex("zz").is_none());
        assert!(from_hex("é0").is_none());
    }

    /// A fake multi-rank PMI server: one thread per connection, a shared
    /// KVS and a real barrier.
    fn fake_job(size: usize, vallen_max: usize) -> Vec<UnixStream> {
        let kvs: Arc<Mutex<HashMap<String, String>>> = Arc::default();
        let barrier = Arc::new(Barrier::new(size));
        let mut clients = Vec::new();
        for _ in 0..size {
            let (client, server) = UnixStream::pair().unwrap();
            clients.push(client);
            let (kvs, barrier) = (kvs.clone(), barrier.clone());
            thread::spawn(move || {
                let mut w = server.try_clone().unwrap();
                for line in BufReader::new(server).lines() {
                    let Ok(line) = line else { break };
                    let r = Reply::parse(line);
                    let f = |n| r.field(n).unwrap_or("").to_owned();
                    let reply = match f("cmd").as_str() {
                        "init" => "cmd=response_to_init rc=0".to_owned(),
                        "get_maxes" => format!(
                            "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max={vallen_max}"
                        ),
                        "get_my_kvsname" => "cmd=my_kvsname kvsname=fake".to_owned(),
                        "put" => {
                            assert!(f("value").len() < vallen_max);
                            let old = kvs.lock().unwrap().insert(f("key"), f("value"));
                            if old.is_some() {
                                "cmd=put_result rc=-1 msg=duplicate".to_owned()
                            } else {
                                "cmd=put_result rc=0 msg=success".to_owned()
                            }
                        }
                        "barrier_in" => {
                            barrier.wait();
                            "cmd=barrier_out".to_owned()
                        }
                        "get" => match kvs.lock().unwrap().get(&f("key")) {
                            Some(v) => format!("cmd=get_result rc=0 msg=success value={v}"),
                            None => "cmd=get_result rc=-1 msg=not_found".to_owned(),
                        },
                        "finalize" => "cmd=finalize_ack".to_owned(),
                        _ => break,
                    };
                    if writeln!(w, "{reply}").is_err() {
                        break;
                    }
                }
            });
        }
        clients
    }

    #[test]
    fn allgather_over_fake_job_with_splitting() {
        let size = 3;
        let vallen_max = 16; // forces many pieces
        let handles: Vec<_> = fake_job(size, vallen_max)
            .into_iter()
            .enumerate()
            .map(|(rank, stream)| {
                thread::spawn(move || -> io::Result<Vec<Vec<u8>>> {
                    let mut pmi = Pmi::from_stream(stream, rank, size)?;
                    let small = pmi.allgather("a", format!("rank{rank}").as_bytes())?;
                    let empty = pmi.allgather("b", &[])?;
                    let long: Vec<u8> = (0..100).map(|i| (i * 7 + rank) as u8).collect();
                    let big = pmi.allgather("c", &long)?;
                    // Reusing a prefix fails (the keys exist), without panic.
                    assert!(pmi.allgather("a", b"again").is_err());
                    pmi.finalize()?;
                    Ok(vec![small.concat(), empty.concat(), big.concat()])
                })
            })
            .collect();
        let mut want_big = Vec::new();
        for r in 0..size {
            want_big.extend((0..100).map(|i| (i * 7 + r) as u8));
        }
        for h in handles {
            let got = h.join().unwrap().unwrap();
            assert_eq!(got[0], b"rank0rank1rank2");
            assert!(got[1].is_empty());
            assert_eq!(got[2], want_big);
        }
    }

    #[test]
    fn from_env_without_pmi_fd_is_none() {
        if env::var_os("PMI_FD").is_none() {
            assert!(Pmi::from_env().unwrap().is_none());
        }
    }

    #[test]
    fn rank_must_be_below_size() {
        let (client, _server) = UnixStream::pair().unwrap();
        assert_eq!(
            Pmi::from_stream(client, 3, 3).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }
}
