//! What `compare --cluster` reports ([`ClusterReport`]), the step figures it computes from the
//! recorded windows and scrapes once the sequence has run ([`phases`]), and the lines it prints
//! ([`describe`]).

use super::phases::{self, EtcdGone, Scrape, Settling, Unchanged, Window};
use super::{events, ClusterOptions, Enforcement, BUSY, SITES};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The shift: a site alone after the other stopped or died.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Reach {
    /// The remaining busy site's share at the last scrape before the event, bits/s (`None`
    /// without shares).
    pub share_before_bps: Option<f64>,
    /// Its rate's median over the [`phases::BEFORE_S`] before the event, bits/s.
    pub rate_before_bps: Option<f64>,
    /// Seconds from the event until the remaining busy site's rate was at least 97 % of the limit
    /// ([`phases::time_to_alone`]); `None`: not in the step.
    pub rate_after_s: Option<f64>,
    /// The same in periods.
    pub rate_after_periods: Option<f64>,
    /// Seconds from the event until its scraped share was at least 97 % of the limit (`None`
    /// also without shares: per-host classes).
    pub share_after_s: Option<f64>,
    /// Its rate's median from then on, bits/s.
    pub held_bps: Option<f64>,
}

/// One thing the sequence did, on the time line of the windows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Event {
    /// Seconds since the traffic started.
    pub at_s: f64,
    /// What.
    pub what: String,
}

/// What `metronome compare --cluster` reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ClusterReport {
    /// Cluster class or per-host classes.
    pub enforcement: Enforcement,
    /// The limit, bits/s.
    pub limit_bps: u64,
    /// `period`, `lease`, `hold`, seconds.
    pub period_s: f64,
    /// `lease`, seconds.
    pub lease_s: f64,
    /// `hold`, seconds.
    pub hold_s: f64,
    /// The floor, bits/s.
    pub floor_bps: u64,
    /// The sites (the daemons' `host`), in order.
    pub sites: Vec<String>,
    /// The busy sites.
    pub busy: Vec<String>,
    /// TCP connections per busy site.
    pub flows: usize,
    /// Why there are no figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// a.
    pub start: Option<Settling>,
    /// b.
    pub shift: Option<Reach>,
    /// Site a back.
    pub rejoin: Option<Settling>,
    /// d.
    pub member_killed: Option<Unchanged>,
    /// c.
    pub crash: Option<Reach>,
    /// e.
    pub etcd_gone: Option<EtcdGone>,
    /// What happened when.
    pub events: Vec<Event>,
    /// Daemons that did not stop cleanly at the end (site: why).
    pub stop_errors: Vec<String>,
    /// Every window of the sites' rates.
    pub windows: Vec<Window>,
    /// Every scrape of the daemons.
    pub scrapes: Vec<Scrape>,
}

impl ClusterReport {
    pub(super) fn empty(options: &ClusterOptions, names: &[String]) -> Self {
        ClusterReport {
            enforcement: options.enforcement,
            limit_bps: options.limit_bps,
            period_s: options.period.as_secs_f64(),
            lease_s: options.lease.as_secs_f64(),
            hold_s: options.hold.as_secs_f64(),
            floor_bps: options.floor_bps(),
            sites: names.to_vec(),
            busy: BUSY.iter().map(|&i| names[i].clone()).collect(),
            flows: options.flows,
            error: None,
            start: None,
            shift: None,
            rejoin: None,
            member_killed: None,
            crash: None,
            etcd_gone: None,
            events: Vec::new(),
            stop_errors: Vec::new(),
            windows: Vec::new(),
            scrapes: Vec::new(),
        }
    }
}

/// The time of event `what` in `report` (seconds on its time line).
pub fn event_at(report: &ClusterReport, what: &str) -> Option<f64> {
    report
        .events
        .iter()
        .find(|e| e.what == what)
        .map(|e| e.at_s)
}

/// Computes every step's figures from the report's records.
pub(super) fn figures(report: &mut ClusterReport, options: &ClusterOptions) {
    let at = |what| event_at(report, what);
    let (Some(shift), Some(rejoin), Some(member), Some(crash), Some(gone), Some(end)) = (
        at(events::SHIFT),
        at(events::REJOIN),
        at(events::MEMBER),
        at(events::CRASH),
        at(events::GONE),
        at(events::END),
    ) else {
        report.error = Some("the sequence did not record every event".into());
        return;
    };
    let limit = options.limit_bps as f64;
    let period = options.period.as_secs_f64();
    let (w, sc) = (&report.windows, &report.scrapes);
    let alone = (limit, phases::ALONE_FRACTION);
    let reach = |(from, to): (f64, f64)| {
        let (rate_after_s, held_bps) = phases::time_to_alone(w, (from, to), BUSY[1], alone);
        let before: Vec<f64> = phases::between(w, from - phases::BEFORE_S, from)
            .iter()
            .map(|w| w.site_bps[BUSY[1]])
            .collect();
        Reach {
            share_before_bps: sc
                .iter()
                .rev()
                .find(|s| s.at_s <= from)
                .and_then(|s| s.share_bps.get(BUSY[1]).copied().flatten()),
            rate_before_bps: phases::median(&before),
            rate_after_s,
            rate_after_periods: rate_after_s.map(|s| s / period),
            share_after_s: phases::share_time_to_alone(sc, (from, to), BUSY[1], alone),
            held_bps,
        }
    };
    let all: Vec<usize> = (0..SITES).collect();
    let live: Vec<usize> = all.iter().copied().filter(|&i| i != BUSY[0]).collect();
    let start = phases::settling(w, (0.0, shift), &BUSY, limit, period);
    let shifted = reach((shift, rejoin));
    let rejoined = phases::settling(w, (rejoin, crash), &BUSY, limit, period);
    let crashed = reach((crash, member));
    let unchanged = phases::unchanged(
        (w, sc),
        (member, gone),
        (&BUSY[1..], &live),
        &report.sites,
        limit,
    );
    let floor = options.floor_bps() as f64;
    let gone = phases::etcd_gone((w, sc), (gone, end), &live, &report.sites, (limit, floor));
    report.start = Some(start);
    report.shift = Some(shifted);
    report.rejoin = Some(rejoined);
    report.member_killed = Some(unchanged);
    report.crash = Some(crashed);
    report.etcd_gone = Some(gone);
}

/// Mbit/s with two decimals, or `-`.
fn mbit(bps: Option<f64>) -> String {
    bps.map_or_else(|| "-".to_owned(), |b| format!("{:.2}", b / 1e6))
}

/// Seconds with two decimals and periods, or `never`.
fn secs(s: Option<f64>, period_s: f64) -> String {
    s.map_or_else(
        || "never".to_owned(),
        |s| format!("{s:.2} s ({:.1} periods)", s / period_s),
    )
}

/// The lines of `report`'s figures, one step each (what `compare --cluster` prints).
pub fn describe(report: &ClusterReport) -> Vec<String> {
    let p = report.period_s;
    let limit = report.limit_bps as f64 / 1e6;
    let mut lines = Vec::new();
    if let Some(e) = &report.error {
        lines.push(format!("not measured: {e}"));
    }
    let settle = |label: &str, s: &Settling| {
        format!(
            "{label}: sum within 1 % of {limit:.0} Mbit/s and each busy site within 2 % of its \
             half after {}; held in {} of the spans after; medians after: sum {}, {} Mbit/s",
            secs(s.settled_after_s, p),
            s.held_pct
                .map_or_else(|| "-".to_owned(), |h| format!("{h:.0} %")),
            mbit(s.sum_bps),
            report
                .busy
                .iter()
                .zip(&s.site_bps)
                .map(|(n, b)| format!("{n} {}", mbit(*b)))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    let reach = |label: &str, r: &Reach| {
        format!(
            "{label}: site-b (before: rate {}, share {} Mbit/s) at >= 97 % of {limit:.0} Mbit/s \
             after {} (its share after {}), median after {} Mbit/s",
            mbit(r.rate_before_bps),
            mbit(r.share_before_bps),
            secs(r.rate_after_s, p),
            secs(r.share_after_s, p),
            mbit(r.held_bps)
        )
    };
    if let Some(s) = &report.start {
        lines.push(settle("a. start (target: <= 3 periods)", s));
    }
    if let Some(r) = &report.shift {
        lines.push(reach("b. site-a stops", r));
    }
    if let Some(s) = &report.rejoin {
        lines.push(settle("   site-a back", s));
    }
    if let Some(r) = &report.crash {
        lines.push(reach(
            &format!(
                "c. site-a's daemon killed (target: <= lease + period = {:.0} s)",
                report.lease_s + p
            ),
            r,
        ));
    }
    if let Some(u) = &report.member_killed {
        let pct = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2} %"));
        lines.push(format!(
            "d. etcd member killed: busy sites' sum before {} Mbit/s; after, its largest move \
             {} of the limit (span medians), {} (one window); largest share change {}; other \
             states: {}; at the end: {}",
            mbit(u.sum_before_bps),
            pct(u.largest_sum_deviation_pct),
            pct(u.largest_window_deviation_pct),
            pct(u.largest_share_change_pct),
            if u.other_states.is_empty() {
                "none".to_owned()
            } else {
                u.other_states.join(", ")
            },
            u.states_at_end.join(", ")
        ));
    }
    if let Some(g) = &report.etcd_gone {
        lines.extend(describe_gone(g, report));
    }
    for e in &report.stop_errors {
        lines.push(format!("did not stop cleanly: {e}"));
    }
    lines
}

/// The lines of step e.
fn describe_gone(g: &EtcdGone, report: &ClusterReport) -> Vec<String> {
    let p = report.period_s;
    let mut lines = vec![format!(
        "e. etcd gone (hold {:.0} s, floor {} Mbit/s): sum of the shares at most {} Mbit/s, sum \
         of the rates at most {} Mbit/s in one window ({} in span medians), bound {} Mbit/s",
        report.hold_s,
        mbit(Some(report.floor_bps as f64)),
        mbit(g.max_share_sum_bps),
        mbit(g.max_sum_bps),
        mbit(g.max_sum_span_bps),
        mbit(Some(g.bound_bps))
    )];
    for d in &g.daemons {
        lines.push(format!(
            "   {}: share {} Mbit/s {}, at its floor after {}, state floor after {}",
            d.site,
            mbit(d.share_before_bps),
            if d.held { "held" } else { "not held" },
            secs(d.at_floor_after_s, p),
            secs(d.floor_state_after_s, p)
        ));
    }
    let sums: Vec<String> = g
        .share_sums
        .iter()
        .map(|s| format!("{:.1}: {}", s.after_s, mbit(s.sum_bps)))
        .collect();
    lines.push(format!(
        "   sum of the shares (s after: Mbit/s) {}",
        sums.join(", ")
    ));
    lines
}
