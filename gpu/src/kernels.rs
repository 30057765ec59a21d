//! The reduction kernels on the device: `out[i] = op(a[i], b[i])` for
//! every tandem element type and operator, written out as CUDA C source,
//! compiled by NVRTC at first use and kept for the process.
//!
//! They compute what tandem's CPU kernels compute
//! (`tandem_driver::reduce_local`), bit for bit on ordinary numbers:
//! integers wrap; floating-point sums and products are one IEEE operation
//! each (no fused multiply-add, no flush to zero); `min`/`max` keep the
//! first operand on ties and when a NaN makes the comparison false; a NaN
//! first operand propagates; `f16` and `bf16` are computed in `f32` and
//! rounded once, to nearest even, by conversions written out here (no CUDA
//! header needed). One difference: a GPU's arithmetic returns its
//! canonical NaN where the CPU keeps the NaN operand's payload.
//!
//! The source is plain C apart from the kernel qualifiers and two
//! intrinsics, so the tests compile it with the host's C compiler behind a
//! small shim and run every kernel against the CPU's on the same data.

use tandem_driver::{Dtype, ReduceOp};

/// The C type, name and class of a tandem element type.
fn ctype(d: Dtype) -> (&'static str, &'static str, Class) {
    match d {
        Dtype::U8 => ("unsigned char", "u8", Class::Int("unsigned char")),
        Dtype::I8 => ("signed char", "i8", Class::Int("unsigned char")),
        Dtype::I32 => ("int", "i32", Class::Int("unsigned int")),
        Dtype::U32 => ("unsigned int", "u32", Class::Int("unsigned int")),
        Dtype::I64 => ("long long", "i64", Class::Int("unsigned long long")),
        Dtype::U64 => (
            "unsigned long long",
            "u64",
            Class::Int("unsigned long long"),
        ),
        Dtype::F16 => ("unsigned short", "f16", Class::Half("h2f", "f2h")),
        Dtype::Bf16 => ("unsigned short", "bf16", Class::Half("b2f", "f2b")),
        Dtype::F32 => ("float", "f32", Class::Float),
        Dtype::F64 => ("double", "f64", Class::Float),
    }
}

#[derive(Clone, Copy)]
enum Class {
    /// Integers, with the unsigned type their wrapping arithmetic runs in.
    Int(&'static str),
    Float,
    /// 16-bit floats stored as their bits, with the conversions to and
    /// from `float`.
    Half(&'static str, &'static str),
}

/// The kernel's name for `d` and `op`, `None` where the operator does not
/// apply (bitwise on floating point).
pub fn name(d: Dtype, op: ReduceOp) -> Option<String> {
    let (_, short, class) = ctype(d);
    let bitwise = matches!(op, ReduceOp::BitAnd | ReduceOp::BitOr | ReduceOp::BitXor);
    if bitwise && !matches!(class, Class::Int(_)) {
        return None;
    }
    Some(format!("tandem_reduce_{short}_{}", op.name()))
}

/// The expression of `op` on operands `x` and `y` of type `t`.
fn expr(t: &str, class: Class, op: ReduceOp) -> String {
    match (class, op) {
        (_, ReduceOp::Min) => "(y < x ? y : x)".into(),
        (_, ReduceOp::Max) => "(y > x ? y : x)".into(),
        (Class::Int(u), ReduceOp::Sum) => format!("({t})(({u})x + ({u})y)"),
        (Class::Int(u), ReduceOp::Prod) => format!("({t})(({u})x * ({u})y)"),
        (Class::Int(_), ReduceOp::BitAnd) => format!("({t})(x & y)"),
        (Class::Int(_), ReduceOp::BitOr) => format!("({t})(x | y)"),
        (Class::Int(_), ReduceOp::BitXor) => format!("({t})(x ^ y)"),
        (Class::Float, ReduceOp::Sum) => "(x + (x != x ? 0 : y))".into(),
        (Class::Float, ReduceOp::Prod) => "(x * (x != x ? 1 : y))".into(),
        (Class::Half(to, from), ReduceOp::Sum) => {
            format!("{from}({to}(x) + ({to}(x) != {to}(x) ? 0.0f : {to}(y)))")
        }
        (Class::Half(to, from), ReduceOp::Prod) => {
            format!("{from}({to}(x) * ({to}(x) != {to}(x) ? 1.0f : {to}(y)))")
        }
        _ => unreachable!("bitwise operators on floating point have no kernel"),
    }
}

/// The comparison of 16-bit floats for `min` and `max`, on their values.
fn half_compare(op: ReduceOp, to: &str) -> String {
    match op {
        ReduceOp::Min => format!("({to}(y) < {to}(x) ? y : x)"),
        _ => format!("({to}(y) > {to}(x) ? y : x)"),
    }
}

/// Conversions between `float` and the 16-bit formats, written out
/// (round to nearest even; NaNs stay NaN, quieted, as the `half` crate
/// does).
const HALF_CONVERSIONS: &str = r#"
__device__ static float h2f(unsigned short h) {
    unsigned int s = ((unsigned int)h & 0x8000u) << 16;
    unsigned int e = ((unsigned int)h >> 10) & 0x1fu;
    unsigned int m = (unsigned int)h & 0x3ffu;
    unsigned int f;
    if (e == 0) {
        if (m == 0) {
            f = s;
        } else {
            e = 113;
            while (!(m & 0x400u)) { m <<= 1; e--; }
            f = s | (e << 23) | ((m & 0x3ffu) << 13);
        }
    } else if (e == 31) {
        f = s | 0x7f800000u | (m << 13);
    } else {
        f = s | ((e + 112) << 23) | (m << 13);
    }
    return __uint_as_float(f);
}

__device__ static unsigned short f2h(float x) {
    unsigned int f = __float_as_uint(x);
    unsigned int s = (f >> 16) & 0x8000u;
    unsigned int a = f & 0x7fffffffu;
    if (a > 0x7f800000u) return (unsigned short)(s | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) return (unsigned short)(s | 0x7c00u);
    if (a < 0x38800000u) {
        if (a < 0x33000000u) return (unsigned short)s;
        unsigned int e = a >> 23;
        unsigned int m = (a & 0x7fffffu) | 0x800000u;
        unsigned int shift = 126 - e;
        unsigned int r = m >> shift;
        unsigned int rem = m & ((1u << shift) - 1);
        unsigned int half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1u))) r++;
        return (unsigned short)(s | r);
    }
    unsigned int r = a - 0x38000000u;
    r = r + 0xfffu + ((r >> 13) & 1u);
    return (unsigned short)(s | (r >> 13));
}

__device__ static float b2f(unsigned short b) {
    return __uint_as_float((unsigned int)b << 16);
}

__device__ static unsigned short f2b(float x) {
    unsigned int f = __float_as_uint(x);
    if ((f & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((f >> 16) | 0x40u);
    return (unsigned short)((f + 0x7fffu + ((f >> 16) & 1u)) >> 16);
}
"#;

/// [`source`], made once for the process (the key of its compiled module).
pub fn source_static() -> &'static str {
    static SRC: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SRC.get_or_init(source)
}

/// The whole module: every kernel of every type and operator.
pub fn source() -> String {
    let mut s = String::from(
        "/* tandem's reduction kernels (generated by tandem-gpu) */\n\
         #ifdef __cplusplus\n#define TANDEM_C extern \"C\"\n#else\n#define TANDEM_C\n#endif\n",
    );
    s.push_str(HALF_CONVERSIONS);
    for d in Dtype::ALL {
        let (t, _, class) = ctype(d);
        for op in ReduceOp::ALL {
            let Some(n) = name(d, op) else { continue };
            let e = match (class, op) {
                (Class::Half(to, _), ReduceOp::Min | ReduceOp::Max) => half_compare(op, to),
                _ => expr(t, class, op),
            };
            s.push_str(&format!(
                "\nTANDEM_C __global__ void {n}({t} *out, const {t} *a, const {t} *b, \
                 unsigned long long n) {{\n\
                 \x20   for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;\n\
                 \x20        i < n; i += (unsigned long long)blockDim.x * gridDim.x) {{\n\
                 \x20       {t} x = a[i], y = b[i];\n\
                 \x20       out[i] = {e};\n\
                 \x20   }}\n}}\n"
            ));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::{c_void, CString};
    use tandem_driver::{bf16, f16, reduce_local, Element};

    /// Lets the host's C compiler build the source: the qualifiers
    /// vanish, one block of one thread walks every element, the two
    /// intrinsics are bit copies.
    const SHIM: &str = r#"
#include <string.h>
#define __global__
#define __device__
struct tandem_dim { unsigned int x; };
static const struct tandem_dim blockIdx = {0}, threadIdx = {0}, blockDim = {1}, gridDim = {1};
static unsigned int __float_as_uint(float f) { unsigned int u; memcpy(&u, &f, 4); return u; }
static float __uint_as_float(unsigned int u) { float f; memcpy(&f, &u, 4); return f; }
/* for the tests: the conversions, callable */
"#;

    /// The kernels, built as a shared library with the host's C compiler;
    /// `None` (the test says so) where there is no compiler.
    struct Lib(*mut c_void);

    impl Lib {
        fn build() -> Option<Self> {
            // A directory of its own: tests build in parallel threads.
            let me: String = format!("{:?}", std::thread::current().id())
                .chars()
                .filter(char::is_ascii_digit)
                .collect();
            let dir =
                std::env::temp_dir().join(format!("tandem-kernels-{}-{me}", std::process::id()));
            std::fs::create_dir_all(&dir).ok()?;
            let c = dir.join("kernels.c");
            let so = dir.join("kernels.so");
            let extra = "\nunsigned short t_f2h(float x) { return f2h(x); }\n\
                         float t_h2f(unsigned short h) { return h2f(h); }\n\
                         unsigned short t_f2b(float x) { return f2b(x); }\n";
            std::fs::write(&c, format!("{SHIM}{}{extra}", source())).ok()?;
            let out = std::process::Command::new("cc")
                .args(["-std=c99", "-O1", "-Wall", "-Werror", "-fno-fast-math"])
                .args(["-ffp-contract=off", "-shared", "-fPIC", "-o"])
                .arg(&so)
                .arg(&c)
                .output();
            let out = match out {
                Ok(o) => o,
                Err(e) => {
                    println!("skipped: no C compiler ({e})");
                    return None;
                }
            };
            assert!(
                out.status.success(),
                "the kernels do not compile as C:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let path = CString::new(so.to_string_lossy().as_bytes()).expect("a path");
            // SAFETY: a library just built from our own source.
            let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
            let _ = std::fs::remove_dir_all(&dir);
            assert!(!h.is_null(), "the kernels' library does not load");
            Some(Self(h))
        }

        fn sym(&self, name: &str) -> *mut c_void {
            let n = CString::new(name).expect("a name");
            // SAFETY: a live handle and a NUL-terminated name.
            let p = unsafe { libc::dlsym(self.0, n.as_ptr()) };
            assert!(!p.is_null(), "{name} missing");
            p
        }
    }

    type KernelFn = unsafe extern "C" fn(*mut c_void, *const c_void, *const c_void, u64);

    fn values<T: Element>(n: usize, seed: u64, make: impl Fn(u64) -> T) -> Vec<T> {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                make(x)
            })
            .collect()
    }

    fn check<T: Element>(lib: &Lib, make: impl Fn(u64) -> T + Copy) {
        let n = 1000;
        for op in ReduceOp::ALL {
            let Some(name) = name(T::DTYPE, op) else {
                continue;
            };
            let a = values(n, 1, make);
            let b = values(n, 2, make);
            let mut want = a.clone();
            reduce_local(&mut want, &b, op).expect("the CPU kernel applies");
            let mut got = vec![a[0]; n];
            // SAFETY: the kernel's signature, `n` elements in each buffer.
            unsafe {
                let f = std::mem::transmute::<*mut c_void, KernelFn>(lib.sym(&name));
                f(
                    got.as_mut_ptr().cast(),
                    a.as_ptr().cast(),
                    b.as_ptr().cast(),
                    n as u64,
                );
            }
            let same = got.iter().zip(&want).all(|(g, w)| {
                tandem_driver::bytemuck::bytes_of(g) == tandem_driver::bytemuck::bytes_of(w)
            });
            assert!(same, "{name}: the kernel differs from the CPU's");
        }
    }

    #[test]
    fn every_kernel_computes_what_the_cpu_computes() {
        let Some(lib) = Lib::build() else { return };
        check::<u8>(&lib, |x| x as u8);
        check::<i8>(&lib, |x| x as i8);
        check::<i32>(&lib, |x| x as i32);
        check::<u32>(&lib, |x| x as u32);
        check::<i64>(&lib, |x| x as i64);
        check::<u64>(&lib, |x| x);
        // Ordinary numbers (NaN payloads differ on a GPU: module docs),
        // spanning magnitudes, ties included.
        let f = |x: u64| ((x % 2001) as f64 - 1000.0) * 0.37 * if x & 8 == 0 { 1.0 } else { 1e-3 };
        check::<f32>(&lib, move |x| f(x) as f32);
        check::<f64>(&lib, f);
        check::<f16>(&lib, move |x| f16::from_f64(f(x) / 10.0));
        check::<bf16>(&lib, move |x| bf16::from_f64(f(x)));
    }

    #[test]
    fn the_16_bit_conversions_round_as_the_half_crate_does() {
        let Some(lib) = Lib::build() else { return };
        // SAFETY: the test exports' signatures.
        let (to_h, from_h, to_b): (
            extern "C" fn(f32) -> u16,
            extern "C" fn(u16) -> f32,
            extern "C" fn(f32) -> u16,
        ) = unsafe {
            (
                std::mem::transmute::<*mut c_void, extern "C" fn(f32) -> u16>(lib.sym("t_f2h")),
                std::mem::transmute::<*mut c_void, extern "C" fn(u16) -> f32>(lib.sym("t_h2f")),
                std::mem::transmute::<*mut c_void, extern "C" fn(f32) -> u16>(lib.sym("t_f2b")),
            )
        };
        // Every f16 to f32 and back.
        for h in 0..=u16::MAX {
            let x = f16::from_bits(h);
            let f = from_h(h);
            if x.is_nan() {
                assert!(f.is_nan(), "{h:#06x}");
                continue;
            }
            assert_eq!(f.to_bits(), x.to_f32().to_bits(), "{h:#06x} to f32");
            assert_eq!(to_h(f), h, "{h:#06x} back");
        }
        // f32 values all over, near the halfway points too.
        let mut x: u32 = 0x1234_5678;
        for i in 0..2_000_000u32 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let bits = if i % 2 == 0 {
                x
            } else {
                x & 0xffff_e000 | 0x1000
            };
            let v = f32::from_bits(bits);
            if v.is_nan() {
                continue;
            }
            assert_eq!(to_h(v), f16::from_f32(v).to_bits(), "{bits:#010x} to f16");
            assert_eq!(to_b(v), bf16::from_f32(v).to_bits(), "{bits:#010x} to bf16");
        }
    }

    #[test]
    fn names_cover_every_type_and_operator_that_applies() {
        let mut n = 0;
        for d in Dtype::ALL {
            for op in ReduceOp::ALL {
                if let Some(k) = name(d, op) {
                    assert!(source().contains(&format!("void {k}(")), "{k}");
                    n += 1;
                }
            }
        }
        // 6 integer types x 7 operators, 4 float types x 4.
        assert_eq!(n, 6 * 7 + 4 * 4);
        assert_eq!(name(Dtype::F32, ReduceOp::BitXor), None);
    }
}
