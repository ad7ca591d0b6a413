use super::*;
use std::os::unix::fs::symlink;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A directory of its own for one test, under which the state directory is made; removed when
/// the test ends.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch() -> Scratch {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "metronome-cni-state-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

fn file() -> ClassFile {
    ClassFile {
        interface: "veth1".into(),
        container_id: "abc".into(),
        ifname: "eth0".into(),
        netns: "/var/run/netns/x".into(),
        classes: Vec::new(),
    }
}

fn mode_of(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

/// A file outside the state directory that a planted link points at: `secret`, mode 0600.
fn victim(scratch: &Scratch) -> PathBuf {
    let victim = scratch.0.join("victim");
    std::fs::write(&victim, "secret").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    victim
}

#[test]
fn the_state_file_is_written_whole_0600_and_read_back() {
    let s = scratch();
    let path = s.0.join("a/b/state");
    assert!(StateDir::open(&path).unwrap().is_none());
    assert!(!path.exists());
    let dir = StateDir::make(&path).unwrap();
    assert_eq!(mode_of(&path), STATE_DIR_MODE);
    dir.write("abc.eth0.json", &file()).unwrap();
    assert_eq!(mode_of(&path.join("abc.eth0.json")), STATE_FILE_MODE);
    assert_eq!(dir.read("abc.eth0.json").unwrap(), Some(file()));
    // Written again: replaced, and nothing else is left in the directory.
    dir.write("abc.eth0.json", &file()).unwrap();
    assert_eq!(std::fs::read_dir(&path).unwrap().count(), 1);
    dir.remove("abc.eth0.json").unwrap();
    dir.remove("abc.eth0.json").unwrap();
    assert_eq!(dir.read("abc.eth0.json").unwrap(), None);
    // A directory there already is opened as it is (0755 is not writable by others).
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(StateDir::make(&path).is_ok());
    // With a trailing `/`: the same directory.
    let slash = PathBuf::from(format!("{}/", path.display()));
    assert_eq!(
        StateDir::open(&slash).unwrap().unwrap().path(),
        path.as_path()
    );
}

#[test]
fn a_link_at_the_state_files_name_is_replaced_never_followed() {
    let s = scratch();
    let victim = victim(&s);
    let path = s.0.join("state");
    let dir = StateDir::make(&path).unwrap();
    symlink(&victim, path.join("abc.eth0.json")).unwrap();
    // Read: an error, and the target's text is not taken.
    let e = dir.read("abc.eth0.json").unwrap_err();
    assert!(e.to_string().contains("symbolic link"), "{e}");
    // Written: the link is replaced by the file; the target keeps its text and mode.
    dir.write("abc.eth0.json", &file()).unwrap();
    assert!(std::fs::symlink_metadata(path.join("abc.eth0.json"))
        .unwrap()
        .is_file());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "secret");
    assert_eq!(mode_of(&victim), 0o600);
    // Removed: a link there goes, its target stays.
    std::fs::remove_file(path.join("abc.eth0.json")).unwrap();
    symlink(&victim, path.join("abc.eth0.json")).unwrap();
    dir.remove("abc.eth0.json").unwrap();
    assert!(std::fs::symlink_metadata(path.join("abc.eth0.json")).is_err());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "secret");
    // A FIFO or a directory is not read (and opening the FIFO does not block).
    nix::unistd::mkfifo(&path.join("fifo.json"), Mode::from_bits_truncate(0o600)).unwrap();
    assert!(dir.read("fifo.json").is_err());
    std::fs::create_dir(path.join("d.json")).unwrap();
    assert!(dir.read("d.json").is_err());
}

fn refusal(path: &Path, create: bool) -> String {
    let opened = if create {
        StateDir::make(path).map(Some)
    } else {
        StateDir::open(path)
    };
    match opened {
        Err(e @ StateDirError::Refused { .. }) => e.to_string(),
        other => panic!("{}: not refused: {other:?}", path.display()),
    }
}

#[test]
fn a_state_directory_others_can_write_or_a_link_is_refused() {
    let s = scratch();
    let path = s.0.join("state");
    std::fs::create_dir(&path).unwrap();
    for mode in [0o777, 0o770, 0o702, 0o1777] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        for create in [true, false] {
            let e = refusal(&path, create);
            assert!(e.contains(&path.display().to_string()), "{e}");
            assert!(e.contains(&format!("{mode:04o}")), "{e}");
        }
    }
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).unwrap();
    // A link to a good directory, and a file.
    let link = s.0.join("link");
    symlink(&path, &link).unwrap();
    let e = refusal(&link, true);
    assert!(e.contains("symbolic link"), "{e}");
    // With a trailing `/` too, which would follow it.
    let e = refusal(&PathBuf::from(format!("{}/", link.display())), false);
    assert!(e.contains("symbolic link"), "{e}");
    let plain = s.0.join("plain");
    std::fs::write(&plain, "").unwrap();
    assert!(refusal(&plain, false).contains("not a directory"));
    // Nothing was written into the refused directories.
    assert_eq!(std::fs::read_dir(&path).unwrap().count(), 0);
}

#[test]
fn a_state_directory_of_another_user_is_refused() {
    if !nix::unistd::geteuid().is_root() {
        metronome_testbed::netns::skip_unprivileged(
            "a_state_directory_of_another_user_is_refused",
            &"giving a directory to another user needs root (CAP_CHOWN)",
        );
        return;
    }
    let s = scratch();
    let path = s.0.join("state");
    std::fs::create_dir(&path).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).unwrap();
    let other = nix::unistd::Uid::from_raw(64_123);
    nix::unistd::chown(&path, Some(other), None).unwrap();
    let e = refusal(&path, true);
    assert!(e.contains(&path.display().to_string()), "{e}");
    assert!(e.contains("uid 64123"), "{e}");
    // Back to root: taken.
    nix::unistd::chown(&path, Some(nix::unistd::Uid::from_raw(0)), None).unwrap();
    assert!(StateDir::make(&path).is_ok());
}
