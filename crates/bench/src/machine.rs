//! A one-line description of the machine, for reports: CPU model, cores, memory, kernel.

use std::fs;

/// "Intel(R) Xeon(R) Processor, 2 cores, 24 GiB, Linux 6.1.0" or as much of it as can be read.
pub fn describe() -> String {
    let cpu = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let mem_gib = fs::read_to_string("/proc/meminfo").ok().and_then(|s| {
        s.lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<u64>().ok())
            .map(|kb| (kb as f64 / (1024.0 * 1024.0)).round() as u64)
    });
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| format!(", Linux {}", s.trim()))
        .unwrap_or_default();
    match mem_gib {
        Some(m) => format!("{cpu}, {cores} cores, {m} GiB{kernel}"),
        None => format!("{cpu}, {cores} cores{kernel}"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_the_core_count() {
        assert!(super::describe().contains("cores"));
    }
}
