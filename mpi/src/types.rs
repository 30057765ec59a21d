//! Datatype calls: constructors, queries, packing.

use crate::abi::{self, Aint, Count, Handle};
use crate::p2p::type_fail;
use crate::state::{Fail, Lib};
use crate::{count, export, fail, put, put_str, run, set};
use std::ffi::{c_char, c_int, c_void, CStr};

const W: Handle = abi::COMM_WORLD;

/// A constructor's result handle, written to `out`, which is checked
/// before `make` runs.
fn made(
    l: &Lib,
    out: *mut Handle,
    what: &str,
    make: impl FnOnce(&mut crate::datatype::Types) -> Result<Handle, c_int>,
) -> Result<(), Fail> {
    crate::need(out, "newtype")?;
    let h = make(&mut l.types.borrow_mut())
        .map_err(|c| Fail::new(c, format!("{what}: invalid arguments or base datatype")))?;
    // SAFETY: the program's out-parameter, checked above.
    unsafe { out.write(h) };
    Ok(())
}

/// The program's array of `n` entries (`n` checked not negative).
unsafe fn arr<'a, T>(p: *const T, n: c_int) -> Result<&'a [T], Fail> {
    // SAFETY: the caller's array of n entries.
    unsafe { crate::array(p, count(n)?, "an array argument") }
}

/// Checks a `datarep` argument: only `"external32"` is known.
unsafe fn external32(datarep: *const c_char) -> Result<(), Fail> {
    if datarep.is_null() {
        return fail(abi::ERR_ARG, "null datarep");
    }
    // SAFETY: the program's NUL-terminated string.
    let rep = unsafe { CStr::from_ptr(datarep) };
    if rep.to_bytes() != b"external32" {
        return fail(
            abi::ERR_ARG,
            format!("data representation {rep:?} (only \"external32\" is supported)"),
        );
    }
    Ok(())
}

/// Reads a position argument within a buffer of `cap` bytes.
unsafe fn position(pos: *const Aint, cap: Aint) -> Result<Aint, Fail> {
    if pos.is_null() {
        return fail(abi::ERR_ARG, "null position");
    }
    // SAFETY: the program's in-out argument.
    let at = unsafe { *pos };
    if at < 0 || cap < at {
        return fail(
            abi::ERR_ARG,
            format!("position {at} outside the {cap}-byte buffer"),
        );
    }
    Ok(at)
}

/// Fails with `ERR_TYPE` unless `dt` is a committed datatype.
fn committed(l: &Lib, dt: Handle) -> Result<(), Fail> {
    if !info(l, dt)?.committed {
        return fail(
            abi::ERR_TYPE,
            format!("datatype {dt:#x} is not committed (MPI_Type_commit)"),
        );
    }
    Ok(())
}

fn info(l: &Lib, dt: Handle) -> Result<crate::datatype::TypeInfo, Fail> {
    l.types.borrow().info(dt).map_err(|c| type_fail(c, dt))
}

export! {
    fn MPI_Type_size, PMPI_Type_size(dt: Handle, size: *mut c_int) -> c_int {
        run(W, "MPI_Type_size", |l| {
            let s = info(l, dt)?.size;
            set(size, if s > c_int::MAX as usize { abi::UNDEFINED } else { s as c_int }, "size")?;
            Ok(())
        })
    }

    fn MPI_Type_size_x, PMPI_Type_size_x(dt: Handle, size: *mut Count) -> c_int {
        run(W, "MPI_Type_size_x", |l| {
            set(size, info(l, dt)?.size as Count, "size")?;
            Ok(())
        })
    }

    fn MPI_Type_get_extent, PMPI_Type_get_extent(dt: Handle, lb: *mut Aint, extent: *mut Aint) -> c_int {
        run(W, "MPI_Type_get_extent", |l| {
            let i = info(l, dt)?;
            set(lb, i.lb, "lb")?;
            set(extent, i.extent, "extent")?;
            Ok(())
        })
    }

    fn MPI_Type_get_extent_x, PMPI_Type_get_extent_x(dt: Handle, lb: *mut Count, extent: *mut Count) -> c_int {
        run(W, "MPI_Type_get_extent_x", |l| {
            let i = info(l, dt)?;
            set(lb, i.lb as Count, "lb")?;
            set(extent, i.extent as Count, "extent")?;
            Ok(())
        })
    }

    fn MPI_Type_get_true_extent, PMPI_Type_get_true_extent(dt: Handle, lb: *mut Aint, extent: *mut Aint) -> c_int {
        run(W, "MPI_Type_get_true_extent", |l| {
            let i = info(l, dt)?;
            set(lb, i.true_lb, "lb")?;
            set(extent, i.true_extent, "extent")?;
            Ok(())
        })
    }

    fn MPI_Type_get_true_extent_x, PMPI_Type_get_true_extent_x(dt: Handle, lb: *mut Count, extent: *mut Count) -> c_int {
        run(W, "MPI_Type_get_true_extent_x", |l| {
            let i = info(l, dt)?;
            set(lb, i.true_lb as Count, "lb")?;
            set(extent, i.true_extent as Count, "extent")?;
            Ok(())
        })
    }

    fn MPI_Type_extent, PMPI_Type_extent(dt: Handle, extent: *mut Aint) -> c_int {
        run(W, "MPI_Type_extent", |l| {
            set(extent, info(l, dt)?.extent, "extent")?;
            Ok(())
        })
    }

    fn MPI_Type_lb, PMPI_Type_lb(dt: Handle, lb: *mut Aint) -> c_int {
        run(W, "MPI_Type_lb", |l| {
            set(lb, info(l, dt)?.lb, "lb")?;
            Ok(())
        })
    }

    fn MPI_Type_ub, PMPI_Type_ub(dt: Handle, ub: *mut Aint) -> c_int {
        run(W, "MPI_Type_ub", |l| {
            let i = info(l, dt)?;
            set(ub, i.lb + i.extent, "ub")?;
            Ok(())
        })
    }

    fn MPI_Type_contiguous, PMPI_Type_contiguous(n: c_int, old: Handle, out: *mut Handle) -> c_int {
        run(W, "MPI_Type_contiguous", |l| made(l, out, "MPI_Type_contiguous", |t| t.contiguous(n, old)))
    }

    fn MPI_Type_vector, PMPI_Type_vector(n: c_int, bl: c_int, stride: c_int, old: Handle, out: *mut Handle) -> c_int {
        run(W, "MPI_Type_vector", |l| made(l, out, "MPI_Type_vector", |t| t.vector(n, bl, stride, old)))
    }

    fn MPI_Type_create_hvector, PMPI_Type_create_hvector(n: c_int, bl: c_int, stride: Aint, old: Handle, out: *mut Handle) -> c_int {
        run(W, "MPI_Type_create_hvector", |l| made(l, out, "MPI_Type_create_hvector", |t| t.hvector(n, bl, stride, old)))
    }

    fn MPI_Type_hvector, PMPI_Type_hvector(n: c_int, bl: c_int, stride: Aint, old: Handle, out: *mut Handle) -> c_int {
        PMPI_Type_create_hvector(n, bl, stride, old, out)
    }

    fn MPI_Type_indexed, PMPI_Type_indexed(n: c_int, bls: *const c_int, ds: *const c_int, old: Handle, out: *mut Handle) -> c_int {
        run(W, "MPI_Type_indexed", |l| {
            let (b, d) = (arr(bls, n)?, arr(ds, n)?);
            made(l, out, "MPI_Type_indexed", |t| t.indexed(b, d, old))
        })
    }

    fn MPI_Type_create_hindexed, PMPI_Type_create_hindexed(n: c_int, bls: *const c_int, ds: *const Aint, old: Handle, out: *mut Handle) -> c_int {
        run(W, "MPI_Type_create_hindexed", |l| {
            let (b, d) = (arr(bls, n)?, arr(ds, n)?);
            made(l, out, "MPI_Type_create_hindexed", |t| t.hindexed(b, d, old))
        })
    }

    fn MPI_Type_hindexed, PMPI_Type_hindexed(n: c_int, bls: *const c_int, ds: *const Aint, old: Handle, out: *mut Handle) -> c_int {
        PMPI_Type_create_hindexed(n, bls, ds, old, out)
    }

    fn MPI_Type_create_indexed_block, PMPI_Type_create_indexed_block(n: c_int, bl: c_int, ds: *const c_int, old: Handle, out: *mut Handle) -> c_int {
        run(W, "MPI_Type_create_indexed_block", |l| {
            let d = arr(ds, n)?;
            made(l, out, "MPI_Type_create_indexed_block", |t| t.indexed_block(bl, d, old))
        })
    }

    fn MPI_Type_create_hindexed_block, PMPI_Type_create_hindexed_block(n: c_int, bl: c_int, ds: *const Aint, old: Handle, out: *mut Handle) -> c_int {
        run(W, "MPI_Type_create_hindexed_block", |l| {
            let d = arr(ds, n)?;
            made(l, out, "MPI_Type_create_hindexed_block", |t| t.hindexed_block(bl, d, old))
        })
    }

    fn MPI_Type_create_struct, PMPI_Type_create_struct(n: c_int, bls: *const c_int, ds: *const Aint, ts: *const Handle, out: *mut Handle) -> c_int {
        run(W, "MPI_Type_create_struct", |l| {
            let (b, d, t) = (arr(bls, n)?, arr(ds, n)?, arr(ts, n)?);
            made(l, out, "MPI_Type_create_struct", |ts| ts.create_struct(b, d, t))
        })
    }

    fn MPI_Type_struct, PMPI_Type_struct(n: c_int, bls: *const c_int, ds: *const Aint, ts: *const Handle, out: *mut Handle) -> c_int {
        PMPI_Type_create_struct(n, bls, ds, ts, out)
    }

    fn MPI_Type_create_resized, PMPI_Type_create_resized(old: Handle, lb: Aint, extent: Aint, out: *mut Handle) -> c_int {
        run(W, "MPI_Type_create_resized", |l| made(l, out, "MPI_Type_create_resized", |t| t.resized(old, lb, extent)))
    }

    fn MPI_Type_dup, PMPI_Type_dup(old: Handle, out: *mut Handle) -> c_int {
        run(W, "MPI_Type_dup", |l| {
            made(l, out, "MPI_Type_dup", |t| t.dup(old))?;
            let r = crate::extra::type_attrs_dup(l, old, *out);
            if r.is_err() {
                // A copy callback refused: the duplicate goes, with the
                // attributes already copied to it, and the caller gets
                // MPI_DATATYPE_NULL.
                let h = *out;
                let _ = crate::extra::type_attrs_free(l, h);
                let _ = l.types.borrow_mut().free(h);
                *out = abi::DATATYPE_NULL;
            }
            r
        })
    }

    fn MPI_Type_commit, PMPI_Type_commit(dt: *mut Handle) -> c_int {
        run(W, "MPI_Type_commit", |l| {
            if dt.is_null() {
                return fail(abi::ERR_ARG, "null datatype pointer");
            }
            let h = *dt;
            l.types.borrow_mut().commit(h).map_err(|c| type_fail(c, h))
        })
    }

    fn MPI_Type_free, PMPI_Type_free(dt: *mut Handle) -> c_int {
        run(W, "MPI_Type_free", |l| {
            if dt.is_null() {
                return fail(abi::ERR_ARG, "null datatype pointer");
            }
            let h = *dt;
            if !crate::datatype::is_predefined(h) && l.types.borrow().is_valid(h) {
                crate::extra::type_attrs_free(l, h)?;
            }
            l.types.borrow_mut().free(h).map_err(|c| Fail::new(c, format!("cannot free datatype {h:#x} (predefined or invalid)")))?;
            *dt = abi::DATATYPE_NULL;
            Ok(())
        })
    }

    fn MPI_Type_get_name, PMPI_Type_get_name(dt: Handle, name: *mut c_char, len: *mut c_int) -> c_int {
        run(W, "MPI_Type_get_name", |l| {
            let n = l.types.borrow().name(dt).map_err(|c| type_fail(c, dt))?;
            let k = put_str(name, abi::MAX_OBJECT_NAME, &n);
            set(len, k, "len")?;
            Ok(())
        })
    }

    fn MPI_Type_set_name, PMPI_Type_set_name(dt: Handle, name: *const c_char) -> c_int {
        run(W, "MPI_Type_set_name", |l| {
            if name.is_null() {
                return fail(abi::ERR_ARG, "null name");
            }
            let s = CStr::from_ptr(name).to_string_lossy().into_owned();
            l.types.borrow_mut().set_name(dt, &s).map_err(|c| type_fail(c, dt))
        })
    }

    fn MPI_Type_get_envelope, PMPI_Type_get_envelope(dt: Handle, ni: *mut c_int, na: *mut c_int, nd: *mut c_int, combiner: *mut c_int) -> c_int {
        run(W, "MPI_Type_get_envelope", |l| {
            let (a, b, c, d) = l.types.borrow().envelope(dt).map_err(|c| type_fail(c, dt))?;
            set(ni, a, "ni")?;
            set(na, b, "na")?;
            set(nd, c, "nd")?;
            set(combiner, d, "combiner")?;
            Ok(())
        })
    }

    fn MPI_Type_get_contents, PMPI_Type_get_contents(dt: Handle, mi: c_int, ma: c_int, md: c_int, ints: *mut c_int, addrs: *mut Aint, types: *mut Handle) -> c_int {
        run(W, "MPI_Type_get_contents", |l| {
            let (mi, ma, md) = (count(mi)?, count(ma)?, count(md)?);
            let mk = |p: *mut c_int, n: usize| if n == 0 || p.is_null() { &mut [][..] } else { std::slice::from_raw_parts_mut(p, n) };
            let a = if ma == 0 || addrs.is_null() { &mut [][..] } else { std::slice::from_raw_parts_mut(addrs, ma) };
            let t = if md == 0 || types.is_null() { &mut [][..] } else { std::slice::from_raw_parts_mut(types, md) };
            l.types.borrow().contents(dt, mk(ints, mi), a, t).map_err(|c| type_fail(c, dt))
        })
    }

    fn MPI_Pack_size, PMPI_Pack_size(n: c_int, dt: Handle, _comm: Handle, size: *mut c_int) -> c_int {
        run(W, "MPI_Pack_size", |l| {
            let s = count(n)? * info(l, dt)?.size;
            set(size, s as c_int, "size")?;
            Ok(())
        })
    }

    fn MPI_Pack, PMPI_Pack(inbuf: *const c_void, n: c_int, dt: Handle, out: *mut c_void, outsize: c_int, pos: *mut c_int, _comm: Handle) -> c_int {
        run(W, "MPI_Pack", |l| {
            let n = count(n)?;
            let (cap, at) = (count(outsize)?, count(*pos)?);
            if at > cap {
                return fail(abi::ERR_ARG, format!("position {at} beyond the {cap}-byte buffer"));
            }
            let dst = std::slice::from_raw_parts_mut(out.cast::<u8>().add(at), cap - at);
            let need = n * info(l, dt)?.size;
            if need > dst.len() {
                return fail(abi::ERR_TRUNCATE, format!("packing {need} bytes into {} left", dst.len()));
            }
            let w = l.types.borrow().pack(dt, n, inbuf.cast(), dst).map_err(|c| type_fail(c, dt))?;
            *pos = (at + w) as c_int;
            Ok(())
        })
    }

    fn MPI_Unpack, PMPI_Unpack(inbuf: *const c_void, insize: c_int, pos: *mut c_int, out: *mut c_void, n: c_int, dt: Handle, _comm: Handle) -> c_int {
        run(W, "MPI_Unpack", |l| {
            let n = count(n)?;
            let (cap, at) = (count(insize)?, count(*pos)?);
            if at > cap {
                return fail(abi::ERR_ARG, format!("position {at} beyond the {cap}-byte buffer"));
            }
            let need = n * info(l, dt)?.size;
            if need > cap - at {
                return fail(abi::ERR_TRUNCATE, format!("unpacking {need} bytes from {} left", cap - at));
            }
            let src = std::slice::from_raw_parts(inbuf.cast::<u8>().add(at), need);
            let r = l.types.borrow().unpack(dt, n, src, out.cast()).map_err(|c| type_fail(c, dt))?;
            *pos = (at + r) as c_int;
            Ok(())
        })
    }

    fn MPI_Type_create_subarray, PMPI_Type_create_subarray(ndims: c_int, sizes: *const c_int, subsizes: *const c_int, starts: *const c_int, order: c_int, old: Handle, out: *mut Handle) -> c_int {
        run(W, "MPI_Type_create_subarray", |l| {
            if ndims < 0 {
                return fail(abi::ERR_ARG, format!("negative number of dimensions {ndims}"));
            }
            let (a, b, c) = (arr(sizes, ndims)?, arr(subsizes, ndims)?, arr(starts, ndims)?);
            made(l, out, "MPI_Type_create_subarray", |t| t.subarray(a, b, c, order, old))
        })
    }

    fn MPI_Type_create_darray, PMPI_Type_create_darray(size: c_int, rank: c_int, ndims: c_int, gsizes: *const c_int, distribs: *const c_int, dargs: *const c_int, psizes: *const c_int, order: c_int, old: Handle, out: *mut Handle) -> c_int {
        run(W, "MPI_Type_create_darray", |l| {
            if ndims < 0 {
                return fail(abi::ERR_ARG, format!("negative number of dimensions {ndims}"));
            }
            let (g, d) = (arr(gsizes, ndims)?, arr(distribs, ndims)?);
            let (a, p) = (arr(dargs, ndims)?, arr(psizes, ndims)?);
            made(l, out, "MPI_Type_create_darray", |t| t.darray(size, rank, g, d, a, p, order, old))
        })
    }

    fn MPI_Pack_external_size, PMPI_Pack_external_size(datarep: *const c_char, n: c_int, dt: Handle, size: *mut Aint) -> c_int {
        run(W, "MPI_Pack_external_size", |l| {
            external32(datarep)?;
            let s = l.types.borrow().external32_size(dt, count(n)?).map_err(|c| type_fail(c, dt))?;
            set(size, s as Aint, "size")?;
            Ok(())
        })
    }

    fn MPI_Pack_external, PMPI_Pack_external(datarep: *const c_char, inbuf: *const c_void, n: c_int, dt: Handle, out: *mut c_void, outsize: Aint, pos: *mut Aint) -> c_int {
        run(W, "MPI_Pack_external", |l| {
            external32(datarep)?;
            let n = count(n)?;
            let at = position(pos, outsize)?;
            committed(l, dt)?;
            let dst = if outsize == at || out.is_null() {
                &mut [][..]
            } else {
                std::slice::from_raw_parts_mut(out.cast::<u8>().offset(at), (outsize - at) as usize)
            };
            let w = l.types.borrow().pack_external32(dt, n, inbuf.cast(), dst).map_err(|c| {
                if c == abi::ERR_TRUNCATE {
                    Fail::new(c, format!("packing into the {} bytes left", dst.len()))
                } else {
                    type_fail(c, dt)
                }
            })?;
            *pos = at + w as Aint;
            Ok(())
        })
    }

    fn MPI_Unpack_external, PMPI_Unpack_external(datarep: *const c_char, inbuf: *const c_void, insize: Aint, pos: *mut Aint, out: *mut c_void, n: c_int, dt: Handle) -> c_int {
        run(W, "MPI_Unpack_external", |l| {
            external32(datarep)?;
            let n = count(n)?;
            let at = position(pos, insize)?;
            committed(l, dt)?;
            let src = if insize == at || inbuf.is_null() {
                &[][..]
            } else {
                std::slice::from_raw_parts(inbuf.cast::<u8>().offset(at), (insize - at) as usize)
            };
            let r = l.types.borrow().unpack_external32(dt, n, src, out.cast()).map_err(|c| {
                if c == abi::ERR_TRUNCATE {
                    Fail::new(c, format!("unpacking from the {} bytes left", src.len()))
                } else {
                    type_fail(c, dt)
                }
            })?;
            *pos = at + r as Aint;
            Ok(())
        })
    }

    fn MPI_Get_address, PMPI_Get_address(p: *const c_void, addr: *mut Aint) -> c_int {
        put(addr, p as Aint);
        abi::SUCCESS
    }

    fn MPI_Address, PMPI_Address(p: *const c_void, addr: *mut Aint) -> c_int {
        put(addr, p as Aint);
        abi::SUCCESS
    }
}

/// `MPI_Aint_add`.
#[no_mangle]
pub extern "C" fn PMPI_Aint_add(base: Aint, disp: Aint) -> Aint {
    base.wrapping_add(disp)
}

/// `MPI_Aint_add`: `base + disp`.
#[no_mangle]
pub extern "C" fn MPI_Aint_add(base: Aint, disp: Aint) -> Aint {
    PMPI_Aint_add(base, disp)
}

/// `MPI_Aint_diff`.
#[no_mangle]
pub extern "C" fn PMPI_Aint_diff(a: Aint, b: Aint) -> Aint {
    a.wrapping_sub(b)
}

/// `MPI_Aint_diff`: `a - b`.
#[no_mangle]
pub extern "C" fn MPI_Aint_diff(a: Aint, b: Aint) -> Aint {
    PMPI_Aint_diff(a, b)
}
