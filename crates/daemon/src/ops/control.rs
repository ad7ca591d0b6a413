//! The control socket (`[daemon] control`): classes added, changed and deleted while the
//! daemon shapes, without a reload. The protocol, the model's rules (the file's classes win at a
//! reload, origin tags, nothing persisted but `[daemon] class_dir`) and the socket's permissions
//! are the operator's page, docs/config.md ("Live classes: the control socket").
//!
//! * [`protocol`]: one JSON object per line each way; a class is the keys of a `[[class]]` table.
//! * [`Live`]: the file's classes (learnt at each SIGHUP, [`Live::merged`]) and the API's.
//! * [`inbox`]: each operation posted to every shaping loop, applied between two packets, and
//!   answered once every loop applied it (`applied_us`).
//! * [`ControlServer`]: the socket, at most [`MAX_CONNECTIONS`] connections, a thread each;
//!   [`class_dir`]: the [`ClassFile`]s written by `metronome-cni`; [`Client`]: the CLI's client.

pub mod class_dir;
pub mod client;
pub mod inbox;
pub mod protocol;
mod server;

pub use class_dir::{ClassFile, Restored};
pub use client::{Client, ClientError};
pub use inbox::{Inbox, LiveEndpoint, LiveOp, Ticket};
pub use protocol::{ClassObject, Reply, ReplyError, Request};
pub use server::{ControlError, ControlServer};

use crate::datapath::engine::{LiveError, TreeError};
use crate::ops::config::{origin_tags, ClassConfig, Config};
use crate::ops::metrics::Metrics;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration as StdDuration, Instant};

/// Most connections served at once (16): each holds a thread. A new one beyond them takes the
/// place of the oldest idle one (waiting for a request: closed, counted `idle`); when all are
/// answering requests it is answered with an error and closed (`busy`). An operator's CLI and a
/// few orchestrators need far fewer.
pub const MAX_CONNECTIONS: usize = 16;
/// How long a reply waits for the loops to apply an operation (5 s): a loop applies it within
/// one round, far below this; a loop that does not (stopping) gets an error reply.
pub const APPLY_TIMEOUT: StdDuration = StdDuration::from_secs(5);
/// Longest a connection may take to send one whole request line, from its start or from the
/// previous reply (10 s): the CLI and `metronome-cni` send theirs at once; a connection that
/// sends nothing, or a part of a line, is closed then (counted `deadline`), so that idle
/// clients cannot hold the slots for ever.
pub const READ_DEADLINE: StdDuration = StdDuration::from_secs(10);
/// Longest one reply may wait for the client to read (5 s).
pub const WRITE_TIMEOUT: StdDuration = StdDuration::from_secs(5);

/// A class of the API: the object as the client gave it (changes merged in) and its validated
/// form.
#[derive(Clone, Debug)]
struct ApiClass {
    object: ClassObject,
    class: ClassConfig,
}

/// The classes in force: the file's and the API's (see the module docs).
#[derive(Debug)]
struct Model {
    /// The file's configuration in force (without the API's classes).
    file: Config,
    file_names: HashSet<String>,
    api: ApiClasses,
}

impl Model {
    fn new(file: Config) -> Model {
        let file_names = file.classes.iter().map(|c| c.name.clone()).collect();
        Model {
            file,
            file_names,
            api: ApiClasses::default(),
        }
    }
}

/// The API's classes in the order they were added (a change of `match` moves one last), found
/// by name: each operation costs O(log n) in the number of classes, not a scan.
#[derive(Debug, Default)]
struct ApiClasses {
    /// The classes by their place in the order.
    by_place: BTreeMap<u64, ApiClass>,
    /// The place of each class, by name.
    place_of: HashMap<String, u64>,
    /// The place the next class added takes.
    next: u64,
}

impl ApiClasses {
    fn get(&self, name: &str) -> Option<&ApiClass> {
        self.by_place.get(self.place_of.get(name)?)
    }

    fn contains(&self, name: &str) -> bool {
        self.place_of.contains_key(name)
    }

    fn len(&self) -> usize {
        self.by_place.len()
    }

    /// The classes in order.
    fn iter(&self) -> impl Iterator<Item = &ApiClass> {
        self.by_place.values()
    }

    /// Adds `class` last (replacing a class of its name, wherever it was).
    fn push(&mut self, class: ApiClass) {
        self.remove(&class.class.name);
        let place = self.next;
        self.next += 1;
        self.place_of.insert(class.class.name.clone(), place);
        self.by_place.insert(place, class);
    }

    /// Puts `class` in the place of the class of its name (last when there is none).
    fn replace(&mut self, class: ApiClass) {
        match self.place_of.get(&class.class.name) {
            Some(place) => {
                self.by_place.insert(*place, class);
            }
            None => self.push(class),
        }
    }

    fn remove(&mut self, name: &str) -> Option<ApiClass> {
        let place = self.place_of.remove(name)?;
        self.by_place.remove(&place)
    }

    /// Keeps the classes for which `keep` is true.
    fn retain(&mut self, mut keep: impl FnMut(&ApiClass) -> bool) {
        let place_of = &mut self.place_of;
        self.by_place.retain(|_, c| {
            let kept = keep(c);
            if !kept {
                place_of.remove(&c.class.name);
            }
            kept
        });
    }
}

/// The live classes' model and the shaping loops' inboxes, shared by the control thread, the
/// loops and the reloader (see the module docs).
#[derive(Debug)]
pub struct Live {
    model: Mutex<Model>,
    /// Set by an operation on a class with a `rate`: the silos' allocator takes the classes in
    /// force again ([`Live::take_limits_changed`]).
    limits_changed: AtomicBool,
    /// Set by an operation on a class that names an origin (`from`, `to`, `cgroup`): attach
    /// mode's watcher takes the origins in force again ([`Live::take_origins_changed`]).
    origins_changed: AtomicBool,
    /// One per shaping loop; taken under the model's lock.
    inboxes: Mutex<Vec<Arc<Inbox>>>,
    metrics: Metrics,
}

impl Live {
    /// The model of `file`'s classes, for `loops` shaping loops (one inbox each).
    pub fn new(file: &Config, loops: usize, metrics: Metrics) -> std::io::Result<Arc<Live>> {
        let live = Live {
            model: Mutex::new(Model::new(file.clone())),
            limits_changed: AtomicBool::new(false),
            origins_changed: AtomicBool::new(false),
            inboxes: Mutex::new(Vec::new()),
            metrics,
        };
        live.set_loops(loops)?;
        Ok(Arc::new(live))
    }

    /// Makes one inbox per loop for `loops` loops, replacing those there were (attach mode
    /// starts its loops again on a re-attach, `crate::ops::service::attached`).
    pub fn set_loops(&self, loops: usize) -> std::io::Result<()> {
        let _model = self.model();
        let inboxes = (0..loops.max(1))
            .map(|_| Inbox::new())
            .collect::<std::io::Result<_>>()?;
        *self.inboxes.lock().unwrap_or_else(PoisonError::into_inner) = inboxes;
        Ok(())
    }

    fn inboxes(&self) -> Vec<Arc<Inbox>> {
        self.inboxes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn model(&self) -> std::sync::MutexGuard<'_, Model> {
        self.model.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Loop `i`'s end of its inbox, for a loop among `silos`; `None` past the last inbox.
    pub fn endpoint(&self, i: usize, silos: usize) -> Option<LiveEndpoint> {
        let inbox = self.inboxes().get(i)?.clone();
        Some(LiveEndpoint::new(inbox, silos))
    }

    /// `file` with the API's classes after its own, except those whose name `file` defines:
    /// what a reload installs, and what a loop's engine starts from. The origin tags of
    /// names the classes in force hold are kept ([`Live::merged_checked`]); when that fails
    /// (more origins than tags), the classes keep the tags they have.
    pub fn merged(&self, file: &Config) -> Config {
        let model = self.model();
        let (out, error) = merged_with(&model, file);
        if let Some(e) = error {
            tracing::warn!(error = %e, "the file's and the API's origins do not fit the tags");
        }
        out
    }

    /// [`Live::merged`], refused when the file's and the API's origins together need more tags
    /// than there are (a reload is then refused).
    pub fn merged_checked(&self, file: &Config) -> Result<Config, origin_tags::TagsExhausted> {
        let model = self.model();
        match merged_with(&model, file) {
            (out, None) => Ok(out),
            (_, Some(e)) => Err(e),
        }
    }

    /// How many classes of the API there are.
    pub fn api_classes(&self) -> usize {
        self.model().api.len()
    }

    /// The cap on them in force (`[daemon] max_api_classes` of the file).
    pub fn max_api_classes(&self) -> usize {
        self.model().file.daemon.max_api_classes
    }

    /// Whether an operation changed a class that names an origin since the last call (attach
    /// mode's watcher then hooks and unhooks for [`Live::current`]).
    pub fn take_origins_changed(&self) -> bool {
        self.origins_changed.swap(false, Ordering::AcqRel)
    }

    /// The classes in force: the file's, then the API's.
    pub fn current(&self) -> Config {
        let file = self.model().file.clone();
        self.merged(&file)
    }

    /// Whether an operation changed a class with a `rate` since the last call (the silos'
    /// coordinator then gives the allocator [`Live::current`]).
    pub fn take_limits_changed(&self) -> bool {
        self.limits_changed.swap(false, Ordering::AcqRel)
    }

    /// A reload put `file` (the file's own classes) in force: the API's classes whose name it
    /// defines are dropped, logged and counted.
    pub fn reloaded(&self, file: &Config) {
        let mut model = self.model();
        // The file's classes with the tags the reload installed (`merged_with` of the same
        // model and file: the file's classes come first, in its order).
        let (installed, _) = merged_with(&model, file);
        let mut file = file.clone();
        let n = file.classes.len();
        file.classes.clone_from_slice(&installed.classes[..n]);
        let file = &file;
        let names: HashSet<String> = file.classes.iter().map(|c| c.name.clone()).collect();
        let before = model.api.len();
        model.api.retain(|a| {
            let shadowed = names.contains(&a.class.name);
            if shadowed {
                tracing::warn!(
                    class = %a.class.name,
                    "the reloaded file defines a class of the control socket: the file's wins"
                );
            }
            !shadowed
        });
        for _ in model.api.len()..before {
            self.metrics.class_change("reload", "shadowed");
        }
        model.file_names = names;
        model.file = file.clone();
    }

    /// Handles one request arriving at `arrived`.
    pub fn handle(&self, request: Request, arrived: Instant) -> Reply {
        let op = request.op();
        let reply = match request {
            Request::List => return self.list(),
            Request::Show { name } => return self.show(&name),
            Request::Add { class } => self.add(class),
            Request::Change { class } => self.change(class),
            Request::Del { name } => self.delete(&name),
        };
        let reply = match reply {
            Ok((name, ticket, undo)) => self.await_loops(name, &ticket, undo, arrived),
            Err(e) => Reply::refused(e),
        };
        self.metrics
            .class_change(op, if reply.ok { "ok" } else { "refused" });
        reply
    }

    fn list(&self) -> Reply {
        let model = self.model();
        let file = model.file.classes.iter().map(|c| {
            let mut o = protocol::file_class_object(c);
            o.insert("source".into(), "file".into());
            o
        });
        let api = model.api.iter().map(api_object);
        Reply {
            ok: true,
            classes: Some(file.chain(api).collect()),
            ..Reply::default()
        }
    }

    fn show(&self, name: &str) -> Reply {
        let model = self.model();
        let class = if let Some(c) = model.api.get(name) {
            Some(api_object(c))
        } else if model.file_names.contains(name) {
            model.file.classes.iter().find(|c| c.name == name).map(|c| {
                let mut o = protocol::file_class_object(c);
                o.insert("source".into(), "file".into());
                o
            })
        } else {
            None
        };
        match class {
            Some(c) => Reply {
                ok: true,
                class: Some(c),
                ..Reply::default()
            },
            None => Reply::refused(ReplyError::new("name", format!("no class {name:?}"))),
        }
    }

    fn add(&self, object: ClassObject) -> Result<Pending, ReplyError> {
        let mut model = self.model();
        let (name, class) = self.insert(&mut model, object)?;
        let ticket = self.post(LiveOp::Add(class));
        Ok((name, ticket, Undo::Add))
    }

    /// Adds `object` as a class of the API before the shaping loops start (`class_dir`,
    /// [`class_dir::apply`]): in the model only, as the loops' engines start from
    /// [`Live::merged`]. Refused as an `add` would be.
    pub fn restore(&self, object: ClassObject) -> Result<String, ReplyError> {
        let mut model = self.model();
        self.insert(&mut model, object).map(|(name, _)| name)
    }

    /// Validates `object` as a new class of the API and puts it last in `model`.
    fn insert(
        &self,
        model: &mut Model,
        object: ClassObject,
    ) -> Result<(String, ClassConfig), ReplyError> {
        let name = class_name(&object)?;
        if model.file_names.contains(&name) {
            return Err(ReplyError::new(
                "name",
                format!("class {name:?} is defined in the file: edit the file and reload (SIGHUP)"),
            ));
        }
        if model.api.contains(&name) {
            return Err(ReplyError::new(
                "name",
                format!("class {name:?} exists: change or delete it"),
            ));
        }
        let cap = model.file.daemon.max_api_classes;
        if model.api.len() >= cap {
            return Err(ReplyError::new(
                "",
                format!(
                    "the daemon holds {cap} classes of the control socket, its [daemon] \
                     max_api_classes: delete one, or raise the key in the file and reload (SIGHUP)"
                ),
            ));
        }
        let mut class = validated(&model.file, &object)?;
        self.tag(model, &mut class, None)?;
        model.api.push(ApiClass {
            object,
            class: class.clone(),
        });
        Ok((name, class))
    }

    fn change(&self, change: ClassObject) -> Result<Pending, ReplyError> {
        let mut model = self.model();
        let name = class_name(&change)?;
        let Some(old) = model.api.get(&name).cloned() else {
            return Err(not_api(&model, &name));
        };
        let object = protocol::merged(&old.object, &change);
        let mut class = validated(&model.file, &object)?;
        self.tag(&model, &mut class, Some(&old.class))?;
        let rematch = class.matcher != old.class.matcher;
        let entry = ApiClass {
            object,
            class: class.clone(),
        };
        if rematch {
            // A new match moves the class last in first-match order, as the engine does.
            model.api.push(entry);
        } else {
            model.api.replace(entry);
        }
        let ticket = self.post(LiveOp::Change { class, rematch });
        Ok((name, ticket, Undo::Change(Box::new(old))))
    }

    fn delete(&self, name: &str) -> Result<Pending, ReplyError> {
        let mut model = self.model();
        if !model.api.contains(name) {
            return Err(not_api(&model, name));
        }
        // Refused here, under the model's lock, as the loops would refuse it: a delete the
        // loops refuse has nothing to put back in the model.
        let children = model
            .api
            .iter()
            .filter(|c| c.class.tree.parent.as_deref() == Some(name))
            .count();
        if children > 0 {
            return Err(live_error(&LiveError::Tree(TreeError::HasChildren {
                name: name.to_owned(),
                children: u32::try_from(children).unwrap_or(u32::MAX),
            })));
        }
        let Some(old) = model.api.remove(name) else {
            return Err(not_api(&model, name));
        };
        if origin_tags::key_of(&old.class.matcher).is_some() {
            self.origins_changed.store(true, Ordering::Release);
        }
        let ticket = self.post(LiveOp::Delete(name.to_owned()));
        Ok((name.to_owned(), ticket, Undo::Delete))
    }

    /// Gives `class` (replacing `old`, if any) the origin tag of the name it matches on: the tag
    /// the classes in force hold for it, else the lowest free ([`origin_tags::tag_for`]); marks
    /// the origins changed when either names one. Scans the classes in force only when `class`
    /// names an origin.
    fn tag(
        &self,
        model: &Model,
        class: &mut ClassConfig,
        old: Option<&ClassConfig>,
    ) -> Result<(), ReplyError> {
        let key = origin_tags::key_of(&class.matcher);
        let old_key = old.and_then(|o| origin_tags::key_of(&o.matcher));
        if key.is_some() || old_key.is_some() {
            self.origins_changed.store(true, Ordering::Release);
        }
        let Some(key) = key else {
            class.matcher.origin = None;
            return Ok(());
        };
        let current = current_tags(model);
        let tag = origin_tags::tag_for(&key, &current, model.file.interfaces.origin_mark)
            .map_err(|e| ReplyError::new(&format!("match.{}", key.field()), e.to_string()))?;
        class.matcher.origin = Some(tag);
        Ok(())
    }

    /// Posts `op` to every loop (called under the model's lock, so that the loops see the
    /// operations in the model's order).
    fn post(&self, op: LiveOp) -> Arc<Ticket> {
        self.limits_changed.store(true, Ordering::Release);
        let inboxes = self.inboxes();
        let ticket = Ticket::new(inboxes.len());
        let op = Arc::new(op);
        for inbox in &inboxes {
            inbox.post(op.clone(), ticket.clone());
        }
        ticket
    }

    fn await_loops(&self, name: String, ticket: &Ticket, undo: Undo, arrived: Instant) -> Reply {
        let loops = ticket.loops();
        match ticket.wait(APPLY_TIMEOUT) {
            Ok(applied) => Reply {
                ok: true,
                applied_us: Some(applied.map_or(0, |t| {
                    t.saturating_duration_since(arrived).as_micros() as u64
                })),
                loops: Some(loops),
                name: Some(name),
                ..Reply::default()
            },
            Err(error) => {
                // A loop refused it (the others took it: the next request sees the model as
                // the refusing loop does, the model is put back).
                let mut model = self.model();
                match undo {
                    Undo::Add => {
                        model.api.remove(&name);
                    }
                    Undo::Change(old) => {
                        model.api.replace(*old);
                    }
                    Undo::Delete => {}
                }
                Reply::refused(match error {
                    Some(e) => live_error(&e),
                    None => ReplyError::new(
                        "",
                        format!("the shaping loops did not apply it within {APPLY_TIMEOUT:?}"),
                    ),
                })
            }
        }
    }
}

/// A request the loops are applying: the class's name, its ticket, and how to put the model
/// back if a loop refuses it.
type Pending = (String, Arc<Ticket>, Undo);

#[derive(Debug)]
enum Undo {
    Add,
    Change(Box<ApiClass>),
    Delete,
}

/// The origin tags the classes of `model` hold (the file's, shadowed ones included, and the
/// API's): none of them is given to another name.
fn current_tags(model: &Model) -> HashMap<origin_tags::OriginKey, u16> {
    let mut tags = origin_tags::tags_of(&model.file.classes);
    for c in model.api.iter() {
        if let Some(k) = origin_tags::key_of(&c.class.matcher) {
            if let Some(t) = c.class.matcher.origin {
                tags.insert(k, t);
            }
        }
    }
    tags
}

/// `file` with `model`'s API classes after its own (except those whose name `file` defines),
/// the origin tags kept for the names `model`'s classes hold ([`origin_tags::assign`]). On
/// error, the merged classes with the tags they had, and the error.
fn merged_with(model: &Model, file: &Config) -> (Config, Option<origin_tags::TagsExhausted>) {
    let mut out = file.clone();
    let names: HashSet<&str> = file.classes.iter().map(|c| c.name.as_str()).collect();
    out.classes.extend(
        model
            .api
            .iter()
            .filter(|c| !names.contains(c.class.name.as_str()))
            .map(|c| c.class.clone()),
    );
    let previous = current_tags(model);
    let mut tagged = out.classes.clone();
    match origin_tags::assign(&mut tagged, &previous, out.interfaces.origin_mark) {
        Ok(()) => {
            out.classes = tagged;
            (out, None)
        }
        Err(e) => (out, Some(e)),
    }
}

fn api_object(c: &ApiClass) -> ClassObject {
    let mut o = c.object.clone();
    o.insert("source".into(), "api".into());
    o
}

fn class_name(object: &ClassObject) -> Result<String, ReplyError> {
    match object.get("name") {
        Some(serde_json::Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(ReplyError::new("name", "must be a string")),
        None => Err(ReplyError::new(
            "name",
            "missing: every class needs a unique name",
        )),
    }
}

fn not_api(model: &Model, name: &str) -> ReplyError {
    if model.file_names.contains(name) {
        ReplyError::new(
            "name",
            format!("class {name:?} is defined in the file: edit the file and reload (SIGHUP)"),
        )
    } else {
        ReplyError::new("name", format!("no class {name:?}"))
    }
}

/// `object` validated as a class of `file` (its MTU, its `[link]`), and refused when it sets
/// what live classes do not take.
fn validated(file: &Config, object: &ClassObject) -> Result<ClassConfig, ReplyError> {
    let table = protocol::toml_table(object)?;
    let mut class = file
        .live_class(&table)
        .map_err(|e| ReplyError::new(&e.field, e.kind.to_string()))?;
    class.line = 0;
    if let Some(field) = crate::datapath::engine::live_unsupported(&class, file.link.is_some()) {
        return Err(live_error(&LiveError::Unsupported(field)));
    }
    if let Some(port) = &class.matcher.to {
        to_port_checked(port, &file.interfaces.bridges)?;
    }
    Ok(class)
}

/// Refuses a `to` interface that exists and is not a port of one of `bridges`: nothing would
/// capture what goes to it, and the class would limit nothing. One that does not exist yet is
/// taken (hooked when it comes, or counted as `attach_failed` then).
fn to_port_checked(port: &str, bridges: &[String]) -> Result<(), ReplyError> {
    let Ok(index) = nix::net::if_::if_nametoindex(port) else {
        return Ok(());
    };
    let master = crate::os::netlink::master(index).ok().flatten();
    let listed = bridges
        .iter()
        .filter_map(|b| nix::net::if_::if_nametoindex(b.as_str()).ok())
        .any(|b| Some(b) == master);
    if listed {
        return Ok(());
    }
    Err(ReplyError::new(
        "match.to",
        format!(
            "{port:?} is not a port of a bridge in [interfaces] bridges ({}): {}, so nothing \
             would shape what goes to it",
            bridges.join(", "),
            crate::os::attach::unlisted_master(master)
        ),
    ))
}

fn live_error(e: &LiveError) -> ReplyError {
    ReplyError::new(e.field(), e.to_string())
}

#[cfg(test)]
mod tests;
