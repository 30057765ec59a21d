//! Views of user buffers recorded when an operation is posted.
//!
//! This is the one place the progress layer turns a raw pointer back into
//! a slice. The argument for why that is sound lives in the parent
//! module's docs: every operation is waited for or withdrawn before the
//! borrow its buffer came from ends, and the record is cleared then.

/// An operation's buffer and bookkeeping.
#[derive(Clone, Copy)]
pub(crate) struct UserBuf {
    ptr: *mut u8,
    len: usize,
    /// Payload bytes moved so far (the progress measure for timeouts).
    pub(crate) moved: usize,
    /// The scope the operation belongs to (0: none).
    pub(crate) scope: u32,
    /// How many times a transport registered the buffer for a rendezvous
    /// (each needs one `Transport::release`), and with which peer.
    pub(crate) regs: u32,
    pub(crate) reg_peer: u32,
    /// What was registered: bytes from the start, and whether writable.
    pub(crate) reg_len: usize,
    pub(crate) reg_writable: bool,
    /// The receive matched a message its sender did not finish writing
    /// (it died or stopped in the middle): it fails instead of completing.
    pub(crate) torn: bool,
}

impl UserBuf {
    /// No buffer.
    pub(crate) const EMPTY: UserBuf = UserBuf {
        ptr: std::ptr::null_mut(),
        len: 0,
        moved: 0,
        scope: 0,
        regs: 0,
        reg_peer: 0,
        reg_len: 0,
        reg_writable: false,
        torn: false,
    };

    /// Records a send buffer (only ever read).
    pub(crate) fn send(buf: &[u8], scope: u32) -> Self {
        Self {
            ptr: buf.as_ptr() as *mut u8,
            len: buf.len(),
            moved: 0,
            scope,
            regs: 0,
            reg_peer: 0,
            reg_len: 0,
            reg_writable: false,
            torn: false,
        }
    }

    /// Records a receive buffer.
    pub(crate) fn recv(buf: &mut [u8], scope: u32) -> Self {
        Self {
            ptr: buf.as_mut_ptr(),
            len: buf.len(),
            moved: 0,
            scope,
            regs: 0,
            reg_peer: 0,
            reg_len: 0,
            reg_writable: false,
            torn: false,
        }
    }

    /// The buffer's address.
    pub(crate) fn addr(&self) -> u64 {
        self.ptr as u64
    }

    /// Whether the slot holds no user buffer any more (its operation was
    /// withdrawn, or the slot is free): nothing may be read or written.
    pub(crate) fn is_gone(&self) -> bool {
        self.ptr.is_null()
    }

    /// The user's buffer as bytes to read.
    ///
    /// # Safety
    /// The op must be pending and not abandoned; its buffer borrow is then
    /// alive (see module docs) and nothing writes it during the engine call.
    pub(crate) unsafe fn src<'b>(&self) -> &'b [u8] {
        // An empty buffer keeps its address (a zero-length slice at a
        // non-null pointer is valid), so what is described for a peer and
        // what is released later agree.
        if self.ptr.is_null() {
            return &[];
        }
        // SAFETY: per the function contract.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The user's buffer as bytes to write.
    ///
    /// # Safety
    /// As for [`UserBuf::src`], and the op is a receive (an exclusive borrow).
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn dst<'b>(&self) -> &'b mut [u8] {
        if self.ptr.is_null() {
            return &mut [];
        }
        // SAFETY: per the function contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

// SAFETY: the raw pointer is only dereferenced inside engine calls, which
// the owning `Comm` serialises behind a lock; the buffer it points to is
// kept alive by the borrow rules of `Comm` and `Scope`.
unsafe impl Send for UserBuf {}
