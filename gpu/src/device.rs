//! A GPU of this process, its device buffers, and the pinned host buffers
//! tandem stages them through.

use crate::{cuda_err, cuda_err_at, probe, Found, GpuError, Result};
use cudarc::driver::{
    result, CudaContext, CudaEvent, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr,
    DevicePtrMut, LaunchConfig, PushKernelArg,
};
use std::sync::{Arc, Mutex};
use tandem_driver::{Dtype, ReduceOp};

/// One GPU as this process uses it: its context, the stream tandem's
/// copies run on, and a pool of pinned staging buffers (allocated at the
/// first transfer, reused after: no allocation per message).
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    found: Found,
    pool: Mutex<Vec<Staging>>,
    /// Modules compiled by NVRTC, by their source's address (each source
    /// is a `'static` string, compiled at its first use), or why one could
    /// not be.
    modules: Mutex<Vec<(usize, Compiled)>>,
    /// This rank's device transfers in flight.
    pub(crate) in_flight: crate::p2p::InFlight,
}

/// A module NVRTC compiled, or what was missing to compile it.
type Compiled = std::result::Result<Arc<CudaModule>, String>;

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("ordinal", &self.ctx.ordinal())
            .field("found", &self.found)
            .finish()
    }
}

impl Gpu {
    /// Opens device `ordinal`, after [`probe()`] found the driver and a
    /// device.
    ///
    /// # Errors
    /// [`GpuError::NoGpu`] as [`probe()`] says, or for an ordinal past the
    /// devices; [`GpuError::Cuda`] if the context or stream cannot be made.
    pub fn open(ordinal: usize) -> Result<Self> {
        let found = probe()?;
        if ordinal >= found.devices {
            return Err(GpuError::NoGpu {
                missing: format!("device {ordinal} (the driver sees {})", found.devices),
            });
        }
        let ctx = CudaContext::new(ordinal)
            .map_err(cuda_err_at(|| format!("opening device {ordinal}")))?;
        let stream = ctx
            .new_stream()
            .map_err(cuda_err("making tandem's copy stream"))?;
        Ok(Self {
            ctx,
            stream,
            found,
            pool: Mutex::new(Vec::new()),
            modules: Mutex::new(Vec::new()),
            in_flight: Default::default(),
        })
    }

    /// What [`probe()`] found.
    pub fn found(&self) -> &Found {
        &self.found
    }

    /// The device's name.
    ///
    /// # Errors
    /// [`GpuError::Cuda`] if the driver cannot say.
    pub fn name(&self) -> Result<String> {
        self.ctx
            .name()
            .map_err(cuda_err("reading the device's name"))
    }

    /// The stream tandem's copies run on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// A device buffer of `len` zero bytes.
    ///
    /// # Errors
    /// [`GpuError::Cuda`] if the device is out of memory.
    pub fn alloc(&self, len: usize) -> Result<DeviceBuf> {
        // An empty buffer holds one byte: CUDA documents allocations of
        // zero bytes as invalid.
        let mem = self
            .stream
            .alloc_zeros::<u8>(len.max(1))
            .map_err(cuda_err_at(|| format!("allocating {len} bytes")))?;
        Ok(DeviceBuf { mem, len })
    }

    /// A device buffer holding `data`.
    ///
    /// # Errors
    /// As [`alloc`](Self::alloc).
    pub fn upload(&self, data: &[u8]) -> Result<DeviceBuf> {
        if data.is_empty() {
            return self.alloc(0);
        }
        let mem = self.stream.clone_htod(data).map_err(cuda_err_at(|| {
            format!("copying {} bytes to the device", data.len())
        }))?;
        Ok(DeviceBuf {
            mem,
            len: data.len(),
        })
    }

    /// The bytes of `buf`, once every copy before on tandem's stream is
    /// done.
    ///
    /// # Errors
    /// [`GpuError::Cuda`] if the copy fails.
    pub fn download(&self, buf: &DeviceBuf) -> Result<Vec<u8>> {
        if buf.is_empty() {
            return Ok(Vec::new());
        }
        let v = self
            .stream
            .clone_dtoh(&buf.mem)
            .map_err(cuda_err("copying a buffer from the device"))?;
        self.stream
            .synchronize()
            .map_err(cuda_err("waiting for the copy from the device"))?;
        Ok(v)
    }

    /// The module of `src`, compiled by NVRTC at its first use (no fused
    /// multiply-add, no flush to zero, IEEE division and square root).
    fn module(&self, src: &'static str) -> Result<Arc<CudaModule>> {
        let key = src.as_ptr() as usize;
        let mut mods = self.modules.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, m)) = mods.iter().find(|(k, _)| *k == key) {
            return m.clone().map_err(|missing| GpuError::NoGpu { missing });
        }
        let m = (|| {
            let Some(lib) = self.found.nvrtc_lib.as_deref() else {
                return Err(format!(
                    "NVRTC, which compiles tandem's kernels (none of {} loads)",
                    crate::probe::candidates("nvrtc").join(", ")
                ));
            };
            let opts = cudarc::nvrtc::CompileOptions {
                ftz: Some(false),
                prec_div: Some(true),
                prec_sqrt: Some(true),
                fmad: Some(false),
                name: Some("tandem_kernels.cu".into()),
                ..Default::default()
            };
            let ptx = std::panic::catch_unwind(|| cudarc::nvrtc::compile_ptx_with_opts(src, opts))
                .map_err(|_| format!("NVRTC that works ({lib} loaded, and compiling panicked)"))?
                .map_err(|e| format!("NVRTC to compile tandem's kernels ({lib}: {e:?})"))?;
            self.ctx.load_module(ptx).map_err(|e| {
                let e = format!("{e:?}");
                // NVRTC writes PTX of its own version, which a driver of an
                // older CUDA cannot load.
                let hint = if e.contains("PTX_VERSION") {
                    format!(
                        "; the PTX of {lib} is newer than this driver (CUDA {}) accepts: \
                         use an NVRTC no newer than the driver, or update the driver",
                        crate::probe::version(self.found.driver_version)
                    )
                } else {
                    String::new()
                };
                format!("tandem's kernels to load ({e}{hint})")
            })
        })();
        mods.push((key, m.clone()));
        m.map_err(|missing| GpuError::NoGpu { missing })
    }

    /// Kernel `name` of the module of `src` (compiled at its first use).
    ///
    /// # Errors
    /// [`GpuError::NoGpu`] without NVRTC or when it fails to compile;
    /// [`GpuError::Cuda`] if the module has no such kernel.
    pub(crate) fn function(&self, src: &'static str, name: &str) -> Result<CudaFunction> {
        self.module(src)?
            .load_function(name)
            .map_err(cuda_err_at(|| format!("finding kernel {name}")))
    }

    /// The device's context.
    pub(crate) fn ctx(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// `acc = op(acc, b)` element by element on the device, `d` the
    /// element type: the step of a reduction (the kernels of
    /// [`crate::kernels`], compiled by NVRTC at the first call). Queued on
    /// tandem's stream; copies on that stream see its result.
    ///
    /// # Errors
    /// [`GpuError::InvalidArgument`] for an operator that does not apply
    /// to `d` (bitwise on floating point), buffers of different lengths or
    /// not whole elements; [`GpuError::NoGpu`] without NVRTC (or when it
    /// fails to compile them); [`GpuError::Cuda`] if the launch fails.
    pub fn reduce(&self, d: Dtype, op: ReduceOp, acc: &mut DeviceBuf, b: &DeviceBuf) -> Result<()> {
        let Some(name) = crate::kernels::name(d, op) else {
            return Err(GpuError::InvalidArgument(format!(
                "{op} does not apply to {d}"
            )));
        };
        if acc.len() != b.len() || acc.len() % d.size() != 0 {
            return Err(GpuError::InvalidArgument(format!(
                "a reduction of {} bytes into {} bytes of {}-byte elements",
                b.len(),
                acc.len(),
                d.size()
            )));
        }
        let n = (acc.len() / d.size()) as u64;
        if n == 0 {
            return Ok(());
        }
        let f = self.function(crate::kernels::source_static(), &name)?;
        let blocks = n.div_ceil(256).min(1 << 16) as u32;
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        self.writing(acc, 0, |out| {
            self.reading(b, 0, |other| {
                let mut launch = self.stream.launch_builder(&f);
                launch.arg(&out).arg(&out).arg(&other).arg(&n);
                // SAFETY: the kernel's parameters are (T *out, const T *a,
                // const T *b, unsigned long long n): `out` and `a` are
                // `acc`'s `n` elements (the kernel reads each element
                // before writing it, in the same thread), `b` is `b`'s `n`
                // elements; both buffers are borrowed by this call, and
                // the launch is ordered with their other users on every
                // stream (the guards of `writing` and `reading`).
                unsafe { launch.launch(cfg) }.map_err(cuda_err_at(|| format!("launching {name}")))
            })
        })?;
        Ok(())
    }

    /// The device's own copy bandwidth, device to device over `bytes`
    /// bytes, counting bytes read plus bytes written per second (as
    /// nccl-tests' bus bandwidth counts a copy): the reference line of
    /// every device benchmark.
    ///
    /// # Errors
    /// [`GpuError::Cuda`] if the allocation or a copy fails.
    pub fn copy_gbps(&self, bytes: usize) -> Result<f64> {
        let a = self.alloc(bytes)?;
        let mut b = self.alloc(bytes)?;
        let mut run = || -> Result<()> {
            self.stream
                .memcpy_dtod(&a.mem, &mut b.mem)
                .map_err(cuda_err("copying on the device"))?;
            self.synchronize()
        };
        run()?;
        let t = std::time::Instant::now();
        for _ in 0..5 {
            run()?;
        }
        Ok(2.0 * bytes as f64 * 5.0 / t.elapsed().as_secs_f64() / 1e9)
    }

    /// Waits until everything queued on tandem's stream is done.
    ///
    /// # Errors
    /// [`GpuError::Cuda`] if the stream failed.
    pub fn synchronize(&self) -> Result<()> {
        self.stream
            .synchronize()
            .map_err(cuda_err("waiting for tandem's stream"))
    }

    /// A staging buffer of at least `len` bytes, from the pool (made the
    /// first time one that large is needed).
    pub(crate) fn staging(&self, len: usize) -> Result<Staging> {
        let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        match pool.iter().position(|s| s.len >= len) {
            Some(i) => Ok(pool.swap_remove(i)),
            None => {
                drop(pool);
                Staging::new(&self.ctx, len)
            }
        }
    }

    /// Two staging buffers of at least `len` bytes each, from the pool.
    pub(crate) fn staging_pair(&self, len: usize) -> Result<[Staging; 2]> {
        let a = self.staging(len)?;
        match self.staging(len) {
            Ok(b) => Ok([a, b]),
            Err(e) => {
                self.give_back([a]);
                Err(e)
            }
        }
    }

    /// Puts staging buffers back into the pool.
    pub(crate) fn give_back<const N: usize>(&self, s: [Staging; N]) {
        let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        pool.extend(s);
    }

    /// Runs `f` with the device address of byte `at` of `buf` for work
    /// that `f` queues on tandem's stream and that reads `buf`: the stream
    /// first waits for `buf`'s earlier writers, and `buf`'s later writers
    /// on other streams wait for this work (its read is recorded when `f`
    /// returns).
    pub(crate) fn reading<R>(&self, buf: &DeviceBuf, at: usize, f: impl FnOnce(u64) -> R) -> R {
        let (p, _record) = buf.mem.device_ptr(&self.stream);
        f(p + at as u64)
    }

    /// [`reading`](Self::reading) for work that writes `buf`.
    pub(crate) fn writing<R>(&self, buf: &mut DeviceBuf, at: usize, f: impl FnOnce(u64) -> R) -> R {
        let (p, _record) = buf.mem.device_ptr_mut(&self.stream);
        f(p + at as u64)
    }

    /// The device address of `buf`, with no ordering: for kernels on
    /// streams of their own that the caller synchronizes itself.
    pub(crate) fn raw_addr(&self, buf: &DeviceBuf) -> u64 {
        self.reading(buf, 0, |p| p)
    }
}

/// Memory on a GPU, usable in tandem's calls ([`crate::send`],
/// [`crate::recv`]).
pub struct DeviceBuf {
    /// The memory: `len` bytes, or one where `len` is 0.
    pub(crate) mem: CudaSlice<u8>,
    len: usize,
}

impl std::fmt::Debug for DeviceBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuf")
            .field("len", &self.len())
            .finish()
    }
}

impl DeviceBuf {
    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// cudarc's slice, for kernels of the program's own (one byte long
    /// for an empty buffer).
    pub fn slice(&self) -> &CudaSlice<u8> {
        &self.mem
    }

    /// The same, mutable.
    pub fn slice_mut(&mut self) -> &mut CudaSlice<u8> {
        &mut self.mem
    }
}

/// A pinned host buffer (page-locked, cached: the CPU reads it to send,
/// which write-combined memory would make slow) and the event of the last
/// copy into or out of it.
pub(crate) struct Staging {
    ptr: *mut u8,
    pub(crate) len: usize,
    done: CudaEvent,
    ctx: Arc<CudaContext>,
}

// SAFETY: the buffer is owned memory; it is touched by one thread at a
// time (the caller of send or recv), and by copies that `done` tracks.
unsafe impl Send for Staging {}

impl Staging {
    fn new(ctx: &Arc<CudaContext>, len: usize) -> Result<Self> {
        ctx.bind_to_thread()
            .map_err(cuda_err("binding the context"))?;
        // SAFETY: a plain page-locked allocation of len bytes (flags 0: not
        // write-combined), freed in Drop.
        let raw = unsafe { result::malloc_host(len.max(1), 0) }.map_err(cuda_err_at(|| {
            format!("pinning {len} bytes of host memory")
        }))?;
        let ptr = raw.cast::<u8>();
        // SAFETY: `ptr` holds len bytes just allocated, used by no copy yet:
        // zeroed so that reading it never sees uninitialised memory.
        unsafe { std::ptr::write_bytes(ptr, 0, len.max(1)) };
        let done = ctx
            .new_event(None)
            .map_err(cuda_err("making a staging event"))?;
        Ok(Self {
            ptr,
            len,
            done,
            ctx: ctx.clone(),
        })
    }

    /// Waits for the last copy into or out of this buffer.
    pub(crate) fn wait(&self) -> Result<()> {
        self.done
            .synchronize()
            .map_err(cuda_err("waiting for a staging copy"))
    }

    /// Whether the last copy into or out of this buffer is done (no wait).
    pub(crate) fn ready(&self) -> Result<bool> {
        self.ctx
            .bind_to_thread()
            .map_err(cuda_err("binding the context"))?;
        self.done
            .try_is_complete()
            .map_err(cuda_err("asking whether a staging copy is done"))
    }

    /// The first `n` bytes, for the CPU: waits for the copies first.
    pub(crate) fn bytes(&mut self, n: usize) -> Result<&mut [u8]> {
        self.wait()?;
        // SAFETY: `ptr` holds `len >= n` initialised bytes (checked by the
        // slice below), no copy is in flight (waited for), and `&mut self`
        // keeps the CPU's use exclusive.
        let all = unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) };
        Ok(&mut all[..n])
    }

    /// Starts copying `n` bytes from device address `src` into this buffer
    /// on `stream`.
    pub(crate) fn start_download(&mut self, stream: &CudaStream, src: u64, n: usize) -> Result<()> {
        self.wait()?;
        // SAFETY: as in `bytes`; the slice stays valid until the copy is
        // waited for (`done`, checked before any other use of the buffer
        // and in Drop), and `src` is `n` bytes of a live device buffer the
        // caller borrows for the transfer.
        let dst = unsafe { std::slice::from_raw_parts_mut(self.ptr, n.min(self.len)) };
        // SAFETY: see above; stream ordered.
        unsafe { result::memcpy_dtoh_async(dst, src, stream.cu_stream()) }
            .map_err(cuda_err_at(|| format!("copying {n} bytes from the device")))?;
        self.done
            .record(stream)
            .map_err(cuda_err("recording a staging event"))
    }

    /// Starts copying the first `n` bytes of this buffer to device address
    /// `dst` on `stream`.
    pub(crate) fn start_upload(&mut self, stream: &CudaStream, dst: u64, n: usize) -> Result<()> {
        // SAFETY: as in `start_download`, the other way.
        let src = unsafe { std::slice::from_raw_parts(self.ptr, n.min(self.len)) };
        // SAFETY: see above; stream ordered.
        unsafe { result::memcpy_htod_async(dst, src, stream.cu_stream()) }
            .map_err(cuda_err_at(|| format!("copying {n} bytes to the device")))?;
        self.done
            .record(stream)
            .map_err(cuda_err("recording a staging event"))
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = self.done.synchronize();
        let _ = self.ctx.bind_to_thread();
        // SAFETY: allocated by malloc_host in `new`, no copy in flight
        // (waited for above), freed once.
        let _ = unsafe { result::free_host(self.ptr.cast()) };
    }
}
