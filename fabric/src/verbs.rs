//! The real verbs fabric: RDMA devices as the kernel lists them.
//!
//! [`probe`] answers whether this machine has a usable RDMA device, with
//! an error that says what is missing when it has none (no
//! `/sys/class/infiniband`, no port that is up). Jobs that ask for verbs
//! (`TANDEM_TRANSPORT=verbs`) fail with that error; `auto` jobs fall back
//! to TCP.

use crate::FabricError;

/// Where the kernel lists RDMA devices.
const SYSFS: &str = "/sys/class/infiniband";

/// The RDMA devices the kernel knows, by name (`mlx5_0`, `rxe0`, ...).
pub fn devices() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(SYSFS)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Whether port `port` of device `dev` is active.
fn port_active(dev: &str, port: u32) -> bool {
    std::fs::read_to_string(format!("{SYSFS}/{dev}/ports/{port}/state"))
        .map(|s| s.contains("ACTIVE"))
        .unwrap_or(false)
}

/// The device to use: `TANDEM_IB_DEV` if set, else the first with an
/// active port 1; an error naming what is missing otherwise.
///
/// # Errors
/// As [`probe_named`], with `TANDEM_IB_DEV` (unset or empty: `None`).
pub fn probe() -> Result<String, FabricError> {
    let want = std::env::var("TANDEM_IB_DEV")
        .ok()
        .filter(|s| !s.is_empty());
    probe_named(want.as_deref())
}

/// As [`probe`], for device `want` (`None`: the first usable one).
///
/// # Errors
/// [`FabricError::NoDevice`], saying what is missing: the kernel lists no
/// RDMA device, `want` is not among them or its port 1 is not ACTIVE, or
/// (`want` `None`) no device has an ACTIVE port 1.
pub fn probe_named(want: Option<&str>) -> Result<String, FabricError> {
    let all = devices();
    let want = want.map(str::to_string);
    if all.is_empty() {
        return Err(FabricError::NoDevice(format!(
            "the kernel lists no RDMA device ({SYSFS} is empty or missing: no \
             InfiniBand/RoCE/iWARP driver is loaded)"
        )));
    }
    match want {
        Some(d) if all.contains(&d) => {
            if port_active(&d, 1) {
                Ok(d)
            } else {
                Err(FabricError::NoDevice(format!(
                    "TANDEM_IB_DEV={d}: port 1 is not ACTIVE"
                )))
            }
        }
        Some(d) => Err(FabricError::NoDevice(format!(
            "TANDEM_IB_DEV={d} is not among this machine's devices ({})",
            all.join(", ")
        ))),
        None => all
            .iter()
            .find(|d| port_active(d, 1))
            .cloned()
            .ok_or_else(|| {
                FabricError::NoDevice(format!(
                    "no device has an ACTIVE port 1 (devices: {})",
                    all.join(", ")
                ))
            }),
    }
}
