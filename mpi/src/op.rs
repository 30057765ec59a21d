//! Reduction operations: MPICH's predefined `MPI_Op`s on the basic types,
//! and the program's own (`MPI_Op_create`).
//!
//! Which operation applies to which type follows MPICH 4.0 (checked with
//! `MPI_Reduce_local` against its `libmpich.so.12`): `MPI_MAX`/`MPI_MIN` on
//! integers (`MPI_CHAR` included) and reals; `MPI_SUM`/`MPI_PROD` on those
//! and complex numbers; the logical operations on integers, reals,
//! `MPI_C_BOOL`/`MPI_CXX_BOOL` and `MPI_LOGICAL` (results 0 or 1); the
//! bitwise ones on integers and `MPI_BYTE`; `MPI_MINLOC`/`MPI_MAXLOC` on the
//! pair types. `MPI_REPLACE` and `MPI_NO_OP` apply to everything. Unlike
//! MPICH, `long double` arithmetic (and `MPI_REAL16`, long double complex,
//! `MPI_LONG_DOUBLE_INT`) is not supported; `MPIX_C_FLOAT16` is.
//!
//! Every kernel computes `inout[i] = in[i] op inout[i]`, reading either
//! buffer unaligned when it must.

use crate::abi::{self, Count, Handle};
use crate::datatype::{Basic, Types};
use half::f16;
use std::cmp::Ordering;
use std::ffi::{c_int, c_void};

/// A user-defined operation's function (`MPI_User_function`):
/// `(invec, inoutvec, len, datatype)`.
pub type UserFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut Handle);

/// A user-defined operation's function with a large count
/// (`MPI_User_function_c`, for `MPI_Op_create_c`).
pub type UserFnC = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut Count, *mut Handle);

/// Whether `op` is one of MPICH's predefined operations (`MPI_MAX` …
/// `MPI_NO_OP`).
pub fn is_builtin(op: Handle) -> bool {
    (abi::MAX..=abi::NO_OP).contains(&op)
}

/// Whether predefined operation `op` applies to basic type `b` (MPICH's
/// table, less `long double`, plus `MPIX_C_FLOAT16`; see the module's
/// documentation). `false` for anything not a predefined operation.
pub fn builtin_applies(op: Handle, b: Basic) -> bool {
    use Basic::*;
    let int = matches!(b, I8 | U8 | I16 | U16 | I32 | U32 | I64 | U64);
    let real = matches!(b, F16 | F32 | F64);
    let complex = matches!(b, CFloatComplex | CDoubleComplex);
    // `long double` arithmetic where it is the x87 format (x86-64).
    let x87 = cfg!(target_arch = "x86_64");
    match op {
        abi::MAX | abi::MIN => int || real || (x87 && b == LongDouble),
        abi::SUM | abi::PROD => {
            int || real || complex || (x87 && matches!(b, LongDouble | CLongDoubleComplex))
        }
        abi::LAND | abi::LOR | abi::LXOR => int || real || matches!(b, Bool | Logical),
        abi::BAND | abi::BOR | abi::BXOR => int || b == Byte,
        abi::MINLOC | abi::MAXLOC => {
            matches!(
                b,
                FloatInt | DoubleInt | LongInt | ShortInt | TwoInt | TwoReal | TwoDouble
            ) || (x87 && b == LongDoubleInt)
        }
        abi::REPLACE | abi::NO_OP => true,
        _ => false,
    }
}

/// `inout[i] = f(in[i], inout[i])` for `n` elements of `T`: as slices when
/// both are aligned and disjoint (so that the loop vectorises), element by
/// element through unaligned reads otherwise.
///
/// # Safety
/// `inp` and `inout` must each hold `n` elements of `T` (any alignment),
/// `inout` writable.
#[inline(always)]
unsafe fn zip<T: Copy>(n: usize, inp: *const u8, inout: *mut u8, f: impl Fn(T, T) -> T) {
    if n == 0 {
        return;
    }
    let s = inp.cast::<T>();
    let d = inout.cast::<T>();
    let bytes = n * std::mem::size_of::<T>();
    let (a, b) = (inp as usize, inout as usize);
    let disjoint = a.wrapping_add(bytes) <= b || b.wrapping_add(bytes) <= a;
    if disjoint && s.is_aligned() && d.is_aligned() {
        // SAFETY: aligned, disjoint, `n` elements each (the caller's word).
        let (src, dst) = unsafe {
            (
                std::slice::from_raw_parts(s, n),
                std::slice::from_raw_parts_mut(d, n),
            )
        };
        for (x, &y) in dst.iter_mut().zip(src) {
            *x = f(y, *x);
        }
    } else {
        for i in 0..n {
            // SAFETY: element i of both buffers, read before written.
            unsafe {
                let y = s.add(i).read_unaligned();
                let p = d.add(i);
                p.write_unaligned(f(y, p.read_unaligned()));
            }
        }
    }
}

macro_rules! int_kernel {
    ($t:ty, $op:expr, $n:expr, $i:expr, $o:expr) => {
        match $op {
            abi::SUM => zip::<$t>($n, $i, $o, |s, d| d.wrapping_add(s)),
            abi::PROD => zip::<$t>($n, $i, $o, |s, d| d.wrapping_mul(s)),
            abi::MAX => zip::<$t>($n, $i, $o, |s, d| if d > s { d } else { s }),
            abi::MIN => zip::<$t>($n, $i, $o, |s, d| if d > s { s } else { d }),
            abi::LAND => zip::<$t>($n, $i, $o, |s, d| (d != 0 && s != 0) as $t),
            abi::LOR => zip::<$t>($n, $i, $o, |s, d| (d != 0 || s != 0) as $t),
            abi::LXOR => zip::<$t>($n, $i, $o, |s, d| ((d != 0) != (s != 0)) as $t),
            abi::BAND => zip::<$t>($n, $i, $o, |s, d| d & s),
            abi::BOR => zip::<$t>($n, $i, $o, |s, d| d | s),
            abi::BXOR => zip::<$t>($n, $i, $o, |s, d| d ^ s),
            _ => return Err(abi::ERR_OP),
        }
    };
}

macro_rules! real_kernel {
    ($t:ty, $op:expr, $n:expr, $i:expr, $o:expr) => {
        match $op {
            abi::SUM => zip::<$t>($n, $i, $o, |s, d| d + s),
            abi::PROD => zip::<$t>($n, $i, $o, |s, d| d * s),
            abi::MAX => zip::<$t>($n, $i, $o, |s, d| if d > s { d } else { s }),
            abi::MIN => zip::<$t>($n, $i, $o, |s, d| if d > s { s } else { d }),
            abi::LAND => zip::<$t>($n, $i, $o, |s, d| if d != 0.0 && s != 0.0 { 1.0 } else { 0.0 }),
            abi::LOR => zip::<$t>($n, $i, $o, |s, d| if d != 0.0 || s != 0.0 { 1.0 } else { 0.0 }),
            abi::LXOR => zip::<$t>($n, $i, $o, |s, d| if (d != 0.0) != (s != 0.0) { 1.0 } else { 0.0 }),
            _ => return Err(abi::ERR_OP),
        }
    };
}

macro_rules! logical_kernel {
    ($t:ty, $op:expr, $n:expr, $i:expr, $o:expr) => {
        match $op {
            abi::LAND => zip::<$t>($n, $i, $o, |s, d| (d != 0 && s != 0) as $t),
            abi::LOR => zip::<$t>($n, $i, $o, |s, d| (d != 0 || s != 0) as $t),
            abi::LXOR => zip::<$t>($n, $i, $o, |s, d| ((d != 0) != (s != 0)) as $t),
            _ => return Err(abi::ERR_OP),
        }
    };
}

macro_rules! complex_kernel {
    ($t:ty, $op:expr, $n:expr, $i:expr, $o:expr) => {
        match $op {
            abi::SUM => zip::<[$t; 2]>($n, $i, $o, |s, d| [d[0] + s[0], d[1] + s[1]]),
            abi::PROD => zip::<[$t; 2]>($n, $i, $o, |s, d| {
                [d[0] * s[0] - d[1] * s[1], d[0] * s[1] + d[1] * s[0]]
            }),
            _ => return Err(abi::ERR_OP),
        }
    };
}

/// `MPI_MINLOC` (`max` false) or `MPI_MAXLOC` on `n` pairs `stride` bytes
/// apart, value `V` at 0 and index `I` at `io`: the better value wins, and
/// on a tie the smaller index (NaN values compare unequal: no change).
///
/// # Safety
/// Both buffers must hold the `n` pairs, `inout` writable.
unsafe fn loc<V: PartialOrd + Copy, I: PartialOrd + Copy>(
    n: usize,
    inp: *const u8,
    inout: *mut u8,
    stride: usize,
    io: usize,
    max: bool,
) {
    for k in 0..n {
        // SAFETY: pair k of both buffers (the caller's word).
        unsafe {
            let s = inp.add(k * stride);
            let d = inout.add(k * stride);
            let sv = s.cast::<V>().read_unaligned();
            let dv = d.cast::<V>().read_unaligned();
            let si = s.add(io).cast::<I>().read_unaligned();
            let di = d.add(io).cast::<I>();
            match dv.partial_cmp(&sv) {
                Some(Ordering::Less) if max => {
                    d.cast::<V>().write_unaligned(sv);
                    di.write_unaligned(si);
                }
                Some(Ordering::Greater) if !max => {
                    d.cast::<V>().write_unaligned(sv);
                    di.write_unaligned(si);
                }
                Some(Ordering::Equal) if si < di.read_unaligned() => di.write_unaligned(si),
                _ => {}
            }
        }
    }
}

/// Applies predefined operation `op` elementwise to `n` elements of basic
/// type `b`: `inout[i] = in[i] op inout[i]`. The elements are C arrays of
/// `b` (`b.size()` bytes apart; for the pair types the C struct, padding
/// included), at any alignment. `MPI_REPLACE` copies `in` (the data bytes
/// only, not a pair's padding); `MPI_NO_OP` keeps `inout`.
///
/// # Errors
/// `ERR_OP` when `op` is not a predefined operation or does not apply to
/// `b` (`builtin_applies`).
///
/// # Safety
/// `inp` must hold `n` readable elements, `inout` `n` writable ones; they
/// may be the same buffer but must not otherwise overlap.
pub unsafe fn apply_builtin(
    op: Handle,
    b: Basic,
    n: usize,
    inp: *const u8,
    inout: *mut u8,
) -> Result<(), c_int> {
    if !builtin_applies(op, b) {
        return Err(abi::ERR_OP);
    }
    if n == 0 || op == abi::NO_OP {
        return Ok(());
    }
    if op == abi::REPLACE {
        match b.pair_parts() {
            Some((v, io, i)) if v + i != b.size() => {
                for k in 0..n {
                    let at = k * b.size();
                    // SAFETY: the value and index of pair k (the caller's word).
                    unsafe {
                        std::ptr::copy(inp.add(at), inout.add(at), v);
                        std::ptr::copy(inp.add(at + io), inout.add(at + io), i);
                    }
                }
            }
            // SAFETY: n elements each (the caller's word).
            _ => unsafe { std::ptr::copy(inp, inout, n * b.size()) },
        }
        return Ok(());
    }
    // SAFETY: n elements of `b` in each buffer (the caller's word); the
    // kernels read each element before writing it.
    unsafe { kernel(op, b, n, inp, inout) }
}

/// The arithmetic of `apply_builtin`.
///
/// # Safety
/// As `apply_builtin`.
unsafe fn kernel(op: Handle, b: Basic, n: usize, i: *const u8, o: *mut u8) -> Result<(), c_int> {
    use Basic::*;
    let max = op == abi::MAXLOC;
    match b {
        I8 => int_kernel!(i8, op, n, i, o),
        U8 => int_kernel!(u8, op, n, i, o),
        I16 => int_kernel!(i16, op, n, i, o),
        U16 => int_kernel!(u16, op, n, i, o),
        I32 => int_kernel!(i32, op, n, i, o),
        U32 => int_kernel!(u32, op, n, i, o),
        I64 => int_kernel!(i64, op, n, i, o),
        U64 => int_kernel!(u64, op, n, i, o),
        F32 => real_kernel!(f32, op, n, i, o),
        F64 => real_kernel!(f64, op, n, i, o),
        F16 => {
            let t = |x: f16| x.to_f32();
            let one = |c: bool| if c { f16::ONE } else { f16::ZERO };
            match op {
                abi::SUM => zip::<f16>(n, i, o, |s, d| f16::from_f32(t(d) + t(s))),
                abi::PROD => zip::<f16>(n, i, o, |s, d| f16::from_f32(t(d) * t(s))),
                abi::MAX => zip::<f16>(n, i, o, |s, d| if t(d) > t(s) { d } else { s }),
                abi::MIN => zip::<f16>(n, i, o, |s, d| if t(d) > t(s) { s } else { d }),
                abi::LAND => zip::<f16>(n, i, o, |s, d| one(t(d) != 0.0 && t(s) != 0.0)),
                abi::LOR => zip::<f16>(n, i, o, |s, d| one(t(d) != 0.0 || t(s) != 0.0)),
                abi::LXOR => zip::<f16>(n, i, o, |s, d| one((t(d) != 0.0) != (t(s) != 0.0))),
                _ => return Err(abi::ERR_OP),
            }
        }
        Bool => logical_kernel!(u8, op, n, i, o),
        Logical => logical_kernel!(i32, op, n, i, o),
        Byte => match op {
            abi::BAND => zip::<u8>(n, i, o, |s, d| d & s),
            abi::BOR => zip::<u8>(n, i, o, |s, d| d | s),
            abi::BXOR => zip::<u8>(n, i, o, |s, d| d ^ s),
            _ => return Err(abi::ERR_OP),
        },
        CFloatComplex => complex_kernel!(f32, op, n, i, o),
        CDoubleComplex => complex_kernel!(f64, op, n, i, o),
        FloatInt => loc::<f32, i32>(n, i, o, 8, 4, max),
        DoubleInt => loc::<f64, i32>(n, i, o, 16, 8, max),
        LongInt => loc::<i64, i32>(n, i, o, 16, 8, max),
        ShortInt => loc::<i16, i32>(n, i, o, 8, 4, max),
        TwoInt => loc::<i32, i32>(n, i, o, 8, 4, max),
        TwoReal => loc::<f32, f32>(n, i, o, 8, 4, max),
        TwoDouble => loc::<f64, f64>(n, i, o, 16, 8, max),
        #[cfg(target_arch = "x86_64")]
        LongDouble => {
            use crate::x87::{add, cmp, mul, F80};
            let gt = |d: F80, s: F80| cmp(d, s) == Some(Ordering::Greater);
            match op {
                abi::SUM => zip::<F80>(n, i, o, |s, d| add(d, s)),
                abi::PROD => zip::<F80>(n, i, o, |s, d| mul(d, s)),
                abi::MAX => zip::<F80>(n, i, o, |s, d| if gt(d, s) { d } else { s }),
                abi::MIN => zip::<F80>(n, i, o, |s, d| if gt(d, s) { s } else { d }),
                _ => return Err(abi::ERR_OP),
            }
        }
        #[cfg(target_arch = "x86_64")]
        CLongDoubleComplex => {
            use crate::x87::{add, mul, sub, F80};
            match op {
                abi::SUM => zip::<[F80; 2]>(n, i, o, |s, d| [add(d[0], s[0]), add(d[1], s[1])]),
                abi::PROD => zip::<[F80; 2]>(n, i, o, |s, d| {
                    [
                        sub(mul(d[0], s[0]), mul(d[1], s[1])),
                        add(mul(d[0], s[1]), mul(d[1], s[0])),
                    ]
                }),
                _ => return Err(abi::ERR_OP),
            }
        }
        #[cfg(target_arch = "x86_64")]
        LongDoubleInt => loc::<crate::x87::Num, i32>(n, i, o, 32, 16, max),
        WChar | Packed => return Err(abi::ERR_OP),
        #[cfg(not(target_arch = "x86_64"))]
        LongDouble | CLongDoubleComplex | LongDoubleInt => return Err(abi::ERR_OP),
    }
    Ok(())
}

/// A user-defined operation's function.
#[derive(Clone, Copy)]
enum Func {
    Int(UserFn),
    Big(UserFnC),
}

#[derive(Clone, Copy)]
struct UserOp {
    f: Func,
    commute: bool,
}

/// The handles of user-defined operations: `0x9800_0000 | index`.
const USER_BASE: u32 = 0x9800_0000;
const USER_MASK: u32 = 0xfff0_0000;
const USER_MAX: usize = 0x10_0000;

/// The operations of a process: the predefined ones, and a slab of the
/// program's own.
#[derive(Default)]
pub struct Ops {
    slots: Vec<Option<UserOp>>,
    free_slots: Vec<usize>,
}

impl Ops {
    /// An empty table (predefined operations only).
    pub fn new() -> Self {
        Ops::default()
    }

    /// The function of a live user-defined operation, to be called with
    /// no borrow of the library's tables held (the function may call the
    /// library: free a datatype, create an operation).
    pub fn user_call(&self, op: Handle) -> Option<UserCall> {
        self.user(op).map(|u| UserCall(u.f))
    }

    fn user(&self, op: Handle) -> Option<UserOp> {
        let u = op as u32;
        if u & USER_MASK != USER_BASE {
            return None;
        }
        *self.slots.get((u & !USER_MASK) as usize)?
    }

    fn insert(&mut self, u: UserOp) -> Handle {
        let idx = match self.free_slots.pop() {
            Some(i) => i,
            // 2^20 live operations: no handle left.
            None if self.slots.len() >= USER_MAX => return abi::OP_NULL,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        self.slots[idx] = Some(u);
        (USER_BASE | idx as u32) as Handle
    }

    /// `MPI_Op_create`: a new operation calling `f` (`MPI_OP_NULL` once
    /// 2^20 are live).
    pub fn create(&mut self, f: UserFn, commute: bool) -> Handle {
        self.insert(UserOp {
            f: Func::Int(f),
            commute,
        })
    }

    /// `MPI_Op_create_c`: a new operation calling `f` with an `MPI_Count`
    /// length.
    pub fn create_c(&mut self, f: UserFnC, commute: bool) -> Handle {
        self.insert(UserOp {
            f: Func::Big(f),
            commute,
        })
    }

    /// `MPI_Op_free`: frees a user-defined operation and sets `*op` to
    /// `MPI_OP_NULL`.
    ///
    /// # Errors
    /// `ERR_OP` for a predefined operation or an invalid handle (`*op`
    /// unchanged).
    pub fn free(&mut self, op: &mut Handle) -> Result<(), c_int> {
        if self.user(*op).is_none() {
            return Err(abi::ERR_OP);
        }
        let idx = (*op as u32 & !USER_MASK) as usize;
        self.slots[idx] = None;
        self.free_slots.push(idx);
        *op = abi::OP_NULL;
        Ok(())
    }

    /// Whether `op` is a predefined or a live user-defined operation.
    pub fn is_valid(&self, op: Handle) -> bool {
        is_builtin(op) || self.user(op).is_some()
    }

    /// `MPI_Op_commutative` (predefined operations are).
    ///
    /// # Errors
    /// `ERR_OP` for an invalid handle.
    pub fn commutative(&self, op: Handle) -> Result<bool, c_int> {
        if is_builtin(op) {
            return Ok(true);
        }
        self.user(op).map(|u| u.commute).ok_or(abi::ERR_OP)
    }

    /// `inout = in op inout` for `count` elements of datatype `dt`, both
    /// buffers in `dt`'s layout (element `i` at `i * extent`). A
    /// predefined operation needs a type whose elements are all one basic
    /// type (`TypeInfo::basic`), except `MPI_REPLACE` (copies the data) and
    /// `MPI_NO_OP`, which take any type; a user-defined one is called once
    /// with `len = count` and `dt` (in pieces of at most `i32::MAX`
    /// elements for an `MPI_User_function`).
    ///
    /// # Errors
    /// `ERR_OP` for an invalid operation or one that does not apply to
    /// `dt`; `ERR_TYPE` for an invalid `dt`; `ERR_COUNT` when `count *
    /// size` overflows.
    ///
    /// # Safety
    /// `inp` must hold `count` readable elements of `dt`, `inout` `count`
    /// writable ones; they may be the same buffer but must not otherwise
    /// overlap. A user function must be safe to call with them.
    pub unsafe fn apply(
        &self,
        op: Handle,
        types: &Types,
        dt: Handle,
        count: usize,
        inp: *const u8,
        inout: *mut u8,
    ) -> Result<(), c_int> {
        if !self.is_valid(op) {
            return Err(abi::ERR_OP);
        }
        let info = types.info(dt)?;
        if let Some(u) = self.user(op) {
            // SAFETY: the caller's buffers and function.
            unsafe { call_user(u.f, dt, info.extent, count, inp, inout) };
            return Ok(());
        }
        match op {
            abi::NO_OP => return Ok(()),
            abi::REPLACE => {
                return types.for_each_block(dt, count, |off, _, len| {
                    // SAFETY: a block of the data of both buffers (the caller's word).
                    unsafe {
                        std::ptr::copy(inp.wrapping_offset(off), inout.wrapping_offset(off), len)
                    }
                });
            }
            _ => {}
        }
        if count == 0 || info.size == 0 {
            return Ok(());
        }
        let (b, _) = info.basic.ok_or(abi::ERR_OP)?;
        if !builtin_applies(op, b) {
            return Err(abi::ERR_OP);
        }
        if types.is_predefined(dt) {
            // SAFETY: a C array of `count` elements of `b` in each buffer.
            return unsafe { apply_builtin(op, b, count, inp, inout) };
        }
        if !b.is_pair() {
            let w = b.size();
            return types.for_each_block(dt, count, |off, _, len| {
                // SAFETY: a block of whole elements of `b` in both buffers;
                // `op` applies to `b`, so this cannot fail.
                let _ = unsafe {
                    apply_builtin(
                        op,
                        b,
                        len / w,
                        inp.wrapping_offset(off),
                        inout.wrapping_offset(off),
                    )
                };
            });
        }
        // Pair types: each pair's value and index lie where its C struct
        // puts them relative to the pair's first byte, which is where a
        // block reaches a multiple of the pair's data size.
        let ps = b.data_size();
        types.for_each_block(dt, count, |off, pos, len| {
            let mut p = pos.next_multiple_of(ps);
            while p < pos + len {
                let at = off.wrapping_add((p - pos) as isize);
                // SAFETY: a whole pair in both buffers; `op` applies to `b`.
                let _ = unsafe {
                    apply_builtin(op, b, 1, inp.wrapping_offset(at), inout.wrapping_offset(at))
                };
                p += ps;
            }
        })
    }
}

/// A user-defined operation's function, taken out of the table
/// (`Ops::user_call`) so that it runs with no borrow held.
#[derive(Clone, Copy)]
pub struct UserCall(Func);

impl UserCall {
    /// `inout = in op inout` for `count` elements of `dt` (extent
    /// `extent`): calls the function once, or in pieces of at most
    /// `i32::MAX` elements for an `MPI_User_function`.
    ///
    /// # Safety
    /// As `Ops::apply`.
    pub unsafe fn call(
        self,
        dt: Handle,
        extent: isize,
        count: usize,
        inp: *const u8,
        inout: *mut u8,
    ) {
        // SAFETY: the caller's word.
        unsafe { call_user(self.0, dt, extent, count, inp, inout) }
    }
}

/// Calls a user-defined operation's function on `count` elements.
///
/// # Safety
/// As `Ops::apply`.
unsafe fn call_user(
    f: Func,
    dt: Handle,
    extent: isize,
    count: usize,
    inp: *const u8,
    inout: *mut u8,
) {
    match f {
        Func::Int(f) => {
            let mut done = 0usize;
            while done < count {
                let k = (count - done).min(c_int::MAX as usize);
                let off = (done as isize).wrapping_mul(extent);
                let mut len = k as c_int;
                let mut t = dt;
                // SAFETY: the caller's buffers, `k` elements from element `done`.
                unsafe {
                    f(
                        inp.wrapping_offset(off) as *mut c_void,
                        inout.wrapping_offset(off).cast(),
                        &mut len,
                        &mut t,
                    )
                };
                done += k;
            }
        }
        Func::Big(f) => {
            if count > 0 {
                let mut len = count as Count;
                let mut t = dt;
                // SAFETY: the caller's buffers of `count` elements.
                unsafe { f(inp as *mut c_void, inout.cast(), &mut len, &mut t) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{DOUBLE_INT, ERR_OP, ERR_TYPE, INT, SHORT_INT};
    use Basic::*;

    const ALL_OPS: [Handle; 14] = [
        abi::MAX,
        abi::MIN,
        abi::SUM,
        abi::PROD,
        abi::LAND,
        abi::BAND,
        abi::LOR,
        abi::BOR,
        abi::LXOR,
        abi::BXOR,
        abi::MINLOC,
        abi::MAXLOC,
        abi::REPLACE,
        abi::NO_OP,
    ];
    const ALL_BASICS: [Basic; 28] = [
        I8,
        U8,
        I16,
        U16,
        I32,
        U32,
        I64,
        U64,
        F16,
        F32,
        F64,
        LongDouble,
        Bool,
        Logical,
        WChar,
        Byte,
        Packed,
        CFloatComplex,
        CDoubleComplex,
        CLongDoubleComplex,
        FloatInt,
        DoubleInt,
        LongInt,
        ShortInt,
        TwoInt,
        LongDoubleInt,
        TwoReal,
        TwoDouble,
    ];

    fn op_name(op: Handle) -> &'static str {
        [
            "MAX", "MIN", "SUM", "PROD", "LAND", "BAND", "LOR", "BOR", "LXOR", "BXOR", "MINLOC",
            "MAXLOC", "REPLACE", "NO_OP",
        ][(op - abi::MAX) as usize]
    }

    /// What `MPI_Reduce_local` in MPICH 4.0.2 accepts, per predefined type
    /// (REPLACE and NO_OP are not reductions there). Logical operations on
    /// reals pass MPICH's check but abort in its kernel: left out here.
    const MPICH: &[(Handle, &str)] = &[
        (abi::CHAR, "MAX MIN SUM PROD LAND BAND LOR BOR LXOR BXOR"),
        (
            abi::SIGNED_CHAR,
            "MAX MIN SUM PROD LAND BAND LOR BOR LXOR BXOR",
        ),
        (
            abi::UNSIGNED_CHAR,
            "MAX MIN SUM PROD LAND BAND LOR BOR LXOR BXOR",
        ),
        (abi::BYTE, "BAND BOR BXOR"),
        (abi::WCHAR, ""),
        (abi::SHORT, "MAX MIN SUM PROD LAND BAND LOR BOR LXOR BXOR"),
        (
            abi::UNSIGNED_SHORT,
            "MAX MIN SUM PROD LAND BAND LOR BOR LXOR BXOR",
        ),
        (abi::INT, "MAX MIN SUM PROD LAND BAND LOR BOR LXOR BXOR"),
        (
            abi::UNSIGNED,
            "MAX MIN SUM PROD LAND BAND LOR BOR LXOR BXOR",
        ),
        (abi::LONG, "MAX MIN SUM PROD LAND BAND LOR BOR LXOR BXOR"),
        (
            abi::UNSIGNED_LONG,
            "MAX MIN SUM PROD LAND BAND LOR BOR LXOR BXOR",
        ),
        (abi::FLOAT, "MAX MIN SUM PROD"),
        (abi::DOUBLE, "MAX MIN SUM PROD"),
        (abi::LONG_DOUBLE, "MAX MIN SUM PROD"),
        (
            abi::LONG_LONG_INT,
            "MAX MIN SUM PROD LAND BAND LOR BOR LXOR BXOR",
        ),
        (
            abi::UNSIGNED_LONG_LONG,
            "MAX MIN SUM PROD LAND BAND LOR BOR LXOR BXOR",
        ),
        (abi::PACKED, ""),
        (abi::FLOAT_INT, "MINLOC MAXLOC"),
        (abi::DOUBLE_INT, "MINLOC MAXLOC"),
        (abi::LONG_INT, "MINLOC MAXLOC"),
        (abi::SHORT_INT, "MINLOC MAXLOC"),
        (abi::TWO_INT, "MINLOC MAXLOC"),
        (abi::LONG_DOUBLE_INT, "MINLOC MAXLOC"),
        (abi::COMPLEX, "SUM PROD"),
        (abi::DOUBLE_COMPLEX, "SUM PROD"),
        (abi::LOGICAL, "LAND LOR LXOR"),
        (abi::REAL, "MAX MIN SUM PROD"),
        (abi::DOUBLE_PRECISION, "MAX MIN SUM PROD"),
        (abi::INTEGER, "MAX MIN SUM PROD LAND BAND LOR BOR LXOR BXOR"),
        (abi::TWO_INTEGER, "MINLOC MAXLOC"),
        (abi::TWO_REAL, "MINLOC MAXLOC"),
        (abi::TWO_DOUBLE_PRECISION, "MINLOC MAXLOC"),
        (
            abi::CHARACTER,
            "MAX MIN SUM PROD LAND BAND LOR BOR LXOR BXOR",
        ),
        (abi::REAL4, "MAX MIN SUM PROD"),
        (abi::REAL8, "MAX MIN SUM PROD"),
        (abi::REAL16, "MAX MIN SUM PROD"),
        (abi::COMPLEX8, "SUM PROD"),
        (abi::COMPLEX16, "SUM PROD"),
        (abi::COMPLEX32, ""),
        (
            abi::INTEGER1,
            "MAX MIN SUM PROD LAND BAND LOR BOR LXOR BXOR",
        ),
        (
            abi::INTEGER2,
            "MAX MIN SUM PROD LAND BAND LOR BOR LXOR BXOR",
        ),
        (
            abi::INTEGER4,
            "MAX MIN SUM PROD LAND BAND LOR BOR LXOR BXOR",
        ),
        (
            abi::INTEGER8,
            "MAX MIN SUM PROD LAND BAND LOR BOR LXOR BXOR",
        ),
        (abi::INT8_T, "MAX MIN SUM PROD LAND BAND LOR BOR LXOR BXOR"),
        (abi::INT16_T, "MAX MIN SUM PROD LAND BAND LOR BOR LXOR BXOR"),
        (abi::INT32_T, "MAX MIN SUM PROD LAND BAND LOR BOR LXOR BXOR"),
        (abi::INT64_T, "MAX MIN SUM PROD LAND BAND LOR BOR LXOR BXOR"),
        (abi::UINT8_T, "MAX MIN SUM PROD LAND BAND LOR BOR LXOR BXOR"),
        (
            abi::UINT16_T,
            "MAX MIN SUM PROD LAND BAND LOR BOR LXOR BXOR",
        ),
        (
            abi::UINT32_T,
            "MAX MIN SUM PROD LAND BAND LOR BOR LXOR BXOR",
        ),
        (
            abi::UINT64_T,
            "MAX MIN SUM PROD LAND BAND LOR BOR LXOR BXOR",
        ),
        (abi::C_BOOL, "LAND LOR LXOR"),
        (abi::C_FLOAT_COMPLEX, "SUM PROD"),
        (abi::C_DOUBLE_COMPLEX, "SUM PROD"),
        (abi::C_LONG_DOUBLE_COMPLEX, "SUM PROD"),
        (abi::AINT, "MAX MIN SUM PROD LAND BAND LOR BOR LXOR BXOR"),
        (abi::OFFSET, "MAX MIN SUM PROD LAND BAND LOR BOR LXOR BXOR"),
        (abi::COUNT, "MAX MIN SUM PROD LAND BAND LOR BOR LXOR BXOR"),
        (abi::CXX_BOOL, "LAND LOR LXOR"),
        (abi::CXX_FLOAT_COMPLEX, "SUM PROD"),
        (abi::CXX_DOUBLE_COMPLEX, "SUM PROD"),
        (abi::CXX_LONG_DOUBLE_COMPLEX, "SUM PROD"),
    ];

    #[test]
    fn applicability_matches_mpich() {
        for &(h, ops) in MPICH {
            let b = crate::datatype::basic_of(h).unwrap();
            for op in ALL_OPS {
                let name = op_name(op);
                let mpich = ops.split(' ').any(|o| o == name);
                let ours = builtin_applies(op, b);
                // The documented differences: long double arithmetic only
                // where it is the x87 format; logical operations on reals;
                // REPLACE/NO_OP everywhere.
                let long_double = matches!(b, LongDouble | CLongDoubleComplex | LongDoubleInt)
                    && !cfg!(target_arch = "x86_64");
                let logical_real =
                    matches!(b, F32 | F64) && matches!(op, abi::LAND | abi::LOR | abi::LXOR);
                // Fortran's COMPLEX32 is C_LONG_DOUBLE_COMPLEX here, with
                // its SUM and PROD; MPICH 4.0.2 gives it no operation.
                let complex32 = h == abi::COMPLEX32
                    && cfg!(target_arch = "x86_64")
                    && matches!(op, abi::SUM | abi::PROD);
                let expected = if op == abi::REPLACE || op == abi::NO_OP || complex32 {
                    true
                } else if long_double {
                    false
                } else {
                    mpich || logical_real
                };
                assert_eq!(ours, expected, "{name} on {h:#x}");
            }
        }
        assert!(!builtin_applies(abi::OP_NULL, I32) && !builtin_applies(0x5800_000f, I32));
    }

    /// An integer element's value (sign-extended), or its bytes from one.
    fn int_of(b: Basic, x: &[u8]) -> Option<(i128, u32, bool)> {
        let (bits, signed) = match b {
            I8 => (8, true),
            U8 => (8, false),
            I16 => (16, true),
            U16 => (16, false),
            I32 => (32, true),
            U32 => (32, false),
            I64 => (64, true),
            U64 => (64, false),
            _ => return None,
        };
        let mut buf = [0u8; 16];
        buf[..x.len()].copy_from_slice(x);
        let raw = u128::from_le_bytes(buf);
        let v = if signed && raw >> (bits - 1) & 1 == 1 {
            (raw | (!0u128 << bits)) as i128
        } else {
            raw as i128
        };
        Some((v, bits, signed))
    }

    fn int_bytes(v: i128, bits: u32) -> Vec<u8> {
        (v as u128).to_le_bytes()[..bits as usize / 8].to_vec()
    }

    fn f32s(x: &[u8]) -> Vec<f32> {
        x.chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    fn f64s(x: &[u8]) -> Vec<f64> {
        x.chunks(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    /// A `long double`'s 16 bytes holding `x` (exact), padding zero.
    #[cfg(target_arch = "x86_64")]
    fn ld_bytes(x: f64) -> Vec<u8> {
        crate::x87::from_f64(x).0.to_vec()
    }

    /// The value of a `long double`'s bytes, as an f64 (exact for the
    /// samples here).
    #[cfg(target_arch = "x86_64")]
    fn ld(x: &[u8]) -> f64 {
        crate::x87::to_f64(crate::x87::F80(x[..16].try_into().unwrap()))
    }

    fn flag(c: bool) -> i128 {
        c as i128
    }

    /// The reference: one element of `inout` after `op`, from the elements'
    /// bytes `s` (in) and `d` (inout).
    fn expect(op: Handle, b: Basic, s: &[u8], d: &[u8]) -> Vec<u8> {
        if op == abi::NO_OP {
            return d.to_vec();
        }
        if op == abi::REPLACE {
            let mut out = d.to_vec();
            match b.pair_parts() {
                Some((v, io, i)) => {
                    out[..v].copy_from_slice(&s[..v]);
                    out[io..io + i].copy_from_slice(&s[io..io + i]);
                }
                None => out.copy_from_slice(s),
            }
            return out;
        }
        if let (Some((x, bits, _)), Some((y, _, _))) = (int_of(b, s), int_of(b, d)) {
            let r = match op {
                abi::SUM => y.wrapping_add(x),
                abi::PROD => y.wrapping_mul(x),
                abi::MAX => y.max(x),
                abi::MIN => y.min(x),
                abi::LAND => flag(y != 0 && x != 0),
                abi::LOR => flag(y != 0 || x != 0),
                abi::LXOR => flag((y != 0) != (x != 0)),
                abi::BAND => y & x,
                abi::BOR => y | x,
                abi::BXOR => y ^ x,
                _ => unreachable!(),
            };
            return int_bytes(r, bits);
        }
        let logic = |y: bool, x: bool| match op {
            abi::LAND => y && x,
            abi::LOR => y || x,
            abi::LXOR => y != x,
            _ => unreachable!(),
        };
        let real = |y: f64, x: f64| match op {
            abi::SUM => y + x,
            abi::PROD => y * x,
            abi::MAX => y.max(x),
            abi::MIN => y.min(x),
            _ => logic(y != 0.0, x != 0.0) as i32 as f64,
        };
        match b {
            Bool => vec![logic(d[0] != 0, s[0] != 0) as u8],
            Logical => (logic(d != [0; 4], s != [0; 4]) as i32)
                .to_le_bytes()
                .to_vec(),
            Byte => vec![match op {
                abi::BAND => d[0] & s[0],
                abi::BOR => d[0] | s[0],
                _ => d[0] ^ s[0],
            }],
            F16 => {
                let h = |x: &[u8]| f16::from_le_bytes([x[0], x[1]]).to_f64();
                f16::from_f64(real(h(d), h(s))).to_le_bytes().to_vec()
            }
            F32 => ((real(f32s(d)[0] as f64, f32s(s)[0] as f64)) as f32)
                .to_le_bytes()
                .to_vec(),
            F64 => real(f64s(d)[0], f64s(s)[0]).to_le_bytes().to_vec(),
            LongDouble => ld_bytes(real(ld(d), ld(s))),
            CLongDoubleComplex => {
                let (x, y) = ([ld(&s[..16]), ld(&s[16..])], [ld(&d[..16]), ld(&d[16..])]);
                let r = if op == abi::SUM {
                    [y[0] + x[0], y[1] + x[1]]
                } else {
                    [y[0] * x[0] - y[1] * x[1], y[0] * x[1] + y[1] * x[0]]
                };
                [ld_bytes(r[0]), ld_bytes(r[1])].concat()
            }
            CFloatComplex => {
                let (x, y) = (f32s(s), f32s(d));
                let r = if op == abi::SUM {
                    [y[0] + x[0], y[1] + x[1]]
                } else {
                    [y[0] * x[0] - y[1] * x[1], y[0] * x[1] + y[1] * x[0]]
                };
                r.iter().flat_map(|v| v.to_le_bytes()).collect()
            }
            CDoubleComplex => {
                let (x, y) = (f64s(s), f64s(d));
                let r = if op == abi::SUM {
                    [y[0] + x[0], y[1] + x[1]]
                } else {
                    [y[0] * x[0] - y[1] * x[1], y[0] * x[1] + y[1] * x[0]]
                };
                r.iter().flat_map(|v| v.to_le_bytes()).collect()
            }
            _ => {
                // Pairs: compare values as f64 (exact for every pair type
                // here), indices likewise.
                let (v, io, i) = b.pair_parts().unwrap();
                let val = |x: &[u8]| match b {
                    FloatInt | TwoReal => f32s(&x[..4])[0] as f64,
                    DoubleInt | TwoDouble => f64s(&x[..8])[0],
                    LongInt => int_of(I64, &x[..8]).unwrap().0 as f64,
                    LongDoubleInt => ld(&x[..16]),
                    ShortInt => int_of(I16, &x[..2]).unwrap().0 as f64,
                    _ => int_of(I32, &x[..4]).unwrap().0 as f64,
                };
                let idx = |x: &[u8]| match b {
                    TwoReal => f32s(&x[4..8])[0] as f64,
                    TwoDouble => f64s(&x[8..16])[0],
                    _ => int_of(I32, &x[io..io + 4]).unwrap().0 as f64,
                };
                let mut out = d.to_vec();
                let (sv, dv) = (val(s), val(d));
                let better = if op == abi::MINLOC { sv < dv } else { sv > dv };
                if better || (sv == dv && idx(s) < idx(d)) {
                    if better {
                        out[..v].copy_from_slice(&s[..v]);
                    }
                    out[io..io + i].copy_from_slice(&s[io..io + i]);
                }
                out
            }
        }
    }

    /// Random bytes for `n` elements of `b`, with values that make the
    /// operations interesting (zeros, ties, no NaN).
    fn sample(b: Basic, n: usize, seed: &mut u64) -> Vec<u8> {
        let mut rnd = || {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            *seed
        };
        let mut out = Vec::new();
        for _ in 0..n {
            let r = rnd();
            let small = (r % 7) as i64 - 3;
            match b {
                F16 => out.extend(
                    f16::from_f64(small as f64 * 0.75 + (r >> 20) as f64 % 3.0).to_le_bytes(),
                ),
                F32 => out.extend(
                    ((small as f32) * 1.25 + ((r >> 20) % 1000) as f32 / 64.0).to_le_bytes(),
                ),
                F64 => out
                    .extend(((small as f64) * 1.5 + ((r >> 20) % 1000) as f64 / 7.0).to_le_bytes()),
                CFloatComplex => {
                    out.extend((small as f32 / 3.0).to_le_bytes());
                    out.extend((((r >> 9) % 11) as f32 - 5.0).to_le_bytes())
                }
                CDoubleComplex => {
                    out.extend((small as f64 / 3.0).to_le_bytes());
                    out.extend((((r >> 9) % 11) as f64 - 5.5).to_le_bytes())
                }
                // Dyadic values: sums and products exact in an f64, so the
                // reference below can compute in f64.
                LongDouble => out.extend(ld_bytes(
                    small as f64 * 1.5 + ((r >> 20) % 1000) as f64 / 8.0,
                )),
                CLongDoubleComplex => {
                    out.extend(ld_bytes(small as f64 / 4.0));
                    out.extend(ld_bytes(((r >> 9) % 11) as f64 - 5.5))
                }
                Bool => out.push((r % 3) as u8),
                Logical => out.extend(((r % 3) as i32).to_le_bytes()),
                _ if b.is_pair() => {
                    let mut e = vec![0xeeu8; b.size()];
                    let (v, io, i) = b.pair_parts().unwrap();
                    let val = small as f64;
                    let ix = ((r >> 8) % 4) as f64;
                    let vb: Vec<u8> = match b {
                        FloatInt | TwoReal => (val as f32).to_le_bytes().to_vec(),
                        DoubleInt | TwoDouble => val.to_le_bytes().to_vec(),
                        LongInt => (val as i64).to_le_bytes().to_vec(),
                        ShortInt => (val as i16).to_le_bytes().to_vec(),
                        LongDoubleInt => ld_bytes(val),
                        _ => (val as i32).to_le_bytes().to_vec(),
                    };
                    let ib: Vec<u8> = match b {
                        TwoReal => (ix as f32).to_le_bytes().to_vec(),
                        TwoDouble => ix.to_le_bytes().to_vec(),
                        _ => (ix as i32).to_le_bytes().to_vec(),
                    };
                    e[..v].copy_from_slice(&vb[..v]);
                    e[io..io + i].copy_from_slice(&ib[..i]);
                    out.extend(e)
                }
                _ => {
                    let r = if r % 5 == 0 { 0 } else { r >> (r % 40) };
                    out.extend(&r.to_le_bytes()[..b.size().min(8)]);
                    out.extend(std::iter::repeat_n(0x11, b.size().saturating_sub(8)));
                }
            }
        }
        out
    }

    /// Runs `apply_builtin` with the buffers placed at alignment offset
    /// `shift` (0: aligned) and, with `same`, on one buffer.
    fn run(
        op: Handle,
        b: Basic,
        s: &[u8],
        d: &[u8],
        shift: usize,
        same: bool,
    ) -> (Result<(), c_int>, Vec<u8>) {
        let n = d.len() / b.size();
        let mut a = vec![0u64; s.len() / 8 + 4];
        let mut c = vec![0u64; d.len() / 8 + 4];
        // SAFETY: plain bytes of the u64 buffers, within them.
        let (ab, cb) = unsafe {
            (
                std::slice::from_raw_parts_mut(a.as_mut_ptr().cast::<u8>().add(shift), s.len()),
                std::slice::from_raw_parts_mut(c.as_mut_ptr().cast::<u8>().add(shift), d.len()),
            )
        };
        ab.copy_from_slice(s);
        cb.copy_from_slice(d);
        let inp = if same { cb.as_ptr() } else { ab.as_ptr() };
        // SAFETY: n elements in each buffer.
        let r = unsafe { apply_builtin(op, b, n, inp, cb.as_mut_ptr()) };
        (r, cb.to_vec())
    }

    #[test]
    fn every_op_on_every_basic_type() {
        let mut seed = 0x1234_5678_9abc_def1u64;
        let n = 37;
        for b in ALL_BASICS {
            for op in ALL_OPS {
                let s = sample(b, n, &mut seed);
                let d = sample(b, n, &mut seed);
                for shift in [0, 1, 3] {
                    let (r, got) = run(op, b, &s, &d, shift, false);
                    if !builtin_applies(op, b) {
                        assert_eq!((r, &got), (Err(ERR_OP), &d), "{} on {b:?}", op_name(op));
                        continue;
                    }
                    assert_eq!(r, Ok(()), "{} on {b:?}", op_name(op));
                    let want: Vec<u8> = s
                        .chunks(b.size())
                        .zip(d.chunks(b.size()))
                        .flat_map(|(x, y)| expect(op, b, x, y))
                        .collect();
                    assert_eq!(got, want, "{} on {b:?}, shift {shift}", op_name(op));
                }
                if builtin_applies(op, b) {
                    // In place: in and inout the same buffer.
                    let (r, got) = run(op, b, &d, &d, 0, true);
                    let want: Vec<u8> = d
                        .chunks(b.size())
                        .flat_map(|y| expect(op, b, y, y))
                        .collect();
                    assert_eq!(
                        (r, got),
                        (Ok(()), want),
                        "{} on {b:?} in place",
                        op_name(op)
                    );
                }
            }
        }
    }

    #[test]
    fn minloc_maxloc_ties_take_the_smaller_index() {
        // FLOAT_INT pairs (value, index).
        let pairs = |v: &[(f32, i32)]| -> Vec<u8> {
            v.iter()
                .flat_map(|&(x, i)| [x.to_ne_bytes(), i.to_ne_bytes()].concat())
                .collect()
        };
        let inp = pairs(&[(1.0, 7), (2.0, 3), (5.0, 9), (0.5, 1)]);
        let io = pairs(&[(1.0, 4), (2.0, 8), (3.0, 2), (f32::NAN, 0)]);
        let (r, got) = run(abi::MINLOC, FloatInt, &inp, &io, 0, false);
        assert_eq!(r, Ok(()));
        assert_eq!(&got[..24], &pairs(&[(1.0, 4), (2.0, 3), (3.0, 2)])[..]);
        // A NaN value compares unequal: no change (as MPICH).
        assert!(f32::from_ne_bytes(got[24..28].try_into().unwrap()).is_nan());
        let (_, got) = run(abi::MAXLOC, FloatInt, &inp, &io, 0, false);
        assert_eq!(&got[..24], &pairs(&[(1.0, 4), (2.0, 3), (5.0, 9)])[..]);
        // SHORT_INT: short at 0, int at 4, padding untouched.
        let mut a = vec![0xaau8; 8];
        a[..2].copy_from_slice(&5i16.to_ne_bytes());
        a[4..].copy_from_slice(&2i32.to_ne_bytes());
        let mut c = vec![0xccu8; 8];
        c[..2].copy_from_slice(&5i16.to_ne_bytes());
        c[4..].copy_from_slice(&6i32.to_ne_bytes());
        let (_, got) = run(abi::MINLOC, ShortInt, &a, &c, 1, false);
        assert_eq!(&got[2..4], &[0xcc, 0xcc]);
        assert_eq!(i32::from_ne_bytes(got[4..].try_into().unwrap()), 2);
    }

    #[test]
    fn real_min_max_follow_mpich_on_nan() {
        let s = [f64::NAN, 1.0, f64::NAN]
            .iter()
            .flat_map(|x| x.to_ne_bytes())
            .collect::<Vec<_>>();
        let d = [1.0, f64::NAN, f64::NAN]
            .iter()
            .flat_map(|x| x.to_ne_bytes())
            .collect::<Vec<_>>();
        // MAX: inout > in ? inout : in; MIN: inout > in ? in : inout.
        let (_, mx) = run(abi::MAX, F64, &s, &d, 0, false);
        let (_, mn) = run(abi::MIN, F64, &s, &d, 0, false);
        let mx = f64s(&mx);
        let mn = f64s(&mn);
        assert!(mx[0].is_nan() && mx[1] == 1.0 && mx[2].is_nan());
        assert!(mn[0] == 1.0 && mn[1].is_nan() && mn[2].is_nan());
    }

    #[test]
    fn zero_elements_touch_nothing() {
        // SAFETY: no element is read or written.
        unsafe {
            assert_eq!(
                apply_builtin(abi::SUM, I32, 0, std::ptr::null(), std::ptr::null_mut()),
                Ok(())
            );
            assert_eq!(
                apply_builtin(abi::BAND, F32, 0, std::ptr::null(), std::ptr::null_mut()),
                Err(ERR_OP)
            );
        }
    }

    unsafe extern "C" fn minus(a: *mut c_void, b: *mut c_void, len: *mut c_int, dt: *mut Handle) {
        // SAFETY: MPI's contract: len ints at a and b.
        unsafe {
            assert_eq!(*dt, INT);
            for i in 0..*len as usize {
                let p = b.cast::<i32>().add(i);
                *p = *a.cast::<i32>().add(i) - *p;
            }
        }
    }

    unsafe extern "C" fn count_c(_: *mut c_void, b: *mut c_void, len: *mut Count, _: *mut Handle) {
        // SAFETY: one i64 at b.
        unsafe { *b.cast::<i64>() = *len };
    }

    #[test]
    fn user_ops() {
        let mut ops = Ops::new();
        let types = Types::new();
        let h = ops.create(minus, false);
        assert!(ops.is_valid(h) && (h as u32) >> 20 == 0x980);
        assert_eq!(ops.commutative(h), Ok(false));
        assert_eq!(ops.commutative(abi::SUM), Ok(true));
        let a = [10i32, 20, 30];
        let mut b = [1i32, 2, 3];
        // SAFETY: three ints each.
        unsafe { ops.apply(h, &types, INT, 3, a.as_ptr().cast(), b.as_mut_ptr().cast()) }.unwrap();
        assert_eq!(b, [9, 18, 27]);
        let hc = ops.create_c(count_c, true);
        let mut x = [0i64; 1];
        // SAFETY: count_c writes one i64.
        unsafe {
            ops.apply(
                hc,
                &types,
                abi::LONG,
                5,
                x.as_ptr().cast(),
                x.as_mut_ptr().cast(),
            )
        }
        .unwrap();
        assert_eq!(x[0], 5);
        let mut hh = h;
        ops.free(&mut hh).unwrap();
        assert_eq!(hh, abi::OP_NULL);
        assert!(!ops.is_valid(h));
        assert_eq!(ops.commutative(h), Err(ERR_OP));
        let mut again = h;
        assert_eq!(ops.free(&mut again), Err(ERR_OP));
        assert_eq!(again, h);
        let mut sum = abi::SUM;
        assert_eq!(ops.free(&mut sum), Err(ERR_OP));
        let mut null = abi::OP_NULL;
        assert_eq!(ops.free(&mut null), Err(ERR_OP));
        assert!(!ops.is_valid(abi::OP_NULL));
        assert!(ALL_OPS.iter().all(|&o| ops.is_valid(o)));
        // Reused slot.
        assert_eq!(ops.create(minus, true), h);
    }

    #[test]
    fn apply_on_derived_types() {
        let ops = Ops::new();
        let mut t = Types::new();
        // Every third int.
        let v = t.vector(4, 1, 3, INT).unwrap();
        let a: Vec<i32> = (100..112).collect();
        let mut b: Vec<i32> = (0..12).collect();
        // SAFETY: one element of `v` (10 ints) each.
        unsafe { ops.apply(abi::SUM, &t, v, 1, a.as_ptr().cast(), b.as_mut_ptr().cast()) }.unwrap();
        assert_eq!(b, [100, 1, 2, 106, 4, 5, 112, 7, 8, 118, 10, 11]);
        // Pairs with padding, in a derived type: MINLOC over contiguous(3, DOUBLE_INT).
        let c = t.contiguous(3, DOUBLE_INT).unwrap();
        let pairs = |v: &[(f64, i32)]| -> Vec<u8> {
            v.iter()
                .flat_map(|&(x, i)| {
                    [&x.to_ne_bytes()[..], &i.to_ne_bytes()[..], &[0xdd; 4][..]].concat()
                })
                .collect()
        };
        let inp = pairs(&[(1.0, 5), (0.5, 9), (3.0, 1)]);
        let mut io = pairs(&[(1.0, 2), (2.0, 0), (1.0, 7)]);
        io[12..16].copy_from_slice(&[1, 2, 3, 4]);
        // SAFETY: three pairs each.
        unsafe { ops.apply(abi::MINLOC, &t, c, 1, inp.as_ptr(), io.as_mut_ptr()) }.unwrap();
        let mut want = pairs(&[(1.0, 2), (0.5, 9), (1.0, 7)]);
        want[12..16].copy_from_slice(&[1, 2, 3, 4]);
        assert_eq!(io, want);
        // SHORT_INT pairs two apart (holes inside and between pairs).
        let sv = t.vector(2, 1, 2, SHORT_INT).unwrap();
        let mk = |v: &[(i16, i32)]| -> Vec<u8> {
            v.iter()
                .flat_map(|&(x, i)| {
                    [
                        &x.to_ne_bytes()[..],
                        &[0xee, 0xee][..],
                        &i.to_ne_bytes()[..],
                    ]
                    .concat()
                })
                .collect()
        };
        let inp = mk(&[(4, 1), (0, 0), (9, 3)]);
        let mut io = mk(&[(4, 6), (7, 7), (8, 5)]);
        // SAFETY: one element of `sv` (3 pairs' span) each.
        unsafe { ops.apply(abi::MAXLOC, &t, sv, 1, inp.as_ptr(), io.as_mut_ptr()) }.unwrap();
        assert_eq!(io, mk(&[(4, 1), (7, 7), (9, 3)]));
        // The predefined pair type, padding untouched.
        let inp = pairs(&[(1.0, 5)]);
        let mut io = pairs(&[(2.0, 2)]);
        io[12..].copy_from_slice(&[9, 9, 9, 9]);
        // SAFETY: one pair each.
        unsafe {
            ops.apply(
                abi::MINLOC,
                &t,
                DOUBLE_INT,
                1,
                inp.as_ptr(),
                io.as_mut_ptr(),
            )
        }
        .unwrap();
        assert_eq!(&io[..12], &inp[..12]);
        assert_eq!(&io[12..], &[9, 9, 9, 9]);
        // A struct of different types: no arithmetic, but REPLACE copies its data only.
        let s = t
            .create_struct(&[1, 1], &[0, 8], &[INT, abi::DOUBLE])
            .unwrap();
        let inp = [0x11u8; 16];
        let mut io = [0x22u8; 16];
        // SAFETY: one element each.
        unsafe {
            assert_eq!(
                ops.apply(abi::SUM, &t, s, 1, inp.as_ptr(), io.as_mut_ptr()),
                Err(ERR_OP)
            );
            ops.apply(abi::NO_OP, &t, s, 1, inp.as_ptr(), io.as_mut_ptr())
                .unwrap();
            assert_eq!(io, [0x22; 16]);
            ops.apply(abi::REPLACE, &t, s, 1, inp.as_ptr(), io.as_mut_ptr())
                .unwrap();
        }
        assert_eq!(
            io,
            [[0x11; 4], [0x22; 4], [0x11; 4], [0x11; 4]].concat()[..]
        );
        // Resized: every other int, three elements.
        let r = t.resized(INT, 0, 8).unwrap();
        let a = [1i32, -1, 2, -1, 3, -1];
        let mut b = [10i32, 0, 20, 0, 30, 0];
        // SAFETY: three elements of `r` each.
        unsafe {
            ops.apply(
                abi::PROD,
                &t,
                r,
                3,
                a.as_ptr().cast(),
                b.as_mut_ptr().cast(),
            )
        }
        .unwrap();
        assert_eq!(b, [10, 0, 40, 0, 90, 0]);
        // Errors.
        let x = [0u8; 16];
        let mut y = [0u8; 16];
        // SAFETY: at most 16 bytes are touched, and errors touch nothing.
        unsafe {
            assert_eq!(
                ops.apply(abi::BAND, &t, abi::FLOAT, 1, x.as_ptr(), y.as_mut_ptr()),
                Err(ERR_OP)
            );
            assert_eq!(
                ops.apply(
                    abi::BAND,
                    &t,
                    abi::LONG_DOUBLE,
                    1,
                    x.as_ptr(),
                    y.as_mut_ptr()
                ),
                Err(ERR_OP)
            );
            // Arithmetic on long double only where it is the x87 format.
            let sum = ops.apply(
                abi::SUM,
                &t,
                abi::LONG_DOUBLE,
                1,
                x.as_ptr(),
                y.as_mut_ptr(),
            );
            assert_eq!(sum.is_ok(), cfg!(target_arch = "x86_64"));
            assert_eq!(
                ops.apply(abi::MINLOC, &t, INT, 1, x.as_ptr(), y.as_mut_ptr()),
                Err(ERR_OP)
            );
            assert_eq!(
                ops.apply(abi::OP_NULL, &t, INT, 1, x.as_ptr(), y.as_mut_ptr()),
                Err(ERR_OP)
            );
            assert_eq!(
                ops.apply(
                    abi::SUM,
                    &t,
                    abi::DATATYPE_NULL,
                    1,
                    x.as_ptr(),
                    y.as_mut_ptr()
                ),
                Err(ERR_TYPE)
            );
            assert_eq!(
                ops.apply(abi::SUM, &t, INT, 0, x.as_ptr(), y.as_mut_ptr()),
                Ok(())
            );
            assert_eq!(
                ops.apply(
                    abi::REPLACE,
                    &t,
                    abi::LONG_DOUBLE,
                    1,
                    x.as_ptr(),
                    y.as_mut_ptr()
                ),
                Ok(())
            );
        }
    }
}
