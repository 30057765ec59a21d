//! Operating-system calls that need `unsafe`, each behind a safe function.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Reads `dst.len()` bytes at `addr` in process `pid` into `dst` with
/// `process_vm_readv` — also when `pid` is this process (ranks as threads):
/// the kernel validates the source range, so a sender that gave up on its
/// send and freed the buffer meanwhile makes this fail or read stale bytes,
/// never touch freed memory from Rust.
pub(crate) fn cma_read(pid: u32, addr: u64, dst: &mut [u8]) -> std::io::Result<()> {
    if dst.is_empty() {
        return Ok(());
    }
    if pid == 0 {
        return Err(std::io::Error::other("peer pid unknown"));
    }
    let mut done = 0usize;
    while done < dst.len() {
        let local = libc::iovec {
            iov_base: dst[done..].as_mut_ptr().cast(),
            iov_len: dst.len() - done,
        };
        let remote = libc::iovec {
            iov_base: (addr as usize + done) as *mut libc::c_void,
            iov_len: dst.len() - done,
        };
        // SAFETY: `local` is our exclusive buffer of that length; the kernel
        // validates `remote` against the peer's address space.
        let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if n == 0 {
            return Err(std::io::Error::other("process_vm_readv made no progress"));
        }
        done += n as usize;
    }
    Ok(())
}

/// Whether process `pid` has exited, through a pidfd opened on first use
/// and kept in `pidfd` (falls back to `kill(pid, 0)` on kernels without
/// pidfds).
pub(crate) fn process_exited(pid: u32, pidfd: &mut Option<OwnedFd>) -> bool {
    if pidfd.is_none() {
        // SAFETY: plain syscall; a returned descriptor is ours to own.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        if fd < 0 {
            let err = std::io::Error::last_os_error();
            // ESRCH: it is gone already. Anything else (an old kernel):
            // fall back to kill(pid, 0).
            if err.raw_os_error() == Some(libc::ESRCH) {
                return true;
            }
            // SAFETY: signal 0 only checks for existence.
            return unsafe { libc::kill(pid as libc::pid_t, 0) } != 0;
        }
        // SAFETY: fd is a fresh descriptor we own.
        *pidfd = Some(unsafe { OwnedFd::from_raw_fd(fd as i32) });
    }
    let fd = pidfd.as_ref().map(AsRawFd::as_raw_fd).unwrap_or(-1);
    poll_now(fd, libc::POLLIN) & (libc::POLLIN | libc::POLLHUP) != 0
}

/// Opens `/proc/<pid>/stat` without allocating (the path is built on the
/// stack, which `File::open` also uses for short paths).
/// Sends signal `sig` to process `pid` (a child this process started).
pub(crate) fn send_signal(pid: u32, sig: libc::c_int) -> std::io::Result<()> {
    // SAFETY: kill has no memory-safety preconditions.
    if unsafe { libc::kill(pid as libc::pid_t, sig) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

pub(crate) fn open_stat(pid: u32) -> Option<std::fs::File> {
    use std::io::Write;
    use std::os::unix::ffi::OsStrExt;
    let mut buf = [0u8; 32];
    let mut w = &mut buf[..];
    write!(w, "/proc/{pid}/stat").ok()?;
    let n = 32 - w.len();
    let path = std::path::Path::new(std::ffi::OsStr::from_bytes(&buf[..n]));
    std::fs::File::open(path).ok()
}

/// Whether the process whose `/proc/<pid>/stat` is open as `stat` is
/// stopped now (`SIGSTOP`, or stopped by a debugger: state `T` or `t`).
/// Reads into a buffer on the stack: no allocation.
pub(crate) fn process_stopped(stat: &std::fs::File) -> bool {
    use std::os::unix::fs::FileExt;
    let mut buf = [0u8; 512];
    let Ok(n) = stat.read_at(&mut buf, 0) else {
        return false;
    };
    let b = &buf[..n];
    // The state follows the command name, which is in parentheses and may
    // itself hold spaces and parentheses: look after the last ')'.
    let Some(i) = b.iter().rposition(|&c| c == b')') else {
        return false;
    };
    matches!(b.get(i + 1..i + 3), Some([b' ', b'T' | b't']))
}

/// `poll` on one descriptor with a zero timeout: the events that are set.
pub(crate) fn poll_now(fd: RawFd, events: libc::c_short) -> libc::c_short {
    let mut pfd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: one valid pollfd, zero timeout.
    let n = unsafe { libc::poll(&mut pfd, 1, 0) };
    if n > 0 {
        pfd.revents
    } else {
        0
    }
}

/// Fills `buf` with random bytes from the kernel; `false` if it could not.
pub(crate) fn random_bytes(buf: &mut [u8]) -> bool {
    // SAFETY: getrandom writes at most buf.len() bytes into buf.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    n == buf.len() as isize
}

/// This process's user id.
pub(crate) fn uid() -> u32 {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() }
}

/// The parent process id.
pub(crate) fn parent_pid() -> u32 {
    // SAFETY: getppid has no preconditions.
    unsafe { libc::getppid() as u32 }
}

/// Whether `fd` is an open descriptor.
pub(crate) fn fd_is_open(fd: RawFd) -> bool {
    // SAFETY: F_GETFD only inspects the descriptor table.
    unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
}

/// Takes over inherited descriptor `fd` (checked open) and marks it
/// close-on-exec so it does not leak into programs this rank starts.
pub(crate) fn take_inherited_fd(fd: RawFd) -> Option<OwnedFd> {
    if !fd_is_open(fd) {
        return None;
    }
    // SAFETY: plain fcntl on an open descriptor.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    // SAFETY: the descriptor is open and was handed to this process for
    // exactly this use (by its launcher); nothing else in it owns it.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The user id of the process at the other end of a Unix socket.
pub(crate) fn peer_uid(fd: RawFd) -> std::io::Result<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writing and sized for SO_PEERCRED.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// A vectored send of up to two slices on a non-blocking descriptor: the bytes
/// written (0 when the kernel has no room), or the error.
pub(crate) fn writev2(fd: RawFd, a: &[u8], b: &[u8]) -> std::io::Result<usize> {
    let iov = [
        libc::iovec {
            iov_base: a.as_ptr() as *mut libc::c_void,
            iov_len: a.len(),
        },
        libc::iovec {
            iov_base: b.as_ptr() as *mut libc::c_void,
            iov_len: b.len(),
        },
    ];
    let cnt = if b.is_empty() { 1 } else { 2 };
    loop {
        // SAFETY: an all-zero msghdr is valid (no name, no control data).
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
        msg.msg_iovlen = cnt;
        // SAFETY: both iovecs describe live slices for the call; sendmsg only
        // reads them. MSG_NOSIGNAL: a closed peer is an EPIPE error, not a
        // SIGPIPE that kills the process.
        let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = std::io::Error::last_os_error();
        match e.kind() {
            std::io::ErrorKind::WouldBlock => return Ok(0),
            std::io::ErrorKind::Interrupted => continue,
            _ => return Err(e),
        }
    }
}

/// Non-blocking `recv` into `dst`: `Ok(Some(n))` bytes read, `Ok(None)` none
/// available now, `Ok(Some(0))` the peer closed the connection.
pub(crate) fn recv_now(fd: RawFd, dst: &mut [u8]) -> std::io::Result<Option<usize>> {
    loop {
        // SAFETY: `dst` is valid for writing dst.len() bytes.
        let n = unsafe { libc::recv(fd, dst.as_mut_ptr().cast(), dst.len(), libc::MSG_DONTWAIT) };
        if n >= 0 {
            return Ok(Some(n as usize));
        }
        let e = std::io::Error::last_os_error();
        match e.kind() {
            std::io::ErrorKind::WouldBlock => return Ok(None),
            std::io::ErrorKind::Interrupted => continue,
            _ => return Err(e),
        }
    }
}

/// Bytes a TCP socket has not yet had acknowledged by its peer (`SIOCOUTQ`);
/// `None` if the kernel does not say.
pub(crate) fn unacked_bytes(fd: RawFd) -> Option<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQ (TIOCOUTQ) writes one c_int into `n`.
    let rc = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut n) };
    (rc == 0).then_some(n.max(0) as usize)
}

/// Pins the calling thread to `core`.
pub(crate) fn pin_to(core: usize) -> crate::error::Result<()> {
    let ids = core_affinity::get_core_ids().unwrap_or_default();
    let id = ids.into_iter().find(|c| c.id == core).ok_or_else(|| {
        crate::error::Error::Config(format!(
            "cannot pin to core {core}: not available to this process"
        ))
    })?;
    if core_affinity::set_for_current(id) {
        Ok(())
    } else {
        Err(crate::error::Error::Config(format!(
            "pinning to core {core} failed"
        )))
    }
}

/// Reserves `len` bytes of `file` (`posix_fallocate`), so that touching the
/// mapping later cannot fail with `SIGBUS` on a full `/dev/shm`.
pub(crate) fn reserve(file: &std::fs::File, len: u64) -> std::io::Result<()> {
    let len =
        libc::off_t::try_from(len).map_err(|_| std::io::Error::from_raw_os_error(libc::EFBIG))?;
    // SAFETY: plain syscall on a descriptor `file` keeps open.
    match unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) } {
        0 => Ok(()),
        rc => Err(std::io::Error::from_raw_os_error(rc)),
    }
}

/// Prepares `cmd`'s child between fork and exec: `keep` (if any) stays open
/// across the exec, the child is killed when this process dies
/// (`PR_SET_PDEATHSIG`), and it refuses to start if its parent is no longer
/// `parent` (the launcher died between fork and `prctl`).
pub(crate) fn child_of(cmd: &mut std::process::Command, keep: Option<RawFd>, parent: libc::pid_t) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs between fork and exec and only makes
    // async-signal-safe calls (fcntl, prctl, getppid) on values it owns.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(fd) = keep {
                let flags = libc::fcntl(fd, libc::F_GETFD);
                if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::getppid() != parent {
                return Err(std::io::Error::other("launcher exited during start"));
            }
            Ok(())
        });
    }
}

/// The CPU's time-stamp counter where it ticks at a constant rate on every
/// core (x86-64 with `constant_tsc` and `nonstop_tsc`, which
/// [`tsc_usable`] checks once): one instruction, for the flight recorder's
/// timestamps. Elsewhere `CLOCK_MONOTONIC` in nanoseconds.
#[inline(always)]
pub(crate) fn ticks(tsc: bool) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if tsc {
        // SAFETY: RDTSC exists on every x86-64 CPU and reads a counter.
        return unsafe { core::arch::x86_64::_rdtsc() };
    }
    let _ = tsc;
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// The time-stamp counter as its low and high halves, as the instruction
/// leaves them: stored apart, they spare the two instructions that join
/// them. Only where [`tsc_usable`] said yes.
#[inline(always)]
pub(crate) fn tsc_halves() -> [u32; 2] {
    #[cfg(target_arch = "x86_64")]
    {
        let (lo, hi): (u32, u32);
        // SAFETY: RDTSC exists on every x86-64 CPU; it reads the counter
        // into EDX:EAX and touches neither memory nor flags.
        unsafe {
            core::arch::asm!("rdtsc", out("eax") lo, out("edx") hi,
                options(nomem, nostack, preserves_flags));
        }
        [lo, hi]
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let t = ticks(false);
        [t as u32, (t >> 32) as u32]
    }
}

/// Whether [`ticks`] may use the time-stamp counter here.
pub(crate) fn tsc_usable() -> bool {
    if !cfg!(target_arch = "x86_64") {
        return false;
    }
    static USABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *USABLE.get_or_init(|| {
        let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let flags = info.lines().find(|l| l.starts_with("flags")).unwrap_or("");
        let has = |f: &str| flags.split_whitespace().any(|x| x == f);
        has("constant_tsc") && has("nonstop_tsc")
    })
}

/// The clock `id` (`CLOCK_MONOTONIC`, `CLOCK_REALTIME`) in nanoseconds.
pub(crate) fn clock_ns(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: one valid timespec to fill; both clocks always exist.
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Makes `handler` run on signal `sig` (`sigaction`, restarting
/// interrupted system calls). The handler must be async-signal-safe.
pub(crate) fn on_signal(
    sig: libc::c_int,
    handler: extern "C" fn(libc::c_int),
) -> std::io::Result<()> {
    // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value;
    // the handler is a plain function the caller promises is
    // async-signal-safe; sigaction only reads `act`.
    let r = unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = handler as usize;
        act.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut act.sa_mask);
        libc::sigaction(sig, &act, std::ptr::null_mut())
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
