//! The figures of each phase of `compare --cluster`, computed from what the run recorded: the
//! sites' rates on the wire in 100 ms windows and the daemons' scraped shares and states, all
//! on one time line (seconds since the traffic started). Pure functions of the records, so the
//! rules are unit-tested here.
//!
//! Rates are judged on the median of three consecutive windows ([`SPAN`]): one 100 ms window of
//! kernel TCP on a loaded machine can be a few percent off while the shaper holds its rate, and
//! a median of three ignores one such window and still moves within 300 ms. A time "to reach" a
//! rate is counted from the event to the end of the first window from which it holds: the first
//! window, in the first span whose median reaches the rate, that reaches it by itself.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The median of the finite ones of `values` (`None` when none is).
pub fn median(values: &[f64]) -> Option<f64> {
    let finite: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    crate::stats::median(&finite)
}

/// Windows in a span whose median judges a rate (see the module docs).
pub const SPAN: usize = 3;

/// A site's share, or the busy sites' sum, is "at the limit" within this fraction of its target
/// when the traffic starts: the sum within 1 % of the limit (the cluster target of the design).
pub const SUM_TOLERANCE: f64 = 0.01;

/// Each busy site within this fraction of its half of the limit: 2 %.
pub const SITE_TOLERANCE: f64 = 0.02;

/// A site alone holds the limit when it has at least this fraction of it: 97 %.
pub const ALONE_FRACTION: f64 = 0.97;

/// One 100 ms window of the sites' rates on the wire.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Window {
    /// The window's end, seconds since the traffic started.
    pub end_s: f64,
    /// Each site's rate on the wire, bits/s, in site order.
    pub site_bps: Vec<f64>,
}

/// One scrape of every daemon's metrics.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Scrape {
    /// When, seconds since the traffic started.
    pub at_s: f64,
    /// Each daemon's `metronome_cluster_share_bps` of the class (`None`: no answer or no
    /// series).
    pub share_bps: Vec<Option<f64>>,
    /// Each daemon's `metronome_cluster_state` that is 1 (`None`: no answer or no series).
    pub state: Vec<Option<String>>,
}

/// The windows that end in `(from_s, to_s]`.
pub fn between(windows: &[Window], from_s: f64, to_s: f64) -> Vec<&Window> {
    windows
        .iter()
        .filter(|w| w.end_s > from_s && w.end_s <= to_s)
        .collect()
}

/// Per window of `windows`, the value `f` gives, as the median over the span starting there
/// ([`SPAN`] windows; the last spans are shorter); paired with the window's end.
pub fn span_medians(windows: &[&Window], f: impl Fn(&Window) -> f64) -> Vec<(f64, f64)> {
    let values: Vec<f64> = windows.iter().map(|w| f(w)).collect();
    (0..windows.len())
        .filter_map(|k| {
            let end = (k + SPAN).min(values.len());
            median(&values[k..end]).map(|m| (windows[k].end_s, m))
        })
        .collect()
}

/// The end of the first window of the span starting at `k` that meets `good` by itself (the
/// span's last window when none does: its medians met a target no single window met).
fn first_good_end(windows: &[&Window], k: usize, good: impl Fn(&Window) -> bool) -> f64 {
    let span = &windows[k..(k + SPAN).min(windows.len())];
    span.iter()
        .find(|w| good(w))
        .or(span.last())
        .map_or(0.0, |w| w.end_s)
}

/// The sum of the sites `sites` in window `w`, bits/s.
pub fn sum_of(w: &Window, sites: &[usize]) -> f64 {
    sites
        .iter()
        .map(|&i| w.site_bps.get(i).copied().unwrap_or(0.0))
        .sum()
}

/// What the busy sites did from an event at which they all sent (the start, or a site's
/// return).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Settling {
    /// Seconds from the event to the end of the first window from which the span medians of the
    /// sum and of each busy site met their targets (the sum within [`SUM_TOLERANCE`] of the
    /// limit, each site within [`SITE_TOLERANCE`] of its equal part); `None`: never in the
    /// phase.
    pub settled_after_s: Option<f64>,
    /// The same in reporting periods.
    pub settled_after_periods: Option<f64>,
    /// Of the span medians from then to the end of the phase, the percentage that met them.
    pub held_pct: Option<f64>,
    /// The median of the busy sites' sum over the windows from then on (all the phase's windows
    /// when it never settled), bits/s.
    pub sum_bps: Option<f64>,
    /// The median of each busy site over the same windows, bits/s.
    pub site_bps: Vec<Option<f64>>,
}

/// Whether the busy sites' rates in a span (their medians `sites`, in order) meet the start
/// targets under `limit_bps`.
fn shares_met(sites: &[f64], limit_bps: f64) -> bool {
    let sum: f64 = sites.iter().sum();
    let part = limit_bps / sites.len().max(1) as f64;
    (sum - limit_bps).abs() <= SUM_TOLERANCE * limit_bps
        && sites
            .iter()
            .all(|s| (s - part).abs() <= SITE_TOLERANCE * part)
}

/// [`Settling`] of `busy` over the windows ending in `(event_s, end_s]`.
pub fn settling(
    windows: &[Window],
    (event_s, end_s): (f64, f64),
    busy: &[usize],
    limit_bps: f64,
    period_s: f64,
) -> Settling {
    let phase = between(windows, event_s, end_s);
    let per_site: Vec<Vec<(f64, f64)>> = busy
        .iter()
        .map(|&i| span_medians(&phase, |w| w.site_bps.get(i).copied().unwrap_or(0.0)))
        .collect();
    let met: Vec<(f64, bool)> = (0..phase.len())
        .map(|k| {
            let sites: Vec<f64> = per_site.iter().map(|s| s[k].1).collect();
            (phase[k].end_s, shares_met(&sites, limit_bps))
        })
        .collect();
    let first = met.iter().position(|&(_, ok)| ok);
    let window_met = |w: &Window| {
        let sites: Vec<f64> = busy
            .iter()
            .map(|&i| w.site_bps.get(i).copied().unwrap_or(0.0))
            .collect();
        shares_met(&sites, limit_bps)
    };
    let from = first.unwrap_or(0);
    let rest = &phase[from.min(phase.len())..];
    let settled_after_s = first.map(|k| first_good_end(&phase, k, window_met) - event_s);
    Settling {
        settled_after_s,
        settled_after_periods: settled_after_s.map(|s| s / period_s),
        held_pct: first.map(|k| {
            let after = &met[k..];
            100.0 * after.iter().filter(|(_, ok)| *ok).count() as f64 / after.len() as f64
        }),
        sum_bps: median(&rest.iter().map(|w| sum_of(w, busy)).collect::<Vec<_>>()),
        site_bps: busy
            .iter()
            .map(|&i| {
                median(
                    &rest
                        .iter()
                        .map(|w| w.site_bps.get(i).copied().unwrap_or(0.0))
                        .collect::<Vec<_>>(),
                )
            })
            .collect(),
    }
}

/// Seconds from `event_s` to the end of the first window (ending in `(event_s, end_s]`) whose
/// span median of site `site` is at least `fraction` of `limit_bps`; with the median of the
/// windows from then on. `None` when it never is.
pub fn time_to_alone(
    windows: &[Window],
    (event_s, end_s): (f64, f64),
    site: usize,
    (limit_bps, fraction): (f64, f64),
) -> (Option<f64>, Option<f64>) {
    let phase = between(windows, event_s, end_s);
    let rate = |w: &Window| w.site_bps.get(site).copied().unwrap_or(0.0);
    let spans = span_medians(&phase, rate);
    let Some(k) = spans.iter().position(|&(_, m)| m >= fraction * limit_bps) else {
        return (None, None);
    };
    let reached = first_good_end(&phase, k, |w| rate(w) >= fraction * limit_bps);
    let after: Vec<f64> = phase[k..]
        .iter()
        .map(|w| w.site_bps.get(site).copied().unwrap_or(0.0))
        .collect();
    (Some(reached - event_s), median(&after))
}

/// Seconds from `event_s` to the first scrape (in `(event_s, end_s]`) at which daemon `site`'s
/// share is at least `fraction` of `limit_bps`; `None` when none is.
pub fn share_time_to_alone(
    scrapes: &[Scrape],
    (event_s, end_s): (f64, f64),
    site: usize,
    (limit_bps, fraction): (f64, f64),
) -> Option<f64> {
    scrapes
        .iter()
        .filter(|s| s.at_s > event_s && s.at_s <= end_s)
        .find(|s| {
            s.share_bps
                .get(site)
                .copied()
                .flatten()
                .is_some_and(|b| b >= fraction * limit_bps)
        })
        .map(|s| s.at_s - event_s)
}

/// What an etcd member's death changed while the busy sites sent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Unchanged {
    /// The median of the busy sites' sum over the [`BEFORE_S`] before the event, bits/s.
    pub sum_before_bps: Option<f64>,
    /// The largest distance of a span median of the sum after the event from
    /// [`Unchanged::sum_before_bps`], percent of the limit.
    pub largest_sum_deviation_pct: Option<f64>,
    /// The largest distance of one window's sum from [`Unchanged::sum_before_bps`], percent of
    /// the limit.
    pub largest_window_deviation_pct: Option<f64>,
    /// The largest change of a daemon's share from its last scrape before the event, percent of
    /// the limit (`None` without shares).
    pub largest_share_change_pct: Option<f64>,
    /// States other than `shared` that a daemon reported after the event (`site: state`).
    pub other_states: Vec<String>,
    /// Each daemon's state at the step's last scrape (`site: state`; `site: none` without an
    /// answer).
    pub states_at_end: Vec<String>,
}

/// The time before an event over which the "before" figure of [`unchanged`] is taken: 2 s.
pub const BEFORE_S: f64 = 2.0;

/// [`Unchanged`] for the event at `event_s`, observed until `end_s`, over the busy sites `busy`
/// and the daemons `live` (by site index), with the site names `names`.
pub fn unchanged(
    (windows, scrapes): (&[Window], &[Scrape]),
    (event_s, end_s): (f64, f64),
    (busy, live): (&[usize], &[usize]),
    names: &[String],
    limit_bps: f64,
) -> Unchanged {
    let before = between(windows, event_s - BEFORE_S, event_s);
    let after = between(windows, event_s, end_s);
    let sum_before_bps = median(&before.iter().map(|w| sum_of(w, busy)).collect::<Vec<_>>());
    let pct = |v: f64| sum_before_bps.map(|b| 100.0 * (v - b).abs() / limit_bps);
    let spans = span_medians(&after, |w| sum_of(w, busy));
    let last_before = scrapes.iter().rev().find(|s| s.at_s <= event_s);
    let mut largest_share: Option<f64> = None;
    let mut other_states = Vec::new();
    for s in scrapes
        .iter()
        .filter(|s| s.at_s > event_s && s.at_s <= end_s)
    {
        for &i in live {
            let now = s.share_bps.get(i).copied().flatten();
            let then = last_before.and_then(|b| b.share_bps.get(i).copied().flatten());
            if let (Some(a), Some(b)) = (now, then) {
                let change = 100.0 * (a - b).abs() / limit_bps;
                largest_share = Some(largest_share.map_or(change, |l: f64| l.max(change)));
            }
            if let Some(state) = s.state.get(i).cloned().flatten() {
                let line = format!("{}: {state}", names.get(i).map_or("?", |n| n.as_str()));
                if state != "shared" && !other_states.contains(&line) {
                    other_states.push(line);
                }
            }
        }
    }
    let last = scrapes
        .iter()
        .rev()
        .find(|s| s.at_s > event_s && s.at_s <= end_s);
    let states_at_end = live
        .iter()
        .map(|&i| {
            let state = last.and_then(|s| s.state.get(i).cloned().flatten());
            let name = names.get(i).map_or("?", |n| n.as_str());
            format!("{name}: {}", state.as_deref().unwrap_or("none"))
        })
        .collect();
    Unchanged {
        states_at_end,
        sum_before_bps,
        largest_sum_deviation_pct: spans.iter().filter_map(|&(_, m)| pct(m)).reduce(f64::max),
        largest_window_deviation_pct: after
            .iter()
            .filter_map(|w| pct(sum_of(w, busy)))
            .reduce(f64::max),
        largest_share_change_pct: largest_share,
        other_states,
    }
}

/// One daemon while etcd is gone.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Holding {
    /// The site.
    pub site: String,
    /// Its share at the last scrape before etcd stopped, bits/s.
    pub share_before_bps: Option<f64>,
    /// Seconds from the stop to the first scrape at which its share was its floor; `None`:
    /// never in the phase.
    pub at_floor_after_s: Option<f64>,
    /// Whether every scrape before that showed the share it had before the stop (within 1 %).
    pub held: bool,
    /// Seconds from the stop to the first scrape that showed the state `floor`.
    pub floor_state_after_s: Option<f64>,
}

/// The sum of the live daemons' shares at one scrape while etcd is gone.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ShareSum {
    /// Seconds since etcd stopped.
    pub after_s: f64,
    /// The sum, bits/s (`None` when no live daemon answered).
    pub sum_bps: Option<f64>,
}

/// What the daemons did with every etcd member gone.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EtcdGone {
    /// Per live daemon.
    pub daemons: Vec<Holding>,
    /// The sum of the live daemons' shares at each scrape.
    pub share_sums: Vec<ShareSum>,
    /// The largest of [`EtcdGone::share_sums`], bits/s.
    pub max_share_sum_bps: Option<f64>,
    /// The largest sum of every site's rate in one window, bits/s.
    pub max_sum_bps: Option<f64>,
    /// The largest span median of that sum, bits/s.
    pub max_sum_span_bps: Option<f64>,
    /// The bound: the limit plus the live daemons' floors, bits/s.
    pub bound_bps: f64,
}

/// Whether `a` is within 1 % of `b` (or of 1 kbit/s, for shares near zero).
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= (0.01 * b.abs()).max(1000.0)
}

/// [`EtcdGone`] for the stop at `event_s`, observed until `end_s`, of the daemons `live`.
pub fn etcd_gone(
    (windows, scrapes): (&[Window], &[Scrape]),
    (event_s, end_s): (f64, f64),
    live: &[usize],
    names: &[String],
    (limit_bps, floor_bps): (f64, f64),
) -> EtcdGone {
    let after: Vec<&Scrape> = scrapes
        .iter()
        .filter(|s| s.at_s > event_s && s.at_s <= end_s)
        .collect();
    let last_before = scrapes.iter().rev().find(|s| s.at_s <= event_s);
    let daemons = live
        .iter()
        .map(|&i| {
            let share = |s: &Scrape| s.share_bps.get(i).copied().flatten();
            let before = last_before.and_then(share);
            let at_floor = after
                .iter()
                .position(|s| share(s).is_some_and(|b| close(b, floor_bps)));
            let until = at_floor.unwrap_or(after.len());
            Holding {
                site: names.get(i).cloned().unwrap_or_default(),
                share_before_bps: before,
                at_floor_after_s: at_floor.map(|k| after[k].at_s - event_s),
                held: before.is_some_and(|b| {
                    after[..until]
                        .iter()
                        .all(|s| share(s).is_some_and(|v| close(v, b)))
                }),
                floor_state_after_s: after
                    .iter()
                    .find(|s| s.state.get(i).cloned().flatten().as_deref() == Some("floor"))
                    .map(|s| s.at_s - event_s),
            }
        })
        .collect();
    let share_sums: Vec<ShareSum> = after
        .iter()
        .map(|s| {
            let shares: Vec<f64> = live
                .iter()
                .filter_map(|&i| s.share_bps.get(i).copied().flatten())
                .collect();
            ShareSum {
                after_s: s.at_s - event_s,
                sum_bps: (!shares.is_empty()).then(|| shares.iter().sum()),
            }
        })
        .collect();
    let all: Vec<usize> = (0..windows.first().map_or(0, |w| w.site_bps.len())).collect();
    let phase = between(windows, event_s, end_s);
    EtcdGone {
        daemons,
        max_share_sum_bps: share_sums.iter().filter_map(|s| s.sum_bps).reduce(f64::max),
        share_sums,
        max_sum_bps: phase.iter().map(|w| sum_of(w, &all)).reduce(f64::max),
        max_sum_span_bps: span_medians(&phase, |w| sum_of(w, &all))
            .into_iter()
            .map(|(_, m)| m)
            .reduce(f64::max),
        bound_bps: limit_bps + floor_bps * live.len() as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: f64 = 300e6;

    /// Windows every 100 ms from 0.1 s, each site's rate from `f(t)`.
    fn series(n: usize, f: impl Fn(f64) -> Vec<f64>) -> Vec<Window> {
        (1..=n)
            .map(|k| {
                let end_s = k as f64 * 0.1;
                Window {
                    end_s,
                    site_bps: f(end_s),
                }
            })
            .collect()
    }

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn the_start_settles_at_the_first_span_that_meets_both_targets() {
        // Both sites at 1 % of the limit until 2 s, then at their halves; one bad window at 3 s
        // is outvoted by its span.
        let w = series(60, |t| {
            if t < 2.05 {
                vec![3e6, 3e6, 0.0]
            } else if (t - 3.0).abs() < 0.01 {
                vec![100e6, 150e6, 0.0]
            } else {
                vec![150e6, 149e6, 0.0]
            }
        });
        let s = settling(&w, (0.0, 6.0), &[0, 1], L, 1.0);
        let after = s.settled_after_s.unwrap();
        assert!((after - 2.1).abs() < 1e-9, "{s:?}");
        assert_eq!(s.settled_after_periods, Some(after));
        assert!(s.held_pct.unwrap() > 90.0, "{s:?}");
        assert_eq!(s.sum_bps, Some(299e6));
        assert_eq!(s.site_bps, vec![Some(150e6), Some(149e6)]);
    }

    #[test]
    fn a_sum_one_percent_short_or_an_unequal_split_never_settles() {
        let short = series(30, |_| vec![148e6, 148e6, 0.0]);
        assert_eq!(
            settling(&short, (0.0, 3.0), &[0, 1], L, 1.0).settled_after_s,
            None
        );
        let unequal = series(30, |_| vec![160e6, 140e6, 0.0]);
        let s = settling(&unequal, (0.0, 3.0), &[0, 1], L, 1.0);
        assert_eq!(s.settled_after_s, None);
        assert_eq!(s.held_pct, None);
        assert_eq!(s.sum_bps, Some(300e6));
    }

    #[test]
    fn time_to_alone_counts_from_the_event() {
        let w = series(100, |t| {
            if t <= 5.5 {
                vec![0.0, 150e6, 0.0]
            } else {
                vec![0.0, 295e6, 0.0]
            }
        });
        let (after, held) = time_to_alone(&w, (4.0, 10.0), 1, (L, ALONE_FRACTION));
        assert!((after.unwrap() - 1.6).abs() < 1e-9, "{after:?}");
        assert_eq!(held, Some(295e6));
        assert_eq!(
            time_to_alone(&w, (0.0, 5.0), 1, (L, ALONE_FRACTION)),
            (None, None)
        );
        // The first window from which the span holds counts, even with a bad one after it.
        let dip = series(100, |t| {
            let bad = t <= 5.55 || (t - 5.7).abs() < 0.01;
            vec![0.0, if bad { 150e6 } else { 295e6 }, 0.0]
        });
        let (after, _) = time_to_alone(&dip, (4.0, 10.0), 1, (L, ALONE_FRACTION));
        assert!((after.unwrap() - 1.6).abs() < 1e-9, "{after:?}");
    }

    fn scrape(at_s: f64, shares: [Option<f64>; 3], states: [&str; 3]) -> Scrape {
        Scrape {
            at_s,
            share_bps: shares.to_vec(),
            state: states
                .iter()
                .map(|s| (!s.is_empty()).then(|| s.to_string()))
                .collect(),
        }
    }

    #[test]
    fn the_share_time_is_the_first_scrape_at_the_limit() {
        let s = vec![
            scrape(10.0, [Some(148e6), Some(148e6), Some(1e6)], ["shared"; 3]),
            scrape(
                12.2,
                [None, Some(148e6), Some(1e6)],
                ["", "shared", "shared"],
            ),
            scrape(
                13.4,
                [None, Some(296e6), Some(1e6)],
                ["", "shared", "shared"],
            ),
        ];
        let t = share_time_to_alone(&s, (10.5, 20.0), 1, (L, ALONE_FRACTION));
        assert!((t.unwrap() - 2.9).abs() < 1e-9, "{t:?}");
        assert_eq!(
            share_time_to_alone(&s, (10.5, 13.0), 1, (L, ALONE_FRACTION)),
            None
        );
    }

    #[test]
    fn unchanged_reports_the_largest_deviation_and_any_other_state() {
        let w = series(100, |t| {
            if (t - 7.0).abs() < 0.01 {
                vec![140e6, 148e6, 0.0]
            } else {
                vec![149e6, 148e6, 0.0]
            }
        });
        let s = vec![
            scrape(5.9, [Some(148e6), Some(148e6), Some(1e6)], ["shared"; 3]),
            scrape(6.5, [Some(148e6), Some(151e6), Some(1e6)], ["shared"; 3]),
            scrape(
                7.5,
                [Some(148e6), Some(148e6), Some(1e6)],
                ["shared", "holding", "shared"],
            ),
        ];
        let names: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        let u = unchanged((&w, &s), (6.0, 9.0), (&[0, 1], &[0, 1, 2]), &names, L);
        assert_eq!(u.sum_before_bps, Some(297e6));
        // From the sum before: the span medians do not move, one window moves by 3 %.
        assert!(u.largest_sum_deviation_pct.unwrap().abs() < 1e-9, "{u:?}");
        assert!(
            (u.largest_window_deviation_pct.unwrap() - 3.0).abs() < 1e-9,
            "{u:?}"
        );
        assert!(
            (u.largest_share_change_pct.unwrap() - 1.0).abs() < 1e-9,
            "{u:?}"
        );
        assert_eq!(u.other_states, ["b: holding"]);
        assert_eq!(u.states_at_end, ["a: shared", "b: holding", "c: shared"]);
    }

    #[test]
    fn etcd_gone_sees_the_hold_then_the_floor() {
        let floor = 3e6;
        let mut s = vec![scrape(
            20.0,
            [None, Some(297e6), Some(1.5e6)],
            ["", "shared", "shared"],
        )];
        for k in 1..=30 {
            let t = 20.0 + 0.2 * k as f64;
            let (b, c, st) = if t < 23.5 {
                (297e6, 1.5e6, "holding")
            } else {
                (floor, floor, "floor")
            };
            s.push(scrape(t, [None, Some(b), Some(c)], ["", st, st]));
        }
        let w = series(260, |t| {
            if t < 23.6 {
                vec![0.0, 296e6, 0.0]
            } else {
                vec![0.0, 2.9e6, 0.0]
            }
        });
        let names: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        let g = etcd_gone((&w, &s), (20.1, 25.9), &[1, 2], &names, (L, floor));
        assert_eq!(g.daemons.len(), 2);
        let b = &g.daemons[0];
        assert_eq!(b.site, "b");
        assert!(b.held, "{b:?}");
        assert!((b.at_floor_after_s.unwrap() - 3.5).abs() < 1e-9, "{b:?}");
        assert!((b.floor_state_after_s.unwrap() - 3.5).abs() < 1e-9, "{b:?}");
        assert_eq!(g.max_share_sum_bps, Some(297e6 + 1.5e6));
        assert_eq!(g.max_sum_bps, Some(296e6));
        assert_eq!(g.bound_bps, L + 2.0 * floor);
        assert_eq!(g.share_sums.len(), 29);
        // A share that moves before the floor is not held.
        s[3].share_bps[1] = Some(250e6);
        let g = etcd_gone((&w, &s), (20.1, 25.9), &[1, 2], &names, (L, floor));
        assert!(!g.daemons[0].held);
    }
}
