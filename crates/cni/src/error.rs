//! The CNI error object (CNI specification 1.0.0, "Error result" and "Well-known error codes"):
//! `{"cniVersion": .., "code": N, "msg": .., "details": ..}` printed on stdout, with a non-zero
//! exit status. Codes 0-99 are the specification's; 100 and up are this plugin's.

use serde::Serialize;

/// Code 1: the configuration's `cniVersion` is not one this plugin supports.
pub const INCOMPATIBLE_VERSION: u32 = 1;
/// Code 4: a `CNI_*` environment variable is missing or invalid.
pub const INVALID_ENVIRONMENT: u32 = 4;
/// Code 5: an I/O failure (the state file could not be written or removed), or the state
/// directory is refused (another user's, or writable by others).
pub const IO_FAILURE: u32 = 5;
/// Code 6: stdin could not be decoded (not JSON, or a key of the wrong type).
pub const DECODING_FAILURE: u32 = 6;
/// Code 7: the network configuration is invalid, or the daemon refused a class built from it.
pub const INVALID_CONFIG: u32 = 7;
/// Code 11: try again later: the daemon does not answer on its control socket.
pub const TRY_AGAIN_LATER: u32 = 11;
/// Code 100 (this plugin's): CHECK found the pod's classes or state file missing or different.
pub const LIMITS_MISSING: u32 = 100;
/// Code 101 (this plugin's): the pod's host-side interface could not be found.
pub const NO_HOST_INTERFACE: u32 = 101;
/// Code 102 (this plugin's): ADD found a class of the pod's name in the daemon that is not the
/// pod's (its state file does not record it with that match), or a class of its namespace's
/// aggregate name that is not an aggregate (a class of the file, one with a `match` or without
/// `gather`): it is left as it is.
pub const CLASS_NOT_OWNED: u32 = 102;
/// Code 103 (this plugin's): ADD of a pod whose own limit (`runtimeConfig.bandwidth`) is above
/// its namespace's (`namespaceBandwidth`) in a direction: the daemon refuses a class above its
/// parent's rate.
pub const ABOVE_NAMESPACE: u32 = 103;

/// A failed command: its code, a short message and the details.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{msg}: {details} (CNI error {code})")]
pub struct CniError {
    /// The error code (the constants of this module).
    pub code: u32,
    /// A short message.
    pub msg: String,
    /// The long message: what failed and what to do.
    pub details: String,
}

/// The error object as the specification writes it.
#[derive(Serialize)]
struct ErrorObject<'a> {
    #[serde(rename = "cniVersion")]
    cni_version: &'a str,
    code: u32,
    msg: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    details: &'a str,
}

impl CniError {
    /// An error with `code`.
    pub fn new(code: u32, msg: impl Into<String>, details: impl Into<String>) -> CniError {
        CniError {
            code,
            msg: msg.into(),
            details: details.into(),
        }
    }

    /// The error object in `cni_version` (the configuration's version, or the newest this
    /// plugin supports when the configuration gave none it supports).
    pub fn to_json(&self, cni_version: &str) -> String {
        let object = ErrorObject {
            cni_version,
            code: self.code,
            msg: &self.msg,
            details: &self.details,
        };
        serde_json::to_string(&object).unwrap_or_else(|_| {
            format!(
                r#"{{"cniVersion":"{cni_version}","code":{},"msg":"error"}}"#,
                self.code
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_error_object_has_the_specifications_keys() {
        let e = CniError::new(TRY_AGAIN_LATER, "daemon not answering", "no daemon on x");
        let v: serde_json::Value = serde_json::from_str(&e.to_json("1.0.0")).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"cniVersion":"1.0.0","code":11,"msg":"daemon not answering",
                "details":"no daemon on x"})
        );
        // `details` is optional and left out when empty.
        let e = CniError::new(INVALID_CONFIG, "bad", "");
        assert!(!e.to_json("0.4.0").contains("details"));
    }
}
