//! The wire header every message starts with.
//!
//! 32 bytes, little-endian, `#[repr(C)]` with its size and alignment fixed
//! at compile time. [`Header::decode`] validates every field against the
//! receiver's [`Limits`] and returns a [`WireError`]; no byte pattern can
//! make it panic (a property test feeds it random bytes).
//!
//! | bytes | field     | meaning                                              |
//! |-------|-----------|------------------------------------------------------|
//! | 0     | `magic`   | always [`MAGIC`]                                     |
//! | 1     | `kind`    | a [`Kind`]                                           |
//! | 2–3   | `context` | communicator context                                 |
//! | 4–7   | `tag`     | the user's tag (matching messages)                   |
//! | 8–9   | `seq`     | per-peer sequence number (matching messages)         |
//! | 10–11 | `credit`  | rendezvous credits freed for the peer, low 16 bits   |
//! | 12–15 | `token`   | the sender's operation (RTS, sync eager, CTS, FIN)   |
//! | 16–23 | `len`     | payload length (CTS/FIN: bytes granted / moved)      |
//! | 24–25 | `ecredit` | eager credits freed for the peer, low 16 bits        |
//! | 26–31 | reserved  | zero                                                 |
//!
//! An eager header with no token and a payload below 64 KiB also has a
//! 16-byte **short form**, for a transport that carries small messages in
//! cache lines (shared memory's line ring), so that a line holds 40 payload
//! bytes instead of 24: the same first 8 bytes with [`SHORT_EAGER`] as the
//! kind, then `seq`, `credit`, `ecredit` and `len` in 2 bytes each
//! ([`Header::short_words`], [`Header::from_short`]).
//!
//! ```
//! use tandem_core::wire::{Header, Kind, Limits};
//! let h = Header::new(Kind::Eager, 0, 42, 8);
//! let limits = Limits { eager_max: 1024, msg_max: 1 << 40, contexts: 1 };
//! assert_eq!(Header::decode(&h.encode(), &limits), Ok(h));
//! assert!(Header::decode(&[0xff; 32], &limits).is_err());
//! ```

/// First byte of every header: catches a peer writing garbage or a
/// mismatched build.
pub const MAGIC: u8 = 0x7e;

/// Encoded size of a [`Header`].
pub const HEADER_LEN: usize = 32;

/// Encoded size of a header in its short form ([`Header::short_words`]).
pub const SHORT_LEN: usize = 16;

/// The second byte of a header in its short form: not a [`Kind`] (so
/// [`Header::decode`] rejects it), because only a transport that knows the
/// form sends it, and expands it ([`Header::from_short`]) before the header
/// goes on.
pub const SHORT_EAGER: u8 = 0x81;

/// Encoded size of a [`MemDesc`].
pub const DESC_LEN: usize = 24;

/// Where a rendezvous payload lives: the body of an RTS (the sender's
/// buffer) and of a CTS (the receiver's buffer). A transport reads or
/// writes the remote buffer through it: shared memory uses the address
/// with cross-memory attach, RDMA verbs the address with `key` as the
/// remote key (rkey); TCP carries it only for diagnostics.
///
/// ```
/// use tandem_core::wire::MemDesc;
/// let d = MemDesc { addr: 0x7f00_1000, len: 1 << 20, key: 0x1234 };
/// assert_eq!(MemDesc::decode(&d.encode()), d);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MemDesc {
    /// Address of the buffer in its owner's address space.
    pub addr: u64,
    /// Its length in bytes.
    pub len: u64,
    /// A transport-specific access key (the rkey on RDMA; 0 elsewhere).
    pub key: u64,
}

impl MemDesc {
    /// No buffer.
    pub const NONE: MemDesc = MemDesc {
        addr: 0,
        len: 0,
        key: 0,
    };

    /// Little-endian encoding: address, length, key.
    pub fn encode(&self) -> [u8; DESC_LEN] {
        let mut b = [0u8; DESC_LEN];
        b[..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..16].copy_from_slice(&self.len.to_le_bytes());
        b[16..].copy_from_slice(&self.key.to_le_bytes());
        b
    }

    /// Decodes [`encode`](Self::encode)'s bytes (any bit pattern is a
    /// descriptor; the transport that uses it validates it).
    pub fn decode(b: &[u8; DESC_LEN]) -> MemDesc {
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        MemDesc {
            addr: word(0),
            len: word(8),
            key: word(16),
        }
    }
}

/// Message kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// A matching message whose payload follows the header (consumes a
    /// credit).
    Eager = 1,
    /// As [`Kind::Eager`], but the receiver answers with [`Kind::Ack`] once
    /// it matched (synchronous send).
    EagerSync = 2,
    /// Request to send: a matching message announcing `len` bytes; its
    /// 8-byte body is the sender's buffer address (consumes a credit).
    Rts = 3,
    /// Clear to send: the receiver matched `token` and wants `len` bytes
    /// streamed to it.
    Cts = 4,
    /// The receiver pulled `len` bytes of `token` itself: the send is done.
    Fin = 5,
    /// The receiver matched the synchronous eager message `token`.
    Ack = 6,
    /// Carries only a credit return.
    Credit = 7,
    /// As [`Kind::Rts`], sent on an eager credit: its sender had no
    /// rendezvous credit left, and the receiver returns the credit as an
    /// eager one (`tandem_core::proto`, "Credits").
    RtsEager = 8,
}

impl Kind {
    #[inline]
    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => Self::Eager,
            2 => Self::EagerSync,
            3 => Self::Rts,
            4 => Self::Cts,
            5 => Self::Fin,
            6 => Self::Ack,
            7 => Self::Credit,
            8 => Self::RtsEager,
            _ => return None,
        })
    }

    /// Whether the message takes part in matching (and so consumes a credit
    /// and a sequence number).
    #[inline]
    pub const fn is_matching(self) -> bool {
        matches!(
            self,
            Self::Eager | Self::EagerSync | Self::Rts | Self::RtsEager
        )
    }

    /// Whether the message announces a rendezvous (an RTS, with a
    /// [`MemDesc`] body).
    #[inline]
    pub const fn is_rts(self) -> bool {
        matches!(self, Self::Rts | Self::RtsEager)
    }

    /// Whether the message takes an eager credit (the others that match
    /// take a rendezvous credit).
    #[inline]
    pub const fn takes_eager_credit(self) -> bool {
        matches!(self, Self::Eager | Self::EagerSync | Self::RtsEager)
    }

    /// Whether the payload rides behind the header.
    #[inline]
    pub const fn is_eager(self) -> bool {
        matches!(self, Self::Eager | Self::EagerSync)
    }
}

/// A message header.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Header {
    /// Always [`MAGIC`].
    pub magic: u8,
    /// A [`Kind`], as a byte.
    pub kind: u8,
    /// Communication context (communicator id).
    pub context: u16,
    /// The user's tag.
    pub tag: u32,
    /// Per-peer sequence number of a matching message.
    pub seq: u16,
    /// Low 16 bits of the count of receive entries the sender of this
    /// header has freed for its receiver (the piggybacked credit return).
    pub credit: u16,
    /// An operation token of the sender (RTS, sync eager) or echoed back
    /// (CTS, FIN, ACK).
    pub token: u32,
    /// Payload length in bytes.
    pub len: u64,
    /// Low 16 bits of the count of eager payload buffers the sender of this
    /// header has freed for its receiver.
    pub ecredit: u16,
    /// Reserved, zero.
    pub reserved: [u8; 6],
}

static_assertions::assert_eq_size!(Header, [u8; HEADER_LEN]);
static_assertions::const_assert_eq!(core::mem::align_of::<Header>(), 8);

/// What the receiver accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest payload an eager message may carry.
    pub eager_max: u64,
    /// Longest payload of any message.
    pub msg_max: u64,
    /// Number of contexts in use (valid contexts are `0..contexts`).
    pub contexts: u16,
}

/// Why a header was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// Fewer than [`HEADER_LEN`] bytes.
    Short(usize),
    /// The first byte is not [`MAGIC`].
    BadMagic(u8),
    /// Unknown kind byte.
    BadKind(u8),
    /// Context outside `0..contexts`.
    BadContext(u16),
    /// Reserved bytes are not zero.
    Reserved,
    /// An eager payload longer than `eager_max`.
    EagerTooLong {
        /// Announced length.
        len: u64,
        /// Limit.
        max: u64,
    },
    /// A payload longer than `msg_max`.
    TooLong {
        /// Announced length.
        len: u64,
        /// Limit.
        max: u64,
    },
}

impl core::fmt::Display for WireError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Short(n) => write!(f, "header too short: {n} bytes"),
            Self::BadMagic(b) => write!(f, "bad header magic {b:#04x}"),
            Self::BadKind(k) => write!(f, "unknown message kind {k}"),
            Self::BadContext(c) => write!(f, "unknown context {c}"),
            Self::Reserved => f.write_str("reserved header bytes are not zero"),
            Self::EagerTooLong { len, max } => {
                write!(f, "eager message of {len} bytes exceeds limit {max}")
            }
            Self::TooLong { len, max } => write!(f, "message of {len} bytes exceeds limit {max}"),
        }
    }
}

impl Header {
    /// A header of `kind` for a `len`-byte payload; `seq`, `credit` and
    /// `token` are zero.
    #[inline]
    pub const fn new(kind: Kind, context: u16, tag: u32, len: u64) -> Self {
        Self {
            magic: MAGIC,
            kind: kind as u8,
            context,
            tag,
            seq: 0,
            credit: 0,
            token: 0,
            len,
            ecredit: 0,
            reserved: [0; 6],
        }
    }

    /// The kind; valid on any header that came from [`decode`](Self::decode).
    #[inline]
    pub fn kind(&self) -> Kind {
        Kind::from_u8(self.kind).unwrap_or(Kind::Credit)
    }

    /// Little-endian encoding.
    #[inline]
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0] = self.magic;
        b[1] = self.kind;
        b[2..4].copy_from_slice(&self.context.to_le_bytes());
        b[4..8].copy_from_slice(&self.tag.to_le_bytes());
        b[8..10].copy_from_slice(&self.seq.to_le_bytes());
        b[10..12].copy_from_slice(&self.credit.to_le_bytes());
        b[12..16].copy_from_slice(&self.token.to_le_bytes());
        b[16..24].copy_from_slice(&self.len.to_le_bytes());
        b[24..26].copy_from_slice(&self.ecredit.to_le_bytes());
        b[26..32].copy_from_slice(&self.reserved);
        b
    }

    /// The encoding as four little-endian words (what
    /// [`encode`](Self::encode) writes, for a transport that stores words).
    #[inline(always)]
    pub const fn words(&self) -> [u64; 4] {
        [
            self.magic as u64
                | (self.kind as u64) << 8
                | (self.context as u64) << 16
                | (self.tag as u64) << 32,
            self.seq as u64 | (self.credit as u64) << 16 | (self.token as u64) << 32,
            self.len,
            self.ecredit as u64
                | (self.reserved[0] as u64) << 16
                | (self.reserved[1] as u64) << 24
                | (self.reserved[2] as u64) << 32
                | (self.reserved[3] as u64) << 40
                | (self.reserved[4] as u64) << 48
                | (self.reserved[5] as u64) << 56,
        ]
    }

    /// The short form (see the module's table) as two little-endian words,
    /// if this header has one: an eager header (not synchronous) with no
    /// token, no reserved bits and a payload of at most `u16::MAX` bytes.
    #[inline(always)]
    pub const fn short_words(&self) -> Option<[u64; 2]> {
        let r = self.reserved;
        if self.kind != Kind::Eager as u8
            || self.magic != MAGIC
            || self.token != 0
            || self.len > u16::MAX as u64
            || (r[0] | r[1] | r[2] | r[3] | r[4] | r[5]) != 0
        {
            return None;
        }
        Some([
            Self::short_word(self.context, self.tag),
            Self::short_second(self.seq, self.credit, self.ecredit, self.len as u16),
        ])
    }

    /// The first word of the short form of an eager header with `context`
    /// and `tag` ([`eager_word`](Self::eager_word) with [`SHORT_EAGER`]
    /// as the kind).
    #[inline(always)]
    pub const fn short_word(context: u16, tag: u32) -> u64 {
        MAGIC as u64 | (SHORT_EAGER as u64) << 8 | (context as u64) << 16 | (tag as u64) << 32
    }

    /// The second word of the short form: `seq`, `credit`, `ecredit`, `len`.
    #[inline(always)]
    pub const fn short_second(seq: u16, credit: u16, ecredit: u16, len: u16) -> u64 {
        seq as u64 | (credit as u64) << 16 | (ecredit as u64) << 32 | (len as u64) << 48
    }

    /// The header whose short form is `w0`, `w1`; `None` if `w0` does not
    /// start a short form (magic and kind). The header is not validated
    /// otherwise: [`decode`](Self::decode) its [`encode`](Self::encode)ing.
    #[inline]
    pub const fn from_short(w0: u64, w1: u64) -> Option<Self> {
        if w0 as u16 != (MAGIC as u16 | (SHORT_EAGER as u16) << 8) {
            return None;
        }
        Some(Self {
            magic: MAGIC,
            kind: Kind::Eager as u8,
            context: (w0 >> 16) as u16,
            tag: (w0 >> 32) as u32,
            seq: w1 as u16,
            credit: (w1 >> 16) as u16,
            token: 0,
            len: w1 >> 48,
            ecredit: (w1 >> 32) as u16,
            reserved: [0; 6],
        })
    }

    /// The header whose [`words`](Self::words) are `w`, field by field, not
    /// validated: [`decode`](Self::decode) checks a header from the wire.
    #[inline(always)]
    pub const fn from_words(w: [u64; 4]) -> Self {
        let r = (w[3] >> 16).to_le_bytes();
        Self {
            magic: w[0] as u8,
            kind: (w[0] >> 8) as u8,
            context: (w[0] >> 16) as u16,
            tag: (w[0] >> 32) as u32,
            seq: w[1] as u16,
            credit: (w[1] >> 16) as u16,
            token: (w[1] >> 32) as u32,
            len: w[2],
            ecredit: w[3] as u16,
            reserved: [r[0], r[1], r[2], r[3], r[4], r[5]],
        }
    }

    /// The first 8 encoded bytes of an eager header with `context` and
    /// `tag`, for [`decode_eager`](Self::decode_eager).
    #[inline]
    pub const fn eager_word(context: u16, tag: u32) -> u64 {
        MAGIC as u64 | (Kind::Eager as u64) << 8 | (context as u64) << 16 | (tag as u64) << 32
    }

    /// A receiver's shortcut: decodes `bytes` only if it is an eager header
    /// whose first 8 bytes are `word` (see [`eager_word`](Self::eager_word))
    /// with a valid length; the same checks as [`decode`](Self::decode) for
    /// that case, in a few compares.
    #[inline(always)]
    pub fn decode_eager(bytes: &[u8; 56], word: u64, eager_max: u64) -> Option<Self> {
        let w = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[i..i + 8]);
            u64::from_le_bytes(b)
        };
        let (w0, w1, len, w3) = (w(0), w(8), w(16), w(24));
        if w0 != word || len > eager_max || w3 >> 16 != 0 {
            return None;
        }
        Some(Self::from_words([w0, w1, len, w3]))
    }

    /// Parses and validates a header; never panics.
    ///
    /// # Errors
    /// The first check that fails, in this order: [`WireError::Short`] (fewer
    /// than [`HEADER_LEN`] bytes), [`WireError::BadMagic`] (the first byte is
    /// not [`MAGIC`]), [`WireError::BadKind`] (no [`Kind`] has the second
    /// byte), [`WireError::BadContext`] (a context not below
    /// `limits.contexts`), [`WireError::TooLong`] (a length above
    /// `limits.msg_max`), [`WireError::EagerTooLong`] (an eager kind longer
    /// than `limits.eager_max`), [`WireError::Reserved`] (a reserved byte that
    /// is not zero).
    #[inline]
    pub fn decode(bytes: &[u8], limits: &Limits) -> Result<Self, WireError> {
        let b: &[u8; HEADER_LEN] = bytes
            .get(..HEADER_LEN)
            .and_then(|s| s.try_into().ok())
            .ok_or(WireError::Short(bytes.len()))?;
        if b[0] != MAGIC {
            return Err(WireError::BadMagic(b[0]));
        }
        let kind = Kind::from_u8(b[1]).ok_or(WireError::BadKind(b[1]))?;
        let context = u16::from_le_bytes([b[2], b[3]]);
        if context >= limits.contexts {
            return Err(WireError::BadContext(context));
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let mut l = [0u8; 8];
        l.copy_from_slice(&b[16..24]);
        let len = u64::from_le_bytes(l);
        if len > limits.msg_max {
            return Err(WireError::TooLong {
                len,
                max: limits.msg_max,
            });
        }
        if kind.is_eager() && len > limits.eager_max {
            return Err(WireError::EagerTooLong {
                len,
                max: limits.eager_max,
            });
        }
        if b[26..32] != [0; 6] {
            return Err(WireError::Reserved);
        }
        Ok(Self {
            magic: MAGIC,
            kind: kind as u8,
            context,
            tag: u32_at(4),
            seq: u16_at(8),
            credit: u16_at(10),
            token: u32_at(12),
            len,
            ecredit: u16_at(24),
            reserved: [0; 6],
        })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const LIMITS: Limits = Limits {
        eager_max: 1024,
        msg_max: 1 << 32,
        contexts: 4,
    };

    #[test]
    fn the_short_form_is_only_for_plain_eager_headers_that_fit() {
        let mut h = Header::new(Kind::Eager, 3, 7, 40);
        (h.seq, h.credit, h.ecredit) = (9, 10, 11);
        let [w0, w1] = h.short_words().unwrap();
        assert_eq!(Header::from_short(w0, w1), Some(h));
        // Not a kind: the full decoder refuses a short form.
        let mut b = [0u8; HEADER_LEN];
        b[..8].copy_from_slice(&w0.to_le_bytes());
        assert_eq!(
            Header::decode(&b, &LIMITS),
            Err(WireError::BadKind(SHORT_EAGER))
        );
        assert_eq!(Header::from_short(h.words()[0], w1), None, "a full form");
        let with = |f: fn(&mut Header)| {
            let mut g = h;
            f(&mut g);
            g.short_words()
        };
        assert_eq!(with(|g| g.kind = Kind::EagerSync as u8), None);
        assert_eq!(with(|g| g.token = 1), None);
        assert_eq!(with(|g| g.len = 1 << 16), None);
        assert_eq!(with(|g| g.reserved[5] = 1), None);
        assert!(with(|g| g.len = u16::MAX as u64).is_some());
    }

    #[test]
    fn each_field_is_validated() {
        let good = Header::new(Kind::Rts, 3, 7, 1 << 20).encode();
        assert!(Header::decode(&good, &LIMITS).is_ok());
        let mut b = good;
        b[0] = 0;
        assert_eq!(Header::decode(&b, &LIMITS), Err(WireError::BadMagic(0)));
        let mut b = good;
        b[1] = 9;
        assert_eq!(Header::decode(&b, &LIMITS), Err(WireError::BadKind(9)));
        let mut b = good;
        b[31] = 1;
        assert_eq!(Header::decode(&b, &LIMITS), Err(WireError::Reserved));
        let mut b = good;
        b[2] = 4;
        assert_eq!(Header::decode(&b, &LIMITS), Err(WireError::BadContext(4)));
        let big = Header::new(Kind::Rts, 0, 0, (1 << 32) + 1).encode();
        assert!(matches!(
            Header::decode(&big, &LIMITS),
            Err(WireError::TooLong { .. })
        ));
        for k in [Kind::Eager, Kind::EagerSync] {
            let eager = Header::new(k, 0, 0, 1025).encode();
            assert!(matches!(
                Header::decode(&eager, &LIMITS),
                Err(WireError::EagerTooLong { .. })
            ));
        }
        assert_eq!(
            Header::decode(&good[..31], &LIMITS),
            Err(WireError::Short(31))
        );
    }

    #[test]
    fn the_eager_shortcut_agrees_with_decode() {
        let h = Header {
            seq: 9,
            credit: 7,
            token: 5,
            ecredit: 3,
            ..Header::new(Kind::Eager, 2, 77, 20)
        };
        let mut line = [0u8; 56];
        line[..HEADER_LEN].copy_from_slice(&h.encode());
        let w = Header::eager_word(2, 77);
        assert_eq!(Header::decode_eager(&line, w, 1024), Some(h));
        assert_eq!(Header::decode_eager(&line, w, 19), None, "too long");
        assert_eq!(
            Header::decode_eager(&line, Header::eager_word(2, 78), 1024),
            None
        );
        line[30] = 1;
        assert_eq!(Header::decode_eager(&line, w, 1024), None, "reserved bytes");
    }

    fn kinds() -> impl Strategy<Value = Kind> {
        (1u8..=8).prop_map(|k| Kind::from_u8(k).unwrap())
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(
            mut bytes in proptest::collection::vec(any::<u8>(), 0..40),
            plausible: bool,
        ) {
            // Half the inputs get a valid magic, kind, context, a length
            // below 2^32 and zero reserved bytes, so that decoding often
            // succeeds and the remaining fields are what is random.
            if plausible && bytes.len() >= HEADER_LEN {
                bytes[0] = MAGIC;
                bytes[1] = bytes[1] % 7 + 1;
                bytes[2] %= 4;
                bytes[3] = 0;
                bytes[20..24].fill(0);
                bytes[26..32].fill(0);
            }
            if let Ok(h) = Header::decode(&bytes, &LIMITS) {
                // Whatever decodes re-encodes to the same bytes.
                prop_assert_eq!(&h.encode()[..], &bytes[..HEADER_LEN]);
                prop_assert!(h.len <= LIMITS.msg_max);
            }
        }

        #[test]
        fn round_trip(kind in kinds(), ctx in 0u16..4, tag: u32, seq: u16, credit: u16,
                      token: u32, len in 0u64..1024, ecredit: u16) {
            let h = Header { seq, credit, token, ecredit, ..Header::new(kind, ctx, tag, len) };
            prop_assert_eq!(Header::decode(&h.encode(), &LIMITS), Ok(h));
        }

        #[test]
        fn short_forms_round_trip(ctx: u16, tag: u32, seq: u16, credit: u16, ecredit: u16,
                                  len: u16) {
            let mut h = Header::new(Kind::Eager, ctx, tag, len as u64);
            (h.seq, h.credit, h.ecredit) = (seq, credit, ecredit);
            let [w0, w1] = h.short_words().unwrap();
            prop_assert_eq!(w0, Header::short_word(ctx, tag));
            prop_assert_eq!(Header::from_short(w0, w1), Some(h));
        }

        #[test]
        fn words_round_trip(w0: u64, w1: u64, w2: u64, w3: u64) {
            prop_assert_eq!(Header::from_words([w0, w1, w2, w3]).words(), [w0, w1, w2, w3]);
        }

        #[test]
        fn words_are_the_encoding(kind in kinds(), ctx: u16, tag: u32, seq: u16, credit: u16,
                                  token: u32, len: u64, ecredit: u16, reserved: [u8; 6]) {
            let h = Header { seq, credit, token, ecredit, reserved, ..Header::new(kind, ctx, tag, len) };
            let mut b = [0u8; HEADER_LEN];
            for (d, w) in b.chunks_exact_mut(8).zip(h.words()) {
                d.copy_from_slice(&w.to_le_bytes());
            }
            prop_assert_eq!(b, h.encode());
        }
    }
}
