//! What a reload (SIGHUP) of the configuration changes, and whether the running daemon can apply
//! it without a restart.
//!
//! Applied live, without losing a queued packet:
//! * classes added, removed, reordered, or with a new `match`, `rate`, `pacing`, `burst`,
//!   `horizon_policy`, `backpressure`, `ack_shaping`, `fair` or `queue`; the default class's
//!   policy;
//! * `daemon.busy_poll`, `daemon.malformed`, `daemon.non_ip`, `daemon.pool_share` (read per
//!   frame from the installed configuration), `daemon.class_metrics` (the next scrape);
//! * `[link]` rate, marking, quantum and burst, and each class's `link`, `weight`, `priority` and
//!   `non_ect`: the link's queues are rebuilt with every queued packet moved over in order.
//!
//! Queued packets keep the EDT they were stamped with: a new rate applies from the next packet
//! stamped (`Timestamper::set_rate`, the core's rule), so the wheel is never rebuilt. Classes are
//! identified by **name** across a reload: a class that keeps its name keeps its policy state
//! (its latest timestamp, so no burst is granted by the reload) and its counters; a renamed class
//! is a removal and an addition. Packets of a removed class that are already queued still leave at
//! their EDT.
//!
//! Needing a restart (the plan lists them; a daemon refuses to half-apply such a reload):
//! * `[interfaces]`: the rings are bound to the interfaces;
//! * `[wheel]` geometry and policy (granularity, horizon, horizon_policy, pool_packets): the slot
//!   array and node pool are sized at start-up and hold the queued packets;
//! * `daemon.batch_size` (buffers are sized at start-up), `daemon.metrics_listen` (the socket is
//!   bound), `daemon.log_format` (the subscriber is installed once), `daemon.drain` and
//!   `daemon.link_down_grace`, `daemon.timer_slack` and `daemon.arrival_slack` (read by the loop
//!   at start), `daemon.user`
//!   (the daemon switched user once, at start-up, and cannot switch back),
//!   `daemon.realtime_priority` (the loops set it for themselves at start), `daemon.control`
//!   (the socket is bound at start-up), `daemon.class_dir` (read once, at start-up);
//! * `[link]` added or removed, `link.scheduler`, `link.buffer`: the link's queues and buffer;
//! * `[cluster]`, and the classes with `scope = "cluster"` and their rates: the cluster agent
//!   holds its lease and publishes for the classes it started with (`metronome_daemon::ops::cluster`).

use super::{ClassConfig, ClassPolicy, Config};
use core::fmt;

/// One field that differs between the running and the new configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldChange {
    /// The field's path (`wheel.granularity`), or its name inside a class (`rate`).
    pub field: String,
    /// The running value, as text.
    pub old: String,
    /// The new value, as text.
    pub new: String,
}

impl fmt::Display for FieldChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} -> {}", self.field, self.old, self.new)
    }
}

/// A change to the classes, all applied live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClassChange {
    /// A class that was not there.
    Added {
        /// Its name.
        name: String,
        /// Its position in the new file order.
        index: usize,
    },
    /// A class that is gone; its queued packets still leave at their EDT.
    Removed {
        /// Its name.
        name: String,
    },
    /// A class whose position in the first-match order changed.
    Moved {
        /// Its name.
        name: String,
        /// Old index.
        from: usize,
        /// New index.
        to: usize,
    },
    /// A class whose match or policy changed.
    Changed {
        /// Its name.
        name: String,
        /// What changed.
        fields: Vec<FieldChange>,
    },
}

/// What reloading a new configuration changes ([`Config::diff`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReloadPlan {
    /// Changes the running daemon cannot apply: it must be restarted to use the new file.
    pub restart_required: Vec<FieldChange>,
    /// Class changes, applied live.
    pub classes: Vec<ClassChange>,
    /// Changes to the default class's policy (fields named as in a class), applied live.
    pub default_class: Vec<FieldChange>,
    /// The new `daemon.busy_poll`, when it changed; applied live.
    pub busy_poll: Option<bool>,
    /// Changes to `[link]` applied live (its rate, marking, quantum, burst): the link's queued
    /// packets stay queued.
    pub link: Vec<FieldChange>,
}

impl ReloadPlan {
    /// True when the new configuration changes nothing.
    pub fn is_empty(&self) -> bool {
        self.restart_required.is_empty()
            && self.classes.is_empty()
            && self.default_class.is_empty()
            && self.busy_poll.is_none()
            && self.link.is_empty()
    }

    /// True when some change needs a restart ([`ReloadPlan::restart_required`]).
    pub fn needs_restart(&self) -> bool {
        !self.restart_required.is_empty()
    }

    /// True when the only change needing a restart is the list of attached interfaces, which a
    /// daemon in attach mode applies by re-attaching in place (`metronome_daemon::driver::attached`).
    pub fn only_reattach(&self) -> bool {
        self.needs_restart()
            && self
                .restart_required
                .iter()
                .all(|c| c.field == "interfaces.attach")
    }
}

impl fmt::Display for ReloadPlan {
    /// One line per change, for the daemon's log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return writeln!(f, "no change");
        }
        for c in &self.restart_required {
            writeln!(f, "needs a restart: {c}")?;
        }
        for c in &self.classes {
            match c {
                ClassChange::Added { name, index } => {
                    writeln!(f, "class {name}: added at position {index}")?
                }
                ClassChange::Removed { name } => writeln!(f, "class {name}: removed")?,
                ClassChange::Moved { name, from, to } => {
                    writeln!(f, "class {name}: moved from position {from} to {to}")?
                }
                ClassChange::Changed { name, fields } => {
                    for field in fields {
                        writeln!(f, "class {name}: {field}")?;
                    }
                }
            }
        }
        for c in &self.default_class {
            writeln!(f, "default class: {c}")?;
        }
        if let Some(b) = self.busy_poll {
            writeln!(f, "daemon.busy_poll: {} -> {b}", !b)?;
        }
        for c in &self.link {
            writeln!(f, "{c}")?;
        }
        Ok(())
    }
}

/// Pushes a change of `field` when `old != new`.
fn compare<T: PartialEq + fmt::Debug>(out: &mut Vec<FieldChange>, field: &str, old: T, new: T) {
    if old != new {
        out.push(FieldChange {
            field: field.to_string(),
            old: format!("{old:?}"),
            new: format!("{new:?}"),
        });
    }
}

/// The changes between two class policies, fields named as in the file.
fn policy_changes(old: &ClassPolicy, new: &ClassPolicy) -> Vec<FieldChange> {
    let rate = |r: Option<metronome_core::Rate>| r.map_or("none".to_string(), |r| r.to_string());
    let mut out = Vec::new();
    let mut text = |field: &str, old: String, new: String| {
        if old != new {
            out.push(FieldChange {
                field: field.to_string(),
                old,
                new,
            });
        }
    };
    text("rate", rate(old.rate), rate(new.rate));
    text("pacing", rate(old.pacing), rate(new.pacing));
    text("burst", old.burst.to_string(), new.burst.to_string());
    text(
        "gso_burst",
        old.gso_burst.to_string(),
        new.gso_burst.to_string(),
    );
    text(
        "backpressure",
        old.backpressure.to_string(),
        new.backpressure.to_string(),
    );
    let acks = |a: Option<super::AckShapingPolicy>| a.map_or("none".to_string(), |a| a.to_string());
    text("ack_shaping", acks(old.ack_shaping), acks(new.ack_shaping));
    text("link", old.link.to_string(), new.link.to_string());
    text("queue", old.queue.to_string(), new.queue.to_string());
    compare(&mut out, "fair", old.fair, new.fair);
    compare(&mut out, "pace_sockets", old.pace_sockets, new.pace_sockets);
    compare(
        &mut out,
        "horizon_policy",
        old.horizon_policy,
        new.horizon_policy,
    );
    out
}

fn class_changes(old: &ClassConfig, new: &ClassConfig) -> Vec<FieldChange> {
    let mut out = Vec::new();
    if old.matcher != new.matcher {
        out.push(FieldChange {
            field: "match".to_string(),
            old: old.matcher.to_string(),
            new: new.matcher.to_string(),
        });
    }
    out.extend(policy_changes(&old.policy, &new.policy));
    let show = |p: &Option<String>| p.clone().unwrap_or_else(|| "none".to_string());
    let (ot, nt) = (&old.tree, &new.tree);
    compare(&mut out, "parent", show(&ot.parent), show(&nt.parent));
    compare(&mut out, "weight", ot.weight, nt.weight);
    compare(&mut out, "gather", ot.gathers_only, nt.gathers_only);
    out
}

/// The changes to `[link]`: its presence, scheduler and buffer need a restart (the link's
/// queues are built for them), the rest is applied live; returns the live ones.
fn link_changes(
    restart: &mut Vec<FieldChange>,
    old: Option<&super::LinkConfig>,
    new: Option<&super::LinkConfig>,
) -> Vec<FieldChange> {
    let mut live = Vec::new();
    let (o, n) = match (old, new) {
        (Some(o), Some(n)) => (o, n),
        (None, None) => return live,
        (o, n) => {
            let show = |l: Option<&super::LinkConfig>| {
                l.map_or("none".to_string(), |l| l.rate.to_string())
            };
            restart.push(FieldChange {
                field: "link".to_string(),
                old: show(o),
                new: show(n),
            });
            return live;
        }
    };
    compare(restart, "link.scheduler", o.scheduler, n.scheduler);
    compare(restart, "link.buffer", o.buffer_bytes, n.buffer_bytes);
    let (or, nr) = (o.rate.to_string(), n.rate.to_string());
    compare(&mut live, "link.rate", or, nr);
    let (om, nm) = (o.marking.to_string(), n.marking.to_string());
    compare(&mut live, "link.marking", om, nm);
    compare(&mut live, "link.quantum", o.quantum_bytes, n.quantum_bytes);
    compare(&mut live, "link.burst", o.burst_bytes, n.burst_bytes);
    live
}

/// The plan for going from `old` to `new`.
pub(super) fn plan(old: &Config, new: &Config) -> ReloadPlan {
    let mut restart = Vec::new();
    let (oi, ni) = (&old.interfaces, &new.interfaces);
    compare(&mut restart, "interfaces.inside", &oi.inside, &ni.inside);
    compare(&mut restart, "interfaces.outside", &oi.outside, &ni.outside);
    compare(&mut restart, "interfaces.mtu", oi.mtu, ni.mtu);
    let (oa, na) = (oi.attach.join(","), ni.attach.join(","));
    compare(&mut restart, "interfaces.attach", oa, na);
    let (ob, nb) = (oi.bridges.join(","), ni.bridges.join(","));
    compare(&mut restart, "interfaces.bridges", ob, nb);
    compare(
        &mut restart,
        "interfaces.origin_mark",
        oi.origin_mark,
        ni.origin_mark,
    );
    // The cluster agent connects, leases and publishes for the classes it started with.
    compare(&mut restart, "cluster", &old.cluster, &new.cluster);
    let (ow, nw) = (&old.wheel, &new.wheel);
    let (og, ng) = (ow.granularity.to_string(), nw.granularity.to_string());
    compare(&mut restart, "wheel.granularity", og, ng);
    let (oh, nh) = (ow.horizon.to_string(), nw.horizon.to_string());
    compare(&mut restart, "wheel.horizon", oh, nh);
    compare(
        &mut restart,
        "wheel.horizon_policy",
        ow.horizon_policy,
        nw.horizon_policy,
    );
    compare(
        &mut restart,
        "wheel.pool_packets",
        ow.pool_packets,
        nw.pool_packets,
    );
    let (od, nd) = (&old.daemon, &new.daemon);
    compare(
        &mut restart,
        "daemon.batch_size",
        od.batch_size,
        nd.batch_size,
    );
    compare(
        &mut restart,
        "daemon.metrics_listen",
        od.metrics_listen,
        nd.metrics_listen,
    );
    compare(
        &mut restart,
        "daemon.log_format",
        od.log_format,
        nd.log_format,
    );
    compare(&mut restart, "daemon.cores", od.cores, nd.cores);
    compare(&mut restart, "daemon.vnet_hdr", od.vnet_hdr, nd.vnet_hdr);
    compare(&mut restart, "daemon.gso_slots", od.gso_slots, nd.gso_slots);
    compare(&mut restart, "daemon.gro", od.gro, nd.gro);
    let (op, np) = (od.nba_period.to_string(), nd.nba_period.to_string());
    compare(&mut restart, "daemon.nba_period", op, np);
    let (op, np) = (od.drain.to_string(), nd.drain.to_string());
    compare(&mut restart, "daemon.drain", op, np);
    let (og, ng) = (od.link_down_grace, nd.link_down_grace);
    compare(
        &mut restart,
        "daemon.link_down_grace",
        og.to_string(),
        ng.to_string(),
    );
    let (os, ns) = (od.timer_slack.to_string(), nd.timer_slack.to_string());
    compare(&mut restart, "daemon.timer_slack", os, ns);
    let (os, ns) = (od.arrival_slack.to_string(), nd.arrival_slack.to_string());
    compare(&mut restart, "daemon.arrival_slack", os, ns);
    compare(&mut restart, "daemon.user", &od.user, &nd.user);
    compare(
        &mut restart,
        "daemon.early_refuse",
        od.early_refuse,
        nd.early_refuse,
    );
    compare(&mut restart, "daemon.nice", od.nice, nd.nice);
    compare(
        &mut restart,
        "daemon.early_multiple",
        od.early_multiple,
        nd.early_multiple,
    );
    compare(
        &mut restart,
        "daemon.realtime_priority",
        &od.realtime_priority,
        &nd.realtime_priority,
    );
    compare(&mut restart, "daemon.control", &od.control, &nd.control);
    compare(
        &mut restart,
        "daemon.class_dir",
        &od.class_dir,
        &nd.class_dir,
    );

    // Classes by name, so that matching them is linear in the number of classes.
    let old_at: std::collections::HashMap<&str, usize> = old
        .classes
        .iter()
        .enumerate()
        .map(|(i, c)| (c.name.as_str(), i))
        .collect();
    let new_names: std::collections::HashSet<&str> =
        new.classes.iter().map(|c| c.name.as_str()).collect();
    let mut classes = Vec::new();
    for c in &old.classes {
        if !new_names.contains(c.name.as_str()) {
            classes.push(ClassChange::Removed {
                name: c.name.clone(),
            });
        }
    }
    for (to, c) in new.classes.iter().enumerate() {
        match old_at.get(c.name.as_str()).copied() {
            None => classes.push(ClassChange::Added {
                name: c.name.clone(),
                index: to,
            }),
            Some(from) => {
                if from != to {
                    classes.push(ClassChange::Moved {
                        name: c.name.clone(),
                        from,
                        to,
                    });
                }
                let fields = class_changes(&old.classes[from], c);
                if !fields.is_empty() {
                    classes.push(ClassChange::Changed {
                        name: c.name.clone(),
                        fields,
                    });
                }
            }
        }
    }
    let link = link_changes(&mut restart, old.link.as_ref(), new.link.as_ref());
    ReloadPlan {
        link,
        restart_required: restart,
        classes,
        default_class: policy_changes(&old.default_class, &new.default_class),
        busy_poll: (od.busy_poll != nd.busy_poll).then_some(nd.busy_poll),
    }
}
