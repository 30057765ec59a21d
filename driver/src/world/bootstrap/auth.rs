//! Mutual challenge-response authentication with a per-job secret.
//!
//! Every rank of one job knows the same secret (the text of
//! `TANDEM_SECRET`, see [`Secret::from_text`]). Before anything else is
//! read from a freshly connected stream, both ends run [`handshake`]; it
//! proves to each side that the other knows the secret, without sending the
//! secret, and it fails on both sides when they do not share it.
//!
//! # Protocol (version `a1`)
//!
//! Both ends run the same steps at the same time; neither waits for the
//! other before writing, so the exchange cannot deadlock.
//!
//! 1. **Greeting.** Each side writes 24 bytes: the 8-byte magic
//!    `TANDEMa1` followed by a 16-byte nonce fresh from `/dev/urandom`.
//! 2. Each side reads exactly 8 bytes and checks them against the magic
//!    *before* reading anything more, so a stray client (an HTTP request, a
//!    port scanner, another program) is refused at once with
//!    [`io::ErrorKind::InvalidData`], and the error shows what it sent. A
//!    peer whose magic starts with `TANDEM` but names another version is
//!    told apart in the message. Then it reads exactly the 16-byte nonce. A
//!    nonce equal to our own means our greeting came back to us (a reflected
//!    or looped-back connection): refused, before we send any proof.
//! 3. **Proof.** Each side writes a 32-byte tag
//!
//!    ```text
//!    HMAC-SHA256(key, "tandem-auth-v1" || role || sender nonce || receiver nonce || context)
//!    ```
//!
//!    where `key` is the 32-byte [`Secret`], `role` is one byte naming the
//!    *sender*'s [`Role`] (`C` for the connector, `A` for the acceptor),
//!    "sender nonce" is the writer's own nonce and "receiver nonce" the one
//!    it read. All fields before `context` have fixed lengths, so the
//!    encoding is unambiguous.
//! 4. Each side reads exactly 32 bytes and compares them, in constant time,
//!    with the tag it expects from the peer (peer's role, peer's nonce, our
//!    nonce). A mismatch gives [`io::ErrorKind::PermissionDenied`].
//!
//! # What it protects against, and what not
//!
//! * The secret never crosses the wire, only MACs over fresh nonces.
//! * Replaying a recorded exchange fails: the other side's nonce is new.
//! * Reflecting a tag back fails: the two directions' tags differ in the
//!   role byte and in the order of the nonces.
//! * The `context` separates purposes (`b"bootstrap"`, `b"data"`, ...): a
//!   proof made for one does not pass for another.
//! * It authenticates the peer once, at connection time. It does not
//!   encrypt or protect the integrity of later traffic, so an attacker who
//!   sits on the path and relays both directions is not stopped. It is meant
//!   to keep other jobs, other users' processes and stray connections off
//!   a job's sockets.
//!
//! # Timeouts
//!
//! The stream must be blocking; the caller sets a read timeout on it (for
//! example [`std::os::unix::net::UnixStream::set_read_timeout`]). A peer
//! that sends nothing then gives an error of kind
//! [`io::ErrorKind::TimedOut`].

use std::fmt;
use std::fs::File;
use std::io::{self, Read, Write};

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// The 8-byte greeting that opens the handshake (protocol version `a1`).
const MAGIC: &[u8; 8] = b"TANDEMa1";
/// The part of [`MAGIC`] that all versions of the handshake share.
const MAGIC_FAMILY: &[u8; 6] = b"TANDEM";
/// Domain-separation label at the start of every MACed message.
const LABEL: &[u8] = b"tandem-auth-v1";
/// Length of each side's nonce in bytes.
const NONCE_LEN: usize = 16;
/// Length of an HMAC-SHA256 tag in bytes.
const TAG_LEN: usize = 32;

type HmacSha256 = Hmac<Sha256>;

/// A per-job secret (32 bytes), the key of the handshake's MACs.
///
/// Its [`fmt::Debug`] form never shows the bytes, and equality is compared
/// in constant time.
#[derive(Clone)]
pub struct Secret([u8; 32]);

impl Secret {
    /// Builds the secret from the text of `TANDEM_SECRET`.
    ///
    /// Any non-empty string is accepted: it is hashed with SHA-256, byte for
    /// byte and without trimming, into the 32-byte key, so hex, base64 or a
    /// passphrase all work.
    ///
    /// # Errors
    /// An error of kind [`io::ErrorKind::InvalidInput`] for an empty string.
    pub fn from_text(s: &str) -> io::Result<Secret> {
        if s.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "TANDEM_SECRET is empty: expected a non-empty string \
                 (for example 64 hex characters)",
            ));
        }
        let digest = Sha256::digest(s.as_bytes());
        let mut key = [0u8; 32];
        key.copy_from_slice(&digest);
        Ok(Secret(key))
    }

    /// Makes a fresh secret from 32 random bytes of `/dev/urandom`.
    ///
    /// Returns the secret and its text form: the 64 lowercase hex
    /// characters of the random bytes, to be handed to the other ranks (for
    /// example as `TANDEM_SECRET`). The secret is
    /// `Secret::from_text(&text)`, so a rank that only has the text gets an
    /// equal secret.
    ///
    /// # Errors
    /// The error of opening or reading `/dev/urandom` (its kind kept, the
    /// message saying what the bytes were for).
    pub fn random() -> io::Result<(Secret, String)> {
        let mut bytes = [0u8; 32];
        fill_random(&mut bytes, "a new job secret")?;
        let text = to_hex(&bytes);
        let secret = Secret::from_text(&text)?;
        Ok((secret, text))
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Secret) -> bool {
        // Constant time: look at every byte whatever the first difference.
        self.0
            .iter()
            .zip(other.0.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

impl Eq for Secret {}

/// Which end of the connection we are.
///
/// The two sides' proofs differ in this role, so a proof reflected back to
/// its sender is useless. The side that called `connect` is the
/// [`Role::Connector`], the side that called `accept` the
/// [`Role::Acceptor`]; the two ends of one connection must pass different
/// roles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// The end that opened the connection.
    Connector,
    /// The end that accepted the connection.
    Acceptor,
}

impl Role {
    /// The byte that stands for this role in the MACed message.
    fn byte(self) -> u8 {
        match self {
            Role::Connector => b'C',
            Role::Acceptor => b'A',
        }
    }

    /// The role of the other end.
    fn peer(self) -> Role {
        match self {
            Role::Connector => Role::Acceptor,
            Role::Acceptor => Role::Connector,
        }
    }
}

/// Runs the handshake on a fresh stream before anything else is read from
/// it (see the module documentation for the protocol).
///
/// `context` binds the proof to a purpose (for example `b"bootstrap"` or
/// `b"data"`); both sides must pass the same bytes. `role` says which end
/// of the connection we are; the two ends must pass different roles.
///
/// # Errors
/// * [`io::ErrorKind::InvalidData`]: the peer's greeting is not tandem's
///   (or names another handshake version), or the peer echoed our own
///   greeting back.
/// * [`io::ErrorKind::PermissionDenied`]: the peer's proof is wrong (it has
///   another secret, belongs to another job or used another context).
/// * [`io::ErrorKind::TimedOut`]: the stream's read timeout ran out while
///   waiting for the peer.
/// * [`io::ErrorKind::UnexpectedEof`]: the peer closed the connection in
///   the middle of the handshake.
/// * Any other error from the stream or from `/dev/urandom`, with what the
///   handshake was doing added to the message.
pub fn handshake<S: Read + Write>(
    s: &mut S,
    secret: &Secret,
    role: Role,
    context: &[u8],
) -> io::Result<()> {
    let mut ours = [0u8; NONCE_LEN];
    fill_random(&mut ours, "the handshake nonce")?;

    let mut greeting = [0u8; MAGIC.len() + NONCE_LEN];
    greeting[..MAGIC.len()].copy_from_slice(MAGIC);
    greeting[MAGIC.len()..].copy_from_slice(&ours);
    send(s, &greeting, "greeting")?;

    let mut magic = [0u8; MAGIC.len()];
    recv(s, &mut magic, "greeting")?;
    check_magic(&magic)?;

    let mut theirs = [0u8; NONCE_LEN];
    recv(s, &mut theirs, "greeting nonce")?;
    if theirs == ours {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "peer sent back our own handshake nonce (a reflected or \
             looped-back connection); refusing it",
        ));
    }

    let tag = proof(secret, role, &ours, &theirs, context)?.finalize();
    send(s, &tag.into_bytes(), "proof")?;

    let mut peer_tag = [0u8; TAG_LEN];
    recv(s, &mut peer_tag, "proof")?;
    proof(secret, role.peer(), &theirs, &ours, context)?
        .verify_slice(&peer_tag)
        .map_err(|_| {
            io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "peer failed the secret check (wrong TANDEM_SECRET or \
                     another job) for context \"{}\"",
                    context.escape_ascii()
                ),
            )
        })
}

/// The MAC, not yet finalized, over the message of one direction: the
/// proof that `sender` (whose nonce is `sender_nonce`) sends to the side
/// whose nonce is `receiver_nonce`.
fn proof(
    secret: &Secret,
    sender: Role,
    sender_nonce: &[u8; NONCE_LEN],
    receiver_nonce: &[u8; NONCE_LEN],
    context: &[u8],
) -> io::Result<HmacSha256> {
    let mut mac = HmacSha256::new_from_slice(&secret.0).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("cannot key HMAC-SHA256 with the job secret: {e}"),
        )
    })?;
    mac.update(LABEL);
    mac.update(&[sender.byte()]);
    mac.update(sender_nonce);
    mac.update(receiver_nonce);
    mac.update(context);
    Ok(mac)
}

/// Checks the peer's first 8 bytes against [`MAGIC`].
fn check_magic(got: &[u8; 8]) -> io::Result<()> {
    if got == MAGIC {
        return Ok(());
    }
    let message = if got.starts_with(MAGIC_FAMILY) {
        format!(
            "tandem peer speaks another handshake version (greeting {} \
             \"{}\", expected \"{}\"); are both sides the same tandem build?",
            to_hex(got),
            got.escape_ascii(),
            MAGIC.escape_ascii()
        )
    } else {
        format!(
            "not a tandem peer (greeting {} \"{}\", expected {} \"{}\")",
            to_hex(got),
            got.escape_ascii(),
            to_hex(MAGIC),
            MAGIC.escape_ascii()
        )
    };
    Err(io::Error::new(io::ErrorKind::InvalidData, message))
}

/// Writes all of `buf` (the handshake's `what`) and flushes.
fn send<S: Write>(s: &mut S, buf: &[u8], what: &str) -> io::Result<()> {
    s.write_all(buf).and_then(|()| s.flush()).map_err(|e| {
        let kind = match e.kind() {
            io::ErrorKind::WouldBlock => io::ErrorKind::TimedOut,
            k => k,
        };
        io::Error::new(
            kind,
            format!("cannot send the handshake {what} to the peer: {e}"),
        )
    })
}

/// Reads exactly `buf.len()` bytes (the handshake's `what`): never more,
/// so nothing after the handshake is consumed.
fn recv<S: Read>(s: &mut S, buf: &mut [u8], what: &str) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "peer closed the connection during the handshake \
                         (after {got} of {} bytes of its {what})",
                        buf.len()
                    ),
                ))
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "peer sent nothing for the handshake (timed out \
                         waiting for its {what}, {got} of {} bytes came)",
                        buf.len()
                    ),
                ))
            }
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("cannot read the peer's handshake {what}: {e}"),
                ))
            }
        }
    }
    Ok(())
}

/// Fills `buf` from `/dev/urandom`; `what` names the purpose in errors.
fn fill_random(buf: &mut [u8], what: &str) -> io::Result<()> {
    File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(buf))
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot read /dev/urandom for {what}: {e}"),
            )
        })
}

/// Lowercase hex of `bytes` (the whole bootstrap's one hex encoder).
pub(crate) fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;
    use std::thread;
    use std::time::Duration;

    const CTX: &[u8] = b"bootstrap";

    /// Runs the connector on a thread and the acceptor here, over a
    /// connected pair; returns (connector's result, acceptor's result).
    fn pair(a: &Secret, b: &Secret, ctx_a: &'static [u8], ctx_b: &[u8]) -> [io::Result<()>; 2] {
        let (mut x, mut y) = UnixStream::pair().expect("socketpair");
        for s in [&x, &y] {
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        }
        let a = a.clone();
        let t = thread::spawn(move || handshake(&mut x, &a, Role::Connector, ctx_a));
        let rb = handshake(&mut y, b, Role::Acceptor, ctx_b);
        let ra = t.join().expect("connector thread");
        [ra, rb]
    }

    fn secret(text: &str) -> Secret {
        Secret::from_text(text).expect("secret")
    }

    /// Secrets that differ in two bytes by the same bit pattern are still
    /// different (an accumulator that xors the differences would cancel
    /// them out).
    #[test]
    fn secrets_differing_twice_alike_are_unequal() {
        let a = Secret([0u8; 32]);
        let mut k = [0u8; 32];
        k[3] = 0x5a;
        k[17] = 0x5a;
        let b = Secret(k);
        assert!(a != b);
        assert!(a == Secret([0u8; 32]));
    }

    /// A reader that fails once with `first`, then serves `data`.
    struct Flaky {
        first: Option<io::ErrorKind>,
        data: std::io::Cursor<Vec<u8>>,
    }

    impl Read for Flaky {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            match self.first.take() {
                Some(k) => Err(io::Error::new(k, "injected")),
                None => self.data.read(buf),
            }
        }
    }

    /// A read interrupted by a signal is retried; any other failure keeps
    /// its kind (only a read timeout is reported as the peer's silence).
    #[test]
    fn interrupted_reads_retry_and_errors_keep_their_kind() {
        let mut buf = [0u8; 4];
        let mut r = Flaky {
            first: Some(io::ErrorKind::Interrupted),
            data: std::io::Cursor::new(b"abcd".to_vec()),
        };
        recv(&mut r, &mut buf, "test").unwrap();
        assert_eq!(&buf, b"abcd");
        for (kind, want) in [
            (
                io::ErrorKind::ConnectionReset,
                io::ErrorKind::ConnectionReset,
            ),
            (io::ErrorKind::WouldBlock, io::ErrorKind::TimedOut),
            (io::ErrorKind::TimedOut, io::ErrorKind::TimedOut),
        ] {
            let mut r = Flaky {
                first: Some(kind),
                data: std::io::Cursor::new(b"abcd".to_vec()),
            };
            let e = recv(&mut r, &mut buf, "test").unwrap_err();
            assert_eq!(e.kind(), want, "{kind:?}: {e}");
        }
    }

    #[test]
    fn same_secret_succeeds_and_stream_stays_usable() {
        let s = secret("hunter2");
        let (mut x, mut y) = UnixStream::pair().unwrap();
        let s2 = s.clone();
        let t = thread::spawn(move || {
            handshake(&mut x, &s2, Role::Connector, CTX)?;
            x.write_all(b"after")
        });
        handshake(&mut y, &s, Role::Acceptor, CTX).expect("acceptor");
        t.join().unwrap().expect("connector");
        let mut buf = [0u8; 5];
        y.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"after", "handshake must not consume later bytes");
    }

    #[test]
    fn wrong_secret_fails_on_both_sides() {
        for r in pair(&secret("one"), &secret("two"), CTX, CTX) {
            let e = r.expect_err("must fail");
            assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
            assert!(e.to_string().contains("secret check"), "{e}");
        }
    }

    #[test]
    fn wrong_context_fails_on_both_sides() {
        let s = secret("same");
        for r in pair(&s, &s, b"bootstrap", b"data") {
            let e = r.expect_err("must fail");
            assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        }
    }

    #[test]
    fn same_role_on_both_sides_fails() {
        let s = secret("same");
        let (mut x, mut y) = UnixStream::pair().unwrap();
        let s2 = s.clone();
        let t = thread::spawn(move || handshake(&mut x, &s2, Role::Acceptor, CTX));
        let e = handshake(&mut y, &s, Role::Acceptor, CTX).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        assert!(t.join().unwrap().is_err());
    }

    #[test]
    fn garbage_is_refused_with_invalid_data() {
        let (mut x, mut y) = UnixStream::pair().unwrap();
        let t = thread::spawn(move || {
            let _ = x.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
            x
        });
        let e = handshake(&mut y, &secret("k"), Role::Acceptor, CTX).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        let msg = e.to_string();
        assert!(msg.contains("not a tandem peer"), "{msg}");
        assert!(msg.contains("474554202f204854"), "{msg}");
        assert!(msg.contains("GET / HT"), "{msg}");
        drop(t.join().unwrap());
    }

    #[test]
    fn other_version_is_named() {
        let (mut x, mut y) = UnixStream::pair().unwrap();
        x.write_all(b"TANDEMb7").unwrap();
        x.write_all(&[0u8; 40]).unwrap();
        let e = handshake(&mut y, &secret("k"), Role::Acceptor, CTX).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("another handshake version"), "{e}");
    }

    #[test]
    fn early_close_is_an_error() {
        // Closes before sending anything, after part of the greeting, and
        // after the whole greeting (before the proof).
        for sent in [
            &b""[..],
            &b"TAND"[..],
            &[&MAGIC[..], &[9u8; NONCE_LEN]].concat(),
        ] {
            let (mut x, mut y) = UnixStream::pair().unwrap();
            x.write_all(sent).unwrap();
            drop(x);
            let e = handshake(&mut y, &secret("k"), Role::Acceptor, CTX).unwrap_err();
            assert!(
                matches!(
                    e.kind(),
                    io::ErrorKind::UnexpectedEof | io::ErrorKind::BrokenPipe
                ),
                "{e}"
            );
        }
    }

    #[test]
    fn silent_peer_times_out() {
        let (_x, mut y) = UnixStream::pair().unwrap();
        y.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let e = handshake(&mut y, &secret("k"), Role::Connector, CTX).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        assert!(e
            .to_string()
            .contains("peer sent nothing for the handshake"));
    }

    /// A stream that hands back whatever is written to it.
    struct Echo(Vec<u8>, usize);

    impl Read for Echo {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let rest = &self.0[self.1..];
            let n = rest.len().min(buf.len());
            buf[..n].copy_from_slice(&rest[..n]);
            self.1 += n;
            Ok(n)
        }
    }

    impl Write for Echo {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn reflection_is_refused_before_any_proof() {
        let mut echo = Echo(Vec::new(), 0);
        let e = handshake(&mut echo, &secret("k"), Role::Connector, CTX).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        assert!(e.to_string().contains("reflected"), "{e}");
        assert_eq!(echo.0.len(), MAGIC.len() + NONCE_LEN, "no proof was sent");
    }

    #[test]
    fn reflected_proof_is_refused() {
        // A peer that answers with fresh nonce but copies our proof back.
        let (mut x, mut y) = UnixStream::pair().unwrap();
        let t = thread::spawn(move || {
            let mut greet = [0u8; 24];
            x.read_exact(&mut greet).unwrap();
            greet[MAGIC.len()] ^= 1;
            x.write_all(&greet).unwrap();
            let mut tag = [0u8; TAG_LEN];
            x.read_exact(&mut tag).unwrap();
            x.write_all(&tag).unwrap();
            x
        });
        let e = handshake(&mut y, &secret("k"), Role::Connector, CTX).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        drop(t.join().unwrap());
    }

    /// Length of one side's whole part of the handshake: greeting and proof.
    const EXCHANGE: usize = MAGIC.len() + NONCE_LEN + TAG_LEN;

    /// A stream that keeps a copy of every byte written to it and read from
    /// it: an eavesdropper on the wire.
    struct Tap<S> {
        inner: S,
        wrote: Vec<u8>,
        read: Vec<u8>,
    }

    impl<S: Read> Read for Tap<S> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.inner.read(buf)?;
            self.read.extend_from_slice(&buf[..n]);
            Ok(n)
        }
    }

    impl<S: Write> Write for Tap<S> {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let n = self.inner.write(buf)?;
            self.wrote.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            self.inner.flush()
        }
    }

    /// The nonce in one side's recorded bytes.
    fn nonce_of(side: &[u8]) -> [u8; NONCE_LEN] {
        side[MAGIC.len()..MAGIC.len() + NONCE_LEN]
            .try_into()
            .unwrap()
    }

    /// Records a complete, successful handshake between a connector and an
    /// acceptor sharing `s`, with context [`CTX`]: (the bytes the connector
    /// sent, the bytes the acceptor sent). Checks that both ends accepted
    /// and that the recorded proofs are the genuine ones for the recorded
    /// nonces, so a replay refused later is refused for its staleness, not
    /// for a bad recording.
    fn record(s: &Secret) -> (Vec<u8>, Vec<u8>) {
        let (x, mut y) = UnixStream::pair().expect("socketpair");
        for t in [&x, &y] {
            t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        }
        let s2 = s.clone();
        let t = thread::spawn(move || {
            let mut tap = Tap {
                inner: x,
                wrote: Vec::new(),
                read: Vec::new(),
            };
            handshake(&mut tap, &s2, Role::Connector, CTX).map(|()| (tap.wrote, tap.read))
        });
        handshake(&mut y, s, Role::Acceptor, CTX).expect("recorded exchange: acceptor");
        let (c, a) = t.join().unwrap().expect("recorded exchange: connector");
        assert_eq!((c.len(), a.len()), (EXCHANGE, EXCHANGE));
        let (nc, na) = (nonce_of(&c), nonce_of(&a));
        let genuine = |role, own: &[u8; NONCE_LEN], other: &[u8; NONCE_LEN]| {
            proof(s, role, own, other, CTX)
                .unwrap()
                .finalize()
                .into_bytes()
                .to_vec()
        };
        assert_eq!(
            c[EXCHANGE - TAG_LEN..],
            genuine(Role::Connector, &nc, &na)[..]
        );
        assert_eq!(
            a[EXCHANGE - TAG_LEN..],
            genuine(Role::Acceptor, &na, &nc)[..]
        );
        (c, a)
    }

    /// Plays `recorded` (one side's bytes of an old exchange, all at once,
    /// as a replaying attacker would) at a fresh party running the
    /// handshake as `role` with `s` and `ctx`. Returns the fresh party's
    /// result and everything it sent.
    fn replay(recorded: &[u8], s: &Secret, role: Role, ctx: &[u8]) -> (io::Result<()>, Vec<u8>) {
        let (mut x, mut y) = UnixStream::pair().expect("socketpair");
        for t in [&x, &y] {
            t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        }
        let bytes = recorded.to_vec();
        let attacker = thread::spawn(move || {
            x.write_all(&bytes)?;
            let mut heard = Vec::new();
            x.read_to_end(&mut heard)?;
            Ok::<_, io::Error>(heard)
        });
        let r = handshake(&mut y, s, role, ctx);
        drop(y);
        (r, attacker.join().unwrap().expect("attacker"))
    }

    /// Asserts that a replay was refused as a failed proof, and that the
    /// fresh party greeted with a nonce of its own, not one of the recorded
    /// exchange's.
    fn assert_refused(r: io::Result<()>, fresh: &[u8], recorded: [&[u8]; 2]) {
        let e = r.expect_err("a replayed exchange must be refused");
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        assert!(e.to_string().contains("secret check"), "{e}");
        assert_eq!(&fresh[..MAGIC.len()], MAGIC, "fresh party's greeting");
        for old in recorded {
            assert_ne!(nonce_of(fresh), nonce_of(old), "fresh party reused a nonce");
        }
    }

    /// An eavesdropper records a good exchange, then connects to fresh
    /// acceptors with the same secret and context and sends the
    /// connector's recorded greeting and proof. The proof is bound to the
    /// old acceptor's nonce, so every fresh acceptor refuses it.
    #[test]
    fn recorded_connector_replayed_to_a_fresh_acceptor_is_refused() {
        let s = secret("job secret");
        let (c, a) = record(&s);
        for _ in 0..3 {
            let (r, fresh) = replay(&c, &s, Role::Acceptor, CTX);
            assert_refused(r, &fresh, [&c, &a]);
        }
    }

    /// The same eavesdropper plays the acceptor's recorded half to fresh
    /// connectors (as a fake server they reached): refused.
    #[test]
    fn recorded_acceptor_replayed_to_a_fresh_connector_is_refused() {
        let s = secret("job secret");
        let (c, a) = record(&s);
        for _ in 0..3 {
            let (r, fresh) = replay(&a, &s, Role::Connector, CTX);
            assert_refused(r, &fresh, [&c, &a]);
        }
    }

    /// Replayed to a party of another job (another secret), or of the
    /// same job for another purpose (another context), in either role:
    /// refused.
    #[test]
    fn recorded_exchange_replayed_into_another_job_or_context_is_refused() {
        let s = secret("job one");
        let (c, a) = record(&s);
        let other = secret("job two");
        for (rec, role) in [(&c, Role::Acceptor), (&a, Role::Connector)] {
            let (r, fresh) = replay(rec, &other, role, CTX);
            assert_refused(r, &fresh, [&c, &a]);
            let (r, fresh) = replay(rec, &s, role, b"data");
            assert_refused(r, &fresh, [&c, &a]);
        }
    }

    /// An attacker in the middle of a fresh connector and a fresh
    /// acceptor plays each the matching half of an old recording, so
    /// each sees a well-formed exchange of the right role: both refuse,
    /// and two fresh handshakes never repeat a nonce.
    #[test]
    fn replay_between_two_fresh_parties_fails_on_both_sides() {
        let s = secret("job secret");
        let (c, a) = record(&s);
        let (rc, to_connector) = replay(&a, &s, Role::Connector, CTX);
        let (ra, to_acceptor) = replay(&c, &s, Role::Acceptor, CTX);
        assert_refused(rc, &to_connector, [&c, &a]);
        assert_refused(ra, &to_acceptor, [&c, &a]);
        assert_ne!(nonce_of(&to_connector), nonce_of(&to_acceptor));
    }

    #[test]
    fn secret_text_and_debug() {
        let (s, text) = Secret::random().unwrap();
        assert_eq!(text.len(), 64);
        assert!(text
            .bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)));
        assert_eq!(Secret::from_text(&text).unwrap(), s);
        let (s2, text2) = Secret::random().unwrap();
        assert_ne!(text, text2);
        assert_ne!(s, s2);
        let dbg = format!("{s:?}");
        assert_eq!(dbg, "Secret(..)");
        assert!(!dbg.contains(&text[..8]));
        assert!(!dbg.contains(&to_hex(&s.0)[..8]));
        let e = Secret::from_text("").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("TANDEM_SECRET is empty"));
    }

    #[test]
    fn from_text_is_sha256() {
        // SHA-256("abc"), FIPS 180-2 test vector.
        let s = secret("abc");
        assert_eq!(
            to_hex(&s.0),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
