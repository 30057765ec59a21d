//! What this machine offers for device memory, found without letting
//! cudarc panic: its loader panics when a library is missing, so the
//! libraries are looked for first, by the very names cudarc tries, and its
//! first calls run where a panic is caught.

use crate::{GpuError, Result};

/// A machine that can run GPU work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The driver library that loaded (e.g. `libcuda.so.1`).
    pub driver_lib: String,
    /// The CUDA version the driver supports, as `cuDriverGetVersion`
    /// reports it (13000 for 13.0).
    pub driver_version: i32,
    /// CUDA devices visible.
    pub devices: usize,
    /// The NVRTC library that loaded, if one did (reduction kernels need
    /// it).
    pub nvrtc_lib: Option<String>,
}

/// cudarc's candidate names for library `name` (`cuda`, `nvrtc`), each
/// once, the versioned ones (what a driver installs) first.
pub(crate) fn candidates(name: &str) -> Vec<String> {
    let mut c: Vec<String> = Vec::new();
    for n in cudarc::get_lib_name_candidates(name) {
        if !c.contains(&n) {
            c.push(n);
        }
    }
    c.sort_by_key(|n| !n.contains(".so."));
    c
}

/// The first of cudarc's candidate names for library `name` (`cuda`,
/// `nvrtc`) that the dynamic loader opens here.
pub(crate) fn find_library(name: &str) -> Option<String> {
    candidates(name).into_iter().find(|c| loads(c))
}

/// Whether the dynamic loader can open `file`.
fn loads(file: &str) -> bool {
    let Ok(c) = std::ffi::CString::new(file) else {
        return false;
    };
    // SAFETY: a NUL-terminated name; the handle, if any, is closed at once.
    // Opening runs the library's initialisers, which CUDA's libraries
    // allow (cudarc opens the same file the same way next).
    unsafe {
        let h = libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        if h.is_null() {
            return false;
        }
        libc::dlclose(h);
    }
    true
}

/// What the machine offers: the driver library, its CUDA version, the
/// devices, NVRTC.
///
/// # Errors
/// [`GpuError::NoGpu`] naming what is missing: no driver library (with
/// the names looked for), a driver that does not initialise (no device
/// node, a kernel module of another version), one too old for CUDA 13's
/// bindings, or no device.
pub fn probe() -> Result<Found> {
    let Some(driver_lib) = find_library("cuda") else {
        return Err(GpuError::NoGpu {
            missing: format!(
                "the CUDA driver library (none of {} loads; install the NVIDIA driver, or put \
                 its directory in LD_LIBRARY_PATH)",
                candidates("cuda").join(", ")
            ),
        });
    };
    let init = std::panic::catch_unwind(|| {
        cudarc::driver::result::init()?;
        let mut v: std::ffi::c_int = 0;
        // SAFETY: the driver is initialised; `v` is a valid out-pointer.
        unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut v) }.result()?;
        let n = cudarc::driver::result::device::get_count()?;
        Ok::<_, cudarc::driver::DriverError>((v, n))
    });
    let (driver_version, devices) = match init {
        Err(_) => {
            return Err(GpuError::NoGpu {
                missing: format!(
                    "a driver that CUDA 13's bindings can use ({driver_lib} loaded but lacks \
                     what they call: a driver older than 580?)"
                ),
            })
        }
        Ok(Err(e)) => {
            return Err(GpuError::NoGpu {
                missing: format!(
                    "a working CUDA driver ({driver_lib} loaded, and initialising it failed: \
                     {e:?}; no device, or a kernel module of another version)"
                ),
            })
        }
        Ok(Ok(x)) => x,
    };
    if devices <= 0 {
        return Err(GpuError::NoGpu {
            missing: format!(
                "a CUDA device (the driver, CUDA {}, sees none)",
                version(driver_version)
            ),
        });
    }
    Ok(Found {
        driver_lib,
        driver_version,
        devices: devices as usize,
        nvrtc_lib: find_library("nvrtc"),
    })
}

/// `13000` as `13.0`.
pub(crate) fn version(v: i32) -> String {
    format!("{}.{}", v / 1000, v % 1000 / 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_machine_without_the_driver_is_told_so_without_a_panic() {
        match probe() {
            Ok(f) => {
                // A GPU machine: what it found is consistent.
                assert!(f.devices > 0 && f.driver_version >= 1000, "{f:?}");
                println!("found {f:?}");
            }
            Err(GpuError::NoGpu { missing }) => {
                assert!(!missing.is_empty());
                if find_library("cuda").is_none() {
                    assert!(missing.contains("libcuda.so.1"), "{missing}");
                }
                println!("skipped, no GPU: {missing}");
            }
            Err(e) => panic!("probe failed otherwise: {e}"),
        }
    }

    #[test]
    fn versions_read_as_cuda_prints_them() {
        assert_eq!(version(13000), "13.0");
        assert_eq!(version(12080), "12.8");
    }

    #[test]
    fn a_library_that_is_not_there_does_not_load() {
        assert!(!loads("libtandem-no-such-library.so.7"));
        assert!(!loads("nul\0inside"));
        assert!(loads("libc.so.6"));
    }
}
