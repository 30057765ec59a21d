//! Collective operations.
//!
//! Every intracommunicator runs tandem's own collectives wherever they
//! apply ([`CommObj::tc`]: on its point-to-point driver communicator for
//! the whole job in job order, on the driver's communicator of its
//! members for any other): barrier, broadcast, allgather and alltoall on
//! any data (as bytes), and reduce, allreduce and reduce-scatter on the
//! element types and operators tandem reduces (integers of 8, 32 and 64
//! bits, `float`, `double`, `_Float16`; sum, product, min, max and the
//! bitwise ones); their non-blocking forms on tandem's non-blocking
//! engine. Everything else — intercommunicators, other types and operators
//! (pairs with `MINLOC`, logical operators, user operators,
//! non-commutative ones in rank order), the v-variants, gather, scatter and
//! scans — runs on the MPI layer's own algorithms over tandem's
//! point-to-point calls, in the communicator's second context so they
//! never meet the program's messages.

use crate::abi::{self, Handle};
use crate::datatype::basic_of;
use crate::p2p::{in_view, out_view, type_fail, unstage};
use crate::state::{CommObj, Fail, Lib, Req, Staged};
use crate::{count, export, fail, put, run, set};
use std::ffi::{c_int, c_void};
use tandem_driver::{f16, ReduceOp};

/// Tags of the MPI layer's own collective traffic (one context per
/// communicator, FIFO between two ranks: calls in the same order match).
const T_BARRIER: u32 = 1;
const T_BCAST: u32 = 2;
const T_REDUCE: u32 = 3;
const T_GATHER: u32 = 4;
const T_SCATTER: u32 = 5;
const T_ALLTOALL: u32 = 6;
const T_SCAN: u32 = 7;
/// Intercommunicators' traffic across (`inter.rs`): context agreement, a
/// barrier, the collectives below and the block exchanges of
/// `topo::blocks_w` (above the neighbourhood collectives' 64 + 2 per
/// dimension).
pub(crate) const T_INTER: u32 = 1 << 20;
pub(crate) const T_INTER_BARRIER: u32 = T_INTER + 1;
const T_INTER_BCAST: u32 = T_INTER + 2;
const T_INTER_REDUCE: u32 = T_INTER + 3;
pub(crate) const T_INTER_BLOCKS: u32 = T_INTER + 4;

/// A datatype's size and extent.
#[derive(Clone, Copy)]
struct Ty {
    size: usize,
    extent: usize,
}

#[inline(always)]
fn ty(l: &Lib, dt: Handle) -> Result<Ty, Fail> {
    if let Some(sz) = abi::builtin_size(dt) {
        if sz > 0 && dt != abi::LB && dt != abi::UB {
            return Ok(Ty {
                size: sz,
                extent: sz,
            });
        }
    }
    let info = l.types.borrow().info(dt).map_err(|c| type_fail(c, dt))?;
    Ok(Ty {
        size: info.size,
        extent: info.extent.max(0) as usize,
    })
}

/// The element count of a buffer of `blocks` blocks of `each` elements,
/// as the views take it (a C int).
///
/// # Errors
/// `MPI_ERR_COUNT` past 2^31 - 1 elements: the product of valid counts,
/// which this library cannot view as one buffer (it never wraps).
fn elements(blocks: usize, each: usize) -> Result<c_int, Fail> {
    blocks
        .checked_mul(each)
        .and_then(|n| c_int::try_from(n).ok())
        .ok_or_else(|| {
            Fail::new(
                abi::ERR_COUNT,
                format!("{blocks} blocks of {each} elements: more than one buffer takes here (2^31 - 1 elements)"),
            )
        })
}

pub(crate) fn is_in_place(p: *const c_void) -> bool {
    p as usize == abi::IN_PLACE
}

/// A reduction's send buffer off the root: `MPI_IN_PLACE` is the root's
/// alone (MPICH refuses it too).
fn send_buffer_off_root(s: *const c_void, at_root: bool) -> Result<(), Fail> {
    if !at_root && is_in_place(s) {
        return fail(
            abi::ERR_BUFFER,
            "MPI_IN_PLACE as the send buffer of a rank that is not the root",
        );
    }
    Ok(())
}

/// Refuses a send buffer that is the receive buffer, or the place in it
/// where this rank's own data goes (`at`): MPI forbids aliased arguments,
/// and `MPI_IN_PLACE` says that instead. Checked, as MPICH does, by
/// address when the rank has data to move (`data`) and neither buffer is
/// `MPI_BOTTOM` (whose types may address disjoint memory).
fn not_aliased(s: *const c_void, at: *const c_void, data: bool, call: &str) -> Result<(), Fail> {
    if data && !is_in_place(s) && !s.is_null() && std::ptr::eq(s, at) {
        return fail(
            abi::ERR_BUFFER,
            format!("{call}: the send and receive buffers are one (aliased); use MPI_IN_PLACE"),
        );
    }
    Ok(())
}

/// `base` moved by `k` elements of `extent` bytes: where a block of a
/// buffer starts (the pointer is compared, never read through).
fn block_at(base: *const c_void, k: isize, extent: usize) -> *const c_void {
    base.cast::<u8>()
        .wrapping_offset(k.wrapping_mul(extent as isize))
        .cast()
}

fn root_of(c: &CommObj, root: c_int) -> Result<usize, Fail> {
    if root < 0 || root as usize >= c.size() {
        return fail(
            abi::ERR_ROOT,
            format!("invalid root {root} in a communicator of {}", c.size()),
        );
    }
    Ok(root as usize)
}

// --- The MPI layer's point-to-point steps (member ranks). ---

fn g_send(c: &CommObj, to: usize, b: &[u8], tag: u32) -> Result<(), Fail> {
    c.coll.send(b, c.job_rank(to), tag)?;
    Ok(())
}

fn g_recv(c: &CommObj, from: usize, b: &mut [u8], tag: u32) -> Result<usize, Fail> {
    let st = c.coll.recv(b, c.job_rank(from), tag)?;
    Ok(st.len)
}

fn g_sendrecv(
    c: &CommObj,
    to: usize,
    s: &[u8],
    from: usize,
    r: &mut [u8],
    tag: u32,
) -> Result<(), Fail> {
    c.coll
        .sendrecv(s, c.job_rank(to), tag, r, c.job_rank(from), tag)?;
    Ok(())
}

/// Dissemination barrier.
pub(crate) fn g_barrier(c: &CommObj) -> Result<(), Fail> {
    let (n, me) = (c.size(), c.rank);
    let mut k = 1;
    while k < n {
        g_sendrecv(c, (me + k) % n, &[], (me + n - k) % n, &mut [], T_BARRIER)?;
        k *= 2;
    }
    Ok(())
}

/// Binomial-tree broadcast of bytes from `root`.
pub(crate) fn g_bcast(c: &CommObj, buf: &mut [u8], root: usize) -> Result<(), Fail> {
    let (n, me) = (c.size(), c.rank);
    let rel = (me + n - root) % n;
    let mut mask = 1;
    while mask < n {
        if rel & mask != 0 {
            g_recv(c, (me + n - mask) % n, buf, T_BCAST)?;
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if rel + mask < n {
            g_send(c, (me + mask) % n, buf, T_BCAST)?;
        }
        mask >>= 1;
    }
    Ok(())
}

/// Reduces `acc` (the packed bytes of `n_el` elements of `t`) onto member
/// 0 in rank order (`acc` = x0 op x1 op … op xn-1 there), for any
/// operator, commutative or not.
fn g_reduce0(
    l: &Lib,
    c: &CommObj,
    acc: &mut Vec<u8>,
    op: Handle,
    t: RedType,
    n_el: usize,
) -> Result<(), Fail> {
    let (n, me) = (c.size(), c.rank);
    let mut tmp = vec![0u8; acc.len()];
    let mut mask = 1;
    while mask < n {
        if me & mask != 0 {
            g_send(c, me - mask, acc, T_REDUCE)?;
            return Ok(());
        }
        if me + mask < n {
            g_recv(c, me + mask, &mut tmp, T_REDUCE)?;
            // acc covers lower ranks than tmp: acc op tmp, MPI's order
            // being inout = in op inout.
            t.apply(l, op, n_el, acc, &mut tmp)?;
            std::mem::swap(acc, &mut tmp);
        }
        mask <<= 1;
    }
    Ok(())
}

/// `inout = in op inout` for `n` elements of `dt`.
pub(crate) fn apply(
    l: &Lib,
    op: Handle,
    dt: Handle,
    n: usize,
    inp: *const u8,
    inout: *mut u8,
) -> Result<(), Fail> {
    // A user's function runs with no table borrowed: it may call the
    // library (free a datatype, create an operation) as MPI allows.
    let user = l.ops.borrow().user_call(op);
    if let Some(f) = user {
        let extent = l
            .types
            .borrow()
            .info(dt)
            .map_err(|c| type_fail(c, dt))?
            .extent;
        // SAFETY: both buffers hold `n` elements of `dt` in its layout.
        unsafe { f.call(dt, extent, n, inp, inout) };
        return Ok(());
    }
    let ops = l.ops.borrow();
    let types = l.types.borrow();
    // SAFETY: both buffers hold `n` elements of `dt` in its layout.
    unsafe { ops.apply(op, &types, dt, n, inp, inout) }.map_err(|class| op_fail(class, op, dt))
}

fn op_fail(class: c_int, op: Handle, dt: Handle) -> Fail {
    if class == abi::ERR_OP {
        Fail::new(
            class,
            format!("operation {op:#x} is invalid or does not apply to datatype {dt:#x}"),
        )
    } else {
        Fail::new(class, format!("reduction of datatype {dt:#x} failed"))
    }
}

/// Checks an operation and datatype before any traffic.
pub(crate) fn check_op(l: &Lib, op: Handle, dt: Handle) -> Result<(), Fail> {
    ty(l, dt)?;
    if !l.ops.borrow().is_valid(op) {
        return fail(abi::ERR_OP, format!("invalid operation handle {op:#x}"));
    }
    if op >> 24 == 0x58 {
        let basic = l
            .types
            .borrow()
            .info(dt)
            .map_err(|c| type_fail(c, dt))?
            .basic
            .map(|b| b.0);
        if !basic.is_some_and(|b| crate::op::builtin_applies(op, b)) {
            return fail(
                abi::ERR_OP,
                format!("operation {op:#x} does not apply to datatype {dt:#x}"),
            );
        }
    }
    Ok(())
}

/// How the general reduction path holds the data of `n` elements of a
/// datatype: as their `n * size` packed bytes, which is what travels
/// between ranks. For a predefined or contiguous derived type the packed
/// bytes are the buffer's own; for any other committed type (holes, a
/// lower bound, a resized extent, absolute addresses at `MPI_BOTTOM`) the
/// data is packed on the way in, unpacked on the way out, and unpacked
/// into scratch buffers of the type's layout for each application of the
/// operation, so that predefined and user operations see the layout MPI
/// gives them and nothing outside the type map is read or written.
#[derive(Clone, Copy)]
struct RedType {
    dt: Handle,
    size: usize,
    /// The packed bytes are the buffer's bytes.
    contiguous: bool,
    extent: isize,
    true_lb: isize,
    true_extent: isize,
}

impl RedType {
    /// The reduction datatype `dt`.
    ///
    /// # Errors
    /// `MPI_ERR_TYPE` for an invalid or uncommitted type.
    fn of(l: &Lib, dt: Handle) -> Result<Self, Fail> {
        let t = ty(l, dt)?;
        let predefined = crate::datatype::is_predefined(dt);
        // A predefined type without holes (not, say, MPI_SHORT_INT).
        if predefined && t.size == t.extent {
            return Ok(RedType {
                dt,
                size: t.size,
                contiguous: true,
                extent: t.extent as isize,
                true_lb: 0,
                true_extent: t.extent as isize,
            });
        }
        let info = l.types.borrow().info(dt).map_err(|c| type_fail(c, dt))?;
        if !info.committed && !predefined {
            return fail(abi::ERR_TYPE, format!("datatype {dt:#x} is not committed"));
        }
        Ok(RedType {
            dt,
            size: info.size,
            contiguous: info.contiguous,
            extent: info.extent,
            true_lb: info.true_lb,
            true_extent: info.true_extent,
        })
    }

    /// The packed bytes of `n` elements.
    fn packed_len(&self, n: usize) -> Result<usize, Fail> {
        self.size
            .checked_mul(n)
            .filter(|&b| b <= isize::MAX as usize)
            .ok_or_else(|| Fail::new(abi::ERR_COUNT, format!("{n} elements overflow")))
    }

    /// The packed bytes of `n` elements at `p`.
    ///
    /// # Errors
    /// `MPI_ERR_BUFFER` for a null buffer (`MPI_BOTTOM`) holding data of a
    /// contiguous type; `MPI_ERR_COUNT` when the size overflows.
    ///
    /// # Safety
    /// `p` holds `n` readable elements of the type.
    unsafe fn load(&self, l: &Lib, p: *const c_void, n: usize) -> Result<Vec<u8>, Fail> {
        let len = self.packed_len(n)?;
        if len == 0 {
            return Ok(Vec::new());
        }
        if self.contiguous {
            if p.is_null() {
                return fail(
                    abi::ERR_BUFFER,
                    "a reduction's buffer is null (MPI_BOTTOM) but holds data",
                );
            }
            // SAFETY: the program's buffer of `n` elements, `len` bytes.
            return Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) }.to_vec());
        }
        let mut out = vec![0u8; len];
        // SAFETY: the caller's buffer of `n` elements of the type.
        unsafe { l.types.borrow().pack(self.dt, n, p.cast(), &mut out) }
            .map_err(|c| type_fail(c, self.dt))?;
        Ok(out)
    }

    /// Writes the packed bytes of `n` elements into the buffer at `p`.
    ///
    /// # Safety
    /// `p` holds `n` writable elements of the type.
    unsafe fn store(&self, l: &Lib, bytes: &[u8], n: usize, p: *mut c_void) -> Result<(), Fail> {
        if bytes.is_empty() {
            return Ok(());
        }
        if self.contiguous {
            // SAFETY: the receive buffer of `n` elements, `bytes.len()` bytes.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p.cast(), bytes.len()) };
            return Ok(());
        }
        // SAFETY: the caller's buffer of `n` elements of the type.
        unsafe { l.types.borrow().unpack(self.dt, n, bytes, p.cast()) }
            .map(|_| ())
            .map_err(|c| type_fail(c, self.dt))
    }

    /// A scratch buffer spanning the data of `n` (> 0) elements in the
    /// type's layout, and where element 0's address lies relative to the
    /// buffer's start (element `i`'s data is at `true_lb + i * extent`
    /// from that address).
    fn scratch(&self, n: usize) -> Result<(Vec<u8>, isize), Fail> {
        let over = || Fail::new(abi::ERR_COUNT, format!("{n} elements overflow"));
        let last = isize::try_from(n.saturating_sub(1))
            .ok()
            .and_then(|k| k.checked_mul(self.extent))
            .ok_or_else(over)?;
        let lo = self.true_lb.checked_add(last.min(0)).ok_or_else(over)?;
        let hi = self
            .true_lb
            .checked_add(self.true_extent)
            .and_then(|h| h.checked_add(last.max(0)))
            .ok_or_else(over)?;
        let span = hi
            .checked_sub(lo)
            .and_then(|d| usize::try_from(d).ok())
            .ok_or_else(over)?;
        Ok((vec![0u8; span], -lo))
    }

    /// `inout = in op inout` on the packed bytes of `n` elements.
    fn apply(
        &self,
        l: &Lib,
        op: Handle,
        n: usize,
        inp: &[u8],
        inout: &mut [u8],
    ) -> Result<(), Fail> {
        if n == 0 || inout.is_empty() {
            return Ok(());
        }
        if self.contiguous {
            return apply(l, op, self.dt, n, inp.as_ptr(), inout.as_mut_ptr());
        }
        let (mut a, at) = self.scratch(n)?;
        let (mut b, _) = self.scratch(n)?;
        let (pa, pb) = (
            a.as_mut_ptr().wrapping_offset(at),
            b.as_mut_ptr().wrapping_offset(at),
        );
        let types = |c| type_fail(c, self.dt);
        // SAFETY: each scratch buffer spans the data of `n` elements
        // placed at `pa`/`pb` (`scratch`); the packed slices hold them.
        unsafe {
            l.types
                .borrow()
                .unpack(self.dt, n, inp, pa)
                .map_err(types)?;
            l.types
                .borrow()
                .unpack(self.dt, n, inout, pb)
                .map_err(types)?;
        }
        apply(l, op, self.dt, n, pa, pb)?;
        // SAFETY: as above; `inout` holds the packed bytes of `n` elements.
        unsafe { l.types.borrow().pack(self.dt, n, pb, inout) }.map_err(types)?;
        Ok(())
    }
}

/// tandem's own reduction of predefined type `dt` with predefined `op`,
/// where it has one and the operator applies to the type (elsewhere the
/// general path, which refuses an operator that does not apply with
/// `MPI_ERR_OP`).
fn native(dt: Handle, op: Handle) -> Option<(El, ReduceOp)> {
    let b = crate::datatype::basic_of(dt)?;
    if !crate::op::builtin_applies(op, b) {
        return None;
    }
    tandem_el(dt).zip(tandem_op(op))
}

/// tandem's reduction for a predefined type and operator, if it has one.
fn tandem_op(op: Handle) -> Option<ReduceOp> {
    Some(match op {
        abi::SUM => ReduceOp::Sum,
        abi::PROD => ReduceOp::Prod,
        abi::MIN => ReduceOp::Min,
        abi::MAX => ReduceOp::Max,
        abi::BAND => ReduceOp::BitAnd,
        abi::BOR => ReduceOp::BitOr,
        abi::BXOR => ReduceOp::BitXor,
        _ => return None,
    })
}

/// The element types tandem reduces.
#[derive(Clone, Copy)]
enum El {
    I8,
    U8,
    I32,
    U32,
    I64,
    U64,
    F32,
    F64,
    F16,
}

fn tandem_el(dt: Handle) -> Option<El> {
    use crate::datatype::Basic as B;
    if abi::builtin_size(dt).is_none()
        || dt == abi::BYTE
        || dt == abi::PACKED
        || dt == abi::C_BOOL
        || dt == abi::CXX_BOOL
    {
        return None;
    }
    Some(match basic_of(dt)? {
        B::I8 => El::I8,
        B::U8 => El::U8,
        B::I32 => El::I32,
        B::U32 => El::U32,
        B::I64 => El::I64,
        B::U64 => El::U64,
        B::F32 => El::F32,
        B::F64 => El::F64,
        B::F16 => El::F16,
        _ => return None,
    })
}

/// Runs `f` with the element type of `el`.
macro_rules! with_el {
    ($el:expr, $T:ident => $body:expr) => {
        match $el {
            El::I8 => {
                type $T = i8;
                $body
            }
            El::U8 => {
                type $T = u8;
                $body
            }
            El::I32 => {
                type $T = i32;
                $body
            }
            El::U32 => {
                type $T = u32;
                $body
            }
            El::I64 => {
                type $T = i64;
                $body
            }
            El::U64 => {
                type $T = u64;
                $body
            }
            El::F32 => {
                type $T = f32;
                $body
            }
            El::F64 => {
                type $T = f64;
                $body
            }
            El::F16 => {
                type $T = f16;
                $body
            }
        }
    };
}

/// A typed slice over the program's buffer.
unsafe fn sl<'a, T>(p: *const c_void, n: usize) -> &'a [T] {
    if n == 0 {
        return &[];
    }
    // SAFETY: the program's buffer of `n` elements (MPI's contract); MPI
    // buffers of predefined types are aligned for them.
    unsafe { std::slice::from_raw_parts(p.cast(), n) }
}

unsafe fn sl_mut<'a, T>(p: *mut c_void, n: usize) -> &'a mut [T] {
    if n == 0 {
        return &mut [];
    }
    // SAFETY: as in `sl`.
    unsafe { std::slice::from_raw_parts_mut(p.cast(), n) }
}

/// Whether `p` is aligned for elements of `size` bytes.
fn aligned(p: *const c_void, size: usize) -> bool {
    size == 0 || (p as usize) % size == 0
}

/// tandem's allreduce, where it applies: `Some(result)`.
unsafe fn fast_allreduce(
    c: &CommObj,
    s: *const c_void,
    r: *mut c_void,
    n: usize,
    dt: Handle,
    op: Handle,
) -> Option<Result<(), Fail>> {
    let (el, rop) = native(dt, op)?;
    let e = match c.tc() {
        Ok(Some(e)) => e,
        Ok(None) => return None,
        Err(f) => return Some(Err(f.into())),
    };
    Some(with_el!(el, T => allreduce_t::<T>(&e, s, r, n, rop)).map_err(Fail::from))
}

/// tandem's allreduce on `n` elements of `T` (`s` may be `MPI_IN_PLACE`).
fn allreduce_t<T: tandem_driver::Element>(
    e: &tandem_driver::Comm,
    s: *const c_void,
    r: *mut c_void,
    n: usize,
    rop: ReduceOp,
) -> tandem_driver::Result<()> {
    // SAFETY: the program's buffers of `n` elements, as MPI_Allreduce's
    // contract gives them; unaligned ones are copied.
    unsafe {
        if is_in_place(s) {
            with_aligned_out::<T, _>(r, n, true, |b| e.allreduce_in_place::<T>(b, rop))
        } else {
            let src = aligned_in::<T>(s, n);
            with_aligned_out::<T, _>(r, n, false, |b| e.allreduce::<T>(&src, b, rop))
        }
    }
}

/// `n` elements of `T` at `p`, borrowed if aligned, else copied.
unsafe fn aligned_in<'a, T: tandem_driver::Element>(
    p: *const c_void,
    n: usize,
) -> std::borrow::Cow<'a, [T]> {
    if aligned(p, std::mem::align_of::<T>()) {
        // SAFETY: the caller's buffer of `n` aligned elements.
        return std::borrow::Cow::Borrowed(unsafe { sl(p, n) });
    }
    let mut v = vec![T::zeroed(); n];
    if n > 0 {
        // SAFETY: the caller's buffer of `n` elements, read as bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                p.cast::<u8>(),
                v.as_mut_ptr().cast::<u8>(),
                n * std::mem::size_of::<T>(),
            )
        };
    }
    std::borrow::Cow::Owned(v)
}

/// Runs `f` on the `n` elements of `T` at `p` (filled from `p` if
/// `copy_in`), through an aligned copy written back if `p` is unaligned.
unsafe fn with_aligned_out<T: tandem_driver::Element, R>(
    p: *mut c_void,
    n: usize,
    copy_in: bool,
    f: impl FnOnce(&mut [T]) -> R,
) -> R {
    if n == 0 || aligned(p, std::mem::align_of::<T>()) {
        // SAFETY: the caller's buffer of `n` aligned elements.
        return f(unsafe { sl_mut(p, n) });
    }
    let bytes = n * std::mem::size_of::<T>();
    let mut v = vec![T::zeroed(); n];
    if copy_in {
        // SAFETY: the caller's buffer of `n` elements, read as bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(p.cast::<u8>(), v.as_mut_ptr().cast::<u8>(), bytes)
        };
    }
    let r = f(&mut v);
    // SAFETY: as above, written back.
    unsafe { std::ptr::copy_nonoverlapping(v.as_ptr().cast::<u8>(), p.cast::<u8>(), bytes) };
    r
}

fn allreduce(
    l: &Lib,
    s: *const c_void,
    r: *mut c_void,
    n: c_int,
    dt: Handle,
    op: Handle,
    comm: Handle,
) -> Result<(), Fail> {
    let c = l.any_comm(comm)?;
    if c.remote.is_some() {
        return inter_allreduce(l, &c, s, r, n, dt, op);
    }
    let n = count(n)?;
    not_aliased(s, r, n > 0, "MPI_Allreduce")?;
    if n == 0 {
        // Nothing to reduce, but the arguments are still checked.
        check_op(l, op, dt)?;
        return Ok(());
    }
    // SAFETY: the program's buffers.
    if let Some(res) = unsafe { fast_allreduce(&c, s, r, n, dt, op) } {
        return res;
    }
    check_op(l, op, dt)?;
    let t = RedType::of(l, dt)?;
    let src = if is_in_place(s) { r.cast_const() } else { s };
    // SAFETY: the program's buffer of `n` elements.
    let mut acc = unsafe { t.load(l, src, n) }?;
    g_reduce0(l, &c, &mut acc, op, t, n)?;
    g_bcast(&c, &mut acc, 0)?;
    // SAFETY: the receive buffer holds n elements of the type.
    unsafe { t.store(l, &acc, n, r) }
}

/// tandem's reduce on `n` elements of `T` to `root`.
fn reduce_t<T: tandem_driver::Element>(
    e: &tandem_driver::Comm,
    s: *const c_void,
    r: *mut c_void,
    n: usize,
    rop: ReduceOp,
    root: usize,
) -> tandem_driver::Result<()> {
    // SAFETY: the program's buffers of `n` elements (the receive buffer only
    // on the root), as MPI_Reduce's contract gives them; unaligned ones are
    // copied.
    unsafe {
        if e.rank() == root && is_in_place(s) {
            with_aligned_out::<T, _>(r, n, true, |b| e.reduce_in_place::<T>(b, rop, root))
        } else if e.rank() == root {
            let src = aligned_in::<T>(s, n);
            with_aligned_out::<T, _>(r, n, false, |b| e.reduce::<T>(&src, b, rop, root))
        } else {
            let src = aligned_in::<T>(s, n);
            let mut none: [T; 0] = [];
            e.reduce::<T>(&src, &mut none, rop, root)
        }
    }
}

fn reduce(
    l: &Lib,
    s: *const c_void,
    r: *mut c_void,
    n: c_int,
    dt: Handle,
    op: Handle,
    root: c_int,
    comm: Handle,
) -> Result<(), Fail> {
    let c = l.any_comm(comm)?;
    if c.remote.is_some() {
        return inter_reduce(l, &c, s, r, n, dt, op, root);
    }
    let root = root_of(&c, root)?;
    send_buffer_off_root(s, c.rank == root)?;
    let n = count(n)?;
    not_aliased(s, r, n > 0 && c.rank == root, "MPI_Reduce")?;
    if n == 0 {
        check_op(l, op, dt)?;
        return Ok(());
    }
    let me = c.rank;
    if let Some(e) = c.tc()? {
        // The same choice on every rank (whatever their buffers' alignment).
        if let Some((el, rop)) = native(dt, op) {
            return with_el!(el, T => reduce_t::<T>(&e, s, r, n, rop, root)).map_err(Fail::from);
        }
    }
    check_op(l, op, dt)?;
    let t = RedType::of(l, dt)?;
    let src = if is_in_place(s) && me == root {
        r.cast_const()
    } else {
        s
    };
    // SAFETY: the program's buffer of `n` elements.
    let mut acc = unsafe { t.load(l, src, n) }?;
    g_reduce0(l, &c, &mut acc, op, t, n)?;
    if root != 0 {
        if me == 0 {
            g_send(&c, root, &acc, T_REDUCE)?;
        } else if me == root {
            g_recv(&c, 0, &mut acc, T_REDUCE)?;
        }
    }
    if me == root {
        // SAFETY: the root's receive buffer of n elements.
        unsafe { t.store(l, &acc, n, r) }?;
    }
    Ok(())
}

fn bcast(
    l: &Lib,
    buf: *mut c_void,
    n: c_int,
    dt: Handle,
    root: c_int,
    comm: Handle,
) -> Result<(), Fail> {
    let c = l.any_comm(comm)?;
    if c.remote.is_some() {
        return inter_bcast(l, &c, buf, n, dt, root);
    }
    let root = root_of(&c, root)?;
    let me = c.rank;
    if me == root {
        let out = out_view(l, buf, n, dt)?;
        if out.packed.is_none() {
            // SAFETY: the root's buffer, read only by a broadcast.
            let b = unsafe { std::slice::from_raw_parts_mut(out.ptr.cast_mut(), out.len) };
            return bcast_bytes(&c, b, root);
        }
        let mut v = out.packed.expect("checked");
        bcast_bytes(&c, &mut v, root)
    } else {
        let mut inb = in_view(l, buf, n, dt)?;
        bcast_bytes(&c, inb.bytes(), root)?;
        if let Some(u) = &inb.stage {
            unstage(l, u, u.staged.len())?;
        }
        Ok(())
    }
}

/// An intercommunicator collective's `root`: `None` for `MPI_PROC_NULL`
/// (a rank of the root's group other than the root), `Some(None)` for
/// `MPI_ROOT` (the root), `Some(Some(r))` for rank `r` of the remote group
/// (a rank of the other group).
pub(crate) fn inter_root(c: &CommObj, root: c_int) -> Result<Option<Option<usize>>, Fail> {
    match root {
        abi::PROC_NULL => Ok(None),
        abi::ROOT => Ok(Some(None)),
        r if r >= 0 && (r as usize) < c.peers() => Ok(Some(Some(r as usize))),
        r => fail(
            abi::ERR_ROOT,
            format!(
                "invalid root {r} on an intercommunicator whose remote group has {} ranks (or MPI_ROOT, MPI_PROC_NULL)",
                c.peers()
            ),
        ),
    }
}

/// `MPI_Bcast` on an intercommunicator: the root (`MPI_ROOT`) hands its
/// buffer to the other group's leader, which broadcasts it there.
fn inter_bcast(
    l: &Lib,
    c: &CommObj,
    buf: *mut c_void,
    n: c_int,
    dt: Handle,
    root: c_int,
) -> Result<(), Fail> {
    match inter_root(c, root)? {
        None => Ok(()),
        Some(None) => {
            let out = out_view(l, buf, n, dt)?;
            c.coll.send(out.bytes(), c.peer_job(0), T_INTER_BCAST)?;
            Ok(())
        }
        Some(Some(r)) => {
            let mut inb = in_view(l, buf, n, dt)?;
            if c.rank == 0 {
                c.coll.recv(inb.bytes(), c.peer_job(r), T_INTER_BCAST)?;
            }
            g_bcast(c, inb.bytes(), 0)?;
            if let Some(u) = &inb.stage {
                unstage(l, u, u.staged.len())?;
            }
            Ok(())
        }
    }
}

/// `MPI_Allreduce` on an intercommunicator: each group receives the
/// reduction of the other group's data. Each group reduces onto its
/// leader, the leaders swap, each broadcasts what it got.
fn inter_allreduce(
    l: &Lib,
    c: &CommObj,
    s: *const c_void,
    r: *mut c_void,
    n: c_int,
    dt: Handle,
    op: Handle,
) -> Result<(), Fail> {
    let n = count(n)?;
    if is_in_place(s) {
        return fail(abi::ERR_BUFFER, "MPI_IN_PLACE on an intercommunicator");
    }
    check_op(l, op, dt)?;
    if n == 0 {
        return Ok(());
    }
    let t = RedType::of(l, dt)?;
    let mut acc = across(l, c, s, n, t, op)?;
    g_bcast(c, &mut acc, 0)?;
    // SAFETY: the receive buffer holds n elements of the type.
    unsafe { t.store(l, &acc, n, r) }
}

/// The middle of an intercommunicator reduction: this group's `n`
/// elements of `t` at `s` reduced with `op` onto its leader, which swaps
/// the result with the other group's leader. On the leader, the other
/// group's reduction (packed); elsewhere, nothing of use.
fn across(
    l: &Lib,
    c: &CommObj,
    s: *const c_void,
    n: usize,
    t: RedType,
    op: Handle,
) -> Result<Vec<u8>, Fail> {
    // SAFETY: the program's buffer of `n` elements.
    let mut acc = unsafe { t.load(l, s, n) }?;
    g_reduce0(l, c, &mut acc, op, t, n)?;
    if c.rank == 0 {
        // The other group's vector is as long as this one's: MPI requires
        // it, and a leader whose vector differs fails on the length.
        let mut theirs = vec![0u8; acc.len()];
        let peer = c.peer_job(0);
        let st = c.coll.sendrecv(
            &acc,
            peer,
            T_INTER_REDUCE,
            &mut theirs,
            peer,
            T_INTER_REDUCE,
        )?;
        same_length(st.len, acc.len())?;
        acc = theirs;
    }
    Ok(acc)
}

/// The other group's vector (`theirs` bytes, packed) is as long as this
/// group's (`ours`), as an intercommunicator's reductions require.
fn same_length(theirs: usize, ours: usize) -> Result<(), Fail> {
    if theirs != ours {
        return fail(
            abi::ERR_COUNT,
            format!("the other group's vectors have {theirs} bytes, this group's {ours}: MPI requires the same count"),
        );
    }
    Ok(())
}

/// `MPI_Reduce` on an intercommunicator: the root (`MPI_ROOT`) receives
/// the reduction of the other group's data, which that group reduces onto
/// its leader first.
fn inter_reduce(
    l: &Lib,
    c: &CommObj,
    s: *const c_void,
    r: *mut c_void,
    n: c_int,
    dt: Handle,
    op: Handle,
    root: c_int,
) -> Result<(), Fail> {
    let n = count(n)?;
    let at = inter_root(c, root)?;
    check_op(l, op, dt)?;
    if n == 0 {
        return Ok(());
    }
    let t = RedType::of(l, dt)?;
    match at {
        None => Ok(()),
        Some(None) => {
            let mut acc = vec![0u8; n * t.size];
            c.coll.recv(&mut acc, c.peer_job(0), T_INTER_REDUCE)?;
            // SAFETY: the root's receive buffer of n elements.
            unsafe { t.store(l, &acc, n, r) }
        }
        Some(Some(root)) => {
            if is_in_place(s) {
                return fail(abi::ERR_BUFFER, "MPI_IN_PLACE on an intercommunicator");
            }
            // SAFETY: the program's buffer of `n` elements.
            let mut acc = unsafe { t.load(l, s, n) }?;
            g_reduce0(l, c, &mut acc, op, t, n)?;
            if c.rank == 0 {
                c.coll.send(&acc, c.peer_job(root), T_INTER_REDUCE)?;
            }
            Ok(())
        }
    }
}

fn bcast_bytes(c: &CommObj, b: &mut [u8], root: usize) -> Result<(), Fail> {
    // Nothing to move (every rank's count is 0: the type signatures match).
    if b.is_empty() {
        return Ok(());
    }
    if let Some(e) = c.tc()? {
        e.broadcast::<u8>(b, root)?;
        Ok(())
    } else {
        g_bcast(c, b, root)
    }
}

/// Allgather of equal byte blocks (`all` is size() blocks of `mine.len()`).
pub(crate) fn allgather_bytes(c: &CommObj, mine: &[u8], all: &mut [u8]) -> Result<(), Fail> {
    if mine.is_empty() {
        return Ok(());
    }
    if let Some(e) = c.tc()? {
        e.allgather::<u8>(mine, all)?;
        return Ok(());
    }
    let (n, me, k) = (c.size(), c.rank, mine.len());
    all[me * k..(me + 1) * k].copy_from_slice(mine);
    // Ring: n - 1 steps, each passing on the block received last.
    for step in 0..n.saturating_sub(1) {
        let send_block = (me + n - step) % n;
        let recv_block = (me + n - step - 1) % n;
        let s = all[send_block * k..(send_block + 1) * k].to_vec();
        g_sendrecv(
            c,
            (me + 1) % n,
            &s,
            (me + n - 1) % n,
            &mut all[recv_block * k..(recv_block + 1) * k],
            T_GATHER,
        )?;
    }
    Ok(())
}

/// Bitwise-and allreduce of a context mask (communicator creation).
pub(crate) fn allreduce_band(c: &CommObj, mask: &mut crate::state::Mask) -> Result<(), Fail> {
    if let Some(e) = c.tc()? {
        e.allreduce_in_place::<u64>(mask, ReduceOp::BitAnd)?;
        return Ok(());
    }
    let n = c.size();
    let k = std::mem::size_of_val(mask);
    let mut all = vec![0u8; k * n];
    let mine: Vec<u8> = mask.iter().flat_map(|w| w.to_le_bytes()).collect();
    allgather_bytes(c, &mine, &mut all)?;
    for r in 0..n {
        for (w, m) in mask.iter_mut().enumerate() {
            let at = r * k + w * 8;
            *m &= u64::from_le_bytes(all[at..at + 8].try_into().expect("8 bytes"));
        }
    }
    Ok(())
}

/// Gathers each member's `counts[i]` elements of `rdt` at `displs[i]`
/// (elements) on `root`.
fn gatherv(
    l: &Lib,
    s: *const c_void,
    sn: c_int,
    sdt: Handle,
    r: *mut c_void,
    counts: &[usize],
    displs: &[isize],
    rdt: Handle,
    root: usize,
    c: &CommObj,
) -> Result<(), Fail> {
    let me = c.rank;
    if me != root {
        let out = out_view(l, s, sn, sdt)?;
        return g_send(c, root, out.bytes(), T_GATHER);
    }
    let rt = ty(l, rdt)?;
    let own = block_at(r, displs[me], rt.extent);
    not_aliased(s, own, counts[me] > 0, "MPI_Gather")?;
    for i in 0..c.size() {
        // SAFETY: the root's receive buffer covers every block.
        let at = unsafe { r.cast::<u8>().offset(displs[i] * rt.extent as isize) }.cast::<c_void>();
        if i == me {
            if !is_in_place(s) {
                let out = out_view(l, s, sn, sdt)?;
                let mut inb = in_view(l, at, counts[i] as c_int, rdt)?;
                let dst = inb.bytes();
                if out.len > dst.len() {
                    return fail(
                        abi::ERR_TRUNCATE,
                        format!(
                            "the root's own block holds {} bytes, it sends {}",
                            dst.len(),
                            out.len
                        ),
                    );
                }
                dst[..out.len].copy_from_slice(out.bytes());
                if let Some(u) = &inb.stage {
                    unstage(l, u, out.len)?;
                }
            }
            continue;
        }
        let mut inb = in_view(l, at, counts[i] as c_int, rdt)?;
        let got = g_recv(c, i, inb.bytes(), T_GATHER)?;
        if let Some(u) = &inb.stage {
            unstage(l, u, got)?;
        }
    }
    Ok(())
}

/// Copies a rank's own block, `out` into `dst` (a collective's step to
/// itself); returns the bytes copied.
///
/// # Errors
/// `MPI_ERR_TRUNCATE` when the block sent is longer than the block
/// received, as for a message from another rank.
fn own_block(out: &[u8], dst: &mut [u8]) -> Result<usize, Fail> {
    if out.len() > dst.len() {
        return fail(
            abi::ERR_TRUNCATE,
            format!(
                "this rank's own block holds {} bytes, it sends itself {}",
                dst.len(),
                out.len()
            ),
        );
    }
    dst[..out.len()].copy_from_slice(out);
    Ok(out.len())
}

/// Scatters `counts[i]` elements of `sdt` at `displs[i]` from `root`.
fn scatterv(
    l: &Lib,
    s: *const c_void,
    counts: &[usize],
    displs: &[isize],
    sdt: Handle,
    r: *mut c_void,
    rn: c_int,
    rdt: Handle,
    root: usize,
    c: &CommObj,
) -> Result<(), Fail> {
    let me = c.rank;
    if me != root {
        let mut inb = in_view(l, r, rn, rdt)?;
        let got = g_recv(c, root, inb.bytes(), T_SCATTER)?;
        if let Some(u) = &inb.stage {
            unstage(l, u, got)?;
        }
        return Ok(());
    }
    let st = ty(l, sdt)?;
    let own = block_at(s, displs[me], st.extent);
    not_aliased(r, own, counts[me] > 0, "MPI_Scatter")?;
    for i in 0..c.size() {
        // SAFETY: the root's send buffer covers every block.
        let at = unsafe { s.cast::<u8>().offset(displs[i] * st.extent as isize) }.cast::<c_void>();
        let out = out_view(l, at, counts[i] as c_int, sdt)?;
        if i == me {
            if !is_in_place(r) {
                let mut inb = in_view(l, r, rn, rdt)?;
                let k = own_block(out.bytes(), inb.bytes())?;
                if let Some(u) = &inb.stage {
                    unstage(l, u, k)?;
                }
            }
            continue;
        }
        g_send(c, i, out.bytes(), T_SCATTER)?;
    }
    Ok(())
}

unsafe fn ints(p: *const c_int, n: usize) -> Result<Vec<usize>, Fail> {
    if p.is_null() && n > 0 {
        return fail(abi::ERR_ARG, "null counts array");
    }
    (0..n)
        // SAFETY: the program's array of n ints.
        .map(|i| count(unsafe { *p.add(i) }))
        .collect()
}

unsafe fn displs(p: *const c_int, n: usize) -> Result<Vec<isize>, Fail> {
    if p.is_null() && n > 0 {
        return fail(abi::ERR_ARG, "null displacements array");
    }
    // SAFETY: the program's array of n ints.
    Ok((0..n).map(|i| unsafe { *p.add(i) } as isize).collect())
}

fn alltoallv(
    l: &Lib,
    s: *const c_void,
    scounts: &[usize],
    sdispls: &[isize],
    sdt: Handle,
    r: *mut c_void,
    rcounts: &[usize],
    rdispls: &[isize],
    rdt: Handle,
    c: &CommObj,
) -> Result<(), Fail> {
    let (n, me) = (c.size(), c.rank);
    let data = scounts.iter().chain(rcounts).any(|&k| k > 0);
    not_aliased(s, r, data, "MPI_Alltoall")?;
    let rt = ty(l, rdt)?;
    let st = if is_in_place(s) { rt } else { ty(l, sdt)? };
    let in_place = is_in_place(s);
    // In place: the send data is the receive buffer's, copied first.
    let saved: Option<Vec<u8>> = if in_place {
        let total = (0..n)
            .map(|i| (rdispls[i].max(0) as usize + rcounts[i]) * rt.extent)
            .max()
            .unwrap_or(0);
        // SAFETY: the receive buffer covers every block.
        Some(unsafe { std::slice::from_raw_parts(r.cast::<u8>(), total) }.to_vec())
    } else {
        None
    };
    let (sbase, scnt, sdis, sdt2, st2) = match &saved {
        Some(v) => (v.as_ptr().cast::<c_void>(), rcounts, rdispls, rdt, rt),
        None => (s, scounts, sdispls, sdt, st),
    };
    for step in 0..n {
        let to = (me + step) % n;
        let from = (me + n - step) % n;
        // SAFETY: the buffers cover every block.
        let sat =
            unsafe { sbase.cast::<u8>().offset(sdis[to] * st2.extent as isize) }.cast::<c_void>();
        // SAFETY: as above.
        let rat =
            unsafe { r.cast::<u8>().offset(rdispls[from] * rt.extent as isize) }.cast::<c_void>();
        let out = out_view(l, sat, scnt[to] as c_int, sdt2)?;
        let mut inb = in_view(l, rat, rcounts[from] as c_int, rdt)?;
        let got = if step == 0 {
            own_block(out.bytes(), inb.bytes())?
        } else {
            let stage = inb.stage.take();
            let mut tmp;
            let dst: &mut [u8] = if stage.is_some() {
                tmp = stage
                    .as_ref()
                    .map(|u| vec![0u8; u.staged.len()])
                    .unwrap_or_default();
                &mut tmp
            } else {
                inb.bytes()
            };
            c.coll.sendrecv(
                out.bytes(),
                c.job_rank(to),
                T_ALLTOALL,
                dst,
                c.job_rank(from),
                T_ALLTOALL,
            )?;
            if let Some(mut u) = stage {
                let k = dst.len();
                u.staged[..k].copy_from_slice(dst);
                unstage(l, &u, k)?;
            }
            0
        };
        if let Some(u) = &inb.stage {
            unstage(l, u, got)?;
        }
    }
    Ok(())
}

/// `MPI_Alltoallw`: per-peer counts, byte displacements and datatypes.
fn alltoallw(
    l: &Lib,
    s: *const c_void,
    sc: &[usize],
    sd: &[isize],
    st: &[Handle],
    r: *mut c_void,
    rc: &[usize],
    rd: &[isize],
    rt: &[Handle],
    c: &CommObj,
) -> Result<(), Fail> {
    let (n, me) = (c.size(), c.rank);
    not_aliased(s, r, sc.iter().chain(rc).any(|&k| k > 0), "MPI_Alltoallw")?;
    // In place: the data to send is the receive buffer's, copied first.
    let saved: Option<Vec<u8>> = if is_in_place(s) {
        let mut end = 0usize;
        for i in 0..n {
            let t = ty(l, rt[i])?;
            end = end.max(rd[i].max(0) as usize + rc[i] * t.extent);
        }
        // SAFETY: the receive buffer covers every block.
        Some(unsafe { std::slice::from_raw_parts(r.cast::<u8>(), end) }.to_vec())
    } else {
        None
    };
    let (sbase, sc, sd, st) = match &saved {
        Some(v) => (v.as_ptr().cast::<c_void>(), rc, rd, rt),
        None => (s, sc, sd, st),
    };
    for step in 0..n {
        let to = (me + step) % n;
        let from = (me + n - step) % n;
        // SAFETY: the displacements are in bytes within the buffers.
        let sat = unsafe { sbase.cast::<u8>().offset(sd[to]) }.cast::<c_void>();
        // SAFETY: as above.
        let rat = unsafe { r.cast::<u8>().offset(rd[from]) }.cast::<c_void>();
        let out = out_view(l, sat, sc[to] as c_int, st[to])?;
        let mut inb = in_view(l, rat, rc[from] as c_int, rt[from])?;
        let got = if step == 0 {
            own_block(out.bytes(), inb.bytes())?
        } else {
            let st = c.coll.sendrecv(
                out.bytes(),
                c.job_rank(to),
                T_ALLTOALL,
                inb.bytes(),
                c.job_rank(from),
                T_ALLTOALL,
            )?;
            st.len
        };
        if let Some(u) = &inb.stage {
            unstage(l, u, got)?;
        }
    }
    Ok(())
}

/// Inclusive (or exclusive) prefix reduction in rank order.
fn scan(
    l: &Lib,
    s: *const c_void,
    r: *mut c_void,
    n: c_int,
    dt: Handle,
    op: Handle,
    comm: Handle,
    exclusive: bool,
) -> Result<(), Fail> {
    let c = l.comm(comm)?;
    let n = count(n)?;
    not_aliased(
        s,
        r,
        n > 0,
        if exclusive { "MPI_Exscan" } else { "MPI_Scan" },
    )?;
    check_op(l, op, dt)?;
    let t = RedType::of(l, dt)?;
    let me = c.rank;
    let src = if is_in_place(s) { r.cast_const() } else { s };
    // SAFETY: the program's buffer of `n` elements.
    let mine = unsafe { t.load(l, src, n) }?;
    // prefix = x0 op … op x(me-1), from the left neighbour.
    let mut prefix = vec![0u8; mine.len()];
    if me > 0 {
        g_recv(&c, me - 1, &mut prefix, T_SCAN)?;
    }
    // upto = prefix op mine.
    let mut upto = mine.clone();
    if me > 0 {
        t.apply(l, op, n, &prefix, &mut upto)?;
    }
    if me + 1 < c.size() {
        g_send(&c, me + 1, &upto, T_SCAN)?;
    }
    let result = if exclusive { &prefix } else { &upto };
    if !exclusive || me > 0 {
        // SAFETY: the receive buffer of n elements.
        unsafe { t.store(l, result, n, r) }?;
    }
    Ok(())
}

/// tandem's reduce-scatter of equal blocks of `k` elements of `T`.
fn reduce_scatter_t<T: tandem_driver::Element>(
    e: &tandem_driver::Comm,
    s: *const c_void,
    r: *mut c_void,
    k: usize,
    rop: ReduceOp,
) -> tandem_driver::Result<()> {
    let total = k * e.size();
    // SAFETY: the program's buffers (`total` elements to send, `k` to
    // receive, or `total` in place); unaligned ones are copied.
    unsafe {
        if is_in_place(s) {
            // MPI: the input is the whole buffer, the result goes to its
            // start, and the rest is left as it was; tandem's in-place form
            // puts the result in block `rank` and uses the buffer as scratch.
            let src = aligned_in::<T>(r, total).into_owned();
            with_aligned_out::<T, _>(r, k, false, |b| e.reduce_scatter::<T>(&src, b, rop))
        } else {
            let src = aligned_in::<T>(s, total);
            with_aligned_out::<T, _>(r, k, false, |b| e.reduce_scatter::<T>(&src, b, rop))
        }
    }
}

fn reduce_scatter(
    l: &Lib,
    s: *const c_void,
    r: *mut c_void,
    counts: &[usize],
    dt: Handle,
    op: Handle,
    comm: Handle,
) -> Result<(), Fail> {
    let c = l.any_comm(comm)?;
    let t = RedType::of(l, dt)?;
    let total = counts
        .iter()
        .try_fold(0usize, |a, &k| a.checked_add(k))
        .ok_or_else(|| Fail::new(abi::ERR_COUNT, "the counts' sum overflows".into()))?;
    if c.remote.is_some() {
        return inter_reduce_scatter(l, &c, s, r, counts, total, dt, op);
    }
    not_aliased(s, r, total > 0, "MPI_Reduce_scatter")?;
    if total == 0 {
        check_op(l, op, dt)?;
        return Ok(());
    }
    // tandem's reduce-scatter for equal blocks of its types.
    if counts.iter().all(|&k| k == counts[0]) {
        if let Some(e) = c.tc()? {
            // The same choice on every rank (whatever their buffers'
            // alignment).
            if let Some((el, rop)) = native(dt, op) {
                let k = counts[0];
                return with_el!(el, T => reduce_scatter_t::<T>(&e, s, r, k, rop))
                    .map_err(Fail::from);
            }
        }
    }
    check_op(l, op, dt)?;
    let src = if is_in_place(s) { r.cast_const() } else { s };
    // SAFETY: the program's buffer of `total` elements.
    let mut acc = unsafe { t.load(l, src, total) }?;
    g_reduce0(l, &c, &mut acc, op, t, total)?;
    scatter_blocks(l, &c, &acc, counts, t, r)
}

/// `MPI_Reduce_scatter(_block)` on an intercommunicator: each group's
/// vectors (`total` elements, the same number in both groups, as MPI
/// requires) are reduced onto its leader, the leaders swap them, and each
/// scatters the other group's reduction among its own members in blocks
/// of `counts` (this group's, one per member).
#[allow(clippy::too_many_arguments)]
fn inter_reduce_scatter(
    l: &Lib,
    c: &CommObj,
    s: *const c_void,
    r: *mut c_void,
    counts: &[usize],
    total: usize,
    dt: Handle,
    op: Handle,
) -> Result<(), Fail> {
    if is_in_place(s) {
        return fail(abi::ERR_BUFFER, "MPI_IN_PLACE on an intercommunicator");
    }
    check_op(l, op, dt)?;
    let t = RedType::of(l, dt)?;
    let acc = across(l, c, s, total, t, op)?;
    scatter_blocks(l, c, &acc, counts, t, r)
}

/// The end of a reduce-scatter: member 0 of `c` holds the packed result
/// `acc` and sends each member its block of `counts[member]` elements,
/// which the member stores in `r`.
fn scatter_blocks(
    l: &Lib,
    c: &CommObj,
    acc: &[u8],
    counts: &[usize],
    t: RedType,
    r: *mut c_void,
) -> Result<(), Fail> {
    let me = c.rank;
    // Each member's block goes to it as bytes (the element counts, and so
    // the packed lengths, are known to every member).
    let mut mine = vec![0u8; t.packed_len(counts[me])?];
    if me == 0 {
        let mut at = 0;
        for (p, &k) in counts.iter().enumerate() {
            let len = t.packed_len(k)?;
            if p == 0 {
                mine.copy_from_slice(&acc[at..at + len]);
            } else if len > 0 {
                g_send(c, p, &acc[at..at + len], T_SCATTER)?;
            }
            at += len;
        }
    } else if !mine.is_empty() {
        g_recv(c, 0, &mut mine, T_SCATTER)?;
    }
    // SAFETY: the receive buffer of counts[me] elements.
    unsafe { t.store(l, &mine, counts[me], r) }
}

/// Starts tandem's allreduce of `n` elements of `T` (`s` null: in place).
fn iallreduce_t<T: tandem_driver::Element>(
    e: &tandem_driver::Comm,
    s: *const c_void,
    r: *mut c_void,
    n: usize,
    rop: ReduceOp,
) -> tandem_driver::Result<tandem_driver::RawCollRequest> {
    // SAFETY: MPI leaves the buffers to the library until the request
    // completes, and the request holds the communicator.
    unsafe { e.iallreduce_raw::<T>(s.cast::<T>(), r.cast::<T>(), n, rop) }
}

/// The receive side of a non-blocking collective on tandem's engine:
/// `n` elements of `dt` at `r` as bytes (where they go, and how many): the
/// program's memory where the type is contiguous, else a staging buffer
/// unpacked at completion. The request's `Staged` holds that buffer, if
/// any, and has room for a copy of the send data.
fn coll_recv_side(
    l: &Lib,
    r: *mut c_void,
    n: usize,
    dt: Handle,
) -> Result<(*mut u8, usize, Staged), Fail> {
    let inb = in_view(l, r, elements(n, 1)?, dt)?;
    let mut st = Staged {
        send: Vec::new(),
        recv: Vec::new(),
        dst: std::ptr::null_mut(),
        len: 0,
        unpack: None,
    };
    if inb.stage.is_none() {
        return Ok((r.cast(), inb.len, st));
    }
    st.recv = vec![0u128; inb.len.div_ceil(16)];
    st.dst = r.cast();
    st.len = inb.len;
    st.unpack = Some((dt, n, l.types.borrow().hold(dt)));
    // The heap buffer does not move with `st`.
    let p = st.recv.as_mut_ptr().cast::<u8>();
    Ok((p, inb.len, st))
}

/// `MPI_Iallgather` on tandem's engine (`e`, the communicator's
/// [`CommObj::tc`]): every datatype, as bytes, as the blocking call
/// does, so every rank takes this path. `None`: empty blocks, nothing to
/// move.
#[allow(clippy::too_many_arguments)]
fn iallgather_start(
    l: &Lib,
    e: &tandem_driver::Comm,
    s: *const c_void,
    sn: c_int,
    sdt: Handle,
    r: *mut c_void,
    rn: c_int,
    rdt: Handle,
) -> Result<Option<(tandem_driver::RawCollRequest, Option<Staged>)>, Fail> {
    let (n, me) = (e.size(), e.rank());
    let rt = ty(l, rdt)?;
    let rn_u = count(rn)?;
    not_aliased(
        s,
        block_at(r, (me * rn_u) as isize, rt.extent),
        rn_u > 0,
        "MPI_Iallgather",
    )?;
    let block = rn_u * rt.size;
    let mine = if is_in_place(s) {
        // This rank's block of `r` (out_view reads it through the type).
        let at = r
            .cast::<u8>()
            .wrapping_add(me * rn_u * rt.extent)
            .cast::<c_void>();
        out_view(l, at, rn, rdt)?
    } else {
        out_view(l, s, sn, sdt)?
    };
    if mine.len != block {
        return fail(
            abi::ERR_TRUNCATE,
            format!(
                "allgather: {} bytes sent, blocks of {block} expected",
                mine.len
            ),
        );
    }
    if block == 0 {
        return Ok(None);
    }
    let (dst, _, mut staged) = coll_recv_side(l, r, n.saturating_mul(rn_u), rdt)?;
    // SAFETY: `mine` (the program's block, or its packed copy) holds
    // `block` bytes; they are copied into the request's own buffer.
    staged.send = unsafe { Staged::copy_of(mine.ptr, block) };
    // SAFETY: the send copy and `dst` (the program's receive buffer of
    // `n * rn` elements, kept by MPI's rules, or the staging buffer of as
    // many bytes) live in the request until it completes.
    let raw = unsafe { e.iallgather_raw::<u8>(staged.send.as_ptr().cast(), dst, block)? };
    Ok(Some((raw, Some(staged))))
}

/// `MPI_Ialltoall` on tandem's engine where the blocking call uses it
/// (not in place, the same bytes sent as received), so every rank makes
/// the same choice. `None`: the blocking call's own algorithm, within the
/// call.
#[allow(clippy::too_many_arguments)]
fn ialltoall_start(
    l: &Lib,
    e: &tandem_driver::Comm,
    s: *const c_void,
    sn: c_int,
    sdt: Handle,
    r: *mut c_void,
    rn: c_int,
    rdt: Handle,
) -> Result<Option<(tandem_driver::RawCollRequest, Option<Staged>)>, Fail> {
    let n = e.size();
    not_aliased(s, r, count(rn)? > 0, "MPI_Ialltoall")?;
    if is_in_place(s) {
        return Ok(None);
    }
    let (rk, sk) = (count(rn)?, count(sn)?);
    if rk == 0 && sk == 0 {
        return Ok(None);
    }
    let out = out_view(l, s, elements(sk, n)?, sdt)?;
    let (dst, in_len, mut staged) = coll_recv_side(l, r, rk.saturating_mul(n), rdt)?;
    if out.len != in_len || out.len % n != 0 {
        return Ok(None);
    }
    let src = match &out.packed {
        // A packed copy of a non-contiguous send, kept in the request.
        Some(p) => {
            // SAFETY: `p` holds `out.len` bytes.
            staged.send = unsafe { Staged::copy_of(p.as_ptr(), out.len) };
            staged.send.as_ptr().cast::<u8>()
        }
        // The program's buffer, which MPI leaves alone until completion.
        None => out.ptr,
    };
    // SAFETY: `src` and `dst` hold `out.len` bytes each and live until the
    // request completes (the program's buffers by MPI's rules, or the
    // request's own copies).
    let raw = unsafe { e.ialltoall_raw::<u8>(src, dst, out.len / n)? };
    Ok(Some((raw, Some(staged))))
}

/// Starts tandem's reduce of `n` elements of `T` to `root` (`s` null: in
/// place on the root; `r` null off the root).
fn ireduce_t<T: tandem_driver::Element>(
    e: &tandem_driver::Comm,
    s: *const c_void,
    r: *mut c_void,
    n: usize,
    rop: ReduceOp,
    root: usize,
) -> tandem_driver::Result<tandem_driver::RawCollRequest> {
    // SAFETY: MPI leaves the buffers to the library until the request
    // completes (the receive buffer only on the root), and the request
    // holds the communicator.
    unsafe { e.ireduce_raw::<T>(s.cast::<T>(), r.cast::<T>(), n, rop, root) }
}

/// Starts a non-blocking collective: tandem's own where it applies, else
/// the blocking call run now (the request is then complete).
fn start_coll(
    l: &Lib,
    comm: Handle,
    out: *mut Handle,
    tandem: impl FnOnce(
        &tandem_driver::Comm,
    ) -> Option<Result<(tandem_driver::RawCollRequest, Option<Staged>), Fail>>,
    blocking: impl FnOnce(&Lib) -> Result<(), Fail>,
) -> Result<(), Fail> {
    // On tandem's engine where it serves the communicator (an
    // intercommunicator's collectives complete within the call).
    let c = l.any_comm(comm)?;
    let started = match c.tc()? {
        Some(e) => tandem(&e),
        None => None,
    };
    if let Some(r) = started {
        let (raw, staged) = r?;
        let h = l.add_req(Req::Coll {
            comm: c,
            raw: Some(raw),
            staged,
        });
        // SAFETY: the program's request out-parameter.
        unsafe { put(out, h) };
        return Ok(());
    }
    drop(c);
    blocking(l)?;
    let h = l.add_req(Req::Done(crate::p2p::empty_status(), None));
    // SAFETY: the program's request out-parameter.
    unsafe { put(out, h) };
    Ok(())
}

export! {
    fn MPI_Barrier, PMPI_Barrier(comm: Handle) -> c_int {
        run(comm, "MPI_Barrier", |l| {
            let c = l.any_comm(comm)?;
            if c.remote.is_some() {
                return crate::inter::barrier(&c);
            }
            let done = match c.tc()? {
                Some(e) => {
                    e.barrier()?;
                    true
                }
                None => false,
            };
            if done {
                return Ok(());
            }
            g_barrier(&c)
        })
    }

    fn MPI_Bcast, PMPI_Bcast(buf: *mut c_void, n: c_int, dt: Handle, root: c_int, comm: Handle) -> c_int {
        run(comm, "MPI_Bcast", |l| bcast(l, buf, n, dt, root, comm))
    }

    fn MPI_Allreduce, PMPI_Allreduce(s: *const c_void, r: *mut c_void, n: c_int, dt: Handle, op: Handle, comm: Handle) -> c_int {
        run(comm, "MPI_Allreduce", |l| allreduce(l, s, r, n, dt, op, comm))
    }

    fn MPI_Reduce, PMPI_Reduce(s: *const c_void, r: *mut c_void, n: c_int, dt: Handle, op: Handle, root: c_int, comm: Handle) -> c_int {
        run(comm, "MPI_Reduce", |l| reduce(l, s, r, n, dt, op, root, comm))
    }

    fn MPI_Reduce_local, PMPI_Reduce_local(s: *const c_void, r: *mut c_void, n: c_int, dt: Handle, op: Handle) -> c_int {
        run(abi::COMM_WORLD, "MPI_Reduce_local", |l| {
            let n = count(n)?;
            check_op(l, op, dt)?;
            if is_in_place(s) || is_in_place(r.cast_const()) {
                return fail(abi::ERR_BUFFER, "MPI_Reduce_local takes no MPI_IN_PLACE");
            }
            if n > 0 && std::ptr::eq(s, r.cast_const()) {
                return fail(abi::ERR_BUFFER, "MPI_Reduce_local's buffers are one buffer (aliased)");
            }
            if n > 0 && (s.is_null() || r.is_null()) && ty(l, dt)?.size > 0 {
                return fail(abi::ERR_BUFFER, "a null buffer (MPI_BOTTOM) holding data");
            }
            apply(l, op, dt, n, s.cast(), r.cast())
        })
    }

    fn MPI_Allgather, PMPI_Allgather(s: *const c_void, sn: c_int, sdt: Handle, r: *mut c_void, rn: c_int, rdt: Handle, comm: Handle) -> c_int {
        run(comm, "MPI_Allgather", |l| {
            let c = l.any_comm(comm)?;
            if c.remote.is_some() {
                return crate::inter::allgather(l, &c, s, sn, sdt, r, rn, rdt);
            }
            let (n, me) = (c.size(), c.rank);
            let rt = ty(l, rdt)?;
            let rn_u = count(rn)?;
            let block = rn_u * rt.size;
            not_aliased(s, block_at(r, (me * rn_u) as isize, rt.extent), rn_u > 0, "MPI_Allgather")?;
            // The own block, packed.
            let mine = if is_in_place(s) {
                let at = r.cast::<u8>().add(me * rn_u * rt.extent).cast::<c_void>();
                out_view(l, at, rn, rdt)?.bytes().to_vec()
            } else {
                out_view(l, s, sn, sdt)?.bytes().to_vec()
            };
            if mine.len() != block {
                return fail(abi::ERR_TRUNCATE, format!("allgather: {} bytes sent, blocks of {block} expected", mine.len()));
            }
            let mut inb = in_view(l, r, elements(n, rn_u)?, rdt)?;
            if inb.stage.is_none() && rt.extent == rt.size {
                allgather_bytes(&c, &mine, inb.bytes())
            } else {
                let mut all = vec![0u8; n * block];
                allgather_bytes(&c, &mine, &mut all)?;
                inb.bytes()[..all.len()].copy_from_slice(&all);
                if let Some(u) = &inb.stage {
                    unstage(l, u, all.len())?;
                }
                Ok(())
            }
        })
    }

    fn MPI_Allgatherv, PMPI_Allgatherv(s: *const c_void, sn: c_int, sdt: Handle, r: *mut c_void, rcounts: *const c_int, rdispls: *const c_int, rdt: Handle, comm: Handle) -> c_int {
        run(comm, "MPI_Allgatherv", |l| {
            let c = l.any_comm(comm)?;
            if c.remote.is_some() {
                return crate::inter::allgatherv(l, &c, s, sn, sdt, r, rcounts, rdispls, rdt);
            }
            let n = c.size();
            let counts = ints(rcounts, n)?;
            let dis = displs(rdispls, n)?;
            let me = c.rank;
            let rt = ty(l, rdt)?;
            not_aliased(s, block_at(r, dis[me], rt.extent), counts[me] > 0, "MPI_Allgatherv")?;
            let (sbuf, sn, sdt) = if is_in_place(s) {
                (r.cast::<u8>().offset(dis[me] * rt.extent as isize).cast::<c_void>().cast_const(), counts[me] as c_int, rdt)
            } else {
                (s, sn, sdt)
            };
            // Gather on 0, then broadcast every block from there.
            let s_in_place = is_in_place(s) && me == 0;
            gatherv(l, if s_in_place { abi::IN_PLACE as *const c_void } else { sbuf }, sn, sdt, r, &counts, &dis, rdt, 0, &c)?;
            for (i, (&k, &d)) in counts.iter().zip(&dis).enumerate() {
                let _ = i;
                let at = r.cast::<u8>().offset(d * rt.extent as isize).cast::<c_void>();
                bcast(l, at, k as c_int, rdt, 0, comm)?;
            }
            Ok(())
        })
    }

    fn MPI_Gather, PMPI_Gather(s: *const c_void, sn: c_int, sdt: Handle, r: *mut c_void, rn: c_int, rdt: Handle, root: c_int, comm: Handle) -> c_int {
        run(comm, "MPI_Gather", |l| {
            let c = l.any_comm(comm)?;
            if c.remote.is_some() {
                return crate::inter::gather(l, &c, s, sn, sdt, r, rn, rdt, root);
            }
            let root = root_of(&c, root)?;
            let n = c.size();
            let k = if c.rank == root { count(rn)? } else { 0 };
            let counts = vec![k; n];
            let dis: Vec<isize> = (0..n).map(|i| (i * k) as isize).collect();
            gatherv(l, s, sn, sdt, r, &counts, &dis, rdt, root, &c)
        })
    }

    fn MPI_Gatherv, PMPI_Gatherv(s: *const c_void, sn: c_int, sdt: Handle, r: *mut c_void, rcounts: *const c_int, rdispls: *const c_int, rdt: Handle, root: c_int, comm: Handle) -> c_int {
        run(comm, "MPI_Gatherv", |l| {
            let c = l.any_comm(comm)?;
            if c.remote.is_some() {
                return crate::inter::gatherv(l, &c, s, sn, sdt, r, rcounts, rdispls, rdt, root);
            }
            let root = root_of(&c, root)?;
            let n = c.size();
            let (counts, dis) = if c.rank == root {
                (ints(rcounts, n)?, displs(rdispls, n)?)
            } else {
                (vec![0; n], vec![0; n])
            };
            gatherv(l, s, sn, sdt, r, &counts, &dis, rdt, root, &c)
        })
    }

    fn MPI_Scatter, PMPI_Scatter(s: *const c_void, sn: c_int, sdt: Handle, r: *mut c_void, rn: c_int, rdt: Handle, root: c_int, comm: Handle) -> c_int {
        run(comm, "MPI_Scatter", |l| {
            let c = l.any_comm(comm)?;
            if c.remote.is_some() {
                return crate::inter::scatter(l, &c, s, sn, sdt, r, rn, rdt, root);
            }
            let root = root_of(&c, root)?;
            let n = c.size();
            let k = if c.rank == root { count(sn)? } else { 0 };
            let counts = vec![k; n];
            let dis: Vec<isize> = (0..n).map(|i| (i * k) as isize).collect();
            scatterv(l, s, &counts, &dis, sdt, r, rn, rdt, root, &c)
        })
    }

    fn MPI_Scatterv, PMPI_Scatterv(s: *const c_void, scounts: *const c_int, sdispls: *const c_int, sdt: Handle, r: *mut c_void, rn: c_int, rdt: Handle, root: c_int, comm: Handle) -> c_int {
        run(comm, "MPI_Scatterv", |l| {
            let c = l.any_comm(comm)?;
            if c.remote.is_some() {
                return crate::inter::scatterv(l, &c, s, scounts, sdispls, sdt, r, rn, rdt, root);
            }
            let root = root_of(&c, root)?;
            let n = c.size();
            let (counts, dis) = if c.rank == root {
                (ints(scounts, n)?, displs(sdispls, n)?)
            } else {
                (vec![0; n], vec![0; n])
            };
            scatterv(l, s, &counts, &dis, sdt, r, rn, rdt, root, &c)
        })
    }

    fn MPI_Alltoall, PMPI_Alltoall(s: *const c_void, sn: c_int, sdt: Handle, r: *mut c_void, rn: c_int, rdt: Handle, comm: Handle) -> c_int {
        run(comm, "MPI_Alltoall", |l| {
            let c = l.any_comm(comm)?;
            if c.remote.is_some() {
                return crate::inter::alltoall(l, &c, s, sn, sdt, r, rn, rdt);
            }
            let n = c.size();
            let rk = count(rn)?;
            let sk = if is_in_place(s) { rk } else { count(sn)? };
            // tandem's alltoall on contiguous bytes.
            if rk == 0 && sk == 0 {
                return Ok(());
            }
            not_aliased(s, r, true, "MPI_Alltoall")?;
            let e = c.tc()?;
            if let (Some(e), false) = (&e, is_in_place(s)) {
                let out = out_view(l, s, elements(sk, n)?, sdt)?;
                let mut inb = in_view(l, r, elements(rk, n)?, rdt)?;
                if out.len == inb.len {
                    let src = out.bytes().to_vec();
                    let res = if out.packed.is_none() {
                        e.alltoall::<u8>(out.bytes(), inb.bytes())
                    } else {
                        e.alltoall::<u8>(&src, inb.bytes())
                    };
                    res?;
                    if let Some(u) = &inb.stage {
                        unstage(l, u, inb.len)?;
                    }
                    return Ok(());
                }
            }
            let scounts = vec![sk; n];
            let rcounts = vec![rk; n];
            let sdis: Vec<isize> = (0..n).map(|i| (i * sk) as isize).collect();
            let rdis: Vec<isize> = (0..n).map(|i| (i * rk) as isize).collect();
            alltoallv(l, s, &scounts, &sdis, sdt, r, &rcounts, &rdis, rdt, &c)
        })
    }

    fn MPI_Alltoallv, PMPI_Alltoallv(s: *const c_void, scounts: *const c_int, sdispls: *const c_int, sdt: Handle, r: *mut c_void, rcounts: *const c_int, rdispls: *const c_int, rdt: Handle, comm: Handle) -> c_int {
        run(comm, "MPI_Alltoallv", |l| {
            let c = l.any_comm(comm)?;
            if c.remote.is_some() {
                return crate::inter::alltoallv(l, &c, s, scounts, sdispls, sdt, r, rcounts, rdispls, rdt);
            }
            let n = c.size();
            let (rc, rd) = (ints(rcounts, n)?, displs(rdispls, n)?);
            let (sc, sd) = if is_in_place(s) {
                (rc.clone(), rd.clone())
            } else {
                (ints(scounts, n)?, displs(sdispls, n)?)
            };
            alltoallv(l, s, &sc, &sd, sdt, r, &rc, &rd, rdt, &c)
        })
    }

    fn MPI_Alltoallw, PMPI_Alltoallw(s: *const c_void, scounts: *const c_int, sdispls: *const c_int, sdt: *const Handle, r: *mut c_void, rcounts: *const c_int, rdispls: *const c_int, rdt: *const Handle, comm: Handle) -> c_int {
        run(comm, "MPI_Alltoallw", |l| {
            let c = l.any_comm(comm)?;
            if c.remote.is_some() {
                return crate::inter::alltoallw(l, &c, s, scounts, sdispls, sdt, r, rcounts, rdispls, rdt);
            }
            let n = c.size();
            let (rc, rd) = (ints(rcounts, n)?, displs(rdispls, n)?);
            let rt: Vec<Handle> = (0..n).map(|i| *rdt.add(i)).collect();
            let (sc, sd, st) = if is_in_place(s) {
                (rc.clone(), rd.clone(), rt.clone())
            } else {
                (ints(scounts, n)?, displs(sdispls, n)?, (0..n).map(|i| *sdt.add(i)).collect())
            };
            alltoallw(l, s, &sc, &sd, &st, r, &rc, &rd, &rt, &c)
        })
    }

    fn MPI_Reduce_scatter, PMPI_Reduce_scatter(s: *const c_void, r: *mut c_void, counts: *const c_int, dt: Handle, op: Handle, comm: Handle) -> c_int {
        run(comm, "MPI_Reduce_scatter", |l| {
            // One count per member of the local group (of either kind of
            // communicator).
            let n = l.any_comm(comm)?.size();
            let counts = ints(counts, n)?;
            reduce_scatter(l, s, r, &counts, dt, op, comm)
        })
    }

    fn MPI_Reduce_scatter_block, PMPI_Reduce_scatter_block(s: *const c_void, r: *mut c_void, k: c_int, dt: Handle, op: Handle, comm: Handle) -> c_int {
        run(comm, "MPI_Reduce_scatter_block", |l| {
            let n = l.any_comm(comm)?.size();
            let counts = vec![count(k)?; n];
            reduce_scatter(l, s, r, &counts, dt, op, comm)
        })
    }

    fn MPI_Scan, PMPI_Scan(s: *const c_void, r: *mut c_void, n: c_int, dt: Handle, op: Handle, comm: Handle) -> c_int {
        run(comm, "MPI_Scan", |l| scan(l, s, r, n, dt, op, comm, false))
    }

    fn MPI_Exscan, PMPI_Exscan(s: *const c_void, r: *mut c_void, n: c_int, dt: Handle, op: Handle, comm: Handle) -> c_int {
        run(comm, "MPI_Exscan", |l| scan(l, s, r, n, dt, op, comm, true))
    }

    fn MPI_Ibarrier, PMPI_Ibarrier(comm: Handle, req: *mut Handle) -> c_int {
        run(comm, "MPI_Ibarrier", |l| {
            start_coll(l, comm, req, |e| Some(e.ibarrier_raw().map(|r| (r, None)).map_err(Fail::from)), |l| {
                let c = l.any_comm(comm)?;
                if c.remote.is_some() {
                    return crate::inter::barrier(&c);
                }
                g_barrier(&c)
            })
        })
    }

    fn MPI_Ibcast, PMPI_Ibcast(buf: *mut c_void, n: c_int, dt: Handle, root: c_int, comm: Handle, req: *mut Handle) -> c_int {
        run(comm, "MPI_Ibcast", |l| {
            if l.any_comm(comm)?.remote.is_some() {
                return start_coll(l, comm, req, |_| None, |l| bcast(l, buf, n, dt, root, comm));
            }
            let c = l.comm(comm)?;
            let rt = root_of(&c, root)?;
            let nn = count(n)?;
            let contiguous = abi::builtin_size(dt).is_some_and(|s| s > 0);
            drop(c);
            start_coll(l, comm, req, |e| {
                if !contiguous {
                    return None;
                }
                let bytes = nn * abi::builtin_size(dt).unwrap_or(0);
                // SAFETY: MPI keeps the buffer for the request.
                Some(unsafe { e.ibroadcast_raw::<u8>(buf.cast(), bytes, rt) }.map(|r| (r, None)).map_err(Fail::from))
            }, |l| bcast(l, buf, n, dt, root, comm))
        })
    }

    fn MPI_Iallgather, PMPI_Iallgather(s: *const c_void, sn: c_int, sdt: Handle, r: *mut c_void, rn: c_int, rdt: Handle, comm: Handle, req: *mut Handle) -> c_int {
        run(comm, "MPI_Iallgather", |l| {
            start_coll(l, comm, req, |e| iallgather_start(l, e, s, sn, sdt, r, rn, rdt).transpose(), |l| {
                let r = crate::extra::quiet(l, comm, || PMPI_Allgather(s, sn, sdt, r, rn, rdt, comm));
                crate::extra::code_to_fail(r, "the allgather failed")
            })
        })
    }

    fn MPI_Ialltoall, PMPI_Ialltoall(s: *const c_void, sn: c_int, sdt: Handle, r: *mut c_void, rn: c_int, rdt: Handle, comm: Handle, req: *mut Handle) -> c_int {
        run(comm, "MPI_Ialltoall", |l| {
            start_coll(l, comm, req, |e| ialltoall_start(l, e, s, sn, sdt, r, rn, rdt).transpose(), |l| {
                let r = crate::extra::quiet(l, comm, || PMPI_Alltoall(s, sn, sdt, r, rn, rdt, comm));
                crate::extra::code_to_fail(r, "the alltoall failed")
            })
        })
    }

    fn MPI_Ireduce, PMPI_Ireduce(s: *const c_void, r: *mut c_void, n: c_int, dt: Handle, op: Handle, root: c_int, comm: Handle, req: *mut Handle) -> c_int {
        run(comm, "MPI_Ireduce", |l| {
            if l.any_comm(comm)?.remote.is_some() {
                return start_coll(l, comm, req, |_| None, |l| reduce(l, s, r, n, dt, op, root, comm));
            }
            let nn = count(n)?;
            let c = l.comm(comm)?;
            let rt = root_of(&c, root)?;
            let at_root = c.rank == rt;
            send_buffer_off_root(s, at_root)?;
            not_aliased(s, r, nn > 0 && at_root, "MPI_Ireduce")?;
            drop(c);
            // The same choice on every rank, as the blocking call makes it:
            // unaligned buffers are staged.
            let fast = native(dt, op);
            let size = abi::builtin_size(dt).unwrap_or(1);
            let in_place = at_root && is_in_place(s);
            let stage = (at_root && !aligned(r, size)) || (!in_place && !aligned(s, size));
            start_coll(l, comm, req, |e| {
                let (el, rop) = fast?;
                if nn == 0 {
                    return None;
                }
                let mut staged = None;
                let mut src = if in_place { std::ptr::null() } else { s };
                let mut dst = if at_root { r } else { std::ptr::null_mut() };
                if stage {
                    let len = nn * size;
                    // SAFETY: the program's send buffer of `n` elements.
                    let send = if src.is_null() { Vec::new() } else { unsafe { Staged::copy_of(src.cast(), len) } };
                    // SAFETY: the root's receive buffer (in place, the data starts there).
                    let recv = if at_root { unsafe { Staged::copy_of(r.cast_const().cast(), len) } } else { Vec::new() };
                    let (to, back) = if at_root { (r.cast(), len) } else { (std::ptr::null_mut(), 0) };
                    let st: &mut Staged = staged.insert(Staged { send, recv, dst: to, len: back, unpack: None });
                    if !src.is_null() {
                        src = st.send.as_ptr().cast();
                    }
                    if at_root {
                        dst = st.recv.as_mut_ptr().cast();
                    }
                }
                let raw = with_el!(el, T => ireduce_t::<T>(e, src, dst, nn, rop, rt));
                Some(raw.map(|r| (r, staged)).map_err(Fail::from))
            }, |l| reduce(l, s, r, n, dt, op, root, comm))
        })
    }

    fn MPI_Iallreduce, PMPI_Iallreduce(s: *const c_void, r: *mut c_void, n: c_int, dt: Handle, op: Handle, comm: Handle, req: *mut Handle) -> c_int {
        run(comm, "MPI_Iallreduce", |l| {
            let nn = count(n)?;
            not_aliased(s, r, nn > 0, "MPI_Iallreduce")?;
            // The same choice on every rank: unaligned buffers are staged.
            let fast = native(dt, op);
            let size = abi::builtin_size(dt).unwrap_or(1);
            let stage = !aligned(r, size) || (!is_in_place(s) && !aligned(s, size));
            start_coll(l, comm, req, |e| {
                let (el, rop) = fast?;
                let mut staged = None;
                let (mut src, mut dst) = (if is_in_place(s) { std::ptr::null() } else { s }, r);
                if stage {
                    let len = nn * size;
                    // SAFETY: the program's buffers of `n` elements.
                    let send = if src.is_null() { Vec::new() } else { unsafe { Staged::copy_of(src.cast(), len) } };
                    // SAFETY: as above (in place, the data starts in `r`).
                    let recv = unsafe { Staged::copy_of(r.cast_const().cast(), len) };
                    let st: &mut Staged = staged.insert(Staged { send, recv, dst: r.cast(), len, unpack: None });
                    if !src.is_null() {
                        src = st.send.as_ptr().cast();
                    }
                    dst = st.recv.as_mut_ptr().cast();
                }
                let raw = with_el!(el, T => iallreduce_t::<T>(e, src, dst, nn, rop));
                Some(raw.map(|r| (r, staged)).map_err(Fail::from))
            }, |l| allreduce(l, s, r, n, dt, op, comm))
        })
    }

    fn MPI_Op_create, PMPI_Op_create(f: Option<crate::op::UserFn>, commute: c_int, op: *mut Handle) -> c_int {
        run(abi::COMM_WORLD, "MPI_Op_create", |l| {
            let Some(f) = f else { return fail(abi::ERR_ARG, "null user function") };
            set(op, l.ops.borrow_mut().create(f, commute != 0), "op")?;
            Ok(())
        })
    }

    fn MPI_Op_free, PMPI_Op_free(op: *mut Handle) -> c_int {
        run(abi::COMM_WORLD, "MPI_Op_free", |l| {
            if op.is_null() {
                return fail(abi::ERR_ARG, "null operation pointer");
            }
            l.ops.borrow_mut().free(&mut *op).map_err(|c| Fail::new(c, format!("cannot free operation {:#x}", *op)))
        })
    }

    fn MPI_Op_commutative, PMPI_Op_commutative(op: Handle, flag: *mut c_int) -> c_int {
        run(abi::COMM_WORLD, "MPI_Op_commutative", |l| {
            let c = l.ops.borrow().commutative(op).map_err(|c| Fail::new(c, format!("invalid operation {op:#x}")))?;
            set(flag, c as c_int, "flag")?;
            Ok(())
        })
    }
}
