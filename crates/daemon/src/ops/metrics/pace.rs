//! Source pacing's series (`crate::os::pace`): per class, the ceiling its flows' sockets are
//! given, the flows seen and the frames held per flow; for the daemon, the sockets slowed now
//! and what the program did, read from its counters.

use super::labels::{ClassLabel, ReasonLabel};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The families (see the module docs).
#[derive(Clone, Debug, Default)]
pub(super) struct PaceFamilies {
    ceiling: Family<ClassLabel, Gauge>,
    flows: Family<ClassLabel, Gauge>,
    held_per_flow: Family<ClassLabel, Gauge>,
    slowed: Gauge,
    active: Gauge,
    events: Family<ReasonLabel, Counter>,
}

impl PaceFamilies {
    pub(super) fn register(&self, r: &mut Registry) {
        r.register(
            "class_socket_ceiling_bps",
            "Source pacing: the pacing ceiling each local TCP socket of the class is given \
             (its SO_MAX_PACING_RATE, counted in wire bits/s)",
            self.ceiling.clone(),
        );
        r.register(
            "class_paced_flows",
            "Source pacing: flows of the class seen in the last period (10 ms)",
            self.flows.clone(),
        );
        r.register(
            "class_held_per_flow_millipackets",
            "Source pacing: frames the class holds per flow seen, in thousandths, at the last \
             period",
            self.held_per_flow.clone(),
        );
        r.register(
            "sockets_slowed",
            "Source pacing: local TCP sockets that carry a ceiling now",
            self.slowed.clone(),
        );
        r.register(
            "source_pacing_active",
            "1 when the source pacing program is attached, else 0",
            self.active.clone(),
        );
        r.register(
            "source_pacing_events",
            "Source pacing: ceilings applied, sockets restored to their own value, sockets \
             closed while slowed, refused setsockopt calls and map writes (reason)",
            self.events.clone(),
        );
    }

    /// Sets class `class`'s (of silo `silo`) ceiling, flows and frames held per flow.
    pub(super) fn class(&self, class: ClassLabel, ceiling_bps: f64, flows: u32, held: u64) {
        let as_i64 = |v: f64| {
            if v >= i64::MAX as f64 {
                i64::MAX
            } else {
                v as i64
            }
        };
        self.ceiling.get_or_create(&class).set(as_i64(ceiling_bps));
        self.flows.get_or_create(&class).set(i64::from(flows));
        let per_flow = held.saturating_mul(1000) / u64::from(flows.max(1));
        self.held_per_flow
            .get_or_create(&class)
            .set(i64::try_from(per_flow).unwrap_or(i64::MAX));
    }

    /// Sets the daemon's gauges and brings `event`'s counter up to `total`.
    pub(super) fn program(&self, slowed: u64, events: &[(&'static str, u64)]) {
        self.active.set(1);
        self.slowed.set(i64::try_from(slowed).unwrap_or(i64::MAX));
        for (reason, total) in events {
            let c = self.events.get_or_create(&ReasonLabel {
                reason: (*reason).to_string(),
            });
            let now = c.get();
            if *total > now {
                c.inc_by(*total - now);
            }
        }
    }
}
