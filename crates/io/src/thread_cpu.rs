//! The on-CPU time of one thread, for the CPU cost that `metronome compare` and
//! `metronome bench --daemon` report per silo or per shaper thread.
//!
//! Linux reports a thread's time on a CPU as the first field of `/proc/thread-self/schedstat`, in
//! nanoseconds (the kernel's Documentation/scheduler/sched-stats.rst). The file is opened *by the
//! thread to be measured* and may then be re-read by any other: an open `/proc/thread-self/...`
//! file keeps naming the task that opened it.

use std::fs::File;
use std::io::{Read, Seek};

/// The on-CPU time of one thread, from its `/proc/thread-self/schedstat`.
#[derive(Debug)]
pub struct ThreadCpu {
    file: File,
    buf: String,
}

impl ThreadCpu {
    /// Opens the **calling** thread's schedstat; the handle may be read from any thread.
    pub fn of_current_thread() -> std::io::Result<Self> {
        Ok(ThreadCpu {
            file: File::open("/proc/thread-self/schedstat")?,
            buf: String::with_capacity(64),
        })
    }

    /// Nanoseconds the thread has run so far.
    pub fn read(&mut self) -> std::io::Result<u64> {
        self.file.rewind()?;
        self.buf.clear();
        self.file.read_to_string(&mut self.buf)?;
        self.buf
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::InvalidData, "unreadable schedstat")
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_thread_can_be_read() {
        if let Ok(mut t) = ThreadCpu::of_current_thread() {
            let before = t.read().unwrap();
            let x: u64 = (0..200_000u64).map(std::hint::black_box).sum();
            std::hint::black_box(x);
            assert!(t.read().unwrap() >= before);
        }
    }
}
