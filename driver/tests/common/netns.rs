//! Fake hosts for multi-host tests, built from Linux network namespaces.
//!
//! [`Net::new`] creates `n` "host" namespaces plus one private "switch"
//! namespace holding a bridge; each host gets a veth whose other end is a
//! port of that bridge. The hosts share one /24 and can reach each other,
//! and nothing else:
//!
//! * each host namespace has only `lo` and `eth0`, and only the on-link
//!   route of its /24 (no default route), so any other destination fails
//!   locally with "Network is unreachable";
//! * the bridge lives in its own namespace, not the root one: it has no
//!   address, there are no routes or NAT into the root namespace, and the
//!   root namespace's firewall (for example Docker's `FORWARD` policy
//!   `DROP` together with `br_netfilter`) never sees the bridged frames.
//!   The switch namespace has no netfilter rules of its own, so even with
//!   `bridge-nf-call-iptables = 1` there is nothing that could drop them.
//!   (Note that the per-bridge `nf_call_iptables 0` option cannot turn
//!   netfilter off for a bridge while the global sysctl is 1: the kernel
//!   ORs the two.)
//!
//! All interface names (`br0`, `p<i>`, `eth0`) are local to these
//! namespaces, so they never collide with anything else; namespace names
//! carry the process id and a per-process counter, so tests running at the
//! same time (threads or processes) never collide either.
//!
//! Everything needs root and `ip` from iproute2. [`Drop`] removes all
//! namespaces, which removes the bridge and every veth with them, also
//! when the test panics.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::io::Write;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Numbers the [`Net`]s of this process, to keep their names apart.
static COUNTER: Mutex<u32> = Mutex::new(0);

/// Name of the bridge inside the switch namespace.
const BRIDGE: &str = "br0";

/// Name of each host's interface inside its namespace.
const HOST_IF: &str = "eth0";

/// How long [`Net::new`] waits for all links to report carrier and the
/// bridge ports to be forwarding.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// The most hosts one [`Net`] can have (addresses `.1` to `.254`).
pub const MAX_HOSTS: usize = 254;

/// One fake host: a network namespace with one address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// The network namespace's name, as `ip netns` knows it.
    pub name: String,
    /// The host's IPv4 address on its `eth0` (prefix length 24).
    pub addr: Ipv4Addr,
}

/// A set of network namespaces joined by a bridge: fake hosts for tests.
///
/// The bridge lives in a private switch namespace of its own (see the
/// module documentation for why not the root namespace). Dropping the
/// `Net` deletes every namespace it created.
#[derive(Debug)]
pub struct Net {
    /// The hosts, in creation order; host `i` has address `.(i + 1)`.
    hosts: Vec<Host>,
    /// The switch namespace holding the bridge.
    switch: String,
    /// Every namespace created so far, switch first; what `Drop` deletes.
    created: Vec<String>,
}

impl Net {
    /// Creates `n` namespaces, each with loopback up and a veth (`eth0`)
    /// into a bridge, addressed `10.X.Y.1` to `10.X.Y.n` with prefix
    /// length 24, where `X.Y` is derived from the process id and a
    /// per-process counter (`X` is never 0), so concurrent tests almost
    /// always get different subnets; a clash would be harmless, since
    /// every `Net` has its own bridge and hosts of different `Net`s cannot
    /// reach each other.
    ///
    /// Returns when every link is up and every bridge port forwards, so a
    /// first packet is not lost; the first packet to a peer still waits
    /// for one ARP round trip.
    ///
    /// # Errors
    ///
    /// `Err` with an explanation when `n` is 0 or above [`MAX_HOSTS`],
    /// when not running as root, when `ip` cannot be run, when an `ip`
    /// command fails (its command line and stderr are in the message), or
    /// when the links do not come up in time. Whatever was created before
    /// the failure is removed again.
    pub fn new(n: usize) -> Result<Net, String> {
        if n == 0 || n > MAX_HOSTS {
            return Err(format!("Net::new({n}): need 1 to {MAX_HOSTS} hosts"));
        }
        if let Some(euid) = effective_uid() {
            if euid != 0 {
                return Err(format!(
                    "Net::new needs root to create network namespaces (effective uid is {euid})"
                ));
            }
        }
        match Command::new("ip").arg("-V").output() {
            Ok(o) if o.status.success() => {}
            Ok(o) => {
                return Err(format!(
                    "`ip -V` failed ({}): {}",
                    o.status,
                    String::from_utf8_lossy(&o.stderr).trim()
                ))
            }
            Err(e) => {
                return Err(format!(
                    "cannot run `ip` (install iproute2, e.g. `apt-get install -y iproute2`): {e}"
                ))
            }
        }

        let pid = std::process::id();
        let count = {
            let mut c = COUNTER.lock().unwrap_or_else(PoisonError::into_inner);
            let n = *c;
            *c = n.wrapping_add(1);
            n
        };
        let tag = format!("tdm{pid}-{count}");
        let (x, y) = subnet(pid, count);

        // From here on, returning early drops `net`, which deletes what
        // has been created so far.
        let mut net = Net {
            hosts: Vec::with_capacity(n),
            switch: format!("{tag}-sw"),
            created: Vec::with_capacity(n + 1),
        };
        let switch = net.switch.clone();

        ip(&["netns", "add", &switch])?;
        net.created.push(switch.clone());
        for i in 0..n {
            let name = format!("{tag}-h{i}");
            ip(&["netns", "add", &name])?;
            net.created.push(name.clone());
            let addr = Ipv4Addr::new(10, x, y, (i + 1) as u8);
            net.hosts.push(Host { name, addr });
        }

        // The switch: a bridge without addresses (addrgenmode none: not
        // even an IPv6 link-local one), and per host a veth created here
        // with its peer directly in the host namespace, so no interface
        // ever appears in the root namespace.
        let mut script = format!(
            "link add {BRIDGE} type bridge stp_state 0\n\
             link set {BRIDGE} addrgenmode none\n"
        );
        for (i, h) in net.hosts.iter().enumerate() {
            script += &format!(
                "link add p{i} type veth peer name {HOST_IF} netns {name}\n\
                 link set p{i} addrgenmode none\n\
                 link set p{i} master {BRIDGE}\n\
                 link set p{i} up\n",
                name = h.name
            );
        }
        script += &format!("link set {BRIDGE} up\n");
        ip_batch(&switch, &script)?;

        for h in &net.hosts {
            ip_batch(
                &h.name,
                &format!(
                    "link set lo up\n\
                     link set {HOST_IF} addrgenmode none\n\
                     addr add {addr}/24 dev {HOST_IF}\n\
                     link set {HOST_IF} up\n",
                    addr = h.addr
                ),
            )?;
        }

        net.wait_ready()?;
        Ok(net)
    }

    /// The hosts, in order; host `i` has address `10.X.Y.(i + 1)`.
    pub fn hosts(&self) -> &[Host] {
        &self.hosts
    }

    /// The argv prefix that runs a command inside host `i`:
    /// `["ip", "netns", "exec", name]`.
    ///
    /// # Panics
    ///
    /// If there is no host `i` (a bug in the test).
    pub fn exec_prefix(&self, i: usize) -> Vec<String> {
        vec![
            "ip".into(),
            "netns".into(),
            "exec".into(),
            self.host(i).name.clone(),
        ]
    }

    /// A [`Command`] that runs `program` inside host `i` (through
    /// `ip netns exec`); add arguments, environment and stdio as usual.
    /// Killing the returned child kills `program` itself, since
    /// `ip netns exec` execs it.
    ///
    /// # Panics
    ///
    /// If there is no host `i` (a bug in the test).
    pub fn command(&self, i: usize, program: impl AsRef<OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.host(i).name]).arg(program);
        c
    }

    /// The host names comma-joined (`"a,b,c"`), for a launcher's
    /// `--hosts` argument; use with [`Net::exec_template`], as in
    /// `tandem-run --hosts <hosts_arg> --exec 'ip netns exec {host}'`.
    pub fn hosts_arg(&self) -> String {
        self.hosts
            .iter()
            .map(|h| h.name.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The remote-exec template for a launcher, `"ip netns exec {host}"`:
    /// `{host}` stands for one of the names in [`Net::hosts_arg`].
    pub fn exec_template(&self) -> &'static str {
        "ip netns exec {host}"
    }

    /// Host `i`, or a loud panic naming the bad index.
    fn host(&self, i: usize) -> &Host {
        match self.hosts.get(i) {
            Some(h) => h,
            None => panic!("Net has {} hosts, there is no host {i}", self.hosts.len()),
        }
    }

    /// Waits until every host's `eth0` is operationally up (which also
    /// means the kernel has attached its queue, so packets are not
    /// dropped) and every bridge port is forwarding.
    fn wait_ready(&self) -> Result<(), String> {
        let start = Instant::now();
        loop {
            let mut pending = None;
            let ports = ip_output(&[
                "-n",
                &self.switch,
                "-d",
                "-o",
                "link",
                "show",
                "master",
                BRIDGE,
            ])?;
            let forwarding = ports
                .lines()
                .filter(|l| l.contains(" state UP ") && l.contains("bridge_slave state forwarding"))
                .count();
            if forwarding < self.hosts.len() {
                pending = Some(format!(
                    "{forwarding} of {} bridge ports forwarding:\n{ports}",
                    self.hosts.len()
                ));
            } else {
                for h in &self.hosts {
                    let link = ip_output(&["-n", &h.name, "-o", "link", "show", "dev", HOST_IF])?;
                    if !link.contains(" state UP ") {
                        pending = Some(format!("{HOST_IF} of {} not up: {link}", h.name));
                        break;
                    }
                }
            }
            match pending {
                None => return Ok(()),
                Some(why) if start.elapsed() > READY_TIMEOUT => {
                    return Err(format!("links not up after {READY_TIMEOUT:?}: {why}"))
                }
                Some(_) => std::thread::sleep(Duration::from_millis(2)),
            }
        }
    }
}

impl Drop for Net {
    /// Deletes the namespaces, switch first (which destroys the bridge
    /// and all veth pairs at once); errors are ignored. Processes still
    /// running inside a host keep that namespace alive, cut off from the
    /// others, until they exit: stop them before dropping the `Net`.
    fn drop(&mut self) {
        for ns in &self.created {
            let _ = Command::new("ip")
                .args(["netns", "delete", ns])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// The `X.Y` of the subnet `10.X.Y.0/24` for `Net` number `count` of
/// process `pid`; `X` is in 1..=255, so `10.0.*` is never used.
fn subnet(pid: u32, count: u32) -> (u8, u8) {
    const SLOTS: u64 = 255 * 256;
    let k = (u64::from(pid) * 7919 + u64::from(count)) % SLOTS;
    (1 + (k / 256) as u8, (k % 256) as u8)
}

/// This process's effective uid, from /proc/self/status; `None` if it
/// cannot be read (then `ip` will report any permission problem).
fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// Runs `ip args…`; `Err` with the command line and its stderr if it fails.
fn ip(args: &[&str]) -> Result<(), String> {
    ip_output(args).map(drop)
}

/// Runs `ip args…` and returns its stdout; `Err` with the command line
/// and its stderr if it fails.
fn ip_output(args: &[&str]) -> Result<String, String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `ip {}`: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "`ip {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Runs the `ip` commands in `script` (one a line) inside namespace `ns`
/// with `ip -n ns -batch -`, stopping at the first that fails; `Err` with
/// the script and stderr if one fails.
fn ip_batch(ns: &str, script: &str) -> Result<(), String> {
    let fail = |why: String| format!("`ip -n {ns} -batch -` failed{why}\nscript:\n{script}");
    let mut child = Command::new("ip")
        .args(["-n", ns, "-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| fail(format!(": cannot run it: {e}")))?;
    // Write all input, then always reap the child, even if writing failed.
    let written = match child.stdin.take() {
        Some(mut stdin) => stdin.write_all(script.as_bytes()),
        None => Ok(()),
    };
    let out = child
        .wait_with_output()
        .map_err(|e| fail(format!(": waiting for it: {e}")))?;
    // If `ip` failed, its stderr says why (a failed write, e.g. a broken
    // pipe because it stopped early, is only a consequence).
    match (out.status.success(), written) {
        (true, Ok(())) => Ok(()),
        (true, Err(e)) => Err(fail(format!(": writing its input: {e}"))),
        (false, _) => Err(fail(format!(
            " ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))),
    }
}

/// `Net::new(n)` for a test: panics with the reason when namespaces cannot
/// be made, unless `TANDEM_SKIP_NETNS` is set (then `None`, said on stderr).
pub fn for_test(n: usize) -> Option<Net> {
    match Net::new(n) {
        Ok(net) => Some(net),
        Err(e) if std::env::var_os("TANDEM_SKIP_NETNS").is_some() => {
            eprintln!("skipped (TANDEM_SKIP_NETNS): {e}");
            None
        }
        Err(e) => {
            panic!("network namespaces unavailable (run as root, or set TANDEM_SKIP_NETNS=1): {e}")
        }
    }
}
