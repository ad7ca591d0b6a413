//! What the privileged io tests share: running `ip`, the capability check and its skip, and
//! threads inside a network namespace.

use nix::sched::CloneFlags;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::JoinHandle;

/// Runs `ip ARGS`; the error names the command and its stderr.
pub fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// `CAP_NET_ADMIN` (bit 12) and `CAP_NET_RAW` (bit 13), capabilities(7).
const NEEDED_CAPS: [(u32, &str); 2] = [(12, "CAP_NET_ADMIN"), (13, "CAP_NET_RAW")];

/// A privileged test cannot run (`why`): panics saying so, unless
/// `METRONOME_SKIP_PRIVILEGED=1`, where it writes `SKIPPED: why` to the process's stderr (past
/// the test harness's capture, so that the skip shows in a passing run) and returns. The same
/// rule as `metronome_testbed::netns::skip_unprivileged` (CONTRIBUTING.md, "Privileged tests").
pub fn skip_unprivileged(why: &str) {
    use std::io::Write;
    if std::env::var("METRONOME_SKIP_PRIVILEGED").as_deref() != Ok("1") {
        panic!(
            "the privileged test cannot run: {why}; it needs root or CAP_NET_ADMIN and \
             CAP_NET_RAW (set METRONOME_SKIP_PRIVILEGED=1 to skip it instead)"
        );
    }
    let _ = writeln!(
        std::io::stderr().lock(),
        "SKIPPED (METRONOME_SKIP_PRIVILEGED=1): {why}"
    );
}

/// Checks the effective capability set (`CapEff` in /proc/self/status) for [`NEEDED_CAPS`].
pub fn check_capabilities() -> Result<(), String> {
    let status = std::fs::read_to_string("/proc/self/status").map_err(|e| e.to_string())?;
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .ok_or("no CapEff line in /proc/self/status")?;
    for (bit, name) in NEEDED_CAPS {
        if eff & (1 << bit) == 0 {
            return Err(format!("the process lacks {name}"));
        }
    }
    Ok(())
}

/// A `(process id, counter)` pair unique to this call, to name a test's namespaces and
/// interfaces; without the capabilities a panic, or `None` after saying why the test is skipped
/// ([`skip_unprivileged`]).
pub fn unique_ids() -> Option<(u32, u32)> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    if let Err(why) = check_capabilities() {
        skip_unprivileged(&why);
        return None;
    }
    Some((std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)))
}

/// Runs `f` on a new thread inside namespace `ns`; sockets it opens stay in `ns`.
pub fn spawn_in<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> JoinHandle<T> {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).expect("open the namespace");
        nix::sched::setns(&file, CloneFlags::CLONE_NEWNET).expect("setns");
        f()
    })
}
