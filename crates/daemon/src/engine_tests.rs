//! The engine's tests that read their configurations from the daemon's file format: hand-built
//! frames through a `metronome_io::MemoryPort`, manual time, the daemon's metrics as the sink.

mod ack_shaping;
mod engine;
mod gso;

use crate::datapath::engine::Engine;
use crate::ops::config::{Config, ReloadPlan};

/// Reloads `new` into `engine` running `running`, as the daemon does: refused when a change
/// needs a restart, else installed; returns the plan.
fn reload(engine: &mut Engine, running: &Config, new: &Config) -> Result<ReloadPlan, String> {
    let plan = running.diff(new);
    if plan.needs_restart() {
        return Err(format!(
            "reload refused, these changes need a restart:\n{plan}"
        ));
    }
    engine.reload(new.engine()).map_err(|e| e.to_string())?;
    Ok(plan)
}
