//! `[daemon] class_dir`: a directory of JSON files, one per workload interface, each naming the
//! classes the control socket registers for it (docs/config.md, "Live classes: the control
//! socket"). `metronome-cni` writes them; [`ClassFile`] is the format both sides share. At start,
//! the daemon reads the files before it switches user ([`load`]) and, before the loops, adds
//! every file's classes as classes of the API ([`apply`]), in name order; a file whose interface is gone is removed, a refused class skipped, an unreadable
//! file left, each counted or logged as that page says. A file is trusted only when the daemon
//! could have written it: a regular file (a symlink is not followed), owned by root or the
//! daemon's user, writable by no one else, at most [`MAX_CLASS_FILE_BYTES`] ([`read_trusted`]);
//! the classes added stop at `[daemon] max_api_classes`.

use super::protocol::ClassObject;
use super::Live;
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Largest file of `class_dir` read, bytes (64 KiB): a pod's file is a few hundred bytes; a
/// larger one is skipped (counted `file_size`).
pub const MAX_CLASS_FILE_BYTES: u64 = 64 * 1024;

/// One file of `class_dir`: the host interface the classes are for, where the workload is, and
/// its classes as the control protocol carries them (the keys and words of a `[[class]]`
/// table). Unknown top-level keys are ignored.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClassFile {
    /// The host's interface of the workload (a pod's host veth): a file whose interface no
    /// longer exists at the daemon's start is removed, its classes not added.
    pub interface: String,
    /// The container runtime's id of the workload (informational).
    #[serde(default)]
    pub container_id: String,
    /// The interface's name inside the workload (informational).
    #[serde(default)]
    pub ifname: String,
    /// The workload's network namespace path (informational).
    #[serde(default)]
    pub netns: String,
    /// The classes, added as classes of the API in this order.
    #[serde(default)]
    pub classes: Vec<ClassObject>,
}

/// What [`load`] and [`apply`] did, by file and class.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Restored {
    /// Classes added.
    pub added: usize,
    /// Classes refused (logged).
    pub refused: usize,
    /// Files removed: their interface is gone.
    pub gone: usize,
    /// Files left: unreadable or invalid (logged).
    pub invalid: usize,
    /// Files not trusted and left unread (a symlink, another user's, writable by others, too
    /// large, not a regular file: logged and counted by reason).
    pub skipped: usize,
    /// Files not read because the classes of the API reached `[daemon] max_api_classes`.
    pub over_cap: usize,
}

/// Why a file of `class_dir` was not trusted: the `reason` of
/// `metronome_control_refused_total` and what the log says.
#[derive(Debug)]
pub struct Untrusted {
    /// `file_symlink`, `file_not_regular`, `file_owner`, `file_mode`, `file_size`.
    pub reason: &'static str,
    /// What is wrong.
    pub message: String,
}

/// The text of `path` when it may be trusted (see the module docs): opened without following a
/// symlink (`O_NOFOLLOW`) or blocking on a FIFO (`O_NONBLOCK`), then checked on the open file.
/// Files of root and of `owners` (the daemon's users) are trusted. An I/O error is `Ok(Err)`.
pub fn read_trusted(path: &Path, owners: &[u32]) -> Result<std::io::Result<String>, Untrusted> {
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path);
    let file = match opened {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => {
            return Err(Untrusted {
                reason: "file_symlink",
                message: "a symlink: not followed".into(),
            })
        }
        Err(e) => return Ok(Err(e)),
    };
    let meta = match file.metadata() {
        Ok(m) => m,
        Err(e) => return Ok(Err(e)),
    };
    if !meta.file_type().is_file() {
        return Err(Untrusted {
            reason: "file_not_regular",
            message: "not a regular file".into(),
        });
    }
    if meta.uid() != 0 && !owners.contains(&meta.uid()) {
        return Err(Untrusted {
            reason: "file_owner",
            message: format!(
                "owned by uid {}, neither root nor the daemon's user (uid {owners:?})",
                meta.uid()
            ),
        });
    }
    if meta.mode() & 0o022 != 0 {
        return Err(Untrusted {
            reason: "file_mode",
            message: format!(
                "mode {:04o}: writable by group or others, so anyone may have written it",
                meta.mode() & 0o7777
            ),
        });
    }
    if meta.len() > MAX_CLASS_FILE_BYTES {
        return Err(Untrusted {
            reason: "file_size",
            message: format!(
                "{} bytes, more than the {MAX_CLASS_FILE_BYTES} a class file may have",
                meta.len()
            ),
        });
    }
    let mut text = String::new();
    match file
        .take(MAX_CLASS_FILE_BYTES + 1)
        .read_to_string(&mut text)
    {
        Ok(n) if n as u64 > MAX_CLASS_FILE_BYTES => Err(Untrusted {
            reason: "file_size",
            message: format!("more than the {MAX_CLASS_FILE_BYTES} bytes a class file may have"),
        }),
        Ok(_) => Ok(Ok(text)),
        Err(e) => Ok(Err(e)),
    }
}

/// The files of a `class_dir` as [`load`] read them: what [`apply`] adds.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The files to add, in name order.
    files: Vec<(std::path::PathBuf, ClassFile)>,
    /// The reasons of the files not trusted, to be counted.
    untrusted: Vec<&'static str>,
    /// What loading did (`gone`, `invalid`, `over_cap`; `skipped` is `untrusted`'s length).
    done: Restored,
}

/// Reads the files of `dir` (see the module docs), trusting those owned by root or by one of
/// `owners`, until their classes reach `cap`; removes a file whose interface is gone (`exists`
/// says whether one exists: the daemon asks the kernel, the tests a list). The daemon calls it
/// at start while it still has the privileges it started with, as the files are root's
/// (`metronome-cni` writes them mode 0600 in a directory of mode 0700, docs/cni.md).
pub fn load(dir: &Path, exists: impl Fn(&str) -> bool, owners: &[u32], cap: usize) -> Loaded {
    let mut loaded = Loaded::default();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "class_dir: not read");
            return loaded;
        }
    };
    let mut paths: Vec<std::path::PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    let mut classes = 0;
    let done = &mut loaded.done;
    for (i, path) in paths.iter().enumerate() {
        if classes >= cap {
            done.over_cap = paths.len() - i;
            tracing::warn!(
                dir = %dir.display(),
                files = done.over_cap,
                "class_dir: [daemon] max_api_classes reached: the remaining files are not read"
            );
            break;
        }
        let text = match read_trusted(path, owners) {
            Ok(text) => text,
            Err(untrusted) => {
                tracing::warn!(
                    file = %path.display(),
                    reason = untrusted.reason,
                    "class_dir: a file is not trusted, left unread: {}",
                    untrusted.message
                );
                loaded.untrusted.push(untrusted.reason);
                continue;
            }
        };
        let file = text
            .map_err(|e| e.to_string())
            .and_then(|text| serde_json::from_str::<ClassFile>(&text).map_err(|e| e.to_string()));
        let file = match file {
            Ok(f) => f,
            Err(error) => {
                tracing::warn!(file = %path.display(), %error, "class_dir: a file is not a class file; left");
                done.invalid += 1;
                continue;
            }
        };
        if !exists(&file.interface) {
            tracing::info!(
                file = %path.display(),
                interface = %file.interface,
                "class_dir: the interface is gone (its workload went while the daemon was down): \
                 the file is removed, its classes not added"
            );
            if let Err(e) = std::fs::remove_file(path) {
                tracing::warn!(file = %path.display(), error = %e, "class_dir: removing a file failed");
            }
            done.gone += 1;
            continue;
        }
        classes += file.classes.len();
        loaded.files.push((path.clone(), file));
    }
    loaded
}

/// Adds the classes [`load`] read to `live` as classes of the API, counting what loading did.
pub fn apply(live: &Live, loaded: Loaded) -> Restored {
    let mut done = Restored {
        skipped: loaded.untrusted.len(),
        ..loaded.done
    };
    for reason in loaded.untrusted {
        live.metrics.control_refused(reason);
    }
    for _ in 0..done.gone {
        live.metrics.class_change("restore", "gone");
    }
    for (path, file) in loaded.files {
        for class in file.classes {
            let name = class.get("name").cloned().unwrap_or_default();
            match live.restore(class) {
                Ok(name) => {
                    tracing::info!(file = %path.display(), class = %name, "class_dir: restored");
                    live.metrics.class_change("restore", "ok");
                    done.added += 1;
                }
                Err(error) => {
                    tracing::warn!(file = %path.display(), class = %name, %error, "class_dir: a class was not restored");
                    live.metrics.class_change("restore", "refused");
                    done.refused += 1;
                }
            }
        }
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::config::Config;
    use crate::ops::metrics::Metrics;

    /// [`load`] then [`apply`], as the daemon does at start, trusting the files of root and of
    /// this process's user, up to `live`'s cap.
    fn restore(live: &Live, dir: &Path, exists: impl Fn(&str) -> bool) -> Restored {
        let own = nix::unistd::geteuid().as_raw();
        apply(live, load(dir, exists, &[own], live.max_api_classes()))
    }

    #[test]
    fn restore_adds_the_classes_of_live_interfaces_and_removes_the_files_of_gone_ones() {
        let dir = std::env::temp_dir().join(format!("metronome-class-dir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = |interface: &str, classes: serde_json::Value| {
            serde_json::json!({"interface": interface, "container_id": "c", "classes": classes})
                .to_string()
        };
        let a = serde_json::json!([
            {"name":"pod-a.egress","match":{"from":"veth-a"},"rate":"10mbit","fair":true},
            {"name":"pod-a.ingress","match":{"to":"veth-a"},"rate":"20mbit"},
        ]);
        std::fs::write(dir.join("a.json"), file("veth-a", a)).unwrap();
        // Same name again, and a bad rate: both refused, the rest of the file kept.
        let b = serde_json::json!([
            {"name":"pod-a.egress","match":{"from":"veth-b"},"rate":"10mbit"},
            {"name":"pod-b.bad","rate":"fast"},
            {"name":"pod-b.egress","match":{"from":"veth-b"},"rate":"1mbit"},
        ]);
        std::fs::write(dir.join("b.json"), file("veth-b", b)).unwrap();
        let gone =
            serde_json::json!([{"name":"pod-c.egress","match":{"from":"veth-c"},"rate":"1mbit"}]);
        std::fs::write(dir.join("c.json"), file("veth-c", gone)).unwrap();
        std::fs::write(dir.join("d.json"), "{not json").unwrap();
        std::fs::write(
            dir.join("e.json.tmp"),
            file("veth-a", serde_json::json!([])),
        )
        .unwrap();
        let config = Config::from_toml_str(
            "[interfaces]\nattach = [\"eth0\"]\nbridges = [\"br0\"]\n",
            "test.toml",
        )
        .unwrap();
        let metrics = Metrics::new();
        let live = Live::new(&config, 1, metrics.clone()).unwrap();
        let done = restore(&live, &dir, |i| i == "veth-a" || i == "veth-b");
        assert_eq!(
            done,
            Restored {
                added: 3,
                refused: 2,
                gone: 1,
                invalid: 1,
                ..Restored::default()
            }
        );
        let names: Vec<String> = live
            .current()
            .classes
            .iter()
            .map(|c| c.name.clone())
            .collect();
        assert_eq!(names, ["pod-a.egress", "pod-a.ingress", "pod-b.egress"]);
        let o = live.current().origin_set();
        assert_eq!((o.from.len(), o.to.len()), (2, 1));
        assert!(live.take_origins_changed());
        assert!(!dir.join("c.json").exists());
        assert!(dir.join("d.json").exists() && dir.join("a.json").exists());
        let text = metrics.encode();
        assert!(
            text.contains(r#"metronome_class_changes_total{op="restore",result="ok"} 3"#),
            "{text}"
        );
        assert!(text.contains(r#"op="restore",result="gone"} 1"#), "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn reads_the_documented_format_and_ignores_unknown_keys() {
        let text = r#"{"interface":"veth1a2b3c4d","container_id":"abc","ifname":"eth0",
            "netns":"/var/run/netns/x","future":1,
            "classes":[{"name":"cni.abc.eth0.egress","match":{"from":"veth1a2b3c4d"},
                        "rate":"100000000bit","burst":"1514b","fair":true}]}"#;
        let file: ClassFile = serde_json::from_str(text).unwrap();
        assert_eq!(file.interface, "veth1a2b3c4d");
        assert_eq!(file.container_id, "abc");
        assert_eq!(file.classes.len(), 1);
        assert_eq!(file.classes[0]["rate"], "100000000bit");
        let back: ClassFile = serde_json::from_str(&serde_json::to_string(&file).unwrap()).unwrap();
        assert_eq!(back, file);
        let bare: ClassFile = serde_json::from_str(r#"{"interface":"v"}"#).unwrap();
        assert!(bare.classes.is_empty() && bare.netns.is_empty());
        assert!(serde_json::from_str::<ClassFile>(r#"{"classes":[]}"#).is_err());
    }

    /// A class file of interface `veth-t` with one class named `name`.
    fn class_file(name: &str) -> String {
        serde_json::json!({"interface":"veth-t","classes":[
            {"name":name,"match":{"dst":"10.9.0.1/32"},"rate":"1mbit"}]})
        .to_string()
    }

    #[test]
    fn untrusted_files_are_skipped_and_counted_and_the_cap_stops_the_restore() {
        use std::os::unix::fs::PermissionsExt;
        let root =
            std::env::temp_dir().join(format!("metronome-class-trust-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dir = root.join("classes");
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, text: &str, mode: u32| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            path
        };
        write("a-trusted.json", &class_file("trusted"), 0o644);
        write("b-world.json", &class_file("world-writable"), 0o666);
        write("c-group.json", &class_file("group-writable"), 0o664);
        // A link to a valid class file elsewhere (a planted one), and to a secret.
        let elsewhere = root.join("elsewhere.json");
        std::fs::write(&elsewhere, class_file("linked")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, dir.join("d-link.json")).unwrap();
        std::os::unix::fs::symlink("/etc/shadow", dir.join("e-shadow.json")).unwrap();
        let padding = " ".repeat(MAX_CLASS_FILE_BYTES as usize);
        write(
            "f-large.json",
            &format!("{}{padding}", class_file("large")),
            0o644,
        );
        nix::unistd::mkfifo(
            &dir.join("g-fifo.json"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let foreign = write("h-foreign.json", &class_file("foreign"), 0o644);
        let may_chown = std::os::unix::fs::chown(&foreign, Some(65_534), Some(65_534)).is_ok();
        if !may_chown {
            std::fs::remove_file(&foreign).unwrap();
        }
        let config =
            Config::from_toml_str("[interfaces]\ninside = \"a\"\noutside = \"b\"\n", "t.toml")
                .unwrap();
        let metrics = Metrics::new();
        let live = Live::new(&config, 1, metrics.clone()).unwrap();
        let done = restore(&live, &dir, |_| true);
        let names: Vec<String> = live
            .current()
            .classes
            .iter()
            .map(|c| c.name.clone())
            .collect();
        assert_eq!(names, ["trusted"]);
        let foreign_skipped = usize::from(may_chown);
        assert_eq!(
            done,
            Restored {
                added: 1,
                skipped: 6 + foreign_skipped,
                ..Restored::default()
            }
        );
        let text = metrics.encode();
        for (reason, n) in [
            ("file_mode", 2),
            ("file_symlink", 2),
            ("file_size", 1),
            ("file_not_regular", 1),
        ] {
            let line = format!("metronome_control_refused_total{{reason=\"{reason}\"}} {n}");
            assert!(text.contains(&line), "{line} in\n{text}");
        }
        if may_chown {
            assert!(
                text.contains(r#"metronome_control_refused_total{reason="file_owner"} 1"#),
                "{text}"
            );
        } else {
            crate::os::privileged_tests::skip_unprivileged(
                "a class_dir file of another user: giving a file away needs CAP_CHOWN (root has it)",
            );
        }
        // The planted files are left as they were.
        assert_eq!(
            std::fs::read_to_string(&elsewhere).unwrap(),
            class_file("linked")
        );

        // With the cap at 2, the third file is not read.
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        for (i, name) in ["one", "two", "three"].iter().enumerate() {
            write(&format!("{i}.json"), &class_file(name), 0o644);
        }
        let capped = Config::from_toml_str(
            "[interfaces]\ninside = \"a\"\noutside = \"b\"\n[daemon]\nmax_api_classes = 2\n",
            "t.toml",
        )
        .unwrap();
        let live = Live::new(&capped, 1, Metrics::new()).unwrap();
        let done = restore(&live, &dir, |_| true);
        assert_eq!(
            done,
            Restored {
                added: 2,
                over_cap: 1,
                ..Restored::default()
            }
        );
        std::fs::remove_dir_all(&root).unwrap();
    }
}
