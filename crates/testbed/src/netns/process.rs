//! Process-level plumbing of the topology: running `ip`/`tc`, the CAP_NET_ADMIN check, the
//! registry of live namespaces that SIGINT/SIGTERM cleanup removes, and removal of namespaces
//! left behind by killed processes.

use super::{TopoError, NETNS_RUN_DIR};
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

/// CAP_NET_ADMIN's bit in the capability sets (`include/uapi/linux/capability.h`).
const CAP_NET_ADMIN_BIT: u32 = 12;

/// Names of the namespaces this process created and has not yet deleted.
static LIVE: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Runs `program args`, returning its standard output, or its standard error as the error.
pub(super) fn run(program: &'static str, args: &[&str]) -> Result<String, TopoError> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|source| TopoError::MissingTool { program, source })?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    Err(TopoError::Command {
        command: format!("{program} {}", args.join(" ")),
        stderr: stderr.trim().lines().next().unwrap_or("").to_owned(),
    })
}

/// Fails with [`TopoError::MissingPrivilege`] unless the effective capability set holds
/// CAP_NET_ADMIN (read from `CapEff` in `/proc/self/status`).
pub(super) fn check_net_admin() -> Result<(), TopoError> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let cap_eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    if cap_eff & (1 << CAP_NET_ADMIN_BIT) == 0 {
        return Err(TopoError::MissingPrivilege(
            "the effective capability set lacks CAP_NET_ADMIN".into(),
        ));
    }
    Ok(())
}

pub(super) fn register(name: &str) {
    if let Ok(mut live) = LIVE.lock() {
        live.push(name.to_owned());
    }
}

pub(super) fn unregister(name: &str) {
    if let Ok(mut live) = LIVE.lock() {
        live.retain(|n| n != name);
    }
}

/// Deletes every namespace this process created and still holds. Returns how many it deleted.
fn delete_registered() -> usize {
    let names = match LIVE.lock() {
        Ok(mut live) => std::mem::take(&mut *live),
        Err(_) => return 0,
    };
    names
        .iter()
        .filter(|n| Path::new(NETNS_RUN_DIR).join(n).exists())
        .filter(|n| run("ip", &["netns", "del", n]).is_ok())
        .count()
}

/// Makes SIGINT and SIGTERM remove every namespace this process created, then exit with status
/// 130 (SIGINT) or 143 (SIGTERM), as a shell reports a death by those signals.
///
/// Call it early in `main`, **before spawning threads**: it blocks both signals in the calling
/// thread (threads spawned afterwards inherit the mask) and waits for them with `sigwait` on a
/// dedicated thread, so no code runs in signal-handler context.
pub fn cleanup_on_signals() -> Result<(), TopoError> {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set.thread_block().map_err(std::io::Error::from)?;
    std::thread::Builder::new()
        .name("netns-cleanup".into())
        .spawn(move || {
            let signal = set.wait().unwrap_or(Signal::SIGTERM);
            let n = delete_registered();
            tracing::warn!("{signal}: removed {n} network namespace(s), exiting");
            std::process::exit(128 + signal as i32);
        })?;
    Ok(())
}

/// Removes namespaces named `<prefix>-<pid>-...` whose process no longer runs (left by a run that
/// was killed with SIGKILL). Returns the names it removed.
pub fn remove_stale(prefix: &str) -> Result<Vec<String>, TopoError> {
    let dir = match std::fs::read_dir(NETNS_RUN_DIR) {
        Ok(dir) => dir,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut removed = Vec::new();
    for entry in dir {
        let name = entry?.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(prefix).and_then(|r| r.strip_prefix('-')) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid != std::process::id() && !Path::new("/proc").join(pid.to_string()).exists() {
            run("ip", &["netns", "del", &name])?;
            removed.push(name);
        }
    }
    Ok(removed)
}
