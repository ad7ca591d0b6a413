//! Compiles the daemon's BPF programs with clang into `OUT_DIR`, where the daemon embeds them:
//! attach mode's (`bpf/attach.bpf.c`, `crate::os::attach`) and the receiving sockets' early
//! admission filter (`bpf/early.bpf.c`, `crate::os::early`). Without clang (or libbpf's
//! headers, Debian's `libbpf-dev`) the build goes on with empty objects and a warning:
//! everything but attach mode works, `metronome run` refuses an `attach` configuration saying
//! why (exit 2), and the loop reads every frame itself (a warning at start). Installing clang
//! later rebuilds them: the script looks for it again whenever `PATH` changes.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=CLANG");
    println!("cargo:rerun-if-env-changed=PATH");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    for (source, object, what) in [
        (
            "bpf/attach.bpf.c",
            "attach.bpf.o",
            "attach mode is unavailable in this build",
        ),
        (
            "bpf/early.bpf.c",
            "early.bpf.o",
            "early refusal in the kernel is unavailable in this build",
        ),
    ] {
        println!("cargo:rerun-if-changed={source}");
        compile(source, &out_dir.join(object), what);
    }
}

/// Compiles `source` into `out`, or writes an empty `out` and a warning saying `what`.
fn compile(source: &str, out: &Path, what: &str) {
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".to_string());
    // linux/bpf.h includes asm/types.h, which Debian keeps under the multiarch directory.
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let multiarch = format!("/usr/include/{arch}-linux-gnu");
    let result = Command::new(&clang)
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
