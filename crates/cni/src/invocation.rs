//! The runtime's parameters in the environment (CNI specification 1.0.0, "Parameters"):
//! `CNI_COMMAND`, `CNI_CONTAINERID`, `CNI_NETNS`, `CNI_IFNAME`, `CNI_ARGS`, `CNI_PATH`, each
//! required or optional per operation as the specification's "CNI operations" lists them:
//!
//! | operation | required | optional |
//! |---|---|---|
//! | ADD | `CNI_CONTAINERID`, `CNI_NETNS`, `CNI_IFNAME` | `CNI_ARGS`, `CNI_PATH` |
//! | DEL | `CNI_CONTAINERID`, `CNI_IFNAME` | `CNI_NETNS`, `CNI_ARGS`, `CNI_PATH` |
//! | CHECK | `CNI_CONTAINERID`, `CNI_NETNS`, `CNI_IFNAME`, `CNI_PATH` | `CNI_ARGS` |
//! | VERSION | | |
//!
//! A missing or invalid variable is error 4 naming it. The container ID and the interface name
//! are checked as the specification words them, since both go into class and file names.

use crate::error::{CniError, INVALID_ENVIRONMENT};
use std::path::PathBuf;

/// Longest interface name in bytes (15): the kernel's `IFNAMSIZ` (16) less the terminating NUL.
pub const MAX_IFNAME: usize = 15;

/// The operation (`CNI_COMMAND`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// Register the pod's classes.
    Add,
    /// Remove them.
    Del,
    /// Verify them.
    Check,
    /// Report the supported versions.
    Version,
}

impl Command {
    /// The command's word, as `CNI_COMMAND` spells it.
    pub fn word(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Version => "VERSION",
        }
    }
}

/// One invocation's parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invocation {
    /// `CNI_COMMAND`.
    pub command: Command,
    /// `CNI_CONTAINERID` (empty for VERSION).
    pub container_id: String,
    /// `CNI_NETNS`, the pod's network namespace (a path); absent for VERSION and possibly DEL.
    pub netns: Option<PathBuf>,
    /// `CNI_IFNAME`, the interface inside the pod (empty for VERSION).
    pub ifname: String,
    /// `CNI_ARGS`, `KEY=VALUE` pairs separated by `;`.
    pub args: Option<String>,
    /// `K8S_POD_NAMESPACE` of `CNI_ARGS`, the pod's Kubernetes namespace, when given and not
    /// empty.
    pub pod_namespace: Option<String>,
    /// `CNI_PATH`, unused (this plugin runs no other plugin).
    pub path: Option<String>,
}

fn invalid(variable: &str, details: impl Into<String>) -> CniError {
    CniError::new(
        INVALID_ENVIRONMENT,
        format!("invalid {variable}"),
        details.into(),
    )
}

impl Invocation {
    /// The parameters from `var` (the environment: `std::env::var(..).ok()`; an empty value is
    /// taken as unset, as the specification's reference library does).
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Invocation, CniError> {
        let get = |name: &str| var(name).filter(|v| !v.is_empty());
        let command = match get("CNI_COMMAND").as_deref() {
            Some("ADD") => Command::Add,
            Some("DEL") => Command::Del,
            Some("CHECK") => Command::Check,
            Some("VERSION") => Command::Version,
            Some(other) => {
                return Err(invalid(
                    "CNI_COMMAND",
                    format!("unknown CNI_COMMAND {other:?}: ADD, DEL, CHECK or VERSION"),
                ))
            }
            None => {
                return Err(invalid(
                    "CNI_COMMAND",
                    "CNI_COMMAND is not set: ADD, DEL, CHECK or VERSION",
                ))
            }
        };
        let mut out = Invocation {
            command,
            container_id: String::new(),
            netns: None,
            ifname: String::new(),
            args: get("CNI_ARGS"),
            pod_namespace: None,
            path: get("CNI_PATH"),
        };
        out.pod_namespace = pod_namespace(out.args.as_deref())?;
        if command == Command::Version {
            return Ok(out);
        }
        let required = |name: &str| {
            get(name).ok_or_else(|| {
                invalid(
                    name,
                    format!("{name} is not set (required for {})", command.word()),
                )
            })
        };
        out.container_id = required("CNI_CONTAINERID")?;
        check_container_id(&out.container_id)?;
        out.ifname = required("CNI_IFNAME")?;
        check_ifname(&out.ifname)?;
        out.netns = match command {
            Command::Del => get("CNI_NETNS").map(PathBuf::from),
            _ => Some(PathBuf::from(required("CNI_NETNS")?)),
        };
        if command == Command::Check {
            required("CNI_PATH")?;
        }
        Ok(out)
    }
}

/// The key of `CNI_ARGS` that names the pod's namespace: the one the Kubernetes runtimes
/// (containerd, CRI-O) pass.
pub const NAMESPACE_ARG: &str = "K8S_POD_NAMESPACE";

/// [`NAMESPACE_ARG`]'s value in `args` (`KEY=VALUE` pairs separated by `;`; a pair without `=`
/// is not one and is passed over, as other plugins' keys may be anything): `None` when absent
/// or empty. Given twice with different values is error 4: which namespace the pod is in must
/// not depend on which one is read.
fn pod_namespace(args: Option<&str>) -> Result<Option<String>, CniError> {
    let mut found: Option<&str> = None;
    for (key, value) in args
        .unwrap_or("")
        .split(';')
        .filter_map(|p| p.split_once('='))
    {
        if key != NAMESPACE_ARG {
            continue;
        }
        if found.is_some_and(|f| f != value) {
            return Err(invalid(
                "CNI_ARGS",
                format!(
                    "CNI_ARGS names two namespaces in {NAMESPACE_ARG} ({:?} and {value:?})",
                    found.unwrap_or_default()
                ),
            ));
        }
        found = Some(value);
    }
    Ok(found.filter(|v| !v.is_empty()).map(str::to_owned))
}

/// The specification's rule: not empty, an alphanumeric character first, then alphanumeric
/// characters, `_`, `.` or `-`.
fn check_container_id(id: &str) -> Result<(), CniError> {
    let mut chars = id.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
    if first_ok && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')) {
        Ok(())
    } else {
        Err(invalid(
            "CNI_CONTAINERID",
            format!(
                "CNI_CONTAINERID {id:?}: must start with a letter or digit, then letters, \
                 digits, '_', '.' or '-'"
            ),
        ))
    }
}

/// An interface name the kernel takes: 1 to 15 bytes, not `.` or `..`, no `/`, `:` or
/// whitespace.
fn check_ifname(name: &str) -> Result<(), CniError> {
    let bad = name.len() > MAX_IFNAME
        || name == "."
        || name == ".."
        || name
            .chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace());
    if bad {
        Err(invalid(
            "CNI_IFNAME",
            format!(
                "CNI_IFNAME {name:?}: an interface name has 1 to {MAX_IFNAME} bytes, is not \
                 '.' or '..', and has no '/', ':' or whitespace"
            ),
        ))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(pairs: &[(&str, &str)]) -> Result<Invocation, CniError> {
        let env: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Invocation::from_env(|k| env.get(k).cloned())
    }

    const ADD: [(&str, &str); 4] = [
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "abc123"),
        ("CNI_NETNS", "/var/run/netns/x"),
        ("CNI_IFNAME", "eth0"),
    ];

    #[test]
    fn add_takes_its_required_variables() {
        let i = parse(&ADD).unwrap();
        assert_eq!(i.command, Command::Add);
        assert_eq!(i.container_id, "abc123");
        assert_eq!(i.netns, Some(PathBuf::from("/var/run/netns/x")));
        assert_eq!(i.ifname, "eth0");
        assert_eq!(i.path, None);
    }

    #[test]
    fn a_missing_variable_is_error_4_naming_it() {
        for missing in ["CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME"] {
            let pairs: Vec<_> = ADD.iter().copied().filter(|(k, _)| *k != missing).collect();
            let e = parse(&pairs).unwrap_err();
            assert_eq!(e.code, INVALID_ENVIRONMENT, "{missing}");
            assert!(e.details.contains(missing), "{missing}: {e}");
        }
        // CHECK also needs CNI_PATH.
        let mut check = ADD.to_vec();
        check[0] = ("CNI_COMMAND", "CHECK");
        assert!(parse(&check).unwrap_err().details.contains("CNI_PATH"));
        check.push(("CNI_PATH", "/opt/cni/bin"));
        assert_eq!(parse(&check).unwrap().command, Command::Check);
    }

    #[test]
    fn del_does_without_a_netns_and_version_without_anything() {
        let del = parse(&[
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", "abc"),
            ("CNI_IFNAME", "eth0"),
        ])
        .unwrap();
        assert_eq!(del.netns, None);
        assert_eq!(
            parse(&[("CNI_COMMAND", "VERSION")]).unwrap().command,
            Command::Version
        );
    }

    #[test]
    fn the_namespace_comes_from_cni_args() {
        let with = |args: &str| {
            let mut pairs = ADD.to_vec();
            pairs.push(("CNI_ARGS", args));
            parse(&pairs)
        };
        let ns = |args: &str| with(args).unwrap().pod_namespace;
        assert_eq!(
            ns("IgnoreUnknown=1;K8S_POD_NAMESPACE=team-a;K8S_POD_NAME=web-0"),
            Some("team-a".to_owned())
        );
        assert_eq!(ns("K8S_POD_NAMESPACE=a=b;odd"), Some("a=b".to_owned()));
        assert_eq!(ns("K8S_POD_NAMESPACE="), None);
        assert_eq!(ns("IgnoreUnknown=1"), None);
        assert_eq!(parse(&ADD).unwrap().pod_namespace, None);
        assert_eq!(
            ns("K8S_POD_NAMESPACE=x;K8S_POD_NAMESPACE=x"),
            Some("x".to_owned())
        );
        let e = with("K8S_POD_NAMESPACE=x;K8S_POD_NAMESPACE=y").unwrap_err();
        assert_eq!(e.code, INVALID_ENVIRONMENT);
        assert!(e.details.contains("CNI_ARGS"), "{e}");
    }

    #[test]
    fn bad_values_are_error_4() {
        assert_eq!(
            parse(&[("CNI_COMMAND", "UPDATE")]).unwrap_err().code,
            INVALID_ENVIRONMENT
        );
        for (key, value) in [
            ("CNI_CONTAINERID", "-abc"),
            ("CNI_CONTAINERID", "a/b"),
            ("CNI_IFNAME", "a-name-too-long-16"),
            ("CNI_IFNAME", ".."),
            ("CNI_IFNAME", "a:b"),
        ] {
            let pairs: Vec<_> = ADD
                .iter()
                .map(|&(k, v)| if k == key { (k, value) } else { (k, v) })
                .collect();
            let e = parse(&pairs).unwrap_err();
            assert_eq!(e.code, INVALID_ENVIRONMENT, "{key}={value}");
            assert!(e.details.contains(key), "{e}");
        }
    }
}
