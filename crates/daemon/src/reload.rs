//! SIGHUP reloads, one path for the single loop and the silos.
//!
//! [`Reloader::reload`] re-reads the configuration file, keeps the running silo count (`--cores`
//! may override the file, and the count cannot change without a restart), refuses a file whose
//! changes need a restart ([`crate::config::ReloadPlan::needs_restart`]), hands the accepted
//! configuration to the caller's `apply` and, when that succeeds, logs what changed and makes it
//! the running configuration. Every failure is logged and leaves the running configuration in
//! force.
//!
//! * The single loop ([`FileReload`], its [`LoopHook`]) applies it to its engine
//!   ([`install`]) and takes the new `busy_poll`.
//! * With silos the coordinator (`silo::run_silos`) applies it to its allocators and
//!   hands it to every silo, which [`install`]s it in its own engine.

use crate::config::{Config, ReloadPlan};
use crate::engine::Engine;
use crate::run::LoopHook;
use metronome_core::Timestamp;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The file a reload re-reads and the configuration in force.
#[derive(Debug)]
pub struct Reloader {
    path: PathBuf,
    running: Config,
}

impl Reloader {
    /// A reloader of `path`, with `running` in force (its `[daemon] cores` is kept on reloads).
    pub fn new(path: PathBuf, running: Config) -> Reloader {
        Reloader { path, running }
    }

    /// The configuration in force.
    pub fn running(&self) -> &Config {
        &self.running
    }

    /// Re-reads the file and, unless it is invalid or needs a restart, passes the new
    /// configuration and what changes to `apply`. When `apply` returns `true` the changes are
    /// logged and the new configuration is in force. Returns the plan applied.
    pub fn reload(
        &mut self,
        apply: impl FnOnce(&Config, &ReloadPlan) -> bool,
    ) -> Option<ReloadPlan> {
        let mut new = match Config::load(&self.path) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "reload failed, keeping the running configuration");
                return None;
            }
        };
        new.daemon.cores = self.running.daemon.cores;
        let plan = self.running.diff(&new);
        if plan.needs_restart() {
            tracing::error!(plan = %plan, "reload refused");
            return None;
        }
        if !apply(&new, &plan) {
            return None;
        }
        for line in plan.to_string().lines() {
            tracing::info!(change = line, "reloaded {}", self.path.display());
        }
        self.running = new;
        Some(plan)
    }
}

/// Installs `config` in `engine` ([`Engine::reload`]); logs a refusal. Returns whether it was
/// installed.
pub fn install(engine: &mut Engine, config: &Config) -> bool {
    match engine.reload(config) {
        Ok(_) => true,
        Err(e) => {
            tracing::error!(error = %e, "reload refused");
            false
        }
    }
}

/// The single loop's hook: a reload whenever `request` is set (SIGHUP), of the file of
/// `reloader` (`None`: requests are cleared and ignored).
#[derive(Debug)]
pub struct FileReload {
    request: Arc<AtomicBool>,
    reloader: Option<Reloader>,
}

impl FileReload {
    /// Reloads `reloader`'s file into the loop's engine when `request` is set.
    pub fn new(request: Arc<AtomicBool>, reloader: Option<Reloader>) -> FileReload {
        FileReload { request, reloader }
    }
}

impl LoopHook for FileReload {
    fn poll(&mut self, engine: &mut Engine, _now: Timestamp) -> Option<bool> {
        if !self.request.swap(false, Ordering::Relaxed) {
            return None;
        }
        let reloader = self.reloader.as_mut()?;
        let plan = reloader.reload(|config, _| install(engine, config))?;
        plan.busy_poll
    }
}
