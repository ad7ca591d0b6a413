//! SIGHUP reloads, one path for the single loop and the silos.
//!
//! [`Reloader::reload`] re-reads the configuration file, keeps the running silo count (`--cores`
//! may override the file, and the count cannot change without a restart), refuses a file whose
//! changes need a restart ([`crate::ops::config::ReloadPlan::needs_restart`]), hands the accepted
//! configuration to the caller's `apply` and, when that succeeds, logs what changed and makes it
//! the running configuration. Every failure is logged and leaves the running configuration in
//! force.
//!
//! * The single loop ([`FileReload`], its [`LoopHook`]) applies it to its engine
//!   ([`install`]) and takes the new `busy_poll`; between two reloads it applies the control
//!   socket's operations ([`LiveEndpoint`]).
//! * With a control socket, what is installed is the file's classes then the API's
//!   ([`Reloader::keeping`], `crate::ops::control`).
//! * With silos the coordinator (`silo::run_silos`) applies it to its allocators and
//!   hands it to every silo, which [`install`]s it in its own engine.

use crate::datapath::engine::Engine;
use crate::driver::run::LoopHook;
use crate::ops::config::{Config, ReloadPlan};
use crate::ops::control::{Live, LiveEndpoint};
use metronome_core::Timestamp;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The file a reload re-reads and the configuration in force.
#[derive(Debug)]
pub struct Reloader {
    path: PathBuf,
    running: Config,
    /// Where an applied configuration is published ([`Reloader::publishing`]).
    published: Option<Arc<std::sync::Mutex<Option<Config>>>>,
    /// Where a change of the attached interfaces is handed over ([`Reloader::reattaching`]).
    reattach: Option<Arc<std::sync::Mutex<Option<Config>>>>,
    /// The control socket's classes, kept across reloads ([`Reloader::keeping`]).
    live: Option<Arc<Live>>,
}

impl Reloader {
    /// A reloader of `path`, with `running` in force (its `[daemon] cores` is kept on reloads).
    pub fn new(path: PathBuf, running: Config) -> Reloader {
        Reloader {
            path,
            running,
            published: None,
            reattach: None,
            live: None,
        }
    }

    /// Keeps the control socket's classes of `live` on every reload: the file's classes, then
    /// the API's, except those whose name the file defines ([`Live::merged`], [`Live::reloaded`]).
    pub fn keeping(mut self, live: Option<Arc<Live>>) -> Reloader {
        self.live = live;
        self
    }

    /// In attach mode: a file whose only restart-needing change is `[interfaces] attach` is not
    /// refused but left in `slot` (`crate::driver::run::Control::reattach`) once every interface
    /// it names exists; whoever runs the loops stops and re-attaches them.
    pub fn reattaching(mut self, slot: Arc<std::sync::Mutex<Option<Config>>>) -> Reloader {
        self.reattach = Some(slot);
        self
    }

    /// Also puts every configuration it applies in `slot` (`crate::driver::run::Control::applied`).
    pub fn publishing(mut self, slot: Arc<std::sync::Mutex<Option<Config>>>) -> Reloader {
        self.published = Some(slot);
        self
    }

    /// The configuration in force.
    pub fn running(&self) -> &Config {
        &self.running
    }

    /// Re-reads the file and, unless it is invalid or needs a restart, passes the new
    /// configuration and what changes to `apply`. When `apply` returns `true` the changes are
    /// logged and the new configuration is in force. Returns the plan applied. Sends
    /// `RELOADING=1` before and `READY=1` after to a supervisor ([`crate::os::notify`]).
    pub fn reload(
        &mut self,
        apply: impl FnOnce(&Config, &ReloadPlan) -> bool,
    ) -> Option<ReloadPlan> {
        crate::os::notify::notify(&crate::os::notify::reloading_state());
        let plan = self.reload_file(apply);
        crate::os::notify::notify("READY=1");
        plan
    }

    fn reload_file(
        &mut self,
        apply: impl FnOnce(&Config, &ReloadPlan) -> bool,
    ) -> Option<ReloadPlan> {
        let mut file = match Config::load(&self.path) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "reload failed, keeping the running configuration");
                return None;
            }
        };
        file.daemon.cores = self.running.daemon.cores;
        let mut new = match &self.live {
            Some(live) => live.merged(&file),
            None => file.clone(),
        };
        let plan = self.running.diff(&new);
        if let (Some(slot), true) = (&self.reattach, plan.only_reattach() && new.is_attach()) {
            let missing = new
                .interfaces
                .attach
                .iter()
                .find(|name| nix::net::if_::if_nametoindex(name.as_str()).is_err());
            if let Some(name) = missing {
                tracing::error!(interface = %name, "reload refused: no such interface to attach to");
                return None;
            }
            new.daemon.cores = new.interfaces.attach.len();
            if let Some(live) = &self.live {
                live.reloaded(&file);
            }
            tracing::info!(plan = %plan, "re-attaching: the loops stop and start on the new interfaces");
            *slot
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(new.clone());
            self.running = new;
            return Some(plan);
        }
        if plan.needs_restart() {
            tracing::error!(plan = %plan, "reload refused");
            return None;
        }
        if !apply(&new, &plan) {
            return None;
        }
        if let Some(live) = &self.live {
            live.reloaded(&file);
        }
        for line in plan.to_string().lines() {
            tracing::info!(change = line, "reloaded {}", self.path.display());
        }
        if let Some(slot) = &self.published {
            *slot
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(new.clone());
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
    /// The loop's end of the control socket's inbox.
    live: Option<LiveEndpoint>,
}

impl FileReload {
    /// Reloads `reloader`'s file into the loop's engine when `request` is set.
    pub fn new(request: Arc<AtomicBool>, reloader: Option<Reloader>) -> FileReload {
        FileReload {
            request,
            reloader,
            live: None,
        }
    }

    /// Also applies the control socket's operations posted to `endpoint`.
    pub fn with_live(mut self, endpoint: Option<LiveEndpoint>) -> FileReload {
        self.live = endpoint;
        self
    }
}

impl LoopHook for FileReload {
    fn wake_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.live.as_ref().map(LiveEndpoint::wake_fd)
    }

    fn poll(&mut self, engine: &mut Engine, _now: Timestamp) -> Option<bool> {
        if let Some(live) = &mut self.live {
            live.poll(engine);
        }
        if !self.request.swap(false, Ordering::Relaxed) {
            return None;
        }
        let reloader = self.reloader.as_mut()?;
        let plan = reloader.reload(|config, _| install(engine, config))?;
        plan.busy_poll
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::metrics::Metrics;
    use metronome_core::{Duration, Rate};

    fn text(rate: &str, busy_poll: bool) -> String {
        format!(
            "[interfaces]\ninside = \"a\"\noutside = \"b\"\n[daemon]\nbusy_poll = {busy_poll}\n\
             [[class]]\nname = \"bulk\"\nmatch = {{ protocol = \"tcp\" }}\nrate = \"{rate}\"\n"
        )
    }

    #[test]
    fn a_request_reloads_the_file_into_the_engine_and_a_restart_change_is_refused() {
        let dir = std::env::temp_dir().join(format!("mtr-reload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("single.toml");
        std::fs::write(&path, text("100mbit", false)).unwrap();
        let config = Config::load(&path).unwrap();
        let mut engine = Engine::new(&config, 64, Metrics::new());
        let request = Arc::new(AtomicBool::new(false));
        let reloader = Reloader::new(path.clone(), config);
        let mut hook = FileReload::new(request.clone(), Some(reloader));
        let now = Timestamp::from_nanos(1);
        let rate = |e: &Engine| e.config().classes[0].policy.rate;

        // Without a request the file is not read.
        std::fs::write(&path, text("300mbit", true)).unwrap();
        assert_eq!(hook.poll(&mut engine, now), None);
        assert_eq!(rate(&engine), Some(Rate::mbps(100)));

        // A request installs the new rate, returns the new busy_poll and is cleared.
        request.store(true, Ordering::Relaxed);
        assert_eq!(hook.poll(&mut engine, now), Some(true));
        assert_eq!(rate(&engine), Some(Rate::mbps(300)));
        assert!(!request.load(Ordering::Relaxed));

        // A change that needs a restart is refused: engine and running configuration stay.
        let restart =
            text("500mbit", true).replace("[daemon]", "[wheel]\ngranularity = \"4us\"\n[daemon]");
        std::fs::write(&path, restart).unwrap();
        request.store(true, Ordering::Relaxed);
        assert_eq!(hook.poll(&mut engine, now), None);
        assert_eq!(rate(&engine), Some(Rate::mbps(300)));
        assert_eq!(engine.config().wheel.granularity, Duration::from_micros(2));
        let running = hook.reloader.as_ref().unwrap().running();
        assert_eq!(running.classes[0].policy.rate, Some(Rate::mbps(300)));

        // Without a file, requests are cleared and ignored.
        let mut ignoring = FileReload::new(request.clone(), None);
        request.store(true, Ordering::Relaxed);
        assert_eq!(ignoring.poll(&mut engine, now), None);
        assert!(!request.load(Ordering::Relaxed));
        let _ = std::fs::remove_dir_all(dir);
    }
}
