//! The state directory (`stateDir`, the daemon's `class_dir`) and its files, kept from other
//! local users:
//!
//! * **The directory** is made mode [`STATE_DIR_MODE`] when missing (its parents with the
//!   default mode) and opened without following a symbolic link; it is refused when it is a
//!   symbolic link or not a directory, owned by a user other than root or the plugin's own
//!   (effective) user, or writable by its group or others. Every file is then reached through
//!   the open directory (`openat`, `renameat`, `unlinkat`), so a path swapped after the checks
//!   changes nothing.
//! * **A state file** is written whole under a temporary name of its own: a dot name with
//!   [`TMP_RANDOM_BYTES`] random bytes, created with `O_CREAT | O_EXCL | O_NOFOLLOW` and mode
//!   [`STATE_FILE_MODE`] (nothing already there is opened, a symbolic link included), synced,
//!   then renamed over the final name (which replaces a link there, never its target), and the
//!   directory synced. It is read with `O_NOFOLLOW` and only when it is a regular file.

use crate::classes::ClassFile;
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Mode of a state directory the plugin makes (0700): only its owner lists or changes it.
pub const STATE_DIR_MODE: u32 = 0o700;
/// Mode of a state file (0600), from its creation: only its owner reads or writes it.
pub const STATE_FILE_MODE: u32 = 0o600;
/// The mode bits that refuse a state directory (0o022): writable by its group or by others.
pub const REFUSED_DIR_BITS: u32 = 0o022;
/// Random bytes in a temporary file's name (8, written as 16 hexadecimal digits): a name no
/// other process can know before the file exists.
pub const TMP_RANDOM_BYTES: usize = 8;

/// Why the state directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StateDirError {
    /// Making, opening or checking it failed.
    #[error("state directory {path}: {source}")]
    Io {
        /// The directory.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// It is there but not safe to use: what is wrong and what to do.
    #[error("state directory {path} refused: {why}")]
    Refused {
        /// The directory.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
}

/// An open, checked state directory.
#[derive(Debug)]
pub struct StateDir {
    path: PathBuf,
    fd: OwnedFd,
}

/// `path` without a trailing `/`, which would make an open follow a link there.
fn without_trailing_slash(path: &Path) -> PathBuf {
    path.components().collect()
}

impl StateDir {
    /// Opens the state directory `path`, made (mode [`STATE_DIR_MODE`], its parents with the
    /// default mode) when missing, and checks it (see the module docs).
    pub fn make(path: &Path) -> Result<StateDir, StateDirError> {
        let path = without_trailing_slash(path);
        let io = |source| StateDirError::Io {
            path: path.clone(),
            source,
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        let made =
            std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), STATE_DIR_MODE)
                .create(&path);
        match made {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(io(e)),
            _ => {}
        }
        StateDir::open(&path)?.ok_or_else(|| {
            io(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "removed as soon as it was made",
            ))
        })
    }

    /// Opens the state directory `path` and checks it (see the module docs): `Ok(None)` when
    /// there is none.
    pub fn open(path: &Path) -> Result<Option<StateDir>, StateDirError> {
        let path = without_trailing_slash(path);
        let io = |source| StateDirError::Io {
            path: path.clone(),
            source,
        };
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = match nix::fcntl::open(&path, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(None),
            Err(Errno::ELOOP | Errno::ENOTDIR) => {
                let link = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_symlink());
                let why = if link {
                    "it is a symbolic link (not followed): name the directory itself"
                } else {
                    "it is not a directory"
                };
                return Err(StateDirError::Refused {
                    path,
                    why: why.to_owned(),
                });
            }
            Err(e) => return Err(io(e.into())),
        };
        let dir = StateDir { path, fd };
        dir.check()?;
        Ok(Some(dir))
    }

    /// Refuses the open directory when owned by another user or writable by group or others.
    fn check(&self) -> Result<(), StateDirError> {
        let meta = self
            .file()?
            .metadata()
            .map_err(|source| StateDirError::Io {
                path: self.path.clone(),
                source,
            })?;
        let euid = nix::unistd::geteuid().as_raw();
        let refused = |why: String| StateDirError::Refused {
            path: self.path.clone(),
            why,
        };
        if meta.uid() != 0 && meta.uid() != euid {
            return Err(refused(format!(
                "it is owned by uid {}, neither root nor the plugin's user (uid {euid}): \
                 another user could plant or change pods' state files; chown it",
                meta.uid()
            )));
        }
        let mode = meta.permissions().mode() & 0o7777;
        if mode & REFUSED_DIR_BITS != 0 {
            return Err(refused(format!(
                "its mode {mode:04o} lets its group or others write in it: another user could \
                 plant or change pods' state files; chmod {STATE_DIR_MODE:04o}"
            )));
        }
        Ok(())
    }

    /// The directory's own descriptor as a `File` (for `fstat` and `fsync`).
    fn file(&self) -> Result<std::fs::File, StateDirError> {
        self.fd
            .try_clone()
            .map(std::fs::File::from)
            .map_err(|source| StateDirError::Io {
                path: self.path.clone(),
                source,
            })
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `file` as `name` (see the module docs).
    pub fn write(&self, name: &str, file: &ClassFile) -> std::io::Result<()> {
        let mut text = serde_json::to_string_pretty(file).map_err(std::io::Error::other)?;
        text.push('\n');
        let mut random = [0u8; TMP_RANDOM_BYTES];
        getrandom::fill(&mut random).map_err(|e| std::io::Error::other(e.to_string()))?;
        let suffix: String = random.iter().map(|b| format!("{b:02x}")).collect();
        let tmp = format!(".{name}.tmp-{suffix}");
        let flags =
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = nix::fcntl::openat(
            &self.fd,
            tmp.as_str(),
            flags,
            Mode::from_bits_truncate(STATE_FILE_MODE),
        )
        .map_err(std::io::Error::from)?;
        let written = (|| {
            let mut f = std::fs::File::from(fd);
            // The mode given to open(2) is reduced by the umask; this sets it exactly.
            f.set_permissions(std::fs::Permissions::from_mode(STATE_FILE_MODE))?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
            nix::fcntl::renameat(&self.fd, tmp.as_str(), &self.fd, name)
                .map_err(std::io::Error::from)
        })();
        if written.is_err() {
            let _ = nix::unistd::unlinkat(
                &self.fd,
                tmp.as_str(),
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            );
        }
        written?;
        // The rename is durable once the directory is synced.
        self.file().map_err(std::io::Error::other)?.sync_all()
    }

    /// Reads the state file `name`: `Ok(None)` when there is none. A symbolic link there is an
    /// error (not followed), and so is anything but a regular file.
    pub fn read(&self, name: &str) -> std::io::Result<Option<ClassFile>> {
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let fd = match nix::fcntl::openat(&self.fd, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(None),
            Err(Errno::ELOOP) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "a symbolic link, not followed",
                ))
            }
            Err(e) => return Err(e.into()),
        };
        let mut f = std::fs::File::from(fd);
        if !f.metadata()?.is_file() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "not a regular file",
            ));
        }
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes)?;
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    }

    /// Removes the state file `name` (a link there is removed, not its target); none there is
    /// fine.
    pub fn remove(&self, name: &str) -> std::io::Result<()> {
        match nix::unistd::unlinkat(&self.fd, name, nix::unistd::UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests;
