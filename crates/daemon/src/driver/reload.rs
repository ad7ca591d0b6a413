//! SIGHUP reloads, one path for the single loop and the silos.
//!
//! [`Reloader::reload`] re-reads the configuration file, keeps the running silo count (`--cores`
//! may override the file, and the count cannot change without a restart) and control socket
//! (likewise `--control`), refuses a file whose changes need a restart
//! ([`crate::ops::config::ReloadPlan::needs_restart`]), hands the accepted configuration to the
//! caller's `apply` and, when that succeeds, logs what changed and makes it the running
//! configuration. Every failure is logged and leaves the running configuration in force.
//! * The single loop ([`FileReload`], its [`LoopHook`]) applies it to its engine
//!   ([`install`]) and takes the new `busy_poll`; between two reloads it applies the control
//!   socket's operations ([`LiveEndpoint`]).
//! * With a control socket, what is installed is the file's classes then the API's
//!   ([`Reloader::keeping`], `crate::ops::control`).
//! * With silos the coordinator (`silo::run_silos`) applies it to its allocators and hands it
//!   to every silo, which [`install`]s it in its own engine.

use crate::datapath::engine::Engine;
use crate::datapath::flow_seed::FlowSeed;
use crate::driver::run::LoopHook;
use crate::ops::config::{origin_tags, Config, ReloadPlan};
use crate::ops::control::{Live, LiveEndpoint};
use crate::ops::metrics::{EngineMetrics, Metrics};
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
    /// The metrics whose class series a reload selects ([`Reloader::selecting`]).
    metrics: Option<Metrics>,
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
            metrics: None,
        }
    }

    /// Puts a reloaded file's `[daemon] class_metrics` in force in `metrics`.
    pub fn selecting(mut self, metrics: &Metrics) -> Reloader {
        self.metrics = Some(metrics.clone());
        self
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
        // The socket bound at start stays (`metronome run --control` may have overridden the
        // file's), as the silo count does.
        if file.daemon.control != self.running.daemon.control {
            tracing::warn!("[daemon] control takes effect at a restart; the socket stays");
            file.daemon.control = self.running.daemon.control.clone();
        }
        // The origin tags of names the running classes hold are kept
        // (`crate::ops::config::origin_tags`).
        let tagged = match &self.live {
            Some(live) => live.merged_checked(&file),
            None => {
                let mut new = file.clone();
                let previous = origin_tags::tags_of(&self.running.classes);
                origin_tags::assign(&mut new.classes, &previous, new.interfaces.origin_mark)
                    .map(|()| new)
            }
        };
        let mut new = match tagged {
            Ok(new) => new,
            Err(e) => {
                tracing::error!(error = %e, "reload refused");
                return None;
            }
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
            new.daemon.cores = new.attached_silos();
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
        if let Some(m) = &self.metrics {
            m.select_class_series(new.daemon.class_metrics.clone());
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

/// An engine for `config` whose frames live in a pool of `pool_slots` slots, hashing flows with
/// `seed`, counting into `metrics` (whose class series it selects, `[daemon] class_metrics`).
pub fn engine(config: &Config, pool_slots: usize, metrics: &Metrics, seed: FlowSeed) -> Engine {
    metrics.select_class_series(config.daemon.class_metrics.clone());
    let telemetry = Box::new(EngineMetrics::new(metrics));
    Engine::seeded(&config.engine(), pool_slots, telemetry, seed)
}

/// [`engine`] with flows hashed with [`FlowSeed::FIXED`]: the tests'.
#[cfg(test)]
pub(crate) fn test_engine(config: &Config, pool_slots: usize, metrics: &Metrics) -> Engine {
    engine(config, pool_slots, metrics, FlowSeed::FIXED)
}

/// Installs `config` in `engine` ([`Engine::reload`]); logs a refusal. Returns whether it was
/// installed.
pub fn install(engine: &mut Engine, config: &Config) -> bool {
    match engine.reload(config.engine()) {
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
    /// The cluster classes' shares and demand (`crate::ops::cluster`).
    cluster: Option<crate::ops::cluster::ClusterPort>,
}

impl FileReload {
    /// Reloads `reloader`'s file into the loop's engine when `request` is set.
    pub fn new(request: Arc<AtomicBool>, reloader: Option<Reloader>) -> FileReload {
        FileReload {
            request,
            reloader,
            live: None,
            cluster: None,
        }
    }

    /// Also applies the control socket's operations posted to `endpoint`.
    pub fn with_live(mut self, endpoint: Option<LiveEndpoint>) -> FileReload {
        self.live = endpoint;
        self
    }

    /// Also puts the cluster classes' shares in force and publishes their demand.
    pub fn with_cluster(mut self, port: Option<crate::ops::cluster::ClusterPort>) -> FileReload {
        self.cluster = port;
        self
    }
}

impl LoopHook for FileReload {
    fn wake_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.live.as_ref().map(LiveEndpoint::wake_fd)
    }

    fn poll_live(&mut self, engine: &mut Engine) {
        if let Some(live) = &mut self.live {
            live.poll(engine);
        }
    }

    fn poll(&mut self, engine: &mut Engine, now: Timestamp) -> Option<bool> {
        self.poll_live(engine);
        let mut busy_poll = None;
        if self.request.swap(false, Ordering::Relaxed) {
            if let Some(reloader) = self.reloader.as_mut() {
                let plan = reloader.reload(|config, _| install(engine, config));
                busy_poll = plan.and_then(|p| p.busy_poll);
                // The reload put the classes' whole rates back: the shares again.
                if let Some(port) = &mut self.cluster {
                    port.rebind(engine);
                }
            }
        }
        if let Some(port) = &mut self.cluster {
            port.poll(engine, now);
        }
        busy_poll
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
        let mut engine = crate::driver::reload::test_engine(&config, 64, &Metrics::new());
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

    /// Sends `request` to `live` from another thread while `hook` polls `engine`, as the
    /// control thread and the loop do; returns the reply.
    fn handled(
        live: &Arc<Live>,
        hook: &mut FileReload,
        engine: &mut Engine,
        request: serde_json::Value,
    ) -> crate::ops::control::Reply {
        let request = crate::ops::control::Request::parse(&request.to_string()).unwrap();
        let sender = {
            let live = live.clone();
            std::thread::spawn(move || live.handle(request, std::time::Instant::now()))
        };
        while !sender.is_finished() {
            hook.poll(engine, Timestamp::from_nanos(1));
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        sender.join().unwrap()
    }

    #[test]
    fn a_reload_keeps_the_api_s_classes_and_the_file_wins_a_name() {
        let dir = std::env::temp_dir().join(format!("mtr-reload-live-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("single.toml");
        std::fs::write(&path, text("100mbit", false)).unwrap();
        let config = Config::load(&path).unwrap();
        let mut engine = crate::driver::reload::test_engine(&config, 64, &Metrics::new());
        let live = Live::new(&config, 1, Metrics::new()).unwrap();
        let request = Arc::new(AtomicBool::new(false));
        let reloader = Reloader::new(path.clone(), config).keeping(Some(live.clone()));
        let mut hook =
            FileReload::new(request.clone(), Some(reloader)).with_live(live.endpoint(0, 1));
        for name in ["t1", "t2"] {
            let class = serde_json::json!({"op":"add","class":{"name":name,
                "match":{"protocol":"udp"},"rate":"1mbit"}});
            assert!(handled(&live, &mut hook, &mut engine, class).ok);
        }
        assert!(engine.class_index("t1").is_some());

        // The file now defines t1: its class wins; t2 stays, after the file's classes.
        let file = format!(
            "{}[[class]]\nname = \"t1\"\nrate = \"5mbit\"\n",
            text("100mbit", false)
        );
        std::fs::write(&path, file).unwrap();
        request.store(true, Ordering::Relaxed);
        hook.poll(&mut engine, Timestamp::from_nanos(1));
        let names: Vec<&str> = engine
            .config()
            .classes
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(names, ["bulk", "t1", "t2"]);
        assert_eq!(engine.config().classes[1].policy.rate, Some(Rate::mbps(5)));
        let del = |name: &str| serde_json::json!({"op":"del","name":name});
        let refused = handled(&live, &mut hook, &mut engine, del("t1"));
        assert!(refused.error.unwrap().message.contains("edit the file"));
        // The API's t2 is still the API's, and its rule the engine's: deleted live.
        assert!(handled(&live, &mut hook, &mut engine, del("t2")).ok);
        assert_eq!(engine.class_index("t2"), None);
        engine.invariants();
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_control_socket_bound_at_start_stays_across_a_reload() {
        let dir = std::env::temp_dir().join(format!("mtr-reload-ctl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("single.toml");
        std::fs::write(&path, text("100mbit", false)).unwrap();
        // `metronome run --control ""` over a file that keeps the default socket.
        let mut config = Config::load(&path).unwrap();
        config.daemon.control = None;
        let mut engine = crate::driver::reload::test_engine(&config, 64, &Metrics::new());
        let mut reloader = Reloader::new(path.clone(), config);
        std::fs::write(&path, text("300mbit", false)).unwrap();
        let plan = reloader.reload(|c, _| install(&mut engine, c));
        assert!(plan.is_some(), "the reload was refused");
        assert_eq!(reloader.running().daemon.control, None);
        assert_eq!(
            engine.config().classes[0].policy.rate,
            Some(Rate::mbps(300))
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
