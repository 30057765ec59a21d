//! MPI datatypes: the predefined ones (described by their handles alone)
//! and the derived ones the constructors build, with packing to and from
//! contiguous bytes.
//!
//! A derived type is kept by value, never by reference to the types it was
//! built from: its layout is a *tile* of byte blocks (adjacent blocks
//! merged) repeated by a few nested *levels* `(reps, stride)`, so that
//! `MPI_Type_contiguous` or `MPI_Type_vector` of anything costs one level,
//! not one block per element. Freeing a type therefore never disturbs the
//! types built from it; handles are reference-counted only so that
//! `MPI_Type_get_contents` can hand back the constituent handles.
//!
//! Bounds follow MPICH 4.0 (checked against its `libmpich.so.12`): the
//! extent of a struct of *different* types is rounded up to the largest
//! alignment of its members, unless an `MPI_LB`/`MPI_UB` marker is
//! present; markers set the struct's bounds; zero-length blocks are ignored.

use crate::abi::{self, Aint, Handle};
use std::cell::Cell;
use std::ffi::c_int;

/// The element types reductions know: what one basic element of a
/// datatype is, for `MPI_Op`s.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Basic {
    /// `signed char`, `char`, `int8_t`, `INTEGER1`, `CHARACTER`.
    I8,
    /// `unsigned char`, `uint8_t`.
    U8,
    /// `short`, `int16_t`, `INTEGER2`.
    I16,
    /// `unsigned short`, `uint16_t`.
    U16,
    /// `int`, `int32_t`, `INTEGER`, `INTEGER4`.
    I32,
    /// `unsigned`, `uint32_t`.
    U32,
    /// `long`, `long long`, `int64_t`, `MPI_AINT`, `MPI_OFFSET`, `MPI_COUNT`, `INTEGER8`.
    I64,
    /// `unsigned long`, `unsigned long long`, `uint64_t`.
    U64,
    /// `MPIX_C_FLOAT16` (IEEE binary16).
    F16,
    /// `float`, `REAL`, `REAL4`.
    F32,
    /// `double`, `DOUBLE_PRECISION`, `REAL8`.
    F64,
    /// `long double` (16 bytes, x87): reductions other than replace unsupported.
    LongDouble,
    /// C `_Bool` / C++ `bool` (1 byte): logical operations only.
    Bool,
    /// Fortran `LOGICAL` (4 bytes; true is 1): logical operations only.
    Logical,
    /// `wchar_t` (4 bytes): no reductions (as in MPICH).
    WChar,
    /// `MPI_BYTE`: bitwise operations only.
    Byte,
    /// `MPI_PACKED`: no reductions.
    Packed,
    /// `float _Complex`, `COMPLEX`, `COMPLEX8`.
    CFloatComplex,
    /// `double _Complex`, `DOUBLE_COMPLEX`, `COMPLEX16`.
    CDoubleComplex,
    /// `long double _Complex`, `COMPLEX32`: reductions other than replace unsupported.
    CLongDoubleComplex,
    /// `MPI_FLOAT_INT`: `struct { float; int; }`, 8 bytes.
    FloatInt,
    /// `MPI_DOUBLE_INT`: `struct { double; int; }`, 16 bytes (12 of data).
    DoubleInt,
    /// `MPI_LONG_INT`: `struct { long; int; }`, 16 bytes (12 of data).
    LongInt,
    /// `MPI_SHORT_INT`: `struct { short; int; }`, 8 bytes (6 of data: short at 0, int at 4).
    ShortInt,
    /// `MPI_2INT`, `MPI_2INTEGER`: two `int`s.
    TwoInt,
    /// `MPI_LONG_DOUBLE_INT`: `struct { long double; int; }`, 32 bytes (20 of data);
    /// reductions other than replace unsupported.
    LongDoubleInt,
    /// `MPI_2REAL`: two `float`s (value and index).
    TwoReal,
    /// `MPI_2DOUBLE_PRECISION`: two `double`s (value and index).
    TwoDouble,
}

impl Basic {
    /// The bytes one element takes in a C array of it (`sizeof`), padding
    /// included: the stride of `apply_builtin`'s arrays.
    pub const fn size(self) -> usize {
        use Basic::*;
        match self {
            I8 | U8 | Bool | Byte | Packed => 1,
            I16 | U16 | F16 => 2,
            I32 | U32 | F32 | Logical | WChar => 4,
            I64 | U64 | F64 | CFloatComplex | FloatInt | ShortInt | TwoInt | TwoReal => 8,
            LongDouble | CDoubleComplex | DoubleInt | LongInt | TwoDouble => 16,
            CLongDoubleComplex | LongDoubleInt => 32,
        }
    }

    /// The bytes of data in one element (`MPI_Type_size`): `size` less the
    /// padding of the pair types.
    pub const fn data_size(self) -> usize {
        match self.pair_parts() {
            Some((v, _, i)) => v + i,
            None => self.size(),
        }
    }

    /// For the value-index pair types: (value bytes, index offset, index
    /// bytes) in the C struct; `None` for the others.
    pub const fn pair_parts(self) -> Option<(usize, usize, usize)> {
        use Basic::*;
        Some(match self {
            FloatInt | TwoInt | TwoReal => (4, 4, 4),
            DoubleInt | LongInt => (8, 8, 4),
            ShortInt => (2, 4, 4),
            LongDoubleInt => (16, 16, 4),
            TwoDouble => (8, 8, 8),
            _ => return None,
        })
    }

    /// Whether this is one of the value-index pair types of `MPI_MINLOC`.
    pub const fn is_pair(self) -> bool {
        self.pair_parts().is_some()
    }
}

/// A predefined type's facts.
#[derive(Clone, Copy)]
struct Predef {
    basic: Option<Basic>,
    size: usize,
    extent: usize,
    align: usize,
    name: &'static str,
}

/// The facts of predefined type `dt`, if it is one.
fn predef(dt: Handle) -> Option<Predef> {
    use Basic::*;
    let (basic, name, align) = match dt {
        abi::CHAR => (I8, "MPI_CHAR", 1),
        abi::SIGNED_CHAR => (I8, "MPI_SIGNED_CHAR", 1),
        abi::UNSIGNED_CHAR => (U8, "MPI_UNSIGNED_CHAR", 1),
        abi::BYTE => (Byte, "MPI_BYTE", 1),
        abi::WCHAR => (WChar, "MPI_WCHAR", 4),
        abi::SHORT => (I16, "MPI_SHORT", 2),
        abi::UNSIGNED_SHORT => (U16, "MPI_UNSIGNED_SHORT", 2),
        abi::INT => (I32, "MPI_INT", 4),
        abi::UNSIGNED => (U32, "MPI_UNSIGNED", 4),
        abi::LONG => (I64, "MPI_LONG", 8),
        abi::UNSIGNED_LONG => (U64, "MPI_UNSIGNED_LONG", 8),
        abi::FLOAT => (F32, "MPI_FLOAT", 4),
        abi::DOUBLE => (F64, "MPI_DOUBLE", 8),
        abi::LONG_DOUBLE => (LongDouble, "MPI_LONG_DOUBLE", 16),
        abi::LONG_LONG_INT => (I64, "MPI_LONG_LONG_INT", 8),
        abi::UNSIGNED_LONG_LONG => (U64, "MPI_UNSIGNED_LONG_LONG", 8),
        abi::PACKED => (Packed, "MPI_PACKED", 1),
        abi::LB | abi::UB => {
            let name = if dt == abi::LB { "MPI_LB" } else { "MPI_UB" };
            return Some(Predef {
                basic: None,
                size: 0,
                extent: 0,
                align: 1,
                name,
            });
        }
        abi::FLOAT_INT => (FloatInt, "MPI_FLOAT_INT", 4),
        abi::DOUBLE_INT => (DoubleInt, "MPI_DOUBLE_INT", 8),
        abi::LONG_INT => (LongInt, "MPI_LONG_INT", 8),
        abi::SHORT_INT => (ShortInt, "MPI_SHORT_INT", 4),
        abi::TWO_INT => (TwoInt, "MPI_2INT", 4),
        abi::LONG_DOUBLE_INT => (LongDoubleInt, "MPI_LONG_DOUBLE_INT", 16),
        abi::COMPLEX => (CFloatComplex, "MPI_COMPLEX", 4),
        abi::DOUBLE_COMPLEX => (CDoubleComplex, "MPI_DOUBLE_COMPLEX", 8),
        abi::LOGICAL => (Logical, "MPI_LOGICAL", 4),
        abi::REAL => (F32, "MPI_REAL", 4),
        abi::DOUBLE_PRECISION => (F64, "MPI_DOUBLE_PRECISION", 8),
        abi::INTEGER => (I32, "MPI_INTEGER", 4),
        abi::TWO_INTEGER => (TwoInt, "MPI_2INTEGER", 4),
        abi::TWO_REAL => (TwoReal, "MPI_2REAL", 4),
        abi::TWO_DOUBLE_PRECISION => (TwoDouble, "MPI_2DOUBLE_PRECISION", 8),
        abi::CHARACTER => (I8, "MPI_CHARACTER", 1),
        abi::REAL4 => (F32, "MPI_REAL4", 4),
        abi::REAL8 => (F64, "MPI_REAL8", 8),
        // MPICH 4.0.2 aligns REAL16 to 1 (a struct {REAL16; char} has extent 17).
        abi::REAL16 => (LongDouble, "MPI_REAL16", 1),
        abi::COMPLEX8 => (CFloatComplex, "MPI_COMPLEX8", 4),
        abi::COMPLEX16 => (CDoubleComplex, "MPI_COMPLEX16", 8),
        abi::COMPLEX32 => (CLongDoubleComplex, "MPI_COMPLEX32", 16),
        abi::INTEGER1 => (I8, "MPI_INTEGER1", 1),
        abi::INTEGER2 => (I16, "MPI_INTEGER2", 2),
        abi::INTEGER4 => (I32, "MPI_INTEGER4", 4),
        abi::INTEGER8 => (I64, "MPI_INTEGER8", 8),
        abi::INT8_T => (I8, "MPI_INT8_T", 1),
        abi::INT16_T => (I16, "MPI_INT16_T", 2),
        abi::INT32_T => (I32, "MPI_INT32_T", 4),
        abi::INT64_T => (I64, "MPI_INT64_T", 8),
        abi::UINT8_T => (U8, "MPI_UINT8_T", 1),
        abi::UINT16_T => (U16, "MPI_UINT16_T", 2),
        abi::UINT32_T => (U32, "MPI_UINT32_T", 4),
        abi::UINT64_T => (U64, "MPI_UINT64_T", 8),
        abi::C_BOOL => (Bool, "MPI_C_BOOL", 1),
        abi::C_FLOAT_COMPLEX => (CFloatComplex, "MPI_C_COMPLEX", 4),
        abi::C_DOUBLE_COMPLEX => (CDoubleComplex, "MPI_C_DOUBLE_COMPLEX", 8),
        abi::C_LONG_DOUBLE_COMPLEX => (CLongDoubleComplex, "MPI_C_LONG_DOUBLE_COMPLEX", 16),
        // MPICH 4.0.2 gives MPIX_C_FLOAT16 no name.
        abi::X_C_FLOAT16 => (F16, "", 2),
        abi::AINT => (I64, "MPI_AINT", 8),
        abi::OFFSET => (I64, "MPI_OFFSET", 8),
        abi::COUNT => (I64, "MPI_COUNT", 8),
        abi::CXX_BOOL => (Bool, "MPI_CXX_BOOL", 1),
        abi::CXX_FLOAT_COMPLEX => (CFloatComplex, "MPI_CXX_FLOAT_COMPLEX", 4),
        abi::CXX_DOUBLE_COMPLEX => (CDoubleComplex, "MPI_CXX_DOUBLE_COMPLEX", 8),
        abi::CXX_LONG_DOUBLE_COMPLEX => (CLongDoubleComplex, "MPI_CXX_LONG_DOUBLE_COMPLEX", 16),
        _ => return None,
    };
    Some(Predef {
        basic: Some(basic),
        size: basic.data_size(),
        extent: basic.size(),
        align,
        name,
    })
}

/// How predefined type `dt`, of basic type `basic`, is written in external32.
fn ext_of(dt: Handle, basic: Option<Basic>) -> Ext {
    match dt {
        abi::LONG | abi::WCHAR => Ext::Half(true),
        abi::UNSIGNED_LONG => Ext::Half(false),
        abi::LONG_DOUBLE
        | abi::REAL16
        | abi::C_LONG_DOUBLE_COMPLEX
        | abi::COMPLEX32
        | abi::CXX_LONG_DOUBLE_COMPLEX => Ext::Quad,
        _ => match basic {
            Some(Basic::CFloatComplex) => Ext::Swap(4),
            Some(Basic::CDoubleComplex) => Ext::Swap(8),
            Some(b) => Ext::Swap(b.size() as u8),
            None => Ext::Swap(1),
        },
    }
}

/// The basic element type of predefined datatype `dt`: `None` for derived
/// types, `MPI_LB`/`MPI_UB`, and handles that are not datatypes.
pub fn basic_of(dt: Handle) -> Option<Basic> {
    predef(dt).and_then(|p| p.basic)
}

/// Whether `dt` is one of MPICH's predefined datatypes (pair types,
/// `MPI_LB` and `MPI_UB` included).
pub fn is_predefined(dt: Handle) -> bool {
    predef(dt).is_some()
}

/// What `Types::info` reports of a datatype.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TypeInfo {
    /// Bytes of data in one element (`MPI_Type_size`).
    pub size: usize,
    /// Lower bound (`MPI_Type_get_extent`).
    pub lb: Aint,
    /// Extent: the stride between consecutive elements.
    pub extent: Aint,
    /// Lower bound of the bytes the data occupies.
    pub true_lb: Aint,
    /// Span of the bytes the data occupies.
    pub true_extent: Aint,
    /// The data of `n` elements is exactly the `n * size` bytes at the
    /// buffer's address: one block at offset 0, `lb == 0`, `extent == size`.
    pub contiguous: bool,
    /// Committed (predefined types always are).
    pub committed: bool,
    /// `Some((b, n))` when one element is `n` basic elements all of type
    /// `b` (what the predefined operations need).
    pub basic: Option<(Basic, usize)>,
}

/// One block of bytes: `len` bytes at `off` from an element's address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Block {
    off: isize,
    len: usize,
}

/// `reps` copies of what is inside, `stride` bytes apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Level {
    reps: usize,
    stride: isize,
}

/// How one basic element is written in MPI's `external32` data
/// representation (MPI-3.1 §13.5.2): big-endian, IEEE floating point,
/// with the sizes of its table 13.2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ext {
    /// The same bytes, big-endian in pieces of this many bytes (the two
    /// parts of a complex number are swapped one by one).
    Swap(u8),
    /// An integer in half its native size: `long` and `unsigned long` in
    /// 4 bytes, `wchar_t` in 2; `true` when signed (unpacking extends the
    /// sign).
    Half(bool),
    /// x87 `long double`s (16 bytes each, one or two per element) as IEEE
    /// binary128 values.
    Quad,
}

impl Ext {
    /// The external32 bytes of one element of `size` native bytes.
    const fn len(self, size: usize) -> usize {
        match self {
            Ext::Half(_) => size / 2,
            _ => size,
        }
    }
}

/// `n` consecutive basic elements of `size` bytes each (in packed order),
/// all written in external32 as `ext` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    size: usize,
    n: u64,
    ext: Ext,
}

/// Where one element's data lies: the tile's blocks, repeated by the
/// levels (outermost first; tile copies in odometer order), and the sizes
/// of the basic elements of one tile, in type-map order.
#[derive(Clone, Debug, Default)]
struct Layout {
    blocks: Vec<Block>,
    /// `starts[i]`: packed offset of `blocks[i]` within the tile; one more
    /// entry than `blocks`, the last being the tile's size.
    starts: Vec<usize>,
    levels: Vec<Level>,
    sig: Vec<Run>,
}

/// Largest number of blocks a layout flattens into before the
/// constructor gives up with `ERR_NO_MEM`.
const MAX_BLOCKS: usize = 1 << 26;

impl Layout {
    /// A predefined type's layout: one block, one basic element of `size`
    /// bytes (a complex number is one element).
    fn dense(size: usize, ext: Ext) -> Layout {
        let mut l = Layout::default();
        if size > 0 {
            l.blocks.push(Block { off: 0, len: size });
            l.sig.push(Run { size, n: 1, ext });
        }
        l.finish()
    }

    /// A pair type's layout: value at 0, index at `io`.
    fn pair(b: Basic) -> Layout {
        let (v, io, i) = b.pair_parts().unwrap_or((b.size(), 0, 0));
        let vext = match b {
            Basic::LongInt => Ext::Half(true),
            Basic::LongDoubleInt => Ext::Quad,
            _ => Ext::Swap(v as u8),
        };
        let mut l = Layout::default();
        push_block(&mut l.blocks, 0, v);
        push_run(&mut l.sig, v, 1, vext);
        push_block(&mut l.blocks, io as isize, i);
        push_run(&mut l.sig, i, 1, Ext::Swap(i as u8));
        l.finish()
    }

    fn finish(mut self) -> Layout {
        self.starts.clear();
        let mut s = 0;
        for b in &self.blocks {
            self.starts.push(s);
            s = s.saturating_add(b.len);
        }
        self.starts.push(s);
        self
    }

    fn tile_size(&self) -> usize {
        self.starts.last().copied().unwrap_or(0)
    }

    fn tiles(&self) -> usize {
        self.levels
            .iter()
            .fold(1usize, |a, l| a.saturating_mul(l.reps))
    }

    fn tile_elems(&self) -> u64 {
        self.sig.iter().map(|r| r.n).sum()
    }

    fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// The one span `(off, len)` the data forms, in type-map order, if it does.
    fn dense_span(&self) -> Option<(isize, usize)> {
        let [b] = self.blocks[..] else { return None };
        let mut len = b.len;
        for l in self.levels.iter().rev() {
            if l.reps > 1 && l.stride != len as isize {
                return None;
            }
            len *= l.reps;
        }
        Some((b.off, len))
    }

    fn shifted(mut self, d: isize) -> Layout {
        for b in &mut self.blocks {
            b.off = b.off.wrapping_add(d);
        }
        self
    }

    /// `n` copies of this layout, `stride` bytes apart.
    fn replicate(mut self, n: usize, stride: isize) -> Layout {
        if n == 0 || self.is_empty() {
            return Layout::default().finish();
        }
        if n == 1 {
            return self;
        }
        if self.levels.is_empty() && self.blocks.len() == 1 && self.sig.len() == 1 {
            let b = self.blocks[0];
            if b.len as isize == stride {
                self.blocks[0].len = b.len.saturating_mul(n);
                self.sig[0].n = self.sig[0].n.saturating_mul(n as u64);
                return self.finish();
            }
        }
        if let Some(l0) = self.levels.first_mut() {
            if (l0.reps as isize).wrapping_mul(l0.stride) == stride {
                l0.reps = l0.reps.saturating_mul(n);
                return self;
            }
        }
        self.levels.insert(0, Level { reps: n, stride });
        self
    }

    /// Appends this layout, flattened and shifted by `d`, to `blocks`/`sig`.
    fn flatten_into(
        &self,
        d: isize,
        blocks: &mut Vec<Block>,
        sig: &mut Vec<Run>,
    ) -> Result<(), c_int> {
        let tiles = self.tiles();
        if tiles
            .saturating_mul(self.blocks.len())
            .saturating_add(blocks.len())
            > MAX_BLOCKS
        {
            return Err(abi::ERR_NO_MEM);
        }
        let mut digits = vec![0usize; self.levels.len()];
        let mut t_off = d;
        for _ in 0..tiles {
            for b in &self.blocks {
                push_block(blocks, t_off.wrapping_add(b.off), b.len);
            }
            t_off = advance(&self.levels, &mut digits, t_off);
        }
        if let [r] = self.sig[..] {
            push_run(sig, r.size, r.n.saturating_mul(tiles as u64), r.ext);
        } else {
            for _ in 0..tiles {
                for r in &self.sig {
                    push_run(sig, r.size, r.n, r.ext);
                }
            }
        }
        Ok(())
    }

    /// Runs `f(mem_off, packed_off, len)` over the blocks of `count`
    /// elements `extent` apart, for packed bytes `start..end`.
    fn walk(
        &self,
        extent: isize,
        start: usize,
        end: usize,
        mut f: impl FnMut(isize, usize, usize),
    ) {
        let tile = self.tile_size();
        if tile == 0 || start >= end {
            return;
        }
        let tiles = self.tiles();
        let size = tile * tiles;
        let mut elem = start / size;
        let rem = start % size;
        let t = rem / tile;
        let r = rem % tile;
        // The block holding packed offset r of the tile.
        let mut b = self.starts.partition_point(|&s| s <= r) - 1;
        let mut in_block = r - self.starts[b];
        // The odometer for tile t.
        let mut digits = vec![0usize; self.levels.len()];
        let mut rest = t;
        for (i, l) in self.levels.iter().enumerate().rev() {
            digits[i] = rest % l.reps;
            rest /= l.reps;
        }
        let mut t_off: isize = self.levels.iter().zip(&digits).fold(0isize, |a, (l, &d)| {
            a.wrapping_add((d as isize).wrapping_mul(l.stride))
        });
        let mut t_idx = t;
        let mut pos = start;
        let mut base = (elem as isize).wrapping_mul(extent);
        loop {
            while b < self.blocks.len() {
                let blk = self.blocks[b];
                let take = (blk.len - in_block).min(end - pos);
                f(
                    base.wrapping_add(t_off)
                        .wrapping_add(blk.off)
                        .wrapping_add(in_block as isize),
                    pos,
                    take,
                );
                pos += take;
                if pos >= end {
                    return;
                }
                in_block = 0;
                b += 1;
            }
            b = 0;
            t_idx += 1;
            if t_idx == tiles {
                t_idx = 0;
                digits.iter_mut().for_each(|d| *d = 0);
                t_off = 0;
                elem += 1;
                base = (elem as isize).wrapping_mul(extent);
            } else {
                t_off = advance(&self.levels, &mut digits, t_off);
            }
        }
    }
}

/// Steps the odometer `digits` over `levels` to the next tile, returning
/// its offset given the current one.
fn advance(levels: &[Level], digits: &mut [usize], mut off: isize) -> isize {
    for i in (0..levels.len()).rev() {
        digits[i] += 1;
        off = off.wrapping_add(levels[i].stride);
        if digits[i] < levels[i].reps {
            return off;
        }
        off = off.wrapping_sub((levels[i].reps as isize).wrapping_mul(levels[i].stride));
        digits[i] = 0;
    }
    off
}

fn push_block(blocks: &mut Vec<Block>, off: isize, len: usize) {
    if len == 0 {
        return;
    }
    if let Some(last) = blocks.last_mut() {
        if last.off.wrapping_add(last.len as isize) == off {
            last.len += len;
            return;
        }
    }
    blocks.push(Block { off, len });
}

fn push_run(sig: &mut Vec<Run>, size: usize, n: u64, ext: Ext) {
    if size == 0 || n == 0 {
        return;
    }
    if let Some(last) = sig.last_mut() {
        if last.size == size && last.ext == ext {
            last.n += n;
            return;
        }
    }
    sig.push(Run { size, n, ext });
}

/// Writes one element's native bytes `n` as external32 bytes `e`
/// (`e.len() == ext.len(n.len())`).
fn to_external32(ext: Ext, n: &[u8], e: &mut [u8]) {
    match ext {
        Ext::Swap(u) => {
            for (a, b) in n
                .chunks(u.max(1) as usize)
                .zip(e.chunks_mut(u.max(1) as usize))
            {
                b.iter_mut().zip(a.iter().rev()).for_each(|(y, x)| *y = *x);
            }
        }
        // Little-endian: the low half comes first.
        Ext::Half(_) => {
            let h = e.len();
            e.iter_mut()
                .zip(n[..h].iter().rev())
                .for_each(|(y, x)| *y = *x);
        }
        Ext::Quad => {
            for (a, b) in n.chunks_exact(16).zip(e.chunks_exact_mut(16)) {
                b.copy_from_slice(&x87_to_binary128(a).to_be_bytes());
            }
        }
    }
}

/// The reverse of `to_external32`.
fn from_external32(ext: Ext, e: &[u8], n: &mut [u8]) {
    match ext {
        Ext::Swap(_) => to_external32(ext, e, n),
        Ext::Half(signed) => {
            let h = e.len();
            n[..h]
                .iter_mut()
                .zip(e.iter().rev())
                .for_each(|(y, x)| *y = *x);
            let fill = if signed && e.first().is_some_and(|&b| b & 0x80 != 0) {
                0xff
            } else {
                0
            };
            n[h..].fill(fill);
        }
        Ext::Quad => {
            for (a, b) in e.chunks_exact(16).zip(n.chunks_exact_mut(16)) {
                let q = u128::from_be_bytes(a.try_into().unwrap_or([0; 16]));
                b.copy_from_slice(&binary128_to_x87(q));
            }
        }
    }
}

/// An x87 80-bit `long double` (the first 10 of 16 little-endian bytes)
/// as the bits of an IEEE binary128 value. The two formats share sign,
/// exponent width and bias; x87 stores the integer bit, binary128 infers
/// it and keeps 112 fraction bits (of which x87 fills the top 63).
fn x87_to_binary128(b: &[u8]) -> u128 {
    let m = u64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8]));
    let se = u16::from_le_bytes([b[8], b[9]]);
    let mut exp = (se & 0x7fff) as u128;
    if exp == 0 && m >> 63 == 1 {
        // A pseudo-denormal: worth 2^-16382 * 1.f, binary128's smallest normal exponent.
        exp = 1;
    }
    let frac = (m & (u64::MAX >> 1)) as u128;
    ((se >> 15) as u128) << 127 | exp << 112 | frac << 49
}

/// An IEEE binary128 value as an x87 `long double` in 16 little-endian
/// bytes (the fraction truncated to 63 bits, the padding zero).
fn binary128_to_x87(q: u128) -> [u8; 16] {
    let sign = (q >> 127) as u16;
    let exp = ((q >> 112) & 0x7fff) as u16;
    let frac = ((q >> 49) as u64) & (u64::MAX >> 1);
    let m = u64::from(exp != 0) << 63 | frac;
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&m.to_le_bytes());
    out[8..10].copy_from_slice(&(sign << 15 | exp).to_le_bytes());
    out
}

/// What a constructor remembers for `MPI_Type_get_contents`.
#[derive(Clone, Debug, Default)]
struct Contents {
    combiner: c_int,
    ints: Vec<i32>,
    addrs: Vec<Aint>,
    types: Vec<Handle>,
}

/// A derived datatype.
#[derive(Debug)]
struct Derived {
    size: usize,
    lb: isize,
    extent: isize,
    true_lb: isize,
    true_ub: isize,
    align: usize,
    basic: Option<(Basic, usize)>,
    /// `Some(off)`: one element's data is the `size` bytes at `off`.
    dense: Option<isize>,
    layout: Layout,
    committed: bool,
    name: String,
    /// The program's handle (1) plus the derived types naming this one in
    /// their contents plus handles `contents` gave out.
    refs: Cell<u32>,
    contents: Contents,
}

/// A reference to a derived datatype held by an operation
/// ([`Types::hold`]), dropped with it.
#[derive(Debug)]
pub struct TypeHold(Option<Handle>);

impl TypeHold {
    /// A hold of nothing (an operation whose type is not needed after it
    /// starts).
    pub const fn empty() -> Self {
        Self(None)
    }
}

impl Drop for TypeHold {
    fn drop(&mut self) {
        let Some(dt) = self.0 else { return };
        // After MPI_Finalize the types are gone already, and so is the
        // need. A hold dropped while the types are borrowed (which no
        // path does) leaves the type allocated rather than failing.
        if let Some(mut t) = crate::state::lib().and_then(|l| l.types.try_borrow_mut().ok()) {
            t.drop_ref(dt);
        }
    }
}

/// A datatype seen through one interface, predefined or derived.
struct View<'a> {
    size: usize,
    lb: isize,
    extent: isize,
    true_lb: isize,
    true_ub: isize,
    align: usize,
    basic: Option<(Basic, usize)>,
    dense: Option<isize>,
    /// `None` only for predefined types whose data is one block at 0.
    layout: Option<&'a Layout>,
    committed: bool,
    predefined: bool,
    /// A predefined type's external32 form (unused for derived types).
    ext: Ext,
}

impl View<'_> {
    fn info(&self) -> TypeInfo {
        TypeInfo {
            size: self.size,
            lb: self.lb,
            extent: self.extent,
            true_lb: self.true_lb,
            true_extent: self.true_ub - self.true_lb,
            contiguous: self.lb == 0
                && self.extent == self.size as isize
                && (self.size == 0 || self.dense == Some(0)),
            committed: self.committed,
            basic: self.basic,
        }
    }

    /// This type's layout, owned (for constructors).
    fn layout(&self) -> Layout {
        match self.layout {
            Some(l) => l.clone(),
            None => Layout::dense(self.size, self.ext),
        }
    }

    /// `f(mem_off, packed_off, len)` over packed bytes `start..end` of a
    /// sequence of elements.
    fn walk(&self, start: usize, end: usize, mut f: impl FnMut(isize, usize, usize)) {
        if self.size == 0 || start >= end {
            return;
        }
        if let Some(off) = self.dense {
            if self.extent == self.size as isize {
                f(off.wrapping_add(start as isize), start, end - start);
                return;
            }
            let mut pos = start;
            while pos < end {
                let e = pos / self.size;
                let within = pos % self.size;
                let take = (self.size - within).min(end - pos);
                let mem = (e as isize)
                    .wrapping_mul(self.extent)
                    .wrapping_add(off)
                    .wrapping_add(within as isize);
                f(mem, pos, take);
                pos += take;
            }
            return;
        }
        if let Some(l) = self.layout {
            l.walk(self.extent, start, end, f);
        }
    }
}

/// A constructor's intermediate: bounds in wide integers, so that
/// overflow is caught once at the end.
#[derive(Clone)]
struct Part {
    /// Contributes bounds (some block of length > 0).
    any: bool,
    /// Has data.
    data: bool,
    size: u128,
    lb: i128,
    ub: i128,
    tlb: i128,
    tub: i128,
    align: usize,
    basic: Option<(Basic, usize)>,
    layout: Layout,
}

impl Part {
    fn empty() -> Part {
        Part {
            any: false,
            data: false,
            size: 0,
            lb: 0,
            ub: 0,
            tlb: 0,
            tub: 0,
            align: 1,
            basic: None,
            layout: Layout::default().finish(),
        }
    }

    /// `k` copies of type `v`, `v.extent` apart, starting at `d` bytes.
    fn of(v: &View<'_>, k: usize, d: isize) -> Part {
        if k == 0 {
            return Part::empty();
        }
        let e = v.extent as i128;
        let span = (k as i128 - 1) * e;
        let (lo, hi) = (span.min(0), span.max(0));
        let d128 = d as i128;
        Part {
            any: true,
            data: v.size > 0,
            size: v.size as u128 * k as u128,
            lb: d128 + v.lb as i128 + lo,
            ub: d128 + v.lb as i128 + e + hi,
            tlb: d128 + v.true_lb as i128 + lo,
            tub: d128 + v.true_ub as i128 + hi,
            align: v.align,
            basic: v.basic.map(|(b, n)| (b, n.saturating_mul(k))),
            layout: v.layout().replicate(k, v.extent).shifted(d),
        }
    }

    /// `n` copies of this part, `stride` bytes apart.
    fn repeat(self, n: usize, stride: isize) -> Part {
        if n == 0 || !self.any {
            return Part::empty();
        }
        let span = (n as i128 - 1) * stride as i128;
        let (lo, hi) = (span.min(0), span.max(0));
        Part {
            size: self.size * n as u128,
            lb: self.lb + lo,
            ub: self.ub + hi,
            tlb: self.tlb + lo,
            tub: self.tub + hi,
            basic: self.basic.map(|(b, k)| (b, k.saturating_mul(n))),
            layout: self.layout.replicate(n, stride),
            ..self
        }
    }

    /// This part moved by `d` bytes.
    fn shift(self, d: isize) -> Part {
        if !self.any || d == 0 {
            return self;
        }
        let d128 = d as i128;
        Part {
            lb: self.lb + d128,
            ub: self.ub + d128,
            tlb: self.tlb + d128,
            tub: self.tub + d128,
            layout: self.layout.shifted(d),
            ..self
        }
    }

    /// The parts one after another in type-map order.
    fn concat(parts: Vec<Part>) -> Result<Part, c_int> {
        let mut parts: Vec<Part> = parts.into_iter().filter(|p| p.any).collect();
        if parts.len() <= 1 {
            return Ok(parts.pop().unwrap_or_else(Part::empty));
        }
        let mut out = Part::empty();
        out.any = true;
        out.lb = i128::MAX;
        out.ub = i128::MIN;
        let mut blocks = Vec::new();
        let mut sig = Vec::new();
        let mut first = true;
        for p in &parts {
            out.size += p.size;
            out.lb = out.lb.min(p.lb);
            out.ub = out.ub.max(p.ub);
            if p.data {
                if out.data {
                    out.tlb = out.tlb.min(p.tlb);
                    out.tub = out.tub.max(p.tub);
                } else {
                    (out.tlb, out.tub) = (p.tlb, p.tub);
                }
                out.data = true;
            }
            out.align = out.align.max(p.align);
            out.basic = match (first, out.basic, p.basic) {
                (true, _, b) => b,
                (false, Some((a, n)), Some((b, m))) if a == b => Some((a, n.saturating_add(m))),
                _ => None,
            };
            first = false;
            p.layout.flatten_into(0, &mut blocks, &mut sig)?;
        }
        out.layout = Layout {
            blocks,
            starts: Vec::new(),
            levels: Vec::new(),
            sig,
        }
        .finish();
        Ok(out)
    }
}

/// The handles of derived types: `0x8c10_0000 | index`.
const USER_BASE: u32 = 0x8c10_0000;
const USER_MASK: u32 = 0xfff0_0000;
const USER_MAX: usize = 0x10_0000;

/// The datatypes of a process: the predefined ones, answered from their
/// handles, and a slab of derived ones.
pub struct Types {
    slots: Vec<Option<Derived>>,
    free_slots: Vec<usize>,
    /// The pair types' layouts, built once (see `pair_index`).
    pairs: Vec<Layout>,
    /// Names the program gave predefined types.
    renamed: Vec<(Handle, String)>,
}

impl Default for Types {
    fn default() -> Self {
        Self::new()
    }
}

const PAIRS: [Handle; 9] = [
    abi::FLOAT_INT,
    abi::DOUBLE_INT,
    abi::LONG_INT,
    abi::SHORT_INT,
    abi::LONG_DOUBLE_INT,
    abi::TWO_INT,
    abi::TWO_INTEGER,
    abi::TWO_REAL,
    abi::TWO_DOUBLE_PRECISION,
];

fn pair_index(dt: Handle) -> Option<usize> {
    PAIRS.iter().position(|&p| p == dt)
}

/// `MPI_ORDER_C`: row-major arrays (the last index varies fastest).
pub const ORDER_C: c_int = 56;
/// `MPI_ORDER_FORTRAN`: column-major arrays (the first index varies fastest).
pub const ORDER_FORTRAN: c_int = 57;
/// `MPI_DISTRIBUTE_BLOCK`.
pub const DISTRIBUTE_BLOCK: c_int = 121;
/// `MPI_DISTRIBUTE_CYCLIC`.
pub const DISTRIBUTE_CYCLIC: c_int = 122;
/// `MPI_DISTRIBUTE_NONE`.
pub const DISTRIBUTE_NONE: c_int = 123;
/// `MPI_DISTRIBUTE_DFLT_DARG`.
pub const DISTRIBUTE_DFLT_DARG: c_int = -49767;
/// `MPI_COMBINER_SUBARRAY`.
pub const COMBINER_SUBARRAY: c_int = 13;
/// `MPI_COMBINER_DARRAY`.
pub const COMBINER_DARRAY: c_int = 14;

/// The dimensions of an `order` array, fastest-varying first.
fn fastest_first(n: usize, order: c_int) -> Result<Vec<usize>, c_int> {
    match order {
        ORDER_C => Ok((0..n).rev().collect()),
        ORDER_FORTRAN => Ok((0..n).collect()),
        _ => Err(abi::ERR_ARG),
    }
}

/// The indices one process owns along one dimension of a distributed
/// array: up to two runs `(start, len, reps, period)`, each `reps` blocks
/// of `len` indices, `period` apart, from index `start`.
fn dim_runs(
    g: usize,
    distrib: c_int,
    darg: c_int,
    p: usize,
    coord: usize,
) -> Result<Vec<(usize, usize, usize, usize)>, c_int> {
    let darg = match darg {
        DISTRIBUTE_DFLT_DARG => None,
        d if d > 0 => Some(d as usize),
        _ if distrib == DISTRIBUTE_NONE => None,
        _ => return Err(abi::ERR_ARG),
    };
    match distrib {
        DISTRIBUTE_NONE => {
            if p != 1 {
                return Err(abi::ERR_ARG);
            }
            Ok(vec![(0, g, 1, 0)])
        }
        DISTRIBUTE_BLOCK => {
            let b = darg.unwrap_or(g.div_ceil(p));
            if b.saturating_mul(p) < g {
                return Err(abi::ERR_ARG);
            }
            let start = coord * b;
            let len = g.saturating_sub(start).min(b);
            Ok(if len > 0 {
                vec![(start, len, 1, 0)]
            } else {
                vec![]
            })
        }
        DISTRIBUTE_CYCLIC => {
            let k = darg.unwrap_or(1);
            let period = k.saturating_mul(p);
            let first = coord.saturating_mul(k);
            let mut runs = Vec::new();
            if first >= g {
                return Ok(runs);
            }
            // Whole blocks, then the last one's remainder.
            let full = if g - first >= k {
                (g - first - k) / period + 1
            } else {
                0
            };
            if full > 0 {
                runs.push((first, k, full, period));
            }
            let tail = first + full * period;
            if tail < g {
                runs.push((tail, g - tail, 1, 0));
            }
            Ok(runs)
        }
        _ => Err(abi::ERR_ARG),
    }
}

/// Converts a constructor's count or block length.
fn count_arg(n: i32) -> Result<usize, c_int> {
    usize::try_from(n).map_err(|_| abi::ERR_COUNT)
}

fn narrow(v: i128) -> Result<isize, c_int> {
    isize::try_from(v).map_err(|_| abi::ERR_ARG)
}

impl Types {
    /// An empty table (predefined types only).
    pub fn new() -> Self {
        let pairs = PAIRS
            .iter()
            .map(|&h| Layout::pair(basic_of(h).unwrap_or(Basic::TwoInt)))
            .collect();
        Types {
            slots: Vec::new(),
            free_slots: Vec::new(),
            pairs,
            renamed: Vec::new(),
        }
    }

    fn slot(&self, dt: Handle) -> Option<&Derived> {
        let u = dt as u32;
        if u & USER_MASK != USER_BASE {
            return None;
        }
        self.slots.get((u & !USER_MASK) as usize)?.as_ref()
    }

    fn slot_mut(&mut self, dt: Handle) -> Option<&mut Derived> {
        let u = dt as u32;
        if u & USER_MASK != USER_BASE {
            return None;
        }
        self.slots.get_mut((u & !USER_MASK) as usize)?.as_mut()
    }

    fn view(&self, dt: Handle) -> Result<View<'_>, c_int> {
        if let Some(p) = predef(dt) {
            let layout = pair_index(dt).map(|i| &self.pairs[i]);
            let dense = match layout {
                Some(l) => l.dense_span().map(|s| s.0),
                None => Some(0),
            };
            let true_ub = match (layout, p.basic) {
                (Some(_), Some(b)) => b.pair_parts().map_or(p.size, |(_, io, i)| io + i),
                _ => p.size,
            };
            return Ok(View {
                size: p.size,
                lb: 0,
                extent: p.extent as isize,
                true_lb: 0,
                true_ub: true_ub as isize,
                align: p.align,
                basic: p.basic.map(|b| (b, 1)),
                dense,
                layout,
                committed: true,
                predefined: true,
                ext: ext_of(dt, p.basic),
            });
        }
        let d = self.slot(dt).ok_or(abi::ERR_TYPE)?;
        Ok(View {
            size: d.size,
            lb: d.lb,
            extent: d.extent,
            true_lb: d.true_lb,
            true_ub: d.true_ub,
            align: d.align,
            basic: d.basic,
            dense: d.dense,
            layout: Some(&d.layout),
            committed: d.committed,
            predefined: false,
            ext: Ext::Swap(1),
        })
    }

    /// A datatype's size, bounds and shape. Predefined types are answered
    /// without allocating.
    ///
    /// # Errors
    /// `ERR_TYPE` for `MPI_DATATYPE_NULL`, a freed or an unknown handle.
    pub fn info(&self, dt: Handle) -> Result<TypeInfo, c_int> {
        self.view(dt).map(|v| v.info())
    }

    /// Whether `dt` names a predefined or a live derived datatype.
    pub fn is_valid(&self, dt: Handle) -> bool {
        predef(dt).is_some() || self.slot(dt).is_some()
    }

    /// Stores a new derived type, taking a reference on each derived type
    /// its contents name.
    fn insert(
        &mut self,
        p: Part,
        lb: i128,
        ub: i128,
        committed: bool,
        contents: Contents,
    ) -> Result<Handle, c_int> {
        let size = usize::try_from(p.size).map_err(|_| abi::ERR_ARG)?;
        let (lb, ub) = (narrow(lb)?, narrow(ub)?);
        let extent = narrow(ub as i128 - lb as i128)?;
        let (tlb, tub) = if p.data {
            (narrow(p.tlb)?, narrow(p.tub)?)
        } else {
            (0, 0)
        };
        narrow(tub as i128 - tlb as i128)?;
        let dense = p.layout.dense_span().filter(|s| s.1 == size).map(|s| s.0);
        let d = Derived {
            size,
            lb,
            extent,
            true_lb: tlb,
            true_ub: tub,
            align: p.align,
            basic: if size == 0 { None } else { p.basic },
            dense,
            layout: p.layout,
            committed,
            name: String::new(),
            refs: Cell::new(1),
            contents,
        };
        let idx = match self.free_slots.pop() {
            Some(i) => i,
            None if self.slots.len() < USER_MAX => {
                self.slots.push(None);
                self.slots.len() - 1
            }
            None => return Err(abi::ERR_NO_MEM),
        };
        for &t in &d.contents.types {
            if let Some(c) = self.slot(t) {
                c.refs.set(c.refs.get() + 1);
            }
        }
        self.slots[idx] = Some(d);
        Ok((USER_BASE | idx as u32) as Handle)
    }

    /// A type built from one part with the part's own bounds.
    fn plain(&mut self, p: Part, contents: Contents) -> Result<Handle, c_int> {
        let (lb, ub) = if p.any { (p.lb, p.ub) } else { (0, 0) };
        self.insert(p, lb, ub, false, contents)
    }

    /// `MPI_Type_contiguous`: `count` copies of `old`.
    ///
    /// # Errors
    /// `ERR_COUNT` for a negative count; `ERR_TYPE` for an invalid `old`;
    /// `ERR_ARG` when the bounds overflow.
    pub fn contiguous(&mut self, count: i32, old: Handle) -> Result<Handle, c_int> {
        let n = count_arg(count)?;
        let v = self.view(old)?;
        let p = Part::of(&v, n, 0);
        let c = Contents {
            combiner: abi::COMBINER_CONTIGUOUS,
            ints: vec![count],
            addrs: vec![],
            types: vec![old],
        };
        self.plain(p, c)
    }

    fn strided(
        &mut self,
        count: i32,
        blocklen: i32,
        stride_bytes: i128,
        old: Handle,
        c: Contents,
    ) -> Result<Handle, c_int> {
        let (n, k) = (count_arg(count)?, count_arg(blocklen)?);
        let v = self.view(old)?;
        let stride = narrow(stride_bytes)?;
        let p = Part::of(&v, k, 0).repeat(n, stride);
        self.plain(p, c)
    }

    /// `MPI_Type_vector`: `count` blocks of `blocklen` elements of `old`,
    /// the blocks `stride` extents of `old` apart.
    ///
    /// # Errors
    /// `ERR_COUNT` for a negative count or block length; `ERR_TYPE` for an
    /// invalid `old`; `ERR_ARG` when the bounds overflow.
    pub fn vector(
        &mut self,
        count: i32,
        blocklen: i32,
        stride: i32,
        old: Handle,
    ) -> Result<Handle, c_int> {
        let ext = self.view(old)?.extent as i128;
        let c = Contents {
            combiner: abi::COMBINER_VECTOR,
            ints: vec![count, blocklen, stride],
            addrs: vec![],
            types: vec![old],
        };
        self.strided(count, blocklen, stride as i128 * ext, old, c)
    }

    /// `MPI_Type_create_hvector`: like `vector` with the stride in bytes.
    ///
    /// # Errors
    /// As `vector`.
    pub fn hvector(
        &mut self,
        count: i32,
        blocklen: i32,
        stride_bytes: Aint,
        old: Handle,
    ) -> Result<Handle, c_int> {
        let c = Contents {
            combiner: abi::COMBINER_HVECTOR,
            ints: vec![count, blocklen],
            addrs: vec![stride_bytes],
            types: vec![old],
        };
        self.strided(count, blocklen, stride_bytes as i128, old, c)
    }

    /// Blocks of `old` at byte displacements.
    fn blocks_of(
        &mut self,
        entries: &[(usize, i128)],
        old: Handle,
        c: Contents,
    ) -> Result<Handle, c_int> {
        let v = self.view(old)?;
        let mut parts = Vec::with_capacity(entries.len());
        for &(k, d) in entries {
            parts.push(Part::of(&v, k, narrow(d)?));
        }
        let p = Part::concat(parts)?;
        self.plain(p, c)
    }

    /// `MPI_Type_indexed`: blocks of `blocklens[i]` elements of `old` at
    /// `displs[i]` extents of `old`.
    ///
    /// # Errors
    /// `ERR_ARG` when the slices' lengths differ or the bounds overflow;
    /// `ERR_COUNT` for a negative block length; `ERR_TYPE` for an invalid
    /// `old`; `ERR_NO_MEM` for a layout of more than 2^26 blocks.
    pub fn indexed(
        &mut self,
        blocklens: &[i32],
        displs: &[i32],
        old: Handle,
    ) -> Result<Handle, c_int> {
        if blocklens.len() != displs.len() {
            return Err(abi::ERR_ARG);
        }
        let ext = self.view(old)?.extent as i128;
        let entries = blocklens
            .iter()
            .zip(displs)
            .map(|(&k, &d)| Ok((count_arg(k)?, d as i128 * ext)))
            .collect::<Result<Vec<_>, c_int>>()?;
        let mut ints = vec![blocklens.len() as i32];
        ints.extend_from_slice(blocklens);
        ints.extend_from_slice(displs);
        let c = Contents {
            combiner: abi::COMBINER_INDEXED,
            ints,
            addrs: vec![],
            types: vec![old],
        };
        self.blocks_of(&entries, old, c)
    }

    /// `MPI_Type_create_hindexed`: like `indexed` with displacements in bytes.
    ///
    /// # Errors
    /// As `indexed`.
    pub fn hindexed(
        &mut self,
        blocklens: &[i32],
        displs: &[Aint],
        old: Handle,
    ) -> Result<Handle, c_int> {
        if blocklens.len() != displs.len() {
            return Err(abi::ERR_ARG);
        }
        self.view(old)?;
        let entries = blocklens
            .iter()
            .zip(displs)
            .map(|(&k, &d)| Ok((count_arg(k)?, d as i128)))
            .collect::<Result<Vec<_>, c_int>>()?;
        let mut ints = vec![blocklens.len() as i32];
        ints.extend_from_slice(blocklens);
        let c = Contents {
            combiner: abi::COMBINER_HINDEXED,
            ints,
            addrs: displs.to_vec(),
            types: vec![old],
        };
        self.blocks_of(&entries, old, c)
    }

    /// `MPI_Type_create_indexed_block`: blocks of `blocklen` elements of
    /// `old` at `displs[i]` extents of `old`.
    ///
    /// # Errors
    /// As `indexed`.
    pub fn indexed_block(
        &mut self,
        blocklen: i32,
        displs: &[i32],
        old: Handle,
    ) -> Result<Handle, c_int> {
        let k = count_arg(blocklen)?;
        let ext = self.view(old)?.extent as i128;
        let entries: Vec<_> = displs.iter().map(|&d| (k, d as i128 * ext)).collect();
        let mut ints = vec![displs.len() as i32, blocklen];
        ints.extend_from_slice(displs);
        let c = Contents {
            combiner: abi::COMBINER_INDEXED_BLOCK,
            ints,
            addrs: vec![],
            types: vec![old],
        };
        self.blocks_of(&entries, old, c)
    }

    /// `MPI_Type_create_hindexed_block`: like `indexed_block` with
    /// displacements in bytes.
    ///
    /// # Errors
    /// As `indexed`.
    pub fn hindexed_block(
        &mut self,
        blocklen: i32,
        displs: &[Aint],
        old: Handle,
    ) -> Result<Handle, c_int> {
        let k = count_arg(blocklen)?;
        self.view(old)?;
        let entries: Vec<_> = displs.iter().map(|&d| (k, d as i128)).collect();
        let c = Contents {
            combiner: abi::COMBINER_HINDEXED_BLOCK,
            ints: vec![displs.len() as i32, blocklen],
            addrs: displs.to_vec(),
            types: vec![old],
        };
        self.blocks_of(&entries, old, c)
    }

    /// `MPI_Type_create_struct`: blocks of `blocklens[i]` elements of
    /// `types[i]` at byte displacements `displs[i]`. As in MPICH, the
    /// extent of a struct of more than one distinct type is rounded up to
    /// its members' largest alignment, and `MPI_LB`/`MPI_UB` entries set
    /// the bounds (no rounding then).
    ///
    /// # Errors
    /// `ERR_ARG` when the slices' lengths differ or the bounds overflow;
    /// `ERR_COUNT` for a negative block length; `ERR_TYPE` for an invalid
    /// type; `ERR_NO_MEM` for a layout of more than 2^26 blocks.
    pub fn create_struct(
        &mut self,
        blocklens: &[i32],
        displs: &[Aint],
        types: &[Handle],
    ) -> Result<Handle, c_int> {
        if blocklens.len() != displs.len() || blocklens.len() != types.len() {
            return Err(abi::ERR_ARG);
        }
        let mut parts = Vec::with_capacity(types.len());
        let (mut mlb, mut mub): (Option<i128>, Option<i128>) = (None, None);
        let mut first: Option<Handle> = None;
        let mut mixed = false;
        for ((&k, &d), &t) in blocklens.iter().zip(displs).zip(types) {
            let k = count_arg(k)?;
            let v = self.view(t)?;
            if t == abi::LB || t == abi::UB {
                if k > 0 {
                    let m = if t == abi::LB { &mut mlb } else { &mut mub };
                    let d = d as i128;
                    *m = Some(match *m {
                        Some(x) if t == abi::LB => x.min(d),
                        Some(x) => x.max(d),
                        None => d,
                    });
                }
                continue;
            }
            if k > 0 {
                match first {
                    None => first = Some(t),
                    Some(f) if f != t => mixed = true,
                    _ => {}
                }
            }
            parts.push(Part::of(&v, k, d));
        }
        let p = Part::concat(parts)?;
        let (mut lb, mut ub) = if p.any { (p.lb, p.ub) } else { (0, 0) };
        if mlb.is_some() || mub.is_some() {
            // A marker sets its bound; the other is the data's, or 0 when
            // there is no data (MPICH: a struct of one MPI_LB at 10 has
            // extent -10).
            lb = mlb.unwrap_or(lb);
            ub = mub.unwrap_or(ub);
        } else if mixed && p.align > 1 && ub > lb {
            let a = p.align as i128;
            ub = lb + (ub - lb + a - 1) / a * a;
        }
        let mut ints = vec![types.len() as i32];
        ints.extend_from_slice(blocklens);
        let c = Contents {
            combiner: abi::COMBINER_STRUCT,
            ints,
            addrs: displs.to_vec(),
            types: types.to_vec(),
        };
        self.insert(p, lb, ub, false, c)
    }

    /// `MPI_Type_create_resized`: `old` with lower bound `lb` and extent
    /// `extent` (which may be negative).
    ///
    /// # Errors
    /// `ERR_TYPE` for an invalid `old`; `ERR_ARG` when `lb + extent` overflows.
    pub fn resized(&mut self, old: Handle, lb: Aint, extent: Aint) -> Result<Handle, c_int> {
        let v = self.view(old)?;
        let p = Part {
            any: true,
            data: v.size > 0,
            size: v.size as u128,
            lb: lb as i128,
            ub: lb as i128 + extent as i128,
            tlb: v.true_lb as i128,
            tub: v.true_ub as i128,
            align: v.align,
            basic: v.basic,
            layout: v.layout(),
        };
        let c = Contents {
            combiner: abi::COMBINER_RESIZED,
            ints: vec![],
            addrs: vec![lb, extent],
            types: vec![old],
        };
        let (l, u) = (p.lb, p.ub);
        self.insert(p, l, u, false, c)
    }

    /// `MPI_Type_dup`: a new handle for the same type, committed if `old`
    /// is, with no name.
    ///
    /// # Errors
    /// `ERR_TYPE` for an invalid `old`.
    pub fn dup(&mut self, old: Handle) -> Result<Handle, c_int> {
        let v = self.view(old)?;
        let p = Part {
            any: true,
            data: v.size > 0,
            size: v.size as u128,
            lb: v.lb as i128,
            ub: v.lb as i128 + v.extent as i128,
            tlb: v.true_lb as i128,
            tub: v.true_ub as i128,
            align: v.align,
            basic: v.basic,
            layout: v.layout(),
        };
        let committed = v.committed;
        let c = Contents {
            combiner: abi::COMBINER_DUP,
            ints: vec![],
            addrs: vec![],
            types: vec![old],
        };
        let (l, u) = (p.lb, p.ub);
        self.insert(p, l, u, committed, c)
    }

    /// The tensor product of per-dimension index runs over `old`: the
    /// dimensions in `dims` (fastest first) with `gsizes[d]` indices, of
    /// which `runs[d]` are selected (see `dim_runs`); the type's bounds are
    /// 0 and the whole array's extent.
    fn array_of(
        &mut self,
        dims: &[usize],
        gsizes: &[i32],
        runs: &[Vec<(usize, usize, usize, usize)>],
        old: Handle,
        c: Contents,
    ) -> Result<Handle, c_int> {
        let v = self.view(old)?;
        let mut part = Part::of(&v, 1, 0);
        let mut stride = v.extent as i128;
        for &d in dims {
            let s = narrow(stride)?;
            let mut pieces = Vec::with_capacity(runs[d].len());
            for &(start, len, reps, period) in &runs[d] {
                let period = narrow(period as i128 * stride)?;
                let at = narrow(start as i128 * stride)?;
                pieces.push(part.clone().repeat(len, s).repeat(reps, period).shift(at));
            }
            part = Part::concat(pieces)?;
            stride = stride
                .checked_mul(gsizes[d] as i128)
                .filter(|x| isize::try_from(*x).is_ok())
                .ok_or(abi::ERR_ARG)?;
        }
        self.insert(part, 0, stride, false, c)
    }

    /// `MPI_Type_create_subarray`: the `subsizes` block at `starts` of an
    /// array of `sizes` elements of `old`, in C (`ORDER_C`) or Fortran
    /// (`ORDER_FORTRAN`) order. The type's lower bound is 0 and its extent
    /// the whole array's (MPI-3.1 §4.1.3).
    ///
    /// # Errors
    /// `ERR_ARG` for no dimensions, slices of different lengths, a size
    /// or subsize of 0, a block that does not fit in the array, a bad
    /// `order`, or bounds that overflow; `ERR_COUNT` for a negative size,
    /// subsize or start; `ERR_TYPE` for an invalid `old`.
    pub fn subarray(
        &mut self,
        sizes: &[i32],
        subsizes: &[i32],
        starts: &[i32],
        order: i32,
        old: Handle,
    ) -> Result<Handle, c_int> {
        let n = sizes.len();
        if n == 0 || subsizes.len() != n || starts.len() != n {
            return Err(abi::ERR_ARG);
        }
        let dims = fastest_first(n, order)?;
        let mut runs = Vec::with_capacity(n);
        for ((&g, &s), &st) in sizes.iter().zip(subsizes).zip(starts) {
            let (g, s, st) = (count_arg(g)?, count_arg(s)?, count_arg(st)?);
            if g == 0 || s == 0 || s > g || st > g - s {
                return Err(abi::ERR_ARG);
            }
            runs.push(vec![(st, s, 1, 0)]);
        }
        self.view(old)?;
        let mut ints = vec![n as i32];
        ints.extend_from_slice(sizes);
        ints.extend_from_slice(subsizes);
        ints.extend_from_slice(starts);
        ints.push(order);
        let c = Contents {
            combiner: COMBINER_SUBARRAY,
            ints,
            addrs: vec![],
            types: vec![old],
        };
        self.array_of(&dims, sizes, &runs, old, c)
    }

    /// `MPI_Type_create_darray`: process `rank`'s part of an array of
    /// `gsizes` elements of `old` distributed over a `psizes` process grid
    /// (ranks laid out row-major), each dimension by `DISTRIBUTE_BLOCK`,
    /// `DISTRIBUTE_CYCLIC` (blocks of `dargs[i]` elements, or 1 for
    /// `DISTRIBUTE_DFLT_DARG`) or `DISTRIBUTE_NONE`, the array in C or
    /// Fortran `order`. The type's lower bound is 0 and its extent the
    /// whole array's (MPI-3.1 §4.1.4).
    ///
    /// # Errors
    /// `ERR_ARG` for a nonpositive `size`, no dimensions, slices of
    /// different lengths, a nonpositive global or grid size, a grid of
    /// other than `size` processes, an unknown distribution, a bad
    /// argument of one, a block distribution that does not cover its
    /// dimension, a bad `order`, or bounds that overflow; `ERR_RANK` for
    /// `rank` outside `0..size`; `ERR_TYPE` for an invalid `old`.
    pub fn darray(
        &mut self,
        size: i32,
        rank: i32,
        gsizes: &[i32],
        distribs: &[i32],
        dargs: &[i32],
        psizes: &[i32],
        order: i32,
        old: Handle,
    ) -> Result<Handle, c_int> {
        let n = gsizes.len();
        if size <= 0 || n == 0 || distribs.len() != n || dargs.len() != n || psizes.len() != n {
            return Err(abi::ERR_ARG);
        }
        if rank < 0 || rank >= size {
            return Err(abi::ERR_RANK);
        }
        let dims = fastest_first(n, order)?;
        if gsizes.iter().chain(psizes).any(|&x| x <= 0) {
            return Err(abi::ERR_ARG);
        }
        let procs = psizes.iter().try_fold(1i64, |a, &p| {
            Some(a * p as i64).filter(|&x| x <= size as i64)
        });
        if procs != Some(size as i64) {
            return Err(abi::ERR_ARG);
        }
        // Grid coordinates, row-major whatever the array's order.
        let mut coords = vec![0usize; n];
        let mut rest = rank as usize;
        for d in (0..n).rev() {
            coords[d] = rest % psizes[d] as usize;
            rest /= psizes[d] as usize;
        }
        let runs = (0..n)
            .map(|d| {
                dim_runs(
                    gsizes[d] as usize,
                    distribs[d],
                    dargs[d],
                    psizes[d] as usize,
                    coords[d],
                )
            })
            .collect::<Result<Vec<_>, c_int>>()?;
        self.view(old)?;
        let mut ints = vec![size, rank, n as i32];
        for a in [gsizes, distribs, dargs, psizes] {
            ints.extend_from_slice(a);
        }
        ints.push(order);
        let c = Contents {
            combiner: COMBINER_DARRAY,
            ints,
            addrs: vec![],
            types: vec![old],
        };
        self.array_of(&dims, gsizes, &runs, old, c)
    }

    /// `MPI_Type_commit` (a no-op for predefined types).
    ///
    /// # Errors
    /// `ERR_TYPE` for an invalid handle.
    pub fn commit(&mut self, dt: Handle) -> Result<(), c_int> {
        if predef(dt).is_some() {
            return Ok(());
        }
        self.slot_mut(dt).ok_or(abi::ERR_TYPE)?.committed = true;
        Ok(())
    }

    /// `MPI_Type_free`: drops the program's reference. The types built
    /// from `dt` keep working, and so does `dt` itself while a handle
    /// `contents` gave out refers to it.
    ///
    /// # Errors
    /// `ERR_TYPE` for a predefined type or an invalid handle.
    pub fn free(&mut self, dt: Handle) -> Result<(), c_int> {
        if predef(dt).is_some() || self.slot(dt).is_none() {
            return Err(abi::ERR_TYPE);
        }
        self.drop_ref(dt);
        Ok(())
    }

    /// A reference to `dt` for an operation that needs the type until it
    /// ends (a receive unpacked at completion, a persistent request), so
    /// that `MPI_Type_free` during the operation does not end it: "any
    /// communication that is currently using this datatype will complete
    /// normally" (MPI 4.1, 5.1.10). Predefined and invalid handles need
    /// none; the hold is then empty.
    pub fn hold(&self, dt: Handle) -> TypeHold {
        match self.slot(dt) {
            Some(d) => {
                d.refs.set(d.refs.get() + 1);
                TypeHold(Some(dt))
            }
            None => TypeHold(None),
        }
    }

    /// Drops one reference to `dt` and, where it was the last, the type and
    /// in turn its references to the types it was built from.
    fn drop_ref(&mut self, dt: Handle) {
        let mut stack = vec![dt];
        while let Some(h) = stack.pop() {
            let Some(d) = self.slot(h) else { continue };
            let r = d.refs.get() - 1;
            d.refs.set(r);
            if r == 0 {
                let idx = (h as u32 & !USER_MASK) as usize;
                if let Some(d) = self.slots[idx].take() {
                    stack.extend(
                        d.contents
                            .types
                            .iter()
                            .copied()
                            .filter(|&t| predef(t).is_none()),
                    );
                }
                self.free_slots.push(idx);
            }
        }
    }

    /// `MPI_Type_get_envelope`: `(num_integers, num_addresses,
    /// num_datatypes, combiner)`; `(0, 0, 0, COMBINER_NAMED)` for
    /// predefined types.
    ///
    /// # Errors
    /// `ERR_TYPE` for an invalid handle.
    pub fn envelope(&self, dt: Handle) -> Result<(i32, i32, i32, i32), c_int> {
        if predef(dt).is_some() {
            return Ok((0, 0, 0, abi::COMBINER_NAMED));
        }
        let c = &self.slot(dt).ok_or(abi::ERR_TYPE)?.contents;
        Ok((
            c.ints.len() as i32,
            c.addrs.len() as i32,
            c.types.len() as i32,
            c.combiner,
        ))
    }

    /// `MPI_Type_get_contents`: the arguments `dt` was built with. The
    /// datatypes are the very handles passed to the constructor; for each
    /// derived one a reference is taken, so that the program may (as MPI
    /// says it should) `MPI_Type_free` it — as MPICH does.
    ///
    /// # Errors
    /// `ERR_TYPE` for a predefined type (MPICH's class) or an invalid
    /// handle; `ERR_ARG` when a slice is shorter than the envelope says.
    pub fn contents(
        &self,
        dt: Handle,
        ints: &mut [i32],
        addrs: &mut [Aint],
        types: &mut [Handle],
    ) -> Result<(), c_int> {
        if predef(dt).is_some() {
            return Err(abi::ERR_TYPE);
        }
        let c = &self.slot(dt).ok_or(abi::ERR_TYPE)?.contents;
        if ints.len() < c.ints.len() || addrs.len() < c.addrs.len() || types.len() < c.types.len() {
            return Err(abi::ERR_ARG);
        }
        ints[..c.ints.len()].copy_from_slice(&c.ints);
        addrs[..c.addrs.len()].copy_from_slice(&c.addrs);
        types[..c.types.len()].copy_from_slice(&c.types);
        for &t in &c.types {
            if let Some(d) = self.slot(t) {
                d.refs.set(d.refs.get() + 1);
            }
        }
        Ok(())
    }

    /// `MPI_Type_get_name`: MPICH's name for a predefined type (e.g.
    /// `"MPI_LONG_LONG_INT"`, `"MPI_C_COMPLEX"`; `""` for
    /// `MPIX_C_FLOAT16`, as MPICH 4.0.2), unless the program renamed it;
    /// `""` for a derived type never named.
    ///
    /// # Errors
    /// `ERR_TYPE` for an invalid handle.
    pub fn name(&self, dt: Handle) -> Result<String, c_int> {
        if let Some(p) = predef(dt) {
            let r = self.renamed.iter().find(|r| r.0 == dt);
            return Ok(r.map_or_else(|| p.name.to_string(), |r| r.1.clone()));
        }
        Ok(self.slot(dt).ok_or(abi::ERR_TYPE)?.name.clone())
    }

    /// `MPI_Type_set_name`, keeping at most `MAX_OBJECT_NAME - 1` bytes
    /// (silently, as MPICH).
    ///
    /// # Errors
    /// `ERR_TYPE` for an invalid handle.
    pub fn set_name(&mut self, dt: Handle, name: &str) -> Result<(), c_int> {
        let mut end = name.len().min(abi::MAX_OBJECT_NAME - 1);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        let name = name[..end].to_string();
        if predef(dt).is_some() {
            match self.renamed.iter_mut().find(|r| r.0 == dt) {
                Some(r) => r.1 = name,
                None => self.renamed.push((dt, name)),
            }
            return Ok(());
        }
        self.slot_mut(dt).ok_or(abi::ERR_TYPE)?.name = name;
        Ok(())
    }

    /// Runs `f(mem_off, packed_off, len)` for each contiguous piece of the
    /// data of `count` elements of `dt` (element `i` at `i * extent`), in
    /// type-map order: `len` bytes at `buf + mem_off` are packed bytes
    /// `packed_off..packed_off + len`. A contiguous type gives one piece.
    ///
    /// # Errors
    /// `ERR_TYPE` for an invalid handle; `ERR_COUNT` when `count * size`
    /// overflows.
    pub fn for_each_block(
        &self,
        dt: Handle,
        count: usize,
        f: impl FnMut(isize, usize, usize),
    ) -> Result<(), c_int> {
        let v = self.view(dt)?;
        let total = v.size.checked_mul(count).ok_or(abi::ERR_COUNT)?;
        v.walk(0, total, f);
        Ok(())
    }

    /// Copies `count` elements of type `dt` laid out at `src` into the
    /// contiguous bytes `out`; returns the bytes written (`count * size`).
    /// Does not check that `dt` is committed.
    ///
    /// # Errors
    /// `ERR_TYPE` for an invalid handle; `ERR_COUNT` when `count * size`
    /// overflows; `ERR_TRUNCATE` when `out` is shorter than `count * size`.
    ///
    /// # Safety
    /// Every byte of the data of the `count` elements at `src` must be
    /// readable and not overlap `out`. (`src` may be `MPI_BOTTOM`, null,
    /// with absolute displacements.)
    pub unsafe fn pack(
        &self,
        dt: Handle,
        count: usize,
        src: *const u8,
        out: &mut [u8],
    ) -> Result<usize, c_int> {
        let v = self.view(dt)?;
        let total = v.size.checked_mul(count).ok_or(abi::ERR_COUNT)?;
        if out.len() < total {
            return Err(abi::ERR_TRUNCATE);
        }
        let dst = out.as_mut_ptr();
        v.walk(0, total, |mem, pos, len| {
            // SAFETY: the caller vouches for the data at `src`; pos + len
            // <= total <= out.len().
            unsafe { std::ptr::copy_nonoverlapping(src.wrapping_offset(mem), dst.add(pos), len) }
        });
        Ok(total)
    }

    /// Packs the bytes `skip..skip + out.len()` of what `pack` would
    /// produce for `count` elements (clipped at the end); returns the bytes
    /// written. For sending a large non-contiguous message in pieces.
    ///
    /// # Errors
    /// `ERR_TYPE` for an invalid handle; `ERR_COUNT` when `count * size`
    /// overflows.
    ///
    /// # Safety
    /// As `pack`, for the bytes packed.
    pub unsafe fn pack_partial(
        &self,
        dt: Handle,
        count: usize,
        src: *const u8,
        skip: usize,
        out: &mut [u8],
    ) -> Result<usize, c_int> {
        let v = self.view(dt)?;
        let total = v.size.checked_mul(count).ok_or(abi::ERR_COUNT)?;
        let end = total.min(skip.saturating_add(out.len()));
        if skip >= end {
            return Ok(0);
        }
        let dst = out.as_mut_ptr();
        v.walk(skip, end, |mem, pos, len| {
            // SAFETY: the caller vouches for the data at `src`; pos - skip
            // + len <= end - skip <= out.len().
            unsafe {
                std::ptr::copy_nonoverlapping(src.wrapping_offset(mem), dst.add(pos - skip), len)
            }
        });
        Ok(end - skip)
    }

    /// The reverse of `pack`: fills (at most) `count` elements at `dst`
    /// from `bytes`, which may be shorter than `count * size` — then the
    /// elements are filled in order as far as the bytes go, a partial last
    /// block included; returns the bytes consumed
    /// (`min(bytes.len(), count * size)`).
    ///
    /// # Errors
    /// `ERR_TYPE` for an invalid handle; `ERR_COUNT` when `count * size`
    /// overflows.
    ///
    /// # Safety
    /// Every byte of the data of the elements filled at `dst` must be
    /// writable and not overlap `bytes`.
    pub unsafe fn unpack(
        &self,
        dt: Handle,
        count: usize,
        bytes: &[u8],
        dst: *mut u8,
    ) -> Result<usize, c_int> {
        // SAFETY: forwarded from the caller.
        unsafe { self.unpack_partial(dt, count, 0, bytes, dst) }
    }

    /// Unpacks `bytes` as the packed bytes `skip..skip + bytes.len()` of
    /// `count` elements at `dst` (clipped at the end); returns the bytes
    /// consumed.
    ///
    /// # Errors
    /// As `unpack`.
    ///
    /// # Safety
    /// As `unpack`, for the bytes unpacked.
    pub unsafe fn unpack_partial(
        &self,
        dt: Handle,
        count: usize,
        skip: usize,
        bytes: &[u8],
        dst: *mut u8,
    ) -> Result<usize, c_int> {
        let v = self.view(dt)?;
        let total = v.size.checked_mul(count).ok_or(abi::ERR_COUNT)?;
        let end = total.min(skip.saturating_add(bytes.len()));
        if skip >= end {
            return Ok(0);
        }
        let src = bytes.as_ptr();
        v.walk(skip, end, |mem, pos, len| {
            // SAFETY: the caller vouches for the memory at `dst`; pos -
            // skip + len <= bytes.len().
            unsafe {
                std::ptr::copy_nonoverlapping(src.add(pos - skip), dst.wrapping_offset(mem), len)
            }
        });
        Ok(end - skip)
    }

    /// Runs `f` over the basic elements of `count` elements of `dt` in
    /// packed order, a run of them at a time.
    fn runs(&self, dt: Handle, count: usize, mut f: impl FnMut(Run)) -> Result<(), c_int> {
        let v = self.view(dt)?;
        let one;
        let (sig, tiles) = match v.layout {
            Some(l) => (&l.sig[..], l.tiles()),
            None => {
                one = [Run {
                    size: v.size,
                    n: 1,
                    ext: v.ext,
                }];
                (&one[..usize::from(v.size > 0)], 1)
            }
        };
        let reps = tiles.checked_mul(count).ok_or(abi::ERR_COUNT)?;
        if let [r] = sig {
            let n = r.n.checked_mul(reps as u64).ok_or(abi::ERR_COUNT)?;
            f(Run { n, ..*r });
        } else if !sig.is_empty() {
            for _ in 0..reps {
                sig.iter().for_each(|&r| f(r));
            }
        }
        Ok(())
    }

    /// `MPI_Pack_external_size` for `"external32"`: the bytes `count`
    /// elements of `dt` take in that representation (`long` counting 4
    /// bytes, `wchar_t` 2, the others their native size).
    ///
    /// # Errors
    /// `ERR_TYPE` for an invalid handle; `ERR_COUNT` when the size overflows.
    pub fn external32_size(&self, dt: Handle, count: usize) -> Result<usize, c_int> {
        let mut total: u128 = 0;
        self.runs(dt, count, |r| {
            total += r.ext.len(r.size) as u128 * r.n as u128;
        })?;
        usize::try_from(total).map_err(|_| abi::ERR_COUNT)
    }

    /// `MPI_Pack_external` for `"external32"`: writes `count` elements of
    /// `dt` at `src` into `out` in that representation (big-endian, IEEE
    /// binary128 for `long double`, 4-byte `long`s); returns the bytes
    /// written (`external32_size`).
    ///
    /// # Errors
    /// `ERR_TYPE` for an invalid handle; `ERR_COUNT` when a size overflows;
    /// `ERR_TRUNCATE` when `out` is too short.
    ///
    /// # Safety
    /// As `pack`.
    pub unsafe fn pack_external32(
        &self,
        dt: Handle,
        count: usize,
        src: *const u8,
        out: &mut [u8],
    ) -> Result<usize, c_int> {
        let need = self.external32_size(dt, count)?;
        if out.len() < need {
            return Err(abi::ERR_TRUNCATE);
        }
        let v = self.view(dt)?;
        let mut native = vec![0u8; v.size.checked_mul(count).ok_or(abi::ERR_COUNT)?];
        // SAFETY: forwarded from the caller; `native` holds the packed bytes.
        unsafe { self.pack(dt, count, src, &mut native) }?;
        let (mut i, mut o) = (0, 0);
        self.runs(dt, count, |r| {
            let e = r.ext.len(r.size);
            for _ in 0..r.n {
                to_external32(r.ext, &native[i..i + r.size], &mut out[o..o + e]);
                i += r.size;
                o += e;
            }
        })?;
        Ok(need)
    }

    /// `MPI_Unpack_external` for `"external32"`: the reverse of
    /// `pack_external32`, filling `count` elements at `dst` from `bytes`;
    /// returns the bytes consumed (`external32_size`).
    ///
    /// # Errors
    /// `ERR_TYPE` for an invalid handle; `ERR_COUNT` when a size overflows;
    /// `ERR_TRUNCATE` when `bytes` is too short.
    ///
    /// # Safety
    /// As `unpack`.
    pub unsafe fn unpack_external32(
        &self,
        dt: Handle,
        count: usize,
        bytes: &[u8],
        dst: *mut u8,
    ) -> Result<usize, c_int> {
        let need = self.external32_size(dt, count)?;
        if bytes.len() < need {
            return Err(abi::ERR_TRUNCATE);
        }
        let v = self.view(dt)?;
        let mut native = vec![0u8; v.size.checked_mul(count).ok_or(abi::ERR_COUNT)?];
        let (mut i, mut o) = (0, 0);
        self.runs(dt, count, |r| {
            let e = r.ext.len(r.size);
            for _ in 0..r.n {
                from_external32(r.ext, &bytes[o..o + e], &mut native[i..i + r.size]);
                i += r.size;
                o += e;
            }
        })?;
        // SAFETY: forwarded from the caller.
        unsafe { self.unpack(dt, count, &native, dst) }?;
        Ok(need)
    }

    /// `MPI_Get_elements` for `bytes` received bytes: the basic elements
    /// of the whole elements, plus the whole basic elements of a partial
    /// one (a complex number or each half of a pair type counting as one).
    /// As MPICH: for a predefined type other than a pair type,
    /// `UNDEFINED` unless `bytes` is a multiple of its size; for a type of
    /// size 0, 0 for 0 bytes and `UNDEFINED` otherwise.
    ///
    /// # Errors
    /// `ERR_TYPE` for an invalid handle.
    pub fn elements(&self, dt: Handle, bytes: usize) -> Result<i64, c_int> {
        let v = self.view(dt)?;
        let undefined = abi::UNDEFINED as i64;
        if v.size == 0 {
            return Ok(if bytes == 0 { 0 } else { undefined });
        }
        let Some(l) = v.layout else {
            return Ok(if bytes % v.size == 0 {
                (bytes / v.size) as i64
            } else {
                undefined
            });
        };
        let tile = l.tile_size();
        let per_tile = l.tile_elems() as i64;
        let per_elem = per_tile.saturating_mul(l.tiles() as i64);
        let mut n = ((bytes / v.size) as i64).saturating_mul(per_elem);
        let rem = bytes % v.size;
        n += (rem / tile) as i64 * per_tile;
        let mut rem = rem % tile;
        for r in &l.sig {
            let k = (rem / r.size) as u64;
            if k < r.n {
                n += k as i64;
                break;
            }
            n += r.n as i64;
            rem -= r.n as usize * r.size;
        }
        Ok(n)
    }

    /// `MPI_Get_count` for `bytes` received bytes: whole elements, or
    /// `UNDEFINED` when `bytes` is not a multiple of the size (0 for a type
    /// of size 0 and 0 bytes).
    ///
    /// # Errors
    /// `ERR_TYPE` for an invalid handle.
    pub fn count_of(&self, dt: Handle, bytes: usize) -> Result<i64, c_int> {
        let v = self.view(dt)?;
        Ok(match v.size {
            0 if bytes == 0 => 0,
            0 => abi::UNDEFINED as i64,
            s if bytes % s == 0 => (bytes / s) as i64,
            _ => abi::UNDEFINED as i64,
        })
    }

    /// Whether `dt` is predefined (answered by the handle alone).
    pub fn is_predefined(&self, dt: Handle) -> bool {
        self.view(dt).is_ok_and(|v| v.predefined)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{
        CHAR, C_DOUBLE_COMPLEX, DOUBLE, DOUBLE_INT, ERR_ARG, ERR_COUNT, ERR_TYPE, FLOAT_INT, INT,
        LB, SHORT, SHORT_INT, UB, UNDEFINED,
    };

    /// (size, lb, extent, true_lb, true_extent)
    fn bounds(t: &Types, dt: Handle) -> (usize, isize, isize, isize, isize) {
        let i = t.info(dt).unwrap();
        (i.size, i.lb, i.extent, i.true_lb, i.true_extent)
    }

    fn st(t: &mut Types, bl: &[i32], d: &[Aint], ty: &[Handle]) -> Handle {
        t.create_struct(bl, d, ty).unwrap()
    }

    /// The reference: one element's type map as (offset, bytes) of its
    /// basic elements, rebuilt from `envelope`/`contents` and extents.
    fn typemap(t: &Types, dt: Handle) -> Vec<(isize, usize)> {
        if is_predefined(dt) {
            return match basic_of(dt) {
                None => vec![],
                Some(b) => match b.pair_parts() {
                    Some((v, io, i)) => vec![(0, v), (io as isize, i)],
                    None => vec![(0, b.size())],
                },
            };
        }
        let (ni, na, nd, comb) = t.envelope(dt).unwrap();
        let mut ints = vec![0; ni as usize];
        let mut addrs = vec![0; na as usize];
        let mut types = vec![0; nd as usize];
        t.contents(dt, &mut ints, &mut addrs, &mut types).unwrap();
        let mut out = Vec::new();
        let mut rep = |h: Handle, disp: isize, k: i32| {
            let m = typemap(t, h);
            let e = t.info(h).unwrap().extent;
            for j in 0..k as isize {
                for &(o, l) in &m {
                    out.push((disp + j * e + o, l));
                }
            }
        };
        let old = types.first().copied().unwrap_or(INT);
        let e = t.info(old).unwrap().extent;
        match comb {
            abi::COMBINER_DUP | abi::COMBINER_RESIZED => return typemap(t, old),
            abi::COMBINER_CONTIGUOUS => rep(old, 0, ints[0]),
            abi::COMBINER_VECTOR => {
                (0..ints[0]).for_each(|i| rep(old, (i * ints[2]) as isize * e, ints[1]))
            }
            abi::COMBINER_HVECTOR => {
                (0..ints[0]).for_each(|i| rep(old, i as isize * addrs[0], ints[1]))
            }
            abi::COMBINER_INDEXED => {
                let n = ints[0] as usize;
                (0..n).for_each(|i| rep(old, ints[1 + n + i] as isize * e, ints[1 + i]))
            }
            abi::COMBINER_HINDEXED => {
                (0..ints[0] as usize).for_each(|i| rep(old, addrs[i], ints[1 + i]))
            }
            abi::COMBINER_INDEXED_BLOCK => {
                (0..ints[0] as usize).for_each(|i| rep(old, ints[2 + i] as isize * e, ints[1]))
            }
            abi::COMBINER_HINDEXED_BLOCK => {
                (0..ints[0] as usize).for_each(|i| rep(old, addrs[i], ints[1]))
            }
            abi::COMBINER_STRUCT => (0..ints[0] as usize).for_each(|i| {
                if types[i] != LB && types[i] != UB {
                    rep(types[i], addrs[i], ints[1 + i])
                }
            }),
            COMBINER_SUBARRAY => {
                let n = ints[0] as usize;
                let (g, sub, st) = (&ints[1..1 + n], &ints[1 + n..1 + 2 * n], &ints[1 + 2 * n..]);
                let keep = |d: usize, i: i32| st[d] <= i && i < st[d] + sub[d];
                for k in array_cells(g, ints[1 + 3 * n] == ORDER_FORTRAN, keep) {
                    rep(old, k * e, 1);
                }
            }
            COMBINER_DARRAY => {
                let (size, rank, n) = (ints[0], ints[1], ints[2] as usize);
                let at = |j: usize| &ints[3 + j * n..3 + (j + 1) * n];
                let (g, dist, darg, ps) = (at(0), at(1), at(2), at(3));
                assert_eq!(ps.iter().product::<i32>(), size);
                let mut coord = vec![0; n];
                let mut r = rank;
                for d in (0..n).rev() {
                    coord[d] = r % ps[d];
                    r /= ps[d];
                }
                // Who owns index i of dimension d, straight from MPI's definitions.
                let keep = |d: usize, i: i32| {
                    let owner = match dist[d] {
                        DISTRIBUTE_BLOCK if darg[d] == DISTRIBUTE_DFLT_DARG => {
                            i / ((g[d] + ps[d] - 1) / ps[d])
                        }
                        DISTRIBUTE_BLOCK => i / darg[d],
                        DISTRIBUTE_CYCLIC if darg[d] == DISTRIBUTE_DFLT_DARG => i % ps[d],
                        DISTRIBUTE_CYCLIC => (i / darg[d]) % ps[d],
                        _ => 0,
                    };
                    owner == coord[d]
                };
                for k in array_cells(g, ints[3 + 4 * n] == ORDER_FORTRAN, keep) {
                    rep(old, k * e, 1);
                }
            }
            c => panic!("combiner {c}"),
        }
        out
    }

    /// The cells of an array of `g` kept by `keep(dim, index)`, as
    /// element offsets in memory order (which is the type map's order).
    fn array_cells(g: &[i32], fortran: bool, keep: impl Fn(usize, i32) -> bool) -> Vec<isize> {
        let total: i32 = g.iter().product();
        let dims: Vec<usize> = if fortran {
            (0..g.len()).collect()
        } else {
            (0..g.len()).rev().collect()
        };
        (0..total)
            .filter(|&k| {
                let mut rest = k;
                dims.iter().all(|&d| {
                    let i = rest % g[d];
                    rest /= g[d];
                    keep(d, i)
                })
            })
            .map(|k| k as isize)
            .collect()
    }

    /// A buffer holding `count` elements of `dt` with a byte pattern, and
    /// the offset of the elements' origin in it.
    fn buffer(t: &Types, dt: Handle, count: usize, seed: u8) -> (Vec<u8>, usize) {
        let i = t.info(dt).unwrap();
        let (mut lo, mut hi) = (0isize, 0isize);
        for k in 0..count as isize {
            lo = lo.min(k * i.extent + i.true_lb);
            hi = hi.max(k * i.extent + i.true_lb + i.true_extent);
        }
        let v = (0..(hi - lo) as usize + 16)
            .map(|k| (k as u8).wrapping_mul(31).wrapping_add(seed))
            .collect();
        (v, (-lo) as usize + 8)
    }

    fn ref_pack(t: &Types, dt: Handle, count: usize, mem: &[u8], origin: usize) -> Vec<u8> {
        let m = typemap(t, dt);
        let e = t.info(dt).unwrap().extent;
        let mut out = Vec::new();
        for k in 0..count as isize {
            for &(o, l) in &m {
                let at = (origin as isize + k * e + o) as usize;
                out.extend_from_slice(&mem[at..at + l]);
            }
        }
        out
    }

    fn ref_unpack(
        t: &Types,
        dt: Handle,
        count: usize,
        bytes: &[u8],
        mem: &mut [u8],
        origin: usize,
    ) {
        let m = typemap(t, dt);
        let e = t.info(dt).unwrap().extent;
        let mut pos = 0;
        for k in 0..count as isize {
            for &(o, l) in &m {
                let at = (origin as isize + k * e + o) as usize;
                let take = l.min(bytes.len() - pos);
                mem[at..at + take].copy_from_slice(&bytes[pos..pos + take]);
                pos += take;
            }
        }
    }

    fn ref_elements(t: &Types, dt: Handle, bytes: usize) -> i64 {
        let m = typemap(t, dt);
        let size: usize = m.iter().map(|x| x.1).sum();
        let mut n = (bytes / size * m.len()) as i64;
        let mut rem = bytes % size;
        for &(_, l) in &m {
            if rem < l {
                break;
            }
            rem -= l;
            n += 1;
        }
        n
    }

    /// Checks pack/unpack (whole and in pieces) and elements against the
    /// reference.
    fn check(t: &Types, dt: Handle, count: usize) {
        let info = t.info(dt).unwrap();
        let m = typemap(t, dt);
        assert_eq!(
            info.size,
            m.iter().map(|x| x.1).sum::<usize>(),
            "size of {dt:#x}"
        );
        if !m.is_empty() {
            let lo = m.iter().map(|x| x.0).min().unwrap();
            let hi = m.iter().map(|x| x.0 + x.1 as isize).max().unwrap();
            assert_eq!(
                (info.true_lb, info.true_extent),
                (lo, hi - lo),
                "true bounds of {dt:#x}"
            );
        }
        if info.contiguous {
            assert_eq!((info.lb, info.extent), (0, info.size as isize));
            let mut off = 0;
            for &(o, l) in &m {
                assert_eq!(o, off);
                off += l as isize;
            }
        }
        let (mem, origin) = buffer(t, dt, count, 7);
        let want = ref_pack(t, dt, count, &mem, origin);
        let mut got = vec![0u8; want.len()];
        // SAFETY: `mem` holds the elements around `origin`.
        let w = unsafe { t.pack(dt, count, mem.as_ptr().add(origin), &mut got) }.unwrap();
        assert_eq!(w, want.len());
        assert_eq!(got, want, "pack of {count} x {dt:#x}");
        // In pieces.
        for piece in [1, 3, 7, 64] {
            let mut acc = vec![0u8; want.len()];
            let mut at = 0;
            while at < want.len() {
                let end = (at + piece).min(want.len());
                // SAFETY: as above.
                let n = unsafe {
                    t.pack_partial(dt, count, mem.as_ptr().add(origin), at, &mut acc[at..end])
                }
                .unwrap();
                assert_eq!(n, end - at);
                at = end;
            }
            assert_eq!(acc, want, "pack in pieces of {piece}");
        }
        // Unpack everything, and a prefix.
        let src: Vec<u8> = (0..want.len()).map(|k| (k as u8) ^ 0x5a).collect();
        for cut in [src.len(), src.len() / 2, src.len().saturating_sub(1)] {
            let (mut a, _) = buffer(t, dt, count, 3);
            let mut b = a.clone();
            // SAFETY: `a` holds the elements around `origin`.
            let r =
                unsafe { t.unpack(dt, count, &src[..cut], a.as_mut_ptr().add(origin)) }.unwrap();
            assert_eq!(r, cut);
            ref_unpack(t, dt, count, &src[..cut], &mut b, origin);
            assert_eq!(a, b, "unpack of {cut} bytes into {count} x {dt:#x}");
        }
        let (mut a, _) = buffer(t, dt, count, 3);
        let mut b = a.clone();
        let mut at = 0;
        while at < src.len() {
            let end = (at + 5).min(src.len());
            // SAFETY: as above.
            unsafe { t.unpack_partial(dt, count, at, &src[at..end], a.as_mut_ptr().add(origin)) }
                .unwrap();
            at = end;
        }
        ref_unpack(t, dt, count, &src, &mut b, origin);
        assert_eq!(a, b, "unpack in pieces");
        if !is_predefined(dt) && info.size > 0 {
            for bytes in (0..=2 * info.size + 1).step_by(1 + info.size / 16) {
                assert_eq!(
                    t.elements(dt, bytes).unwrap(),
                    ref_elements(t, dt, bytes),
                    "elements({dt:#x}, {bytes})"
                );
            }
        }
    }

    #[test]
    fn predefined_types_match_their_handles() {
        let t = Types::new();
        let all = [
            abi::CHAR,
            abi::SIGNED_CHAR,
            abi::UNSIGNED_CHAR,
            abi::BYTE,
            abi::WCHAR,
            abi::SHORT,
            abi::UNSIGNED_SHORT,
            abi::INT,
            abi::UNSIGNED,
            abi::LONG,
            abi::UNSIGNED_LONG,
            abi::FLOAT,
            abi::DOUBLE,
            abi::LONG_DOUBLE,
            abi::LONG_LONG_INT,
            abi::UNSIGNED_LONG_LONG,
            abi::PACKED,
            abi::LB,
            abi::UB,
            abi::TWO_INT,
            abi::COMPLEX,
            abi::DOUBLE_COMPLEX,
            abi::LOGICAL,
            abi::REAL,
            abi::DOUBLE_PRECISION,
            abi::INTEGER,
            abi::TWO_INTEGER,
            abi::TWO_REAL,
            abi::TWO_DOUBLE_PRECISION,
            abi::CHARACTER,
            abi::REAL4,
            abi::REAL8,
            abi::REAL16,
            abi::COMPLEX8,
            abi::COMPLEX16,
            abi::COMPLEX32,
            abi::INTEGER1,
            abi::INTEGER2,
            abi::INTEGER4,
            abi::INTEGER8,
            abi::INT8_T,
            abi::INT16_T,
            abi::INT32_T,
            abi::INT64_T,
            abi::UINT8_T,
            abi::UINT16_T,
            abi::UINT32_T,
            abi::UINT64_T,
            abi::C_BOOL,
            abi::C_FLOAT_COMPLEX,
            abi::C_DOUBLE_COMPLEX,
            abi::C_LONG_DOUBLE_COMPLEX,
            abi::X_C_FLOAT16,
            abi::AINT,
            abi::OFFSET,
            abi::COUNT,
            abi::CXX_BOOL,
            abi::CXX_FLOAT_COMPLEX,
            abi::CXX_DOUBLE_COMPLEX,
            abi::CXX_LONG_DOUBLE_COMPLEX,
        ];
        for dt in all {
            let i = t.info(dt).unwrap();
            let s = abi::builtin_size(dt).unwrap();
            assert_eq!(
                (i.size, i.extent, i.lb, i.true_lb, i.true_extent),
                (s, s as isize, 0, 0, s as isize),
                "{dt:#x}"
            );
            assert!(i.contiguous && i.committed, "{dt:#x}");
            assert!(t.is_valid(dt) && t.is_predefined(dt));
            assert_eq!(t.envelope(dt), Ok((0, 0, 0, abi::COMBINER_NAMED)));
            if dt != LB && dt != UB {
                let b = basic_of(dt).unwrap();
                assert_eq!((b.size(), i.basic), (s, Some((b, 1))), "{dt:#x}");
            }
            check(&t, dt, 3);
        }
        // The pair types (size, lb, extent, true lb, true extent), as MPICH reports them.
        assert_eq!(bounds(&t, FLOAT_INT), (8, 0, 8, 0, 8));
        assert_eq!(bounds(&t, DOUBLE_INT), (12, 0, 16, 0, 12));
        assert_eq!(bounds(&t, abi::LONG_INT), (12, 0, 16, 0, 12));
        assert_eq!(bounds(&t, SHORT_INT), (6, 0, 8, 0, 8));
        assert_eq!(bounds(&t, abi::LONG_DOUBLE_INT), (20, 0, 32, 0, 20));
        for dt in [
            FLOAT_INT,
            DOUBLE_INT,
            abi::LONG_INT,
            SHORT_INT,
            abi::LONG_DOUBLE_INT,
        ] {
            assert!(t.info(dt).unwrap().contiguous == (dt == FLOAT_INT));
            assert_eq!(t.envelope(dt), Ok((0, 0, 0, abi::COMBINER_NAMED)));
            check(&t, dt, 4);
        }
        for bad in [
            abi::DATATYPE_NULL,
            0,
            -1,
            abi::COMM_WORLD,
            0x4c00_04ff,
            0x8c00_0005u32 as Handle,
            0x8c10_0000u32 as Handle,
        ] {
            assert_eq!(t.info(bad), Err(ERR_TYPE));
            assert!(!t.is_valid(bad));
        }
    }

    #[test]
    fn basic_of_maps_every_family() {
        use Basic::*;
        let cases = [
            (CHAR, I8),
            (abi::CHARACTER, I8),
            (abi::UNSIGNED_CHAR, U8),
            (abi::BYTE, Byte),
            (abi::PACKED, Packed),
            (abi::WCHAR, WChar),
            (abi::LOGICAL, Logical),
            (abi::C_BOOL, Bool),
            (abi::CXX_BOOL, Bool),
            (abi::LONG, I64),
            (abi::AINT, I64),
            (abi::OFFSET, I64),
            (abi::COUNT, I64),
            (abi::UNSIGNED_LONG_LONG, U64),
            (abi::INTEGER, I32),
            (abi::INTEGER2, I16),
            (abi::REAL, F32),
            (abi::DOUBLE_PRECISION, F64),
            (abi::X_C_FLOAT16, F16),
            (abi::LONG_DOUBLE, LongDouble),
            (abi::COMPLEX, CFloatComplex),
            (abi::DOUBLE_COMPLEX, CDoubleComplex),
            (abi::COMPLEX32, CLongDoubleComplex),
            (abi::TWO_INTEGER, TwoInt),
            (abi::TWO_INT, TwoInt),
            (abi::TWO_REAL, TwoReal),
            (abi::TWO_DOUBLE_PRECISION, TwoDouble),
            (SHORT_INT, ShortInt),
            (abi::CXX_DOUBLE_COMPLEX, CDoubleComplex),
        ];
        for (h, b) in cases {
            assert_eq!(basic_of(h), Some(b), "{h:#x}");
        }
        assert_eq!(basic_of(LB), None);
        assert_eq!(basic_of(abi::DATATYPE_NULL), None);
    }

    #[test]
    fn names_are_mpichs() {
        let mut t = Types::new();
        let names = [
            (abi::LONG_LONG_INT, "MPI_LONG_LONG_INT"),
            (abi::C_FLOAT_COMPLEX, "MPI_C_COMPLEX"),
            (abi::X_C_FLOAT16, ""),
            (FLOAT_INT, "MPI_FLOAT_INT"),
            (abi::TWO_INT, "MPI_2INT"),
            (LB, "MPI_LB"),
            (abi::CXX_BOOL, "MPI_CXX_BOOL"),
            (abi::AINT, "MPI_AINT"),
            (abi::INTEGER1, "MPI_INTEGER1"),
            (abi::REAL16, "MPI_REAL16"),
            (abi::CHARACTER, "MPI_CHARACTER"),
            (INT, "MPI_INT"),
            (abi::TWO_DOUBLE_PRECISION, "MPI_2DOUBLE_PRECISION"),
        ];
        for (h, n) in names {
            assert_eq!(t.name(h).unwrap(), n);
        }
        t.set_name(INT, "myint").unwrap();
        assert_eq!(t.name(INT).unwrap(), "myint");
        assert_eq!(t.name(abi::UNSIGNED).unwrap(), "MPI_UNSIGNED");
        let c = t.contiguous(1, INT).unwrap();
        assert_eq!(t.name(c).unwrap(), "");
        t.set_name(c, &"a".repeat(300)).unwrap();
        assert_eq!(t.name(c).unwrap(), "a".repeat(127));
        t.set_name(c, "hello").unwrap();
        let d = t.dup(c).unwrap();
        assert_eq!(
            (t.name(c).unwrap().as_str(), t.name(d).unwrap().as_str()),
            ("hello", "")
        );
        assert_eq!(t.name(abi::DATATYPE_NULL), Err(ERR_TYPE));
        assert_eq!(t.set_name(abi::DATATYPE_NULL, "x"), Err(ERR_TYPE));
    }

    #[test]
    fn bounds_match_mpich() {
        let mut t = Types::new();
        let s1 = st(&mut t, &[1, 1, 3], &[0, 8, 16], &[INT, DOUBLE, CHAR]);
        assert_eq!(bounds(&t, s1), (15, 0, 24, 0, 19));
        let c3 = t.contiguous(3, s1).unwrap();
        assert_eq!(bounds(&t, c3), (45, 0, 72, 0, 67));
        let r8 = t.resized(INT, 0, 8).unwrap();
        let r2 = t.resized(INT, -2, 10).unwrap();
        let ub5 = st(&mut t, &[1, 1], &[0, 5], &[INT, UB]);
        let cint2 = t.contiguous(2, INT).unwrap();
        let v2 = t.vector(2, 1, 2, DOUBLE).unwrap();
        let rd = t.resized(DOUBLE, 0, 1).unwrap();
        let r6 = t.resized(INT, 0, 6).unwrap();
        type Bounds = (usize, isize, isize, isize, isize);
        let cases: Vec<(Handle, Bounds)> = vec![
            (st(&mut t, &[1, 1], &[0, 1], &[CHAR, CHAR]), (2, 0, 2, 0, 2)),
            (st(&mut t, &[1, 1], &[0, 4], &[INT, CHAR]), (5, 0, 8, 0, 5)),
            (
                st(&mut t, &[1, 1, 1], &[0, 4, -1], &[INT, CHAR, CHAR]),
                (6, -1, 8, -1, 6),
            ),
            (st(&mut t, &[1], &[4], &[DOUBLE]), (8, 4, 8, 4, 8)),
            (st(&mut t, &[1], &[4], &[INT]), (4, 4, 4, 4, 4)),
            (st(&mut t, &[2], &[0], &[DOUBLE_INT]), (24, 0, 32, 0, 28)),
            (
                st(&mut t, &[1, 1], &[0, 16], &[abi::LONG_DOUBLE, CHAR]),
                (17, 0, 32, 0, 17),
            ),
            (r8, (4, 0, 8, 0, 4)),
            (st(&mut t, &[1, 1], &[0, 8], &[r8, CHAR]), (5, 0, 12, 0, 9)),
            (st(&mut t, &[1, 1], &[0, 1], &[r8, CHAR]), (5, 0, 8, 0, 4)),
            (r2, (4, -2, 10, 0, 4)),
            (t.dup(r2).unwrap(), (4, -2, 10, 0, 4)),
            (t.contiguous(2, r2).unwrap(), (8, -2, 20, 0, 14)),
            (t.contiguous(0, INT).unwrap(), (0, 0, 0, 0, 0)),
            (t.hvector(2, 1, -8, INT).unwrap(), (8, -8, 12, -8, 12)),
            (t.vector(3, 2, 5, DOUBLE).unwrap(), (48, 0, 96, 0, 96)),
            (t.vector(3, 2, -5, DOUBLE).unwrap(), (48, -80, 96, -80, 96)),
            (t.indexed(&[0, 2], &[5, 1], INT).unwrap(), (8, 4, 8, 4, 8)),
            (t.indexed(&[0, 0], &[5, 1], INT).unwrap(), (0, 0, 0, 0, 0)),
            (st(&mut t, &[1, 1], &[0, 4], &[INT, LB]), (4, 4, 0, 0, 4)),
            (
                st(&mut t, &[1, 1, 1], &[0, -4, 20], &[INT, LB, UB]),
                (4, -4, 24, 0, 4),
            ),
            (ub5, (4, 0, 5, 0, 4)),
            (t.contiguous(2, ub5).unwrap(), (8, 0, 10, 0, 9)),
            (
                st(&mut t, &[1, 1], &[0, 16], &[ub5, CHAR]),
                (5, 0, 20, 0, 17),
            ),
            (st(&mut t, &[1, 1], &[0, -1], &[INT, LB]), (4, -1, 5, 0, 4)),
            // Markers alone: the other bound is 0 (MPICH's
            // struct_no_real_types).
            (st(&mut t, &[1], &[10], &[LB]), (0, 10, -10, 0, 0)),
            (st(&mut t, &[1], &[10], &[UB]), (0, 0, 10, 0, 0)),
            (
                st(&mut t, &[1, 0], &[0, 8], &[CHAR, DOUBLE]),
                (1, 0, 1, 0, 1),
            ),
            (st(&mut t, &[], &[], &[]), (0, 0, 0, 0, 0)),
            (
                st(&mut t, &[1, 1], &[0, 8], &[cint2, CHAR]),
                (9, 0, 12, 0, 9),
            ),
            (
                st(&mut t, &[1, 1], &[0, 24], &[v2, CHAR]),
                (17, 0, 32, 0, 25),
            ),
            (st(&mut t, &[1, 1], &[0, 1], &[rd, CHAR]), (9, 0, 8, 0, 8)),
            (st(&mut t, &[1], &[0], &[FLOAT_INT]), (8, 0, 8, 0, 8)),
            (
                st(&mut t, &[1, 1], &[0, 4], &[SHORT_INT, CHAR]),
                (7, 0, 8, 0, 8),
            ),
            (
                st(&mut t, &[1, 1], &[0, 8], &[C_DOUBLE_COMPLEX, CHAR]),
                (17, 0, 16, 0, 16),
            ),
            (
                st(&mut t, &[1, 1], &[0, 4], &[abi::WCHAR, CHAR]),
                (5, 0, 8, 0, 5),
            ),
            (
                st(&mut t, &[1, 1], &[0, 4], &[abi::LOGICAL, CHAR]),
                (5, 0, 8, 0, 5),
            ),
            (
                st(&mut t, &[1, 1], &[0, 8], &[abi::TWO_DOUBLE_PRECISION, CHAR]),
                (17, 0, 16, 0, 16),
            ),
            (
                st(&mut t, &[1, 1], &[0, 4], &[abi::TWO_INT, CHAR]),
                (9, 0, 8, 0, 8),
            ),
            (
                st(&mut t, &[1, 1], &[0, 8], &[abi::PACKED, CHAR]),
                (2, 0, 9, 0, 9),
            ),
            (
                st(&mut t, &[1, 1], &[0, 8], &[abi::AINT, CHAR]),
                (9, 0, 16, 0, 9),
            ),
            (
                st(&mut t, &[1, 1], &[0, 8], &[abi::CXX_BOOL, CHAR]),
                (2, 0, 9, 0, 9),
            ),
            (
                st(&mut t, &[1, 1], &[0, 16], &[abi::REAL16, CHAR]),
                (17, 0, 17, 0, 17),
            ),
            (
                st(&mut t, &[1, 1], &[0, 16], &[abi::LONG_DOUBLE_INT, CHAR]),
                (21, 0, 32, 0, 20),
            ),
            (
                st(&mut t, &[1, 1], &[0, 8], &[abi::INTEGER8, CHAR]),
                (9, 0, 16, 0, 9),
            ),
            (
                st(
                    &mut t,
                    &[1, 1],
                    &[0, 16],
                    &[abi::C_LONG_DOUBLE_COMPLEX, CHAR],
                ),
                (33, 0, 32, 0, 32),
            ),
            (
                t.hindexed_block(2, &[0, 16, 40], INT).unwrap(),
                (24, 0, 48, 0, 48),
            ),
            (
                t.indexed_block(2, &[0, 4, 10], INT).unwrap(),
                (24, 0, 48, 0, 48),
            ),
            (
                t.hindexed(&[1, 2], &[3, 7], INT).unwrap(),
                (12, 3, 12, 3, 12),
            ),
            (t.hindexed(&[1, 1], &[0, 5], INT).unwrap(), (8, 0, 9, 0, 9)),
            (t.hvector(2, 1, 5, INT).unwrap(), (8, 0, 9, 0, 9)),
            (st(&mut t, &[1, 1], &[0, 5], &[INT, INT]), (8, 0, 9, 0, 9)),
            (st(&mut t, &[1], &[0], &[r6]), (4, 0, 6, 0, 4)),
            (t.contiguous(2, SHORT_INT).unwrap(), (12, 0, 16, 0, 16)),
            (t.vector(2, 1, 1, SHORT_INT).unwrap(), (12, 0, 16, 0, 16)),
            (t.resized(INT, 0, -4).unwrap(), (4, 0, -4, 0, 4)),
            (t.contiguous(2, DOUBLE_INT).unwrap(), (24, 0, 32, 0, 28)),
        ];
        for (i, (h, want)) in cases.into_iter().enumerate() {
            assert_eq!(bounds(&t, h), want, "case {i}");
            check(&t, h, 3);
        }
    }

    #[test]
    fn struct_extent_is_padded_like_sizeof() {
        #[repr(C)]
        struct S {
            a: i32,
            b: f64,
            c: [u8; 3],
        }
        let mut t = Types::new();
        let h = st(&mut t, &[1, 1, 3], &[0, 8, 16], &[INT, DOUBLE, CHAR]);
        assert_eq!(t.info(h).unwrap().extent as usize, std::mem::size_of::<S>());
        t.commit(h).unwrap();
        let src = [
            S {
                a: 1,
                b: 2.5,
                c: [3, 4, 5],
            },
            S {
                a: -7,
                b: -0.25,
                c: [6, 7, 8],
            },
        ];
        let mut packed = [0u8; 30];
        // SAFETY: two S.
        let r = unsafe { t.pack(h, 2, src.as_ptr().cast(), &mut packed) };
        assert_eq!(r, Ok(30));
        assert_eq!(&packed[..4], &1i32.to_ne_bytes());
        assert_eq!(&packed[4..12], &2.5f64.to_ne_bytes());
        assert_eq!(&packed[12..15], &[3, 4, 5]);
        assert_eq!(&packed[15..19], &(-7i32).to_ne_bytes());
        let mut dst = [
            S {
                a: 0,
                b: 0.0,
                c: [0; 3],
            },
            S {
                a: 0,
                b: 0.0,
                c: [0; 3],
            },
        ];
        // SAFETY: two S.
        let r = unsafe { t.unpack(h, 2, &packed, dst.as_mut_ptr().cast()) };
        assert_eq!(r, Ok(30));
        assert_eq!((dst[1].a, dst[1].b, dst[1].c), (-7, -0.25, [6, 7, 8]));
        assert_eq!(t.info(h).unwrap().basic, None);
    }

    #[test]
    fn matrix_column_round_trip() {
        // A 5x4 row-major matrix of doubles; its column 2, then all columns
        // via a resized column type.
        let mut t = Types::new();
        let m: Vec<f64> = (0..20).map(|x| x as f64).collect();
        let col = t.vector(5, 1, 4, DOUBLE).unwrap();
        t.commit(col).unwrap();
        let i = t.info(col).unwrap();
        assert_eq!(
            (i.size, i.extent, i.contiguous, i.basic),
            (40, 136, false, Some((Basic::F64, 5)))
        );
        let mut out = [0u8; 40];
        // SAFETY: column 2 of `m`.
        unsafe { t.pack(col, 1, m.as_ptr().add(2).cast(), &mut out) }.unwrap();
        let got: Vec<f64> = out
            .chunks(8)
            .map(|c| f64::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(got, [2.0, 6.0, 10.0, 14.0, 18.0]);
        let cols = t.resized(col, 0, 8).unwrap();
        let mut all = vec![0u8; 160];
        // SAFETY: four columns of `m`.
        unsafe { t.pack(cols, 4, m.as_ptr().cast(), &mut all) }.unwrap();
        let got: Vec<f64> = all
            .chunks(8)
            .map(|c| f64::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        let want: Vec<f64> = (0..4)
            .flat_map(|c| (0..5).map(move |r| (r * 4 + c) as f64))
            .collect();
        assert_eq!(got, want);
        let mut back = vec![0f64; 20];
        // SAFETY: a 5x4 matrix.
        unsafe { t.unpack(cols, 4, &all, back.as_mut_ptr().cast()) }.unwrap();
        assert_eq!(back, m);
        check(&t, col, 2);
        check(&t, cols, 4);
    }

    #[test]
    fn nested_and_indexed_round_trips() {
        let mut t = Types::new();
        let idx = t.indexed(&[2, 1, 3], &[4, 0, 9], INT).unwrap();
        let hidx = t.hindexed(&[1, 2], &[24, -8], SHORT).unwrap();
        let vv = t.vector(3, 2, 3, idx).unwrap();
        let s = st(&mut t, &[2, 1, 1], &[0, 100, -40], &[vv, SHORT_INT, hidx]);
        let cs = t.contiguous(2, s).unwrap();
        let rs = t.resized(s, -16, 64).unwrap();
        let pairs = t.vector(3, 2, -3, SHORT_INT).unwrap();
        for h in [idx, hidx, vv, s, cs, rs, pairs] {
            check(&t, h, 3);
        }
        assert_eq!(t.info(idx).unwrap().basic, Some((Basic::I32, 6)));
        assert_eq!(t.info(vv).unwrap().basic, Some((Basic::I32, 36)));
        assert_eq!(t.info(pairs).unwrap().basic, Some((Basic::ShortInt, 6)));
        assert_eq!(t.info(s).unwrap().basic, None);
    }

    /// A small deterministic generator.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> i64 {
            (self.next() % n) as i64
        }
        fn range(&mut self, lo: i64, hi: i64) -> i64 {
            lo + self.below((hi - lo + 1) as u64)
        }
    }

    fn random_type(t: &mut Types, r: &mut Rng, depth: u32) -> Handle {
        const LEAVES: [Handle; 9] = [
            INT,
            DOUBLE,
            CHAR,
            SHORT,
            SHORT_INT,
            DOUBLE_INT,
            C_DOUBLE_COMPLEX,
            FLOAT_INT,
            LB,
        ];
        if depth == 0 || r.below(4) == 0 {
            return LEAVES[r.below(LEAVES.len() as u64) as usize];
        }
        let old = random_type(t, r, depth - 1);
        let n = r.range(0, 3) as usize;
        let k = |r: &mut Rng| r.range(0, 3) as i32;
        match r.below(10) {
            0 => t.contiguous(r.range(0, 4) as i32, old),
            1 => {
                let (c, b, s) = (r.range(0, 3) as i32, k(r), r.range(-3, 4) as i32);
                t.vector(c, b, s, old)
            }
            2 => {
                let (c, b, s) = (r.range(0, 3) as i32, k(r), r.range(-40, 40) as isize);
                t.hvector(c, b, s, old)
            }
            3 => {
                let bl: Vec<i32> = (0..n).map(|_| k(r)).collect();
                let d: Vec<i32> = (0..n).map(|_| r.range(-3, 6) as i32).collect();
                t.indexed(&bl, &d, old)
            }
            4 => {
                let bl: Vec<i32> = (0..n).map(|_| k(r)).collect();
                let d: Vec<isize> = (0..n).map(|_| r.range(-30, 60) as isize).collect();
                t.hindexed(&bl, &d, old)
            }
            5 => {
                let d: Vec<i32> = (0..n).map(|_| r.range(-3, 6) as i32).collect();
                t.indexed_block(k(r), &d, old)
            }
            6 => {
                let d: Vec<isize> = (0..n).map(|_| r.range(-30, 60) as isize).collect();
                t.hindexed_block(k(r), &d, old)
            }
            7 => {
                let n = n + 1;
                let ty: Vec<Handle> = (0..n)
                    .map(|i| {
                        if i == 0 {
                            old
                        } else {
                            random_type(t, r, depth - 1)
                        }
                    })
                    .collect();
                let bl: Vec<i32> = (0..n).map(|_| k(r)).collect();
                let d: Vec<isize> = (0..n).map(|_| r.range(-30, 60) as isize).collect();
                t.create_struct(&bl, &d, &ty)
            }
            8 => {
                let (lb, e) = (r.range(-8, 8) as isize, r.range(-4, 40) as isize);
                t.resized(old, lb, e)
            }
            _ => t.dup(old),
        }
        .unwrap()
    }

    #[test]
    fn random_types_pack_like_their_type_maps() {
        let mut t = Types::new();
        let mut r = Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..2000 {
            let h = random_type(&mut t, &mut r, 3);
            t.commit(h).unwrap();
            let count = r.range(0, 3) as usize;
            check(&t, h, count);
        }
    }

    #[test]
    fn elements_match_mpich() {
        let mut t = Types::new();
        let s1 = st(&mut t, &[1, 1, 3], &[0, 8, 16], &[INT, DOUBLE, CHAR]);
        let want = [
            (0, 0),
            (2, 0),
            (4, 1),
            (6, 1),
            (12, 2),
            (13, 3),
            (14, 4),
            (15, 5),
            (17, 5),
            (19, 6),
            (23, 6),
            (30, 10),
            (31, 10),
        ];
        for (b, n) in want {
            assert_eq!(t.elements(s1, b), Ok(n), "{b} bytes");
        }
        let c3 = t.contiguous(3, s1).unwrap();
        assert_eq!(
            [45, 50, 94].map(|b| t.elements(c3, b).unwrap()),
            [15, 16, 31]
        );
        let c2 = t.contiguous(2, DOUBLE_INT).unwrap();
        assert_eq!([20, 24, 12].map(|b| t.elements(c2, b).unwrap()), [3, 4, 2]);
        let u = UNDEFINED as i64;
        assert_eq!([6, 8].map(|b| t.elements(INT, b).unwrap()), [u, 2]);
        assert_eq!(
            [12, 16, 24, 8].map(|b| t.elements(DOUBLE_INT, b).unwrap()),
            [2, 2, 4, 1]
        );
        assert_eq!(t.elements(SHORT_INT, 6), Ok(2));
        assert_eq!(t.elements(abi::TWO_INT, 8), Ok(2));
        assert_eq!(t.elements(abi::TWO_REAL, 8), Ok(2));
        assert_eq!(
            [16, 8].map(|b| t.elements(C_DOUBLE_COMPLEX, b).unwrap()),
            [1, u]
        );
        assert_eq!(t.elements(CHAR, 5), Ok(5));
        let z = t.contiguous(0, INT).unwrap();
        assert_eq!([0, 4].map(|b| t.elements(z, b).unwrap()), [0, u]);
        assert_eq!([0, 4].map(|b| t.count_of(z, b).unwrap()), [0, u]);
        assert_eq!([15, 30, 31].map(|b| t.count_of(s1, b).unwrap()), [1, 2, u]);
        assert_eq!(t.elements(abi::DATATYPE_NULL, 4), Err(ERR_TYPE));
    }

    #[test]
    fn envelope_and_contents() {
        let mut t = Types::new();
        let get = |t: &Types, h: Handle| {
            let (ni, na, nd, c) = t.envelope(h).unwrap();
            let (mut i, mut a, mut d) = (
                vec![0; ni as usize],
                vec![0; na as usize],
                vec![0; nd as usize],
            );
            t.contents(h, &mut i, &mut a, &mut d).unwrap();
            (c, i, a, d)
        };
        let v = t.vector(2, 3, 4, INT).unwrap();
        assert_eq!(
            get(&t, v),
            (abi::COMBINER_VECTOR, vec![2, 3, 4], vec![], vec![INT])
        );
        let h = t.hvector(2, 3, 100, INT).unwrap();
        assert_eq!(
            get(&t, h),
            (abi::COMBINER_HVECTOR, vec![2, 3], vec![100], vec![INT])
        );
        let c = t.contiguous(3, v).unwrap();
        assert_eq!(
            get(&t, c),
            (abi::COMBINER_CONTIGUOUS, vec![3], vec![], vec![v])
        );
        let i = t.indexed(&[1, 2], &[3, 7], INT).unwrap();
        assert_eq!(
            get(&t, i),
            (
                abi::COMBINER_INDEXED,
                vec![2, 1, 2, 3, 7],
                vec![],
                vec![INT]
            )
        );
        let hi = t.hindexed(&[1, 2], &[3, 7], INT).unwrap();
        assert_eq!(
            get(&t, hi),
            (abi::COMBINER_HINDEXED, vec![2, 1, 2], vec![3, 7], vec![INT])
        );
        let ib = t.indexed_block(2, &[0, 4, 10], INT).unwrap();
        assert_eq!(
            get(&t, ib),
            (
                abi::COMBINER_INDEXED_BLOCK,
                vec![3, 2, 0, 4, 10],
                vec![],
                vec![INT]
            )
        );
        let hb = t.hindexed_block(2, &[0, 16, 40], INT).unwrap();
        assert_eq!(
            get(&t, hb),
            (
                abi::COMBINER_HINDEXED_BLOCK,
                vec![3, 2],
                vec![0, 16, 40],
                vec![INT]
            )
        );
        let s = st(&mut t, &[1, 1, 3], &[0, 8, 16], &[INT, v, CHAR]);
        assert_eq!(
            get(&t, s),
            (
                abi::COMBINER_STRUCT,
                vec![3, 1, 1, 3],
                vec![0, 8, 16],
                vec![INT, v, CHAR]
            )
        );
        let s0 = st(&mut t, &[], &[], &[]);
        assert_eq!(get(&t, s0), (abi::COMBINER_STRUCT, vec![0], vec![], vec![]));
        let r = t.resized(INT, 3, 9).unwrap();
        assert_eq!(
            get(&t, r),
            (abi::COMBINER_RESIZED, vec![], vec![3, 9], vec![INT])
        );
        let d = t.dup(INT).unwrap();
        assert_eq!(get(&t, d), (abi::COMBINER_DUP, vec![], vec![], vec![INT]));
        assert_eq!(t.contents(INT, &mut [], &mut [], &mut []), Err(ERR_TYPE));
        assert_eq!(
            t.contents(v, &mut [0; 2], &mut [], &mut [0; 1]),
            Err(ERR_ARG)
        );
        assert_eq!(t.envelope(abi::DATATYPE_NULL), Err(ERR_TYPE));
    }

    #[test]
    fn free_keeps_derived_types_working() {
        let mut t = Types::new();
        let v = t.vector(3, 1, 2, INT).unwrap();
        let c = t.contiguous(2, v).unwrap();
        t.commit(c).unwrap();
        t.free(v).unwrap();
        assert_eq!(bounds(&t, c), (24, 0, 40, 0, 40));
        let m: Vec<i32> = (0..10).collect();
        let mut out = [0u8; 24];
        // SAFETY: `m` holds one element of `c`.
        unsafe { t.pack(c, 1, m.as_ptr().cast(), &mut out) }.unwrap();
        let got: Vec<i32> = out
            .chunks(4)
            .map(|x| i32::from_ne_bytes(x.try_into().unwrap()))
            .collect();
        assert_eq!(got, [0, 2, 4, 5, 7, 9]);
        // `c`'s contents still name `v`, which lives on for them; handing it
        // out takes a reference the program may free.
        let mut ty = [0];
        t.contents(c, &mut [0], &mut [], &mut ty).unwrap();
        assert_eq!(ty[0], v);
        assert!(t.is_valid(v));
        t.free(v).unwrap();
        t.free(c).unwrap();
        assert!(!t.is_valid(c) && !t.is_valid(v));
        assert_eq!(t.free(c), Err(ERR_TYPE));
        assert_eq!(t.info(c), Err(ERR_TYPE));
        for p in [INT, FLOAT_INT, LB, abi::DATATYPE_NULL] {
            assert_eq!(t.free(p), Err(ERR_TYPE));
        }
        // Slots are reused.
        let n = t.contiguous(1, INT).unwrap();
        assert!(n == c || n == v);
    }

    #[test]
    fn constructor_errors() {
        let mut t = Types::new();
        assert_eq!(t.contiguous(-1, INT), Err(ERR_COUNT));
        assert_eq!(t.contiguous(1, abi::DATATYPE_NULL), Err(ERR_TYPE));
        assert_eq!(t.vector(-1, 1, 1, INT), Err(ERR_COUNT));
        assert_eq!(t.vector(1, -1, 1, INT), Err(ERR_COUNT));
        assert_eq!(t.hvector(1, -1, 1, INT), Err(ERR_COUNT));
        assert_eq!(t.indexed(&[-1], &[0], INT), Err(ERR_COUNT));
        assert_eq!(t.indexed(&[1], &[0, 1], INT), Err(ERR_ARG));
        assert_eq!(t.hindexed(&[1, 1], &[0], INT), Err(ERR_ARG));
        assert_eq!(t.indexed_block(-1, &[0], INT), Err(ERR_COUNT));
        assert_eq!(t.hindexed_block(1, &[0], 12345), Err(ERR_TYPE));
        assert_eq!(t.create_struct(&[-1], &[0], &[INT]), Err(ERR_COUNT));
        assert_eq!(
            t.create_struct(&[1], &[0], &[abi::DATATYPE_NULL]),
            Err(ERR_TYPE)
        );
        assert_eq!(t.create_struct(&[1], &[0, 1], &[INT]), Err(ERR_ARG));
        assert_eq!(t.resized(abi::DATATYPE_NULL, 0, 4), Err(ERR_TYPE));
        assert_eq!(t.dup(abi::DATATYPE_NULL), Err(ERR_TYPE));
        assert_eq!(t.commit(abi::DATATYPE_NULL), Err(ERR_TYPE));
        assert_eq!(t.hvector(2, 1, isize::MAX, INT), Err(ERR_ARG));
        let mut small = [0u8; 3];
        // SAFETY: nothing is read: the output is too small.
        let r = unsafe { t.pack(INT, 1, std::ptr::null(), &mut small) };
        assert_eq!(r, Err(abi::ERR_TRUNCATE));
    }

    #[test]
    fn commit_and_dup_state() {
        let mut t = Types::new();
        let c = t.contiguous(2, INT).unwrap();
        assert!(!t.info(c).unwrap().committed);
        let d0 = t.dup(c).unwrap();
        t.commit(c).unwrap();
        let d1 = t.dup(c).unwrap();
        assert!(t.info(c).unwrap().committed);
        assert!(!t.info(d0).unwrap().committed && t.info(d1).unwrap().committed);
        let di = t.dup(INT).unwrap();
        assert!(t.info(di).unwrap().committed);
        assert_eq!(t.commit(INT), Ok(()));
    }

    #[test]
    fn contiguity_and_basic() {
        let mut t = Types::new();
        let yes = [
            t.contiguous(4, INT).unwrap(),
            t.vector(3, 2, 2, DOUBLE).unwrap(),
            t.dup(INT).unwrap(),
            t.contiguous(3, FLOAT_INT).unwrap(),
        ];
        for h in yes {
            assert!(t.info(h).unwrap().contiguous, "{h:#x}");
        }
        let no = [
            t.vector(3, 1, 2, DOUBLE).unwrap(),
            t.resized(INT, 0, 8).unwrap(),
            st(&mut t, &[1], &[4], &[INT]),
            t.contiguous(2, DOUBLE_INT).unwrap(),
            t.hvector(2, 1, -4, INT).unwrap(),
        ];
        for h in no {
            assert!(!t.info(h).unwrap().contiguous, "{h:#x}");
        }
        assert_eq!(t.info(yes[0]).unwrap().basic, Some((Basic::I32, 4)));
        assert_eq!(t.info(yes[1]).unwrap().basic, Some((Basic::F64, 6)));
        let c = t.contiguous(3, DOUBLE_INT).unwrap();
        assert_eq!(t.info(c).unwrap().basic, Some((Basic::DoubleInt, 3)));
        let mixed = st(&mut t, &[1, 1], &[0, 4], &[INT, abi::UNSIGNED]);
        assert_eq!(t.info(mixed).unwrap().basic, None);
        let same = st(&mut t, &[1, 2], &[8, 0], &[INT, INT]);
        assert_eq!(t.info(same).unwrap().basic, Some((Basic::I32, 3)));
    }

    #[test]
    fn big_regular_types_stay_small() {
        let mut t = Types::new();
        let big = t.contiguous(1 << 30, INT).unwrap();
        assert_eq!(t.info(big).unwrap().size, 4 << 30);
        assert!(t.info(big).unwrap().contiguous);
        let col = t.vector(1_000_000, 1, 2, DOUBLE).unwrap();
        let many = t.contiguous(1000, col).unwrap();
        let nested = t.vector(1000, 3, 5, many).unwrap();
        for h in [big, col, many, nested] {
            assert!(t.slot(h).unwrap().layout.blocks.len() <= 1);
            assert!(t.slot(h).unwrap().layout.levels.len() <= 3);
        }
        // A window deep inside `nested` packs like the elements it covers.
        let mem: Vec<u8> = (0..64).map(|x| x as u8).collect();
        let mut out = [0u8; 16];
        // SAFETY: only the first two doubles are touched: packed offset 8
        // is element 0's second double, at byte 16.
        let n = unsafe { t.pack_partial(nested, 1, mem.as_ptr(), 8, &mut out[..8]) }.unwrap();
        assert_eq!((n, &out[..8]), (8, &mem[16..24]));
        assert_eq!(t.elements(nested, 8 * 1000 + 4), Ok(1000));
        // Too big for the address space: an error, not a panic.
        let v1 = t.vector(1 << 20, 1, 2, DOUBLE).unwrap();
        let v2 = t.vector(1 << 20, 1, 2, v1).unwrap();
        assert_eq!(t.vector(1 << 20, 1, 2, v2), Err(ERR_ARG));
        assert_eq!(t.contiguous(i32::MAX, v2), Err(ERR_ARG));
        assert_eq!(
            t.create_struct(&[1 << 30, 1], &[0, 0], &[v1, INT]),
            Err(abi::ERR_NO_MEM)
        );
    }

    /// Packs one element of `dt` from `mem` (an `i32` array) as `i32`s.
    fn pack_ints(t: &Types, dt: Handle, count: usize, mem: &[i32]) -> Vec<i32> {
        let mut out = vec![0u8; t.info(dt).unwrap().size * count];
        // SAFETY: the callers' arrays hold the elements.
        unsafe { t.pack(dt, count, mem.as_ptr().cast(), &mut out) }.unwrap();
        out.chunks(4)
            .map(|x| i32::from_ne_bytes(x.try_into().unwrap()))
            .collect()
    }

    fn contents_of(t: &Types, h: Handle) -> (i32, Vec<i32>, Vec<Aint>, Vec<Handle>) {
        let (ni, na, nd, c) = t.envelope(h).unwrap();
        let (mut i, mut a, mut d) = (
            vec![0; ni as usize],
            vec![0; na as usize],
            vec![0; nd as usize],
        );
        t.contents(h, &mut i, &mut a, &mut d).unwrap();
        (c, i, a, d)
    }

    #[test]
    fn subarray_matches_mpich() {
        let mut t = Types::new();
        let m: Vec<i32> = (0..256).collect();
        // (sizes, subsizes, starts, order, count, packed, true_lb, true_extent),
        // as MPICH 4.0.2 gives them for MPI_INT.
        type Case<'a> = (
            &'a [i32],
            &'a [i32],
            &'a [i32],
            i32,
            usize,
            &'a [i32],
            isize,
            isize,
        );
        let cases: [Case; 5] = [
            (
                &[4, 5],
                &[2, 3],
                &[1, 2],
                ORDER_C,
                1,
                &[7, 8, 9, 12, 13, 14],
                28,
                32,
            ),
            (
                &[4, 5],
                &[2, 3],
                &[1, 2],
                ORDER_FORTRAN,
                2,
                &[9, 10, 13, 14, 17, 18, 29, 30, 33, 34, 37, 38],
                36,
                40,
            ),
            (
                &[3, 4, 5],
                &[2, 2, 2],
                &[1, 0, 3],
                ORDER_C,
                1,
                &[23, 24, 28, 29, 43, 44, 48, 49],
                92,
                108,
            ),
            (
                &[3, 4, 5],
                &[2, 2, 2],
                &[1, 0, 3],
                ORDER_FORTRAN,
                1,
                &[37, 38, 40, 41, 49, 50, 52, 53],
                148,
                68,
            ),
            (&[7], &[3], &[4], ORDER_C, 2, &[4, 5, 6, 11, 12, 13], 16, 12),
        ];
        for (sz, sub, st, order, count, packed, tlb, tex) in cases {
            let h = t.subarray(sz, sub, st, order, INT).unwrap();
            t.commit(h).unwrap();
            let whole: i32 = sz.iter().product();
            let i = t.info(h).unwrap();
            assert_eq!(
                (i.size, i.lb, i.extent, i.true_lb, i.true_extent),
                (packed.len() * 4 / count, 0, whole as isize * 4, tlb, tex),
                "{sz:?} {sub:?} {st:?} {order}"
            );
            assert_eq!(pack_ints(&t, h, count, &m), packed);
            check(&t, h, 2);
            // The envelope and contents MPI specifies.
            let mut ints = vec![sz.len() as i32];
            for a in [sz, sub, st] {
                ints.extend_from_slice(a);
            }
            ints.push(order);
            assert_eq!(
                contents_of(&t, h),
                (COMBINER_SUBARRAY, ints, vec![], vec![INT])
            );
        }
        // Over a resized type: the element stride is its extent (12 bytes).
        let r = t.resized(INT, -4, 12).unwrap();
        let h = t.subarray(&[3, 3], &[2, 2], &[1, 1], ORDER_C, r).unwrap();
        assert_eq!(bounds(&t, h), (16, 0, 108, 48, 52));
        assert_eq!(pack_ints(&t, h, 1, &m), [12, 15, 21, 24]);
        assert_eq!(contents_of(&t, h).3, [r]);
        // Of a derived type, in both orders, checked against the reference.
        let v = t.vector(2, 1, 3, DOUBLE_INT).unwrap();
        for order in [ORDER_C, ORDER_FORTRAN] {
            let h = t
                .subarray(&[2, 3, 4], &[1, 2, 3], &[1, 1, 0], order, v)
                .unwrap();
            check(&t, h, 3);
            let h = t
                .subarray(&[5], &[5], &[0], order, C_DOUBLE_COMPLEX)
                .unwrap();
            assert_eq!(bounds(&t, h), (80, 0, 80, 0, 80));
            assert!(t.info(h).unwrap().contiguous);
        }
    }

    #[test]
    fn subarray_errors() {
        let mut t = Types::new();
        let ok = ([4, 5], [2, 3], [1, 2]);
        let sa = |t: &mut Types, a: &[i32], b: &[i32], c: &[i32], o: i32, old: Handle| {
            t.subarray(a, b, c, o, old)
        };
        assert!(sa(&mut t, &ok.0, &ok.1, &ok.2, ORDER_C, INT).is_ok());
        assert_eq!(sa(&mut t, &[], &[], &[], ORDER_C, INT), Err(ERR_ARG));
        assert_eq!(sa(&mut t, &[4], &ok.1, &ok.2, ORDER_C, INT), Err(ERR_ARG));
        assert_eq!(sa(&mut t, &ok.0, &ok.1, &ok.2, 99, INT), Err(ERR_ARG));
        assert_eq!(
            sa(&mut t, &[0, 5], &ok.1, &ok.2, ORDER_C, INT),
            Err(ERR_ARG)
        );
        assert_eq!(
            sa(&mut t, &[-4, 5], &ok.1, &ok.2, ORDER_C, INT),
            Err(ERR_COUNT)
        );
        assert_eq!(
            sa(&mut t, &ok.0, &[0, 3], &ok.2, ORDER_C, INT),
            Err(ERR_ARG)
        );
        assert_eq!(
            sa(&mut t, &ok.0, &[5, 3], &[0, 0], ORDER_C, INT),
            Err(ERR_ARG)
        );
        assert_eq!(
            sa(&mut t, &ok.0, &ok.1, &[-1, 2], ORDER_C, INT),
            Err(ERR_COUNT)
        );
        assert_eq!(
            sa(&mut t, &ok.0, &ok.1, &[3, 2], ORDER_C, INT),
            Err(ERR_ARG)
        );
        let null = abi::DATATYPE_NULL;
        assert_eq!(
            sa(&mut t, &ok.0, &ok.1, &ok.2, ORDER_C, null),
            Err(ERR_TYPE)
        );
        // An array too big for the address space.
        let big = [1 << 30; 3];
        assert_eq!(sa(&mut t, &big, &big, &[0; 3], ORDER_C, INT), Err(ERR_ARG));
    }

    #[test]
    fn darray_on_a_2x2_grid() {
        let mut t = Types::new();
        let m: Vec<i32> = (0..64).collect();
        let dflt = DISTRIBUTE_DFLT_DARG;
        let (b, c) = (DISTRIBUTE_BLOCK, DISTRIBUTE_CYCLIC);
        // A 5x7 array of ints over 2x2 processes, as MPICH 4.0.2 hands it out:
        // (order, distribs, dargs, [rank 0..4 elements]).
        type Case<'a> = (i32, [i32; 2], [i32; 2], [&'a [i32]; 4]);
        let cases: [Case; 6] = [
            (
                ORDER_C,
                [b, b],
                [dflt, dflt],
                [
                    &[0, 1, 2, 3, 7, 8, 9, 10, 14, 15, 16, 17],
                    &[4, 5, 6, 11, 12, 13, 18, 19, 20],
                    &[21, 22, 23, 24, 28, 29, 30, 31],
                    &[25, 26, 27, 32, 33, 34],
                ],
            ),
            (
                ORDER_C,
                [c, c],
                [dflt, dflt],
                [
                    &[0, 2, 4, 6, 14, 16, 18, 20, 28, 30, 32, 34],
                    &[1, 3, 5, 15, 17, 19, 29, 31, 33],
                    &[7, 9, 11, 13, 21, 23, 25, 27],
                    &[8, 10, 12, 22, 24, 26],
                ],
            ),
            (
                ORDER_C,
                [c, b],
                [2, dflt],
                [
                    &[0, 1, 2, 3, 7, 8, 9, 10, 28, 29, 30, 31],
                    &[4, 5, 6, 11, 12, 13, 32, 33, 34],
                    &[14, 15, 16, 17, 21, 22, 23, 24],
                    &[18, 19, 20, 25, 26, 27],
                ],
            ),
            (
                ORDER_FORTRAN,
                [b, b],
                [dflt, dflt],
                [
                    &[0, 1, 2, 5, 6, 7, 10, 11, 12, 15, 16, 17],
                    &[20, 21, 22, 25, 26, 27, 30, 31, 32],
                    &[3, 4, 8, 9, 13, 14, 18, 19],
                    &[23, 24, 28, 29, 33, 34],
                ],
            ),
            (
                ORDER_FORTRAN,
                [c, c],
                [dflt, dflt],
                [
                    &[0, 2, 4, 10, 12, 14, 20, 22, 24, 30, 32, 34],
                    &[5, 7, 9, 15, 17, 19, 25, 27, 29],
                    &[1, 3, 11, 13, 21, 23, 31, 33],
                    &[6, 8, 16, 18, 26, 28],
                ],
            ),
            (
                ORDER_FORTRAN,
                [c, b],
                [2, dflt],
                [
                    &[0, 1, 4, 5, 6, 9, 10, 11, 14, 15, 16, 19],
                    &[20, 21, 24, 25, 26, 29, 30, 31, 34],
                    &[2, 3, 7, 8, 12, 13, 17, 18],
                    &[22, 23, 27, 28, 32, 33],
                ],
            ),
        ];
        for (order, dist, darg, want) in cases {
            let mut seen = [0; 35];
            for (rank, w) in want.iter().enumerate() {
                let h = t
                    .darray(4, rank as i32, &[5, 7], &dist, &darg, &[2, 2], order, INT)
                    .unwrap();
                t.commit(h).unwrap();
                assert_eq!(pack_ints(&t, h, 1, &m), *w, "{order} {dist:?} rank {rank}");
                let i = t.info(h).unwrap();
                assert_eq!((i.lb, i.extent), (0, 140));
                check(&t, h, 2);
                for &x in *w {
                    seen[x as usize] += 1;
                }
                let mut ints = vec![4, rank as i32, 2, 5, 7];
                for a in [&dist[..], &darg, &[2, 2]] {
                    ints.extend_from_slice(a);
                }
                ints.push(order);
                assert_eq!(
                    contents_of(&t, h),
                    (COMBINER_DARRAY, ints, vec![], vec![INT])
                );
            }
            // The ranks' parts tile the array.
            assert!(seen.iter().all(|&k| k == 1));
        }
    }

    #[test]
    fn darray_more_shapes() {
        let mut t = Types::new();
        let (b, c, none, dflt) = (
            DISTRIBUTE_BLOCK,
            DISTRIBUTE_CYCLIC,
            DISTRIBUTE_NONE,
            DISTRIBUTE_DFLT_DARG,
        );
        // 3-D, mixed distributions, against MPICH 4.0.2 and the reference.
        let m: Vec<i32> = (0..64).collect();
        let g = [4, 3, 5];
        let (d, a, p) = ([none, c, b], [dflt, 2, 2], [1, 2, 3]);
        let dt = |t: &mut Types, r, o| t.darray(6, r, &g, &d, &a, &p, o, INT).unwrap();
        let h = dt(&mut t, 0, ORDER_C);
        assert_eq!(
            pack_ints(&t, h, 1, &m),
            [0, 1, 5, 6, 15, 16, 20, 21, 30, 31, 35, 36, 45, 46, 50, 51]
        );
        let h = dt(&mut t, 5, ORDER_C);
        assert_eq!(bounds(&t, h), (16, 0, 240, 56, 184));
        assert_eq!(pack_ints(&t, h, 1, &m), [14, 29, 44, 59]);
        let h = dt(&mut t, 5, ORDER_FORTRAN);
        assert_eq!(pack_ints(&t, h, 1, &m), [56, 57, 58, 59]);
        // A process with nothing: size 0, the array's extent.
        let h = t
            .darray(4, 3, &[2], &[b], &[dflt], &[4], ORDER_C, INT)
            .unwrap();
        assert_eq!(bounds(&t, h), (0, 0, 8, 0, 0));
        // Every rank of assorted grids, over a derived type, checked
        // against the reference type map.
        let v = t.vector(2, 1, 2, SHORT_INT).unwrap();
        type Grid<'a> = (&'a [i32], &'a [i32], &'a [i32], &'a [i32]);
        let grids: [Grid; 4] = [
            (&[9], &[c], &[2], &[4]),
            (&[7, 6], &[b, c], &[3, 4], &[3, 2]),
            (&[5, 4, 3], &[c, none, b], &[dflt, dflt, dflt], &[2, 1, 2]),
            (&[8, 3], &[c, c], &[3, dflt], &[2, 3]),
        ];
        for (g, d, a, p) in grids {
            let size: i32 = p.iter().product();
            for order in [ORDER_C, ORDER_FORTRAN] {
                for old in [INT, v] {
                    for r in 0..size {
                        let h = t.darray(size, r, g, d, a, p, order, old).unwrap();
                        check(&t, h, 2);
                        t.free(h).unwrap();
                    }
                }
            }
        }
    }

    #[test]
    fn darray_errors() {
        let mut t = Types::new();
        let (b, c, none, dflt) = (
            DISTRIBUTE_BLOCK,
            DISTRIBUTE_CYCLIC,
            DISTRIBUTE_NONE,
            DISTRIBUTE_DFLT_DARG,
        );
        let g = [5, 7];
        let da = |t: &mut Types, size, rank, d: [i32; 2], a: [i32; 2], p: [i32; 2], o, old| {
            t.darray(size, rank, &g, &d, &a, &p, o, old)
        };
        let (bb, dd, pp) = ([b, b], [dflt, dflt], [2, 2]);
        assert!(da(&mut t, 4, 0, bb, dd, pp, ORDER_C, INT).is_ok());
        assert_eq!(da(&mut t, 0, 0, bb, dd, pp, ORDER_C, INT), Err(ERR_ARG));
        assert_eq!(
            da(&mut t, 4, 4, bb, dd, pp, ORDER_C, INT),
            Err(abi::ERR_RANK)
        );
        assert_eq!(
            da(&mut t, 4, -1, bb, dd, pp, ORDER_C, INT),
            Err(abi::ERR_RANK)
        );
        assert_eq!(da(&mut t, 5, 0, bb, dd, pp, ORDER_C, INT), Err(ERR_ARG));
        assert_eq!(da(&mut t, 4, 0, bb, dd, [0, 2], ORDER_C, INT), Err(ERR_ARG));
        assert_eq!(da(&mut t, 4, 0, bb, dd, pp, 7, INT), Err(ERR_ARG));
        assert_eq!(da(&mut t, 4, 0, [5, b], dd, pp, ORDER_C, INT), Err(ERR_ARG));
        assert_eq!(
            da(&mut t, 4, 0, [none, b], dd, pp, ORDER_C, INT),
            Err(ERR_ARG)
        );
        // Blocks of 2 on 2 processes do not cover 5 elements.
        assert_eq!(
            da(&mut t, 4, 0, bb, [2, dflt], pp, ORDER_C, INT),
            Err(ERR_ARG)
        );
        assert_eq!(
            da(&mut t, 4, 0, bb, [0, dflt], pp, ORDER_C, INT),
            Err(ERR_ARG)
        );
        assert_eq!(
            da(&mut t, 4, 0, [c, b], [-3, dflt], pp, ORDER_C, INT),
            Err(ERR_ARG)
        );
        let null = abi::DATATYPE_NULL;
        assert_eq!(da(&mut t, 4, 0, bb, dd, pp, ORDER_C, null), Err(ERR_TYPE));
        assert_eq!(
            t.darray(4, 0, &[0, 7], &bb, &dd, &pp, ORDER_C, INT),
            Err(ERR_ARG)
        );
        assert_eq!(
            t.darray(1, 0, &[], &[], &[], &[], ORDER_C, INT),
            Err(ERR_ARG)
        );
    }

    /// Packs `count` elements at `src` in external32, checking the size.
    fn ext32(t: &Types, dt: Handle, count: usize, src: *const u8) -> Vec<u8> {
        let n = t.external32_size(dt, count).unwrap();
        let mut out = vec![0u8; n];
        // SAFETY: the callers' values hold the elements.
        let w = unsafe { t.pack_external32(dt, count, src, &mut out) }.unwrap();
        assert_eq!(w, n);
        out
    }

    #[test]
    fn external32_is_big_endian() {
        let mut t = Types::new();
        let i: [i32; 2] = [0x0102_0304, -2];
        assert_eq!(
            ext32(&t, INT, 2, i.as_ptr().cast()),
            [1, 2, 3, 4, 0xff, 0xff, 0xff, 0xfe]
        );
        let d = 1.0f64;
        assert_eq!(
            ext32(&t, DOUBLE, 1, (&d as *const f64).cast()),
            [0x3f, 0xf0, 0, 0, 0, 0, 0, 0]
        );
        // A complex number's parts are swapped one by one.
        let z: [f32; 2] = [1.0, 2.0];
        assert_eq!(
            ext32(&t, abi::C_FLOAT_COMPLEX, 1, z.as_ptr().cast()),
            [0x3f, 0x80, 0, 0, 0x40, 0, 0, 0]
        );
        // `long` is 4 bytes (MPI's table 13.2, as MPICH); unpacking extends.
        let l: [i64; 2] = [0x0102_0304_0506_0708, -5];
        let e = ext32(&t, abi::LONG, 2, l.as_ptr().cast());
        assert_eq!(e, [5, 6, 7, 8, 0xff, 0xff, 0xff, 0xfb]);
        let mut back = [0i64; 2];
        // SAFETY: `back` holds two longs.
        let r = unsafe { t.unpack_external32(abi::LONG, 2, &e, back.as_mut_ptr().cast()) };
        assert_eq!((r, back), (Ok(8), [0x0506_0708, -5]));
        let mut ub = [0u64; 2];
        // SAFETY: `ub` holds two unsigned longs.
        unsafe { t.unpack_external32(abi::UNSIGNED_LONG, 2, &e, ub.as_mut_ptr().cast()) }.unwrap();
        assert_eq!(ub, [0x0506_0708, 0xffff_fffb]);
        assert_eq!(t.external32_size(abi::WCHAR, 3), Ok(6));
        // x87 long double 1.5 is IEEE binary128 0x3fff8000...
        let mut x = [0u8; 16];
        x[7] = 0xc0;
        x[8] = 0xff;
        x[9] = 0x3f;
        let q = ext32(&t, abi::LONG_DOUBLE, 1, x.as_ptr());
        let mut want = [0u8; 16];
        want[..3].copy_from_slice(&[0x3f, 0xff, 0x80]);
        assert_eq!(q, want);
        let mut y = [0xaau8; 16];
        // SAFETY: `y` holds one long double.
        unsafe { t.unpack_external32(abi::LONG_DOUBLE, 1, &q, y.as_mut_ptr()) }.unwrap();
        assert_eq!(y, x);
        // A pair type: value and index each big-endian, no padding.
        let mut di = [0u8; 16];
        di[..8].copy_from_slice(&2.0f64.to_ne_bytes());
        di[8..12].copy_from_slice(&7i32.to_ne_bytes());
        assert_eq!(
            ext32(&t, DOUBLE_INT, 1, di.as_ptr()),
            [0x40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7]
        );
        // A derived type: its elements in type-map order.
        let v = t.vector(2, 1, 2, SHORT).unwrap();
        let s: [i16; 4] = [0x0102, 9, 0x0304, 9];
        assert_eq!(ext32(&t, v, 1, s.as_ptr().cast()), [1, 2, 3, 4]);
        let st = st(&mut t, &[1, 2], &[0, 8], &[abi::LONG, INT]);
        assert_eq!(t.external32_size(st, 3), Ok(36));
        assert_eq!(t.external32_size(abi::DATATYPE_NULL, 1), Err(ERR_TYPE));
        let mut small = [0u8; 3];
        // SAFETY: nothing is read: the output is too small.
        let r = unsafe { t.pack_external32(INT, 1, i.as_ptr().cast(), &mut small) };
        assert_eq!(r, Err(abi::ERR_TRUNCATE));
        // SAFETY: nothing is written: the input is too small.
        let r = unsafe { t.unpack_external32(INT, 1, &small, std::ptr::null_mut()) };
        assert_eq!(r, Err(abi::ERR_TRUNCATE));
    }

    #[test]
    fn external32_round_trips() {
        let mut t = Types::new();
        let mut r = Rng(0x2545_f491_4f6c_dd1d);
        for _ in 0..500 {
            let h = random_type(&mut t, &mut r, 3);
            let count = r.range(0, 3) as usize;
            let (mem, origin) = buffer(&t, h, count, 11);
            // SAFETY: `mem` holds the elements around `origin`.
            let e = ext32(&t, h, count, unsafe { mem.as_ptr().add(origin) });
            // No `long`s among the leaves: the sizes are the native ones,
            // and the bytes reversed per element are the same multiset.
            let size = t.info(h).unwrap().size * count;
            assert_eq!(e.len(), size);
            let mut native = vec![0u8; size];
            // SAFETY: as above.
            unsafe { t.pack(h, count, mem.as_ptr().add(origin), &mut native) }.unwrap();
            let (mut a, mut b) = (e.clone(), native.clone());
            a.sort_unstable();
            b.sort_unstable();
            assert_eq!(a, b);
            let (mut back, _) = buffer(&t, h, count, 99);
            let mut want = back.clone();
            // SAFETY: `back` is laid out like `mem`.
            let n = unsafe { t.unpack_external32(h, count, &e, back.as_mut_ptr().add(origin)) };
            assert_eq!(n, Ok(e.len()));
            ref_unpack(&t, h, count, &native, &mut want, origin);
            assert_eq!(back, want);
        }
    }
}
