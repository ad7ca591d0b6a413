//! Compiles the daemon's BPF programs with clang into `OUT_DIR`, where the daemon embeds them:
//! attach mode's (`bpf/attach.bpf.c`, `crate::os::attach`) and the receiving sockets' early
//! admission filter (`bpf/early.bpf.c`, `crate::os::early`). Without clang (or libbpf's
//! headers, Debian's `libbpf-dev`) the build goes on with empty objects and a warning:
//! everything but attach mode works, `metronome run` refuses an `attach` configuration saying
//! why (exit 2), and the loop reads every frame itself (a warning at start). Installing clang
//! later, removing it or putting another one first on `PATH` runs the script again
//! ([`watch_clang`]).

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".to_string());
    watch_clang(&clang);
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    for (source, object, what) in [
        (
            "bpf/attach.bpf.c",
            "attach.bpf.o",
            "attach mode is unavailable in this build",
        ),
        (
            "bpf/pace.bpf.c",
            "pace.bpf.o",
            "source pacing is unavailable in this build",
        ),
        (
            "bpf/early.bpf.c",
            "early.bpf.o",
            "early refusal in the kernel is unavailable in this build",
        ),
    ] {
        println!("cargo:rerun-if-changed={source}");
        compile(&clang, source, &out_dir.join(object), what);
    }
}

/// Tells cargo to run this script again when the `clang` that `Command` would run changes: a change
/// of `CLANG` or `PATH`, and a change inside each directory of `PATH` that it searches (all of them
/// when there is no clang, those up to the one that holds it otherwise), so that a clang installed,
/// removed or put first on `PATH` is seen; and the clang found itself (the removal of what its
/// symbolic link points to changes no directory of `PATH`). Cargo scans a watched directory for any
/// change, so the script also runs again when something else is installed there; it does not run
/// for every build. A directory of `PATH` that does not exist is not watched (cargo would run the
/// script at every build): a clang put in a directory created later is seen after the next change
/// of `PATH` or of a watched directory. A `CLANG` that names a path is watched itself, or its
/// directory while it does not exist.
fn watch_clang(clang: &str) {
    println!("cargo:rerun-if-env-changed=CLANG");
    println!("cargo:rerun-if-env-changed=PATH");
    let clang = Path::new(clang);
    if clang.components().count() > 1 {
        if clang.exists() {
            println!("cargo:rerun-if-changed={}", clang.display());
        } else if let Some(dir) = clang.parent().filter(|d| d.is_dir()) {
            println!("cargo:rerun-if-changed={}", dir.display());
        }
        return;
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut watched: Vec<PathBuf> = Vec::new();
    for dir in std::env::split_paths(&path).filter(|d| d.is_absolute()) {
        // `/bin` and `/usr/bin` are one directory on a merged-/usr system: watched once.
        let Ok(dir) = dir.canonicalize() else {
            continue;
        };
        if watched.contains(&dir) {
            continue;
        }
        println!("cargo:rerun-if-changed={}", dir.display());
        let candidate = dir.join(clang);
        watched.push(dir);
        if candidate.is_file() {
            println!("cargo:rerun-if-changed={}", candidate.display());
            return;
        }
    }
}

/// Compiles `source` with `clang` into `out`, or writes an empty `out` and a warning saying
/// `what`.
fn compile(clang: &str, source: &str, out: &Path, what: &str) {
    // linux/bpf.h includes asm/types.h, which Debian keeps under the multiarch directory.
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let multiarch = format!("/usr/include/{arch}-linux-gnu");
    let result = Command::new(clang)
        .args([
            "-O2", "-g", "-Wall", "-Werror", "-target", "bpf", "-I", &multiarch, "-c", source, "-o",
        ])
        .arg(out)
        .output();
    match result {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            std::fs::write(out, []).expect("write the empty BPF object");
            println!(
                "cargo:warning={clang} could not compile {source}: {what}: {}",
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .next()
                    .unwrap_or("")
            );
        }
        Err(e) => {
            std::fs::write(out, []).expect("write the empty BPF object");
            println!(
                "cargo:warning={clang} not found ({e}): {what} (install clang and libbpf-dev)"
            );
        }
    }
}
