//! Element types and reduction operators of the collectives, and the
//! reduction kernels: one monomorphised loop per (type, operator), written
//! over slices so the compiler vectorises it.

use half::{bf16, f16};

/// A reduction operator (MPI's `MPI_Op`, NCCL's `ncclRedOp_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum (integers wrap on overflow; on floating point a NaN operand
    /// propagates, quieted, the first one if both are).
    Sum,
    /// Product (integers wrap on overflow; NaN operands as for `Sum`).
    Prod,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
    /// Bitwise and (integers only).
    BitAnd,
    /// Bitwise or (integers only).
    BitOr,
    /// Bitwise exclusive or (integers only).
    BitXor,
}

impl ReduceOp {
    /// Every operator, in declaration order.
    pub const ALL: [ReduceOp; 7] = [
        Self::Sum,
        Self::Prod,
        Self::Min,
        Self::Max,
        Self::BitAnd,
        Self::BitOr,
        Self::BitXor,
    ];

    /// The operator's short name (`sum`, `prod`, `min`, `max`, `band`,
    /// `bor`, `bxor`), as `tandem-perf` prints and parses it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sum => "sum",
            Self::Prod => "prod",
            Self::Min => "min",
            Self::Max => "max",
            Self::BitAnd => "band",
            Self::BitOr => "bor",
            Self::BitXor => "bxor",
        }
    }

    /// The operator named `s` (see [`name`](Self::name)).
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.name() == s)
    }
}

impl std::fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The element types collectives carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// `u8`
    U8,
    /// `i8`
    I8,
    /// `i32`
    I32,
    /// `u32`
    U32,
    /// `i64`
    I64,
    /// `u64`
    U64,
    /// IEEE half precision ([`half::f16`]).
    F16,
    /// bfloat16 ([`half::bf16`]).
    Bf16,
    /// `f32`
    F32,
    /// `f64`
    F64,
}

impl Dtype {
    /// Every type, in declaration order.
    pub const ALL: [Dtype; 10] = [
        Self::U8,
        Self::I8,
        Self::I32,
        Self::U32,
        Self::I64,
        Self::U64,
        Self::F16,
        Self::Bf16,
        Self::F32,
        Self::F64,
    ];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Self::U8 | Self::I8 => 1,
            Self::F16 | Self::Bf16 => 2,
            Self::I32 | Self::U32 | Self::F32 => 4,
            Self::I64 | Self::U64 | Self::F64 => 8,
        }
    }

    /// The type's short name as nccl-tests prints it (`uint8`, `int8`,
    /// `int32`, `uint32`, `int64`, `uint64`, `half`, `bfloat16`, `float`,
    /// `double`).
    pub fn name(self) -> &'static str {
        match self {
            Self::U8 => "uint8",
            Self::I8 => "int8",
            Self::I32 => "int32",
            Self::U32 => "uint32",
            Self::I64 => "int64",
            Self::U64 => "uint64",
            Self::F16 => "half",
            Self::Bf16 => "bfloat16",
            Self::F32 => "float",
            Self::F64 => "double",
        }
    }

    /// Whether the bitwise operators apply.
    pub fn is_integer(self) -> bool {
        !matches!(self, Self::F16 | Self::Bf16 | Self::F32 | Self::F64)
    }
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `out[i] = op(a[i], b[i])` over `n` elements. `out` is either the same
/// range as `a`, the same as `b`, or disjoint from both; `a` and `b` are
/// disjoint.
pub(crate) type Kernel = unsafe fn(out: *mut u8, a: *const u8, b: *const u8, n: usize);

mod sealed {
    pub trait Sealed {}
}

/// An element type collectives reduce: `u8 i8 i32 u32 i64 u64 f32 f64`,
/// [`half::f16`] and [`half::bf16`]. Sealed: the set is fixed so every
/// rank agrees on the kernels.
pub trait Element: bytemuck::Pod + PartialEq + std::fmt::Debug + sealed::Sealed {
    /// The type's tag.
    const DTYPE: Dtype;
    /// The kernel for `op`, `None` where it does not apply (bitwise on
    /// floating point).
    #[doc(hidden)]
    fn kernel(op: ReduceOp) -> Option<Kernel>;
}

/// Runs `f` element-wise with the aliasing `Kernel` allows, over slices so
/// the loop vectorises.
///
/// # Safety
/// `out`, `a`, `b` point to `n` valid, aligned `T`s; `out` equals `a`,
/// equals `b`, or overlaps neither; `a` and `b` do not overlap unless they
/// are the same range as `out` (never both).
#[inline(always)]
unsafe fn zip3<T: Copy>(out: *mut T, a: *const T, b: *const T, n: usize, f: impl Fn(T, T) -> T) {
    if n == 0 {
        return;
    }
    if std::ptr::eq(out, a) {
        // SAFETY: `out` (= `a`) and `b` are valid for `n` and disjoint.
        let (o, b) = unsafe {
            (
                std::slice::from_raw_parts_mut(out, n),
                std::slice::from_raw_parts(b, n),
            )
        };
        for (o, &y) in o.iter_mut().zip(b) {
            *o = f(*o, y);
        }
    } else if std::ptr::eq(out, b) {
        // SAFETY: `out` (= `b`) and `a` are valid for `n` and disjoint.
        let (o, a) = unsafe {
            (
                std::slice::from_raw_parts_mut(out, n),
                std::slice::from_raw_parts(a, n),
            )
        };
        for (o, &x) in o.iter_mut().zip(a) {
            *o = f(x, *o);
        }
    } else {
        // SAFETY: three valid ranges; `out` overlaps neither input.
        let (o, a, b) = unsafe {
            (
                std::slice::from_raw_parts_mut(out, n),
                std::slice::from_raw_parts(a, n),
                std::slice::from_raw_parts(b, n),
            )
        };
        for ((o, &x), &y) in o.iter_mut().zip(a).zip(b) {
            *o = f(x, y);
        }
    }
}

/// Defines one kernel function per operator for an element type.
macro_rules! kernels {
    ($t:ty, $d:ident, $($op:ident => $f:expr),* $(,)?) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: Dtype = Dtype::$d;
            fn kernel(op: ReduceOp) -> Option<Kernel> {
                $(
                    #[allow(non_snake_case)]
                    unsafe fn $op(out: *mut u8, a: *const u8, b: *const u8, n: usize) {
                        // SAFETY: the `Kernel` contract, with `T`-aligned
                        // ranges (the callers' buffers are `&[T]` and the
                        // scratch space is 64-byte aligned).
                        unsafe { zip3(out.cast::<$t>(), a.cast::<$t>(), b.cast::<$t>(), n, $f) }
                    }
                )*
                match op {
                    $( ReduceOp::$op => Some($op as Kernel), )*
                    #[allow(unreachable_patterns)]
                    _ => None,
                }
            }
        }
    };
}

/// Integer kernels: wrapping arithmetic and the bitwise operators.
macro_rules! int_kernels {
    ($t:ty, $d:ident) => {
        kernels!($t, $d,
            Sum => |x: $t, y: $t| x.wrapping_add(y),
            Prod => |x: $t, y: $t| x.wrapping_mul(y),
            Min => |x: $t, y: $t| if y < x { y } else { x },
            Max => |x: $t, y: $t| if y > x { y } else { x },
            BitAnd => |x: $t, y: $t| x & y,
            BitOr => |x: $t, y: $t| x | y,
            BitXor => |x: $t, y: $t| x ^ y,
        );
    };
}

/// `y`, or `$identity` (the operator's identity, `0.0` or `1.0`) when `x`
/// is NaN: the second operand of a float sum or product, chosen so that a
/// NaN `x` propagates, quieted, whatever `y` is. IEEE hardware returns the
/// one NaN operand, quieted, when only one is NaN; when both are it picks
/// one by the operand order of its instruction, which the compiler chooses
/// per loop (addition and multiplication commute), and `zip3`'s loops
/// differ: recursive doubling's partners compute the same element with
/// `out` = `a` on one rank and `out` = `b` on the other. Never letting both
/// be NaN makes every rank's bits agree. It costs a compare and a mask per
/// vector, and the loop still vectorises (a branch between two NaN results
/// here halved the in-cache f32 sum; a select of the result cost 20 %).
macro_rules! nan_first {
    ($x:ident, $y:expr, $identity:expr) => {
        if $x.is_nan() {
            $identity
        } else {
            $y
        }
    };
}

/// Floating-point kernels. `min`/`max` keep the first operand on ties and
/// when either is NaN compare false the same way on every rank (the
/// operand order is fixed by the algorithm, so results agree bitwise);
/// sums and products propagate the first NaN operand (`nan_first!`).
macro_rules! float_kernels {
    ($t:ty, $d:ident) => {
        kernels!($t, $d,
            Sum => |x: $t, y: $t| x + nan_first!(x, y, 0.0),
            Prod => |x: $t, y: $t| x * nan_first!(x, y, 1.0),
            Min => |x: $t, y: $t| if y < x { y } else { x },
            Max => |x: $t, y: $t| if y > x { y } else { x },
        );
    };
}

/// 16-bit float kernels: computed in `f32`, rounded once per operation;
/// NaN operands as in `float_kernels!`.
macro_rules! half_kernels {
    ($t:ty, $d:ident) => {
        kernels!($t, $d,
            Sum => |x: $t, y: $t| {
                <$t>::from_f32(x.to_f32() + nan_first!(x, y.to_f32(), 0.0))
            },
            Prod => |x: $t, y: $t| {
                <$t>::from_f32(x.to_f32() * nan_first!(x, y.to_f32(), 1.0))
            },
            Min => |x: $t, y: $t| if y < x { y } else { x },
            Max => |x: $t, y: $t| if y > x { y } else { x },
        );
    };
}

int_kernels!(u8, U8);
int_kernels!(i8, I8);
int_kernels!(i32, I32);
int_kernels!(u32, U32);
int_kernels!(i64, I64);
int_kernels!(u64, U64);
float_kernels!(f32, F32);
float_kernels!(f64, F64);
half_kernels!(f16, F16);
half_kernels!(bf16, Bf16);

/// `dst = op(dst, src)` element-wise on typed slices: the reduction kernel
/// the collectives run, exposed for measuring it (every collective
/// `tandem-perf` run prints its GB/s beside memcpy's) and for tests.
///
/// ```
/// use tandem_driver::{reduce_local, ReduceOp};
/// let mut acc = [1.0f32, 2.0, 3.0];
/// reduce_local(&mut acc, &[10.0, 20.0, 30.0], ReduceOp::Sum).unwrap();
/// assert_eq!(acc, [11.0, 22.0, 33.0]);
/// ```
///
/// # Errors
/// [`Error::InvalidArgument`](crate::error::Error::InvalidArgument) if `op` does
/// not apply to `T` (a bitwise operator on a float type) or the lengths
/// differ; `dst` is then unchanged.
pub fn reduce_local<T: Element>(
    dst: &mut [T],
    src: &[T],
    op: ReduceOp,
) -> crate::error::Result<()> {
    let k = T::kernel(op).ok_or_else(|| not_applicable(T::DTYPE, op))?;
    if dst.len() != src.len() {
        return Err(crate::error::Error::InvalidArgument(format!(
            "reduce_local: {} destination elements but {} source elements",
            dst.len(),
            src.len()
        )));
    }
    let p = dst.as_mut_ptr().cast::<u8>();
    // SAFETY: `dst` and `src` are distinct borrows (one is `&mut`), hence
    // disjoint, valid and aligned for `len` elements.
    unsafe { k(p, p, src.as_ptr().cast(), dst.len()) };
    Ok(())
}

/// The error for an operator that does not apply to a type.
pub(crate) fn not_applicable(d: Dtype, op: ReduceOp) -> crate::error::Error {
    crate::error::Error::InvalidArgument(format!(
        "reduction {op} does not apply to {d} (bitwise operators are for integer types)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check<T: Element>(a: &[T], b: &[T], op: ReduceOp, want: &[T]) {
        let mut x = a.to_vec();
        reduce_local(&mut x, b, op).unwrap();
        assert_eq!(x, want, "{:?} {op}", T::DTYPE);
    }

    #[test]
    fn every_type_and_operator() {
        check(&[250u8, 3], &[10, 4], ReduceOp::Sum, &[4, 7]);
        check(&[-3i8, 5], &[2, -7], ReduceOp::Min, &[-3, -7]);
        check(&[6i32, 1], &[7, 9], ReduceOp::Prod, &[42, 9]);
        check(&[0b1100u32], &[0b1010], ReduceOp::BitAnd, &[0b1000]);
        check(&[0b1100i64], &[0b1010], ReduceOp::BitOr, &[0b1110]);
        check(&[0b1100u64], &[0b1010], ReduceOp::BitXor, &[0b0110]);
        check(&[1.5f32, -2.0], &[2.0, 3.0], ReduceOp::Max, &[2.0, 3.0]);
        check(&[1.5f64], &[2.5], ReduceOp::Sum, &[4.0]);
        check(
            &[f16::from_f32(1.5)],
            &[f16::from_f32(2.0)],
            ReduceOp::Prod,
            &[f16::from_f32(3.0)],
        );
        check(
            &[bf16::from_f32(1.0)],
            &[bf16::from_f32(2.0)],
            ReduceOp::Sum,
            &[bf16::from_f32(3.0)],
        );
    }

    #[test]
    fn bitwise_on_floats_and_length_mismatch_are_errors() {
        let mut x = [1.0f32];
        assert!(matches!(
            reduce_local(&mut x, &[1.0], ReduceOp::BitXor),
            Err(crate::error::Error::InvalidArgument(_))
        ));
        let mut y = [1u8, 2];
        assert!(reduce_local(&mut y, &[1], ReduceOp::Sum).is_err());
        for d in Dtype::ALL {
            assert_eq!(
                d.is_integer(),
                !d.name().contains("float") && d.name() != "half" && d.name() != "double"
            );
        }
    }

    /// Runs `op`'s kernel on `n` copies of `u` and `v` in each aliasing
    /// form (disjoint, `out` = `a`, `out` = `b`) and checks every element
    /// is bitwise `want`.
    fn forms<T: Element>(op: ReduceOp, u: T, v: T, want: T) {
        let k = T::kernel(op).unwrap();
        // Long enough for a vector body and a scalar tail.
        let n = 37;
        let (a, b) = (vec![u; n], vec![v; n]);
        let mut o = vec![want; n];
        let mut oa = a.clone();
        let mut ob = b.clone();
        // SAFETY: vectors of `n` elements; `o` overlaps neither input,
        // `oa` is `out` and `a` with `b` disjoint, `ob` is `out` and `b`
        // with `a` disjoint.
        unsafe {
            k(
                o.as_mut_ptr().cast(),
                a.as_ptr().cast(),
                b.as_ptr().cast(),
                n,
            );
            k(
                oa.as_mut_ptr().cast(),
                oa.as_ptr().cast(),
                b.as_ptr().cast(),
                n,
            );
            k(
                ob.as_mut_ptr().cast(),
                a.as_ptr().cast(),
                ob.as_ptr().cast(),
                n,
            );
        }
        for (form, r) in [("disjoint", &o), ("out = a", &oa), ("out = b", &ob)] {
            for (i, x) in r.iter().enumerate() {
                assert_eq!(
                    bytemuck::bytes_of(x),
                    bytemuck::bytes_of(&want),
                    "{:?} {op} {form}, element {i}: {x:?} want {want:?}",
                    T::DTYPE
                );
            }
        }
    }

    /// Float sums and products propagate the first NaN operand, quieted,
    /// in every aliasing form of the kernel and in both its vector body and
    /// its tail: recursive doubling's partners reduce the same element
    /// with `out` = `a` on one rank and `out` = `b` on the other, and they
    /// must agree bitwise. `a` is a signalling NaN, `b` a quiet one with
    /// another payload and sign.
    #[test]
    fn float_nan_operands_propagate_first_in_every_aliasing_form() {
        fn all<T: Element>(a: T, qa: T, b: T, x: T) {
            for op in [ReduceOp::Sum, ReduceOp::Prod] {
                forms(op, a, b, qa);
                forms(op, b, a, b);
                forms(op, a, x, qa);
                forms(op, x, a, qa);
                forms(op, x, b, b);
            }
        }
        all(
            f64::from_bits(0xfff0_0000_0000_0005),
            f64::from_bits(0xfff8_0000_0000_0005),
            f64::from_bits(0x7ff8_0000_0000_0003),
            1.5,
        );
        all(
            f32::from_bits(0xff80_0005),
            f32::from_bits(0xffc0_0005),
            f32::from_bits(0x7fc0_0003),
            1.5,
        );
        all(
            f16::from_bits(0xfc05),
            f16::from_bits(0xfe05),
            f16::from_bits(0x7e03),
            f16::from_f32(1.5),
        );
        all(
            bf16::from_bits(0xff85),
            bf16::from_bits(0xffc5),
            bf16::from_bits(0x7fc3),
            bf16::from_f32(1.5),
        );
    }

    #[test]
    fn kernel_aliasing_forms_agree() {
        // out = a, out = b, and three distinct ranges give the same values.
        let k = <i32 as Element>::kernel(ReduceOp::Sum).unwrap();
        let a: Vec<i32> = (0..37).collect();
        let b: Vec<i32> = (0..37).map(|i| i * 100).collect();
        let mut o = vec![0i32; 37];
        // SAFETY: distinct vectors of 37 elements.
        unsafe {
            k(
                o.as_mut_ptr().cast(),
                a.as_ptr().cast(),
                b.as_ptr().cast(),
                37,
            )
        };
        let mut oa = a.clone();
        // SAFETY: out = a, b disjoint.
        unsafe {
            k(
                oa.as_mut_ptr().cast(),
                oa.as_ptr().cast(),
                b.as_ptr().cast(),
                37,
            )
        };
        let mut ob = b.clone();
        // SAFETY: out = b, a disjoint.
        unsafe {
            k(
                ob.as_mut_ptr().cast(),
                a.as_ptr().cast(),
                ob.as_ptr().cast(),
                37,
            )
        };
        assert_eq!(o, oa);
        assert_eq!(o, ob);
    }
}
