//! Least privilege for `metronome run` ([`drop_privileges`]): once its ports are open, the daemon
//! keeps only the two capabilities its running loop can still need ([`KEPT`]: CAP_NET_RAW to reopen
//! AF_PACKET sockets, CAP_NET_ADMIN for `SO_RCVBUFFORCE` and GRO), sets `PR_SET_NO_NEW_PRIVS`, and
//! with `[daemon] user` switches to that user, keeping those two; CAP_SYS_NICE too only where
//! `[daemon] realtime_priority` needs it (`crate::os::realtime`).
//!
//! Capabilities are per thread, so it runs while the daemon has one thread, before the metrics
//! endpoint and the silos start theirs. Why these two, the six steps in order and what fails how:
//! ARCHITECTURE.md, "Least privilege"; the operator's view: docs/config.md ("Privileges").

use caps::{CapSet, Capability, CapsHashSet};
use nix::unistd::{Gid, Uid, User};
use std::ffi::CString;

/// The capabilities the daemon keeps after start-up (see the module docs for what needs them).
pub const KEPT: [Capability; 2] = [Capability::CAP_NET_ADMIN, Capability::CAP_NET_RAW];

/// Why the privileges could not be dropped: a start-up error, named for the user to fix.
#[derive(Debug, thiserror::Error)]
pub enum PrivilegeError {
    /// `[daemon] user` names no user.
    #[error("[daemon] user {user:?}: no such user")]
    NoSuchUser {
        /// The configured name.
        user: String,
    },
    /// Looking the user up failed (`getpwnam`, `getgrouplist`).
    #[error("[daemon] user {user:?}: looking it up failed: {source}")]
    Lookup {
        /// The configured name.
        user: String,
        /// The lookup's error.
        source: nix::Error,
    },
    /// The process may not change its user: it lacks CAP_SETUID or CAP_SETGID.
    #[error(
        "[daemon] user {user:?}: switching to it needs CAP_SETUID and CAP_SETGID; start the \
         daemon as root, or remove `user` and start it as that user"
    )]
    CannotSwitch {
        /// The configured name.
        user: String,
    },
    /// A call of the user switch failed.
    #[error("[daemon] user {user:?}: {op} failed: {source}")]
    Switch {
        /// The configured name.
        user: String,
        /// The call (`setgroups`, `setresgid`, `setresuid`, `PR_SET_KEEPCAPS`).
        op: &'static str,
        /// Its error.
        source: nix::Error,
    },
    /// Reading or setting a capability set failed, or it did not read back as set.
    #[error("dropping capabilities: {op}: {message}")]
    Caps {
        /// What was being done.
        op: &'static str,
        /// What went wrong.
        message: String,
    },
    /// `PR_SET_NO_NEW_PRIVS` failed.
    #[error("prctl(PR_SET_NO_NEW_PRIVS) failed: {0}")]
    NoNewPrivs(nix::Error),
}

/// What [`drop_privileges`] left the process with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dropped {
    /// The capabilities in the effective and permitted sets: [`KEPT`] and the extra ones asked
    /// for, less those the process did not have.
    pub kept: CapsHashSet,
    /// Whether the bounding set was reduced to the kept capabilities (false without
    /// CAP_SETPCAP).
    pub bounding_trimmed: bool,
    /// The real, effective and saved uid afterwards.
    pub uid: u32,
}

/// Drops every privilege but [`KEPT`] and `extra` and switches to `user` if given (see the
/// module docs). Call it while the process has one thread.
pub fn drop_privileges(
    user: Option<&str>,
    extra: &[Capability],
) -> Result<Dropped, PrivilegeError> {
    let target = user.map(resolve).transpose()?;
    let permitted = read(CapSet::Permitted)?;
    let kept: CapsHashSet = KEPT
        .iter()
        .chain(extra)
        .copied()
        .filter(|c| permitted.contains(c))
        .collect();
    let bounding_trimmed = trim_bounding(&kept)?;
    if let Some(target) = &target {
        switch_user(target)?;
    }
    caps::clear(None, CapSet::Ambient).map_err(caps_err("clearing the ambient set"))?;
    caps::set(None, CapSet::Effective, &kept).map_err(caps_err("setting the effective set"))?;
    caps::clear(None, CapSet::Inheritable).map_err(caps_err("clearing the inheritable set"))?;
    caps::set(None, CapSet::Permitted, &kept).map_err(caps_err("setting the permitted set"))?;
    nix::sys::prctl::set_no_new_privs().map_err(PrivilegeError::NoNewPrivs)?;
    let uid = verify(&kept, target.as_ref())?;
    Ok(Dropped {
        kept,
        bounding_trimmed,
        uid,
    })
}

/// The user `[daemon] user` names: its ids and groups.
#[derive(Debug)]
struct Target {
    name: String,
    uid: Uid,
    gid: Gid,
    groups: Vec<Gid>,
}

fn resolve(name: &str) -> Result<Target, PrivilegeError> {
    let lookup = |source| PrivilegeError::Lookup {
        user: name.to_owned(),
        source,
    };
    let user =
        User::from_name(name)
            .map_err(lookup)?
            .ok_or_else(|| PrivilegeError::NoSuchUser {
                user: name.to_owned(),
            })?;
    // A name from getpwnam has no NUL byte.
    let cname = CString::new(name).map_err(|_| lookup(nix::Error::EINVAL))?;
    let groups = nix::unistd::getgrouplist(&cname, user.gid).map_err(lookup)?;
    Ok(Target {
        name: name.to_owned(),
        uid: user.uid,
        gid: user.gid,
        groups,
    })
}

/// Removes every capability but `kept` from the bounding set; `false` (nothing removed)
/// without CAP_SETPCAP in the effective set.
fn trim_bounding(kept: &CapsHashSet) -> Result<bool, PrivilegeError> {
    if !read(CapSet::Effective)?.contains(&Capability::CAP_SETPCAP) {
        return Ok(false);
    }
    let bounding =
        caps::read(None, CapSet::Bounding).map_err(caps_err("reading the bounding set"))?;
    for cap in bounding.iter().filter(|c| !kept.contains(c)) {
        caps::drop(None, CapSet::Bounding, *cap).map_err(caps_err("trimming the bounding set"))?;
    }
    Ok(true)
}

/// Whether the process already runs as `target` (real, effective and saved ids).
fn is_already(target: &Target) -> bool {
    let ids = (nix::unistd::getresuid(), nix::unistd::getresgid());
    matches!(ids, (Ok(u), Ok(g))
        if [u.real, u.effective, u.saved] == [target.uid; 3]
            && [g.real, g.effective, g.saved] == [target.gid; 3])
}

fn switch_user(target: &Target) -> Result<(), PrivilegeError> {
    if is_already(target) {
        return Ok(());
    }
    let effective = read(CapSet::Effective)?;
    if !effective.contains(&Capability::CAP_SETUID) || !effective.contains(&Capability::CAP_SETGID)
    {
        return Err(PrivilegeError::CannotSwitch {
            user: target.name.clone(),
        });
    }
    let fail = |op| {
        move |source| PrivilegeError::Switch {
            user: target.name.clone(),
            op,
            source,
        }
    };
    use nix::sys::prctl::set_keepcaps;
    set_keepcaps(true).map_err(fail("PR_SET_KEEPCAPS"))?;
    nix::unistd::setgroups(&target.groups).map_err(fail("setgroups"))?;
    let (uid, gid) = (target.uid, target.gid);
    nix::unistd::setresgid(gid, gid, gid).map_err(fail("setresgid"))?;
    nix::unistd::setresuid(uid, uid, uid).map_err(fail("setresuid"))?;
    set_keepcaps(false).map_err(fail("PR_SET_KEEPCAPS"))
}

/// Checks that the effective and permitted sets are `kept`, the inheritable and ambient sets
/// empty, no-new-privs set and, with a target, every uid and gid the target's. Returns the uid.
fn verify(kept: &CapsHashSet, target: Option<&Target>) -> Result<u32, PrivilegeError> {
    let mismatch = |op, message: String| PrivilegeError::Caps { op, message };
    for (set, want, name) in [
        (CapSet::Effective, kept.clone(), "effective"),
        (CapSet::Permitted, kept.clone(), "permitted"),
        (CapSet::Inheritable, CapsHashSet::new(), "inheritable"),
        (CapSet::Ambient, CapsHashSet::new(), "ambient"),
    ] {
        let got = caps::read(None, set).map_err(caps_err("reading back"))?;
        if got != want {
            return Err(mismatch(
                "reading back",
                format!("the {name} set is {got:?}, not {want:?}"),
            ));
        }
    }
    if nix::sys::prctl::get_no_new_privs() != Ok(true) {
        return Err(mismatch("reading back", "no_new_privs is not set".into()));
    }
    let uid = nix::unistd::getresuid().map_err(|e| mismatch("getresuid", e.to_string()))?;
    if let Some(t) = target {
        if !is_already(t) {
            return Err(mismatch(
                "reading back",
                format!("the ids are not those of user {:?}", t.name),
            ));
        }
    }
    Ok(uid.effective.as_raw())
}

fn read(set: CapSet) -> Result<CapsHashSet, PrivilegeError> {
    caps::read(None, set).map_err(caps_err("reading a capability set"))
}

fn caps_err(op: &'static str) -> impl Fn(caps::errors::CapsError) -> PrivilegeError {
    move |e| PrivilegeError::Caps {
        op,
        message: e.to_string(),
    }
}

/// The capability names of `set`, sorted, comma-separated (for logs).
pub fn names(set: &CapsHashSet) -> String {
    let mut names: Vec<String> = set.iter().map(|c| c.to_string().to_lowercase()).collect();
    names.sort();
    names.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `f` on a thread of its own: capabilities and no-new-privs are per thread, so the
    /// test thread and the others keep theirs.
    fn on_own_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::spawn(f).join().expect("the thread ran")
    }

    #[test]
    fn only_the_kept_capabilities_remain_and_no_new_privs_is_set() {
        let (before, dropped, after, bounding) = on_own_thread(|| {
            let before = read(CapSet::Permitted).unwrap();
            let dropped = drop_privileges(None, &[]).unwrap();
            let after = [CapSet::Effective, CapSet::Permitted, CapSet::Inheritable]
                .map(|s| read(s).unwrap());
            let bounding = caps::read(None, CapSet::Bounding).unwrap();
            (before, dropped, after, bounding)
        });
        let expected: CapsHashSet = KEPT.into_iter().filter(|c| before.contains(c)).collect();
        assert_eq!(dropped.kept, expected);
        assert_eq!(after[0], expected, "effective");
        assert_eq!(after[1], expected, "permitted");
        assert!(after[2].is_empty(), "inheritable: {:?}", after[2]);
        if before.contains(&Capability::CAP_SETPCAP) {
            assert!(dropped.bounding_trimmed);
            assert!(bounding.iter().all(|c| KEPT.contains(c)), "{bounding:?}");
        }
        // Run as root (as CI does), the uid stays 0 but only the two capabilities are left.
        if before.contains(&Capability::CAP_SYS_ADMIN) {
            assert_eq!(dropped.kept.len(), 2);
            assert!(!dropped.kept.contains(&Capability::CAP_SYS_ADMIN));
        }
    }

    #[test]
    fn an_extra_capability_is_kept_with_the_two_and_nothing_else() {
        let (before, dropped, effective) = on_own_thread(|| {
            let before = read(CapSet::Permitted).unwrap();
            let dropped = drop_privileges(None, &[Capability::CAP_SYS_NICE]).unwrap();
            (before, dropped, read(CapSet::Effective).unwrap())
        });
        let expected: CapsHashSet = KEPT
            .into_iter()
            .chain([Capability::CAP_SYS_NICE])
            .filter(|c| before.contains(c))
            .collect();
        assert_eq!(dropped.kept, expected);
        assert_eq!(effective, expected);
        if before.contains(&Capability::CAP_SYS_NICE) {
            assert!(dropped.kept.contains(&Capability::CAP_SYS_NICE));
        }
    }

    #[test]
    fn dropping_twice_is_harmless() {
        on_own_thread(|| {
            let first = drop_privileges(None, &[]).unwrap();
            let second = drop_privileges(None, &[]).unwrap();
            assert_eq!((second.kept, second.uid), (first.kept, first.uid));
            // CAP_SETPCAP went with the first drop: the bounding set is left as it is.
            assert!(!second.bounding_trimmed);
        });
    }

    #[test]
    fn a_missing_user_is_named() {
        let err = on_own_thread(|| drop_privileges(Some("mtr-no-such-user"), &[]).unwrap_err());
        assert!(matches!(err, PrivilegeError::NoSuchUser { .. }), "{err}");
        assert_eq!(
            err.to_string(),
            "[daemon] user \"mtr-no-such-user\": no such user"
        );
    }

    #[test]
    fn switching_user_without_cap_setuid_is_a_one_line_error() {
        let err = on_own_thread(|| {
            // Whatever the test runs as, after this drop CAP_SETUID is gone.
            drop_privileges(None, &[]).unwrap();
            drop_privileges(Some("nobody"), &[]).unwrap_err()
        });
        match err {
            PrivilegeError::CannotSwitch { .. } => {}
            PrivilegeError::NoSuchUser { .. } => return, // a system without `nobody`
            other => panic!("{other}"),
        }
        let msg = err.to_string();
        assert!(msg.starts_with("[daemon] user \"nobody\": "), "{msg}");
        assert!(msg.contains("CAP_SETUID") && !msg.contains('\n'), "{msg}");
    }

    #[test]
    fn capability_names_are_sorted_and_lowercase() {
        assert_eq!(
            names(&KEPT.into_iter().collect()),
            "cap_net_admin,cap_net_raw"
        );
    }
}
