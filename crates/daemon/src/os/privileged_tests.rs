//! The rule of the daemon's unit tests that need a privilege (CAP_SYS_NICE, CAP_CHOWN): one that
//! cannot run fails, unless the run asked to skip them (CONTRIBUTING.md, "Privileged tests"; the
//! same rule as `metronome_testbed::netns::skip_unprivileged`).

use std::io::Write;

/// A privileged test, or the privileged part of one, cannot run (`why`): panics saying so,
/// unless `METRONOME_SKIP_PRIVILEGED=1`, where it writes `SKIPPED: why` to the process's stderr
/// (past the test harness's capture, so that the skip shows in a passing run) and returns.
pub(crate) fn skip_unprivileged(why: &str) {
    if std::env::var("METRONOME_SKIP_PRIVILEGED").as_deref() != Ok("1") {
        panic!(
            "the privileged test cannot run: {why}; run it as root (set \
             METRONOME_SKIP_PRIVILEGED=1 to skip it instead)"
        );
    }
    let _ = writeln!(
        std::io::stderr().lock(),
        "SKIPPED (METRONOME_SKIP_PRIVILEGED=1): {why}"
    );
}
