//! Compiles the attach mode's BPF programs (`bpf/attach.bpf.c`) with clang into `OUT_DIR`, where
//! `crate::os::attach` embeds them. Without clang (or libbpf's headers, Debian's `libbpf-dev`)
//! the build goes on with an empty object and a warning: everything but attach mode works, and
//! `metronome run` refuses an `attach` configuration saying why (exit 2).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let source = "bpf/attach.bpf.c";
    println!("cargo:rerun-if-changed={source}");
    println!("cargo:rerun-if-env-changed=CLANG");
    let out =
        PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("attach.bpf.o");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".to_string());
    // linux/bpf.h includes asm/types.h, which Debian keeps under the multiarch directory.
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let multiarch = format!("/usr/include/{arch}-linux-gnu");
    let result = Command::new(&clang)
        .args([
            "-O2", "-g", "-Wall", "-Werror", "-target", "bpf", "-I", &multiarch, "-c", source, "-o",
        ])
        .arg(&out)
        .output();
    match result {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            std::fs::write(&out, []).expect("write the empty BPF object");
            println!(
                "cargo:warning={clang} could not compile {source}: attach mode is unavailable in this build: {}",
                String::from_utf8_lossy(&o.stderr).lines().next().unwrap_or("")
            );
        }
        Err(e) => {
            std::fs::write(&out, []).expect("write the empty BPF object");
            println!(
                "cargo:warning={clang} not found ({e}): attach mode is unavailable in this build (install clang and libbpf-dev)"
            );
        }
    }
}
