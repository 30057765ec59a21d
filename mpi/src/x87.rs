//! C's `long double` on x86-64: the x87 80-bit extended format in a
//! 16-byte slot (`MPI_LONG_DOUBLE`, the parts of
//! `MPI_C_LONG_DOUBLE_COMPLEX`, the value of `MPI_LONG_DOUBLE_INT`). Rust
//! has no such type, so the reductions load each value on the x87 stack,
//! apply one instruction and store the result back in 80 bits, as C code
//! compiled for x86-64 does (the x87 runs at its default extended
//! precision on Linux). The only unsafe code is the short `asm!`
//! sequences below (the arithmetic, the comparison, and the conversions
//! the tests use), each reading and writing the values it is given.

use std::cmp::Ordering;

/// A `long double` as stored in memory: 10 bytes of value, 6 of padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(16))]
pub struct F80(pub [u8; 16]);

/// A `long double` compared by value (equal zeros of both signs, NaN
/// unordered), for `MPI_MINLOC` and `MPI_MAXLOC`.
#[derive(Debug, Clone, Copy)]
#[repr(transparent)]
pub struct Num(pub F80);

impl PartialEq for Num {
    fn eq(&self, other: &Self) -> bool {
        cmp(self.0, other.0) == Some(Ordering::Equal)
    }
}

impl PartialOrd for Num {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        cmp(self.0, other.0)
    }
}

/// `a op b` rounded to 80 bits, `op` one x87 instruction that pops:
/// `st(1) = st(1) op st(0)` with `st(1) = a`, `st(0) = b`.
macro_rules! arith {
    ($op:literal, $a:expr, $b:expr) => {{
        let (a, b): (F80, F80) = ($a, $b);
        let mut out = F80([0; 16]);
        // SAFETY: reads the 10 value bytes of `a` and `b` and writes 10
        // bytes of `out` (16-byte locals), and leaves the x87 stack as it
        // found it (two loads, one pop by the operation, one by the
        // store), which the clobbers declare.
        unsafe {
            std::arch::asm!(
                "fld tbyte ptr [{a}]",
                "fld tbyte ptr [{b}]",
                $op,
                "fstp tbyte ptr [{o}]",
                a = in(reg) a.0.as_ptr(), b = in(reg) b.0.as_ptr(), o = in(reg) out.0.as_mut_ptr(),
                out("st(0)") _, out("st(1)") _,
                options(nostack),
            )
        };
        out
    }};
}

/// `a + b`.
pub fn add(a: F80, b: F80) -> F80 {
    arith!("faddp st(1), st", a, b)
}

/// `a - b` (`fsubp st(1), st` leaves st(1) - st(0); the unit test pins the
/// operand order, which assemblers have been known to swap for this
/// mnemonic).
pub fn sub(a: F80, b: F80) -> F80 {
    arith!("fsubp st(1), st", a, b)
}

/// `a * b`.
pub fn mul(a: F80, b: F80) -> F80 {
    arith!("fmulp st(1), st", a, b)
}

/// How `a` compares with `b`; `None` when either is a NaN.
pub fn cmp(a: F80, b: F80) -> Option<Ordering> {
    let (above, below, unordered): (u8, u8, u8);
    // SAFETY: reads the 10 value bytes of `a` and `b`; `fucomip` pops
    // one and `fstp st(0)` the other, so the x87 stack is left as found.
    unsafe {
        std::arch::asm!(
            "fld tbyte ptr [{b}]",
            "fld tbyte ptr [{a}]",
            "fucomip st, st(1)",
            "fstp st(0)",
            "seta {above}",
            "setb {below}",
            "setp {unordered}",
            a = in(reg) a.0.as_ptr(), b = in(reg) b.0.as_ptr(),
            above = out(reg_byte) above, below = out(reg_byte) below,
            unordered = out(reg_byte) unordered,
            out("st(0)") _, out("st(1)") _,
            options(nostack, readonly),
        );
    }
    match (unordered, above, below) {
        (1, ..) => None,
        (_, 1, _) => Some(Ordering::Greater),
        (_, _, 1) => Some(Ordering::Less),
        _ => Some(Ordering::Equal),
    }
}

/// `x` widened to 80 bits (exact).
#[cfg(test)]
pub fn from_f64(x: f64) -> F80 {
    let mut out = F80([0; 16]);
    // SAFETY: reads the 8 bytes of `x`, writes 10 of `out`; one load,
    // one popping store.
    unsafe {
        std::arch::asm!(
            "fld qword ptr [{x}]",
            "fstp tbyte ptr [{o}]",
            x = in(reg) &x, o = in(reg) out.0.as_mut_ptr(),
            out("st(0)") _,
            options(nostack),
        );
    }
    out
}

/// `x` rounded to the nearest `f64`.
#[cfg(test)]
pub fn to_f64(x: F80) -> f64 {
    let mut out = 0f64;
    // SAFETY: reads 10 bytes of `x`, writes the 8 of `out`; one load, one
    // popping store.
    unsafe {
        std::arch::asm!(
            "fld tbyte ptr [{x}]",
            "fstp qword ptr [{o}]",
            x = in(reg) x.0.as_ptr(), o = in(reg) &mut out,
            out("st(0)") _,
            options(nostack),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(x: f64) -> F80 {
        from_f64(x)
    }

    #[test]
    fn arithmetic_and_order_of_operands() {
        assert_eq!(to_f64(add(f(5.0), f(3.0))), 8.0);
        assert_eq!(to_f64(sub(f(5.0), f(3.0))), 2.0, "a - b, not b - a");
        assert_eq!(to_f64(mul(f(5.0), f(-3.0))), -15.0);
        assert_eq!(cmp(f(5.0), f(3.0)), Some(Ordering::Greater));
        assert_eq!(cmp(f(3.0), f(5.0)), Some(Ordering::Less));
        assert_eq!(cmp(f(3.0), f(3.0)), Some(Ordering::Equal));
        assert_eq!(cmp(f(f64::NAN), f(3.0)), None);
        assert_eq!(cmp(f(3.0), f(f64::NAN)), None);
    }

    #[test]
    fn sums_keep_the_bits_a_double_loses() {
        // 1 + 2^-60 is 1 in a double and not in 80 bits (64-bit mantissa).
        let tiny = f(2f64.powi(-60));
        let s = add(f(1.0), tiny);
        assert_ne!(s, f(1.0));
        assert_eq!(to_f64(sub(s, f(1.0))), 2f64.powi(-60));
    }
}
