//! The shapers of `compare link-sharing`, started on the bump in the wire one at a time and
//! read while they run (each class's queued bytes):
//!
//! * **metronome** ([`link_config`]): the daemon's loop on AF_PACKET ports on `in0`/`out0`, a
//!   `[link]` at the link rate, one class per destination port with the scenario's weight and
//!   priority, MQ-ECN marking (the `[link]` default) or, as the `metronome-per-queue` row,
//!   per-queue standard marking, with thresholds for a base RTT of [`DEFAULT_LINK_RTT`]
//!   ([`LinkOptions::link_rtt`]);
//! * **htb** ([`htb_commands`]): a Linux bridge joins `in0` and `out0`; `out0` gets a root HTB
//!   class with rate = ceil = link, and one leaf per class with rate = its weight's share of the
//!   link, ceil = link, and prio 0 for a priority class, 1 for the others; `u32` filters send
//!   each destination port to its leaf. The leaves keep HTB's default queue (a `pfifo` of the
//!   interface's `txqueuelen`, drop-tail: HTB marks nothing).
//!

use super::{ClassSpec, LinkOptions, Marking, HTB_QUEUE_SAMPLE, LINK_QUEUE_METRIC, QUEUE_SAMPLE};
use crate::compare::{CompareError, Shaper};
use crate::netns::{run_command, TopoError, Topology};
use metronome_daemon::driver::run::Control;
use metronome_daemon::ops::config::Config;
use metronome_daemon::ops::metrics::Metrics;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The daemon's configuration for `classes` on a link of `link_bps` with marking thresholds for
/// a base RTT of `rtt`: one class per destination port (`ports[i]` for class `i`), all TCP to
/// `receiver`, weights and priorities as given, `marking` on the link's queues.
pub fn link_config(
    receiver: std::net::Ipv4Addr,
    (link_bps, rtt): (u64, Duration),
    marking: Marking,
    classes: &[(&ClassSpec, u16)],
) -> Result<Config, String> {
    let mut text = format!(
        "[interfaces]\ninside = \"in0\"\noutside = \"out0\"\n\n[link]\nrate = {link_bps}\n\
         marking = \"{}\"\nrtt = \"{}us\"\n",
        marking.config_name(),
        rtt.as_micros()
    );
    for (class, port) in classes {
        text += &format!(
            "\n[[class]]\nname = \"{}\"\nmatch = {{ dst = \"{receiver}\", protocol = \"tcp\", \
             dst_port = \"{port}\" }}\n",
            class.name
        );
        // A priority class is served before the weighted ones: the highest tier, no weight.
        if class.priority {
            text += "priority = 0\n";
        } else {
            text += &format!("weight = {}\n", class.weight);
        }
    }
    Config::from_toml_str(&text, "link-sharing.toml").map_err(|e| e.to_string())
}

/// The `tc` commands (arguments after `tc -n <ns>`) that build the HTB hierarchy of `classes`
/// on `iface` (see the module docs): leaf `1:1<i>` for class `i`, matched by destination port
/// `ports[i]`.
pub fn htb_commands(iface: &str, link_bps: u64, classes: &[(&ClassSpec, u16)]) -> Vec<Vec<String>> {
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    let link = format!("{link_bps}bit");
    let total: u64 = classes
        .iter()
        .filter(|(c, _)| !c.priority)
        .map(|(c, _)| u64::from(c.weight))
        .sum::<u64>()
        .max(1);
    let mut cmds = vec![
        s(&[
            "qdisc", "replace", "dev", iface, "root", "handle", "1:", "htb",
        ]),
        s(&[
            "class", "add", "dev", iface, "parent", "1:", "classid", "1:1", "htb", "rate", &link,
            "ceil", &link,
        ]),
    ];
    for (i, (class, port)) in classes.iter().enumerate() {
        let id = format!("1:{}", 10 + i);
        // A priority class is guaranteed 1 % of the link (its traffic is far below it) and
        // served first; a weighted class is guaranteed its weight's share.
        let rate_bps = if class.priority {
            link_bps / 100
        } else {
            link_bps * u64::from(class.weight) / total
        };
        let rate = format!("{rate_bps}bit");
        let prio = if class.priority { "0" } else { "1" };
        cmds.push(s(&[
            "class", "add", "dev", iface, "parent", "1:1", "classid", &id, "htb", "rate", &rate,
            "ceil", &link, "prio", prio,
        ]));
        let port = port.to_string();
        cmds.push(s(&[
            "filter", "add", "dev", iface, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
            "match", "ip", "dport", &port, "0xffff", "flowid", &id,
        ]));
    }
    cmds
}

/// The backlog in bytes of each HTB class `1:<10 + i>` in the text of `tc -s class show`
/// (`class htb 1:10 parent ...` then ` backlog 1234b 5p requeues 0`); `None` for a class not
/// found.
pub fn parse_htb_backlogs(text: &str, classes: usize) -> Vec<Option<u64>> {
    let mut out = vec![None; classes];
    let mut current: Option<usize> = None;
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("class htb ") {
            current = rest
                .split_whitespace()
                .next()
                .and_then(|id| id.strip_prefix("1:"))
                .and_then(|minor| minor.parse::<usize>().ok())
                .and_then(|minor| minor.checked_sub(10))
                .filter(|&i| i < classes);
        } else if let (Some(i), Some(rest)) = (current, line.strip_prefix("backlog ")) {
            out[i] = parse_size(rest.split_whitespace().next().unwrap_or(""));
        }
    }
    out
}

/// `tc`'s byte count: `1234b`, `12Kb`, `3Mb` (powers of 1024).
fn parse_size(s: &str) -> Option<u64> {
    let digits = s.strip_suffix('b')?;
    let (num, mult) = match digits.chars().last()? {
        'K' => (&digits[..digits.len() - 1], 1024),
        'M' => (&digits[..digits.len() - 1], 1024 * 1024),
        'G' => (&digits[..digits.len() - 1], 1024 * 1024 * 1024),
        _ => (digits, 1),
    };
    Some(num.parse::<u64>().ok()? * mult)
}

/// The shaper of one run.
pub(super) enum Active {
    Daemon {
        control: Control,
        thread: crate::shaper::ShaperThread,
        metrics: Metrics,
    },
    Htb,
}

impl Active {
    pub(super) fn stop(self, topo: &Topology) -> Result<(), CompareError> {
        match self {
            Active::Daemon {
                control, thread, ..
            } => {
                control.stop.store(true, Ordering::Relaxed);
                let report = thread
                    .join()
                    .map_err(|_| TopoError::ThreadPanicked("shaper".into()))???;
                metronome_daemon::ops::service::log_report(&report);
                Ok(())
            }
            Active::Htb => {
                if let Ok(stats) = tc(topo, &["-s", "class", "show", "dev", &topo.shaper_out]) {
                    tracing::debug!("{}", stats.trim());
                }
                Ok(topo.remove_qdisc(&topo.shaper_out)?)
            }
        }
    }

    /// Queued bytes of each class now, `None` where unknown.
    pub(super) fn queues(&self, topo: &Topology, classes: &[ClassSpec]) -> Vec<Option<u64>> {
        match self {
            Active::Daemon { metrics, .. } => {
                let scrape = crate::scrape::Scrape::parse(&metrics.encode());
                classes
                    .iter()
                    .map(|c| {
                        let queued = scrape.value(LINK_QUEUE_METRIC, Some(("class", &c.name)));
                        queued.map(|v| v.max(0.0) as u64)
                    })
                    .collect()
            }
            Active::Htb => tc(topo, &["-s", "class", "show", "dev", &topo.shaper_out])
                .map(|text| parse_htb_backlogs(&text, classes.len()))
                .unwrap_or_else(|_| vec![None; classes.len()]),
        }
    }

    pub(super) fn queue_sample(&self) -> Duration {
        match self {
            Active::Daemon { .. } => QUEUE_SAMPLE,
            Active::Htb => HTB_QUEUE_SAMPLE,
        }
    }
}

fn tc(topo: &Topology, args: &[&str]) -> Result<String, TopoError> {
    let mut full = vec!["-n", topo.shaper.name()];
    full.extend_from_slice(args);
    run_command("tc", &full)
}

pub(super) fn start(
    topo: &mut Topology,
    options: &LinkOptions,
    shaper: Shaper,
    classes: &[(&ClassSpec, u16)],
) -> Result<Active, CompareError> {
    let out = topo.shaper_out.clone();
    match shaper {
        Shaper::Htb => {
            topo.bridge_shaper()?;
            for cmd in htb_commands(&out, options.link_bps, classes) {
                let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
                tc(topo, &args)?;
            }
            Ok(Active::Htb)
        }
        other => {
            let marking = other
                .link_marking()
                .ok_or_else(|| CompareError::Refused(other.not_in("link sharing")))?;
            topo.remove_qdisc(&out)?;
            topo.unbridge_shaper()?;
            let link = (options.link_bps, options.link_rtt);
            let mut config = link_config(topo.receiver_addr, link, marking, classes)
                .map_err(|e| TopoError::Io(std::io::Error::other(e)))?;
            options.offloads.configure(&mut config);
            let (control, metrics) = (Control::default(), Metrics::new());
            let thread = crate::shaper::spawn_shaper(
                &topo.shaper,
                config,
                metrics.clone(),
                control.clone(),
            )?;
            let thread = crate::compare::started(&control, thread)?;
            Ok(Active::Daemon {
                control,
                thread,
                metrics,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::link_sharing::{Scenario, DEFAULT_LINK_RTT, LINK_BPS};
    use metronome_daemon::ops::config::LinkMarkingRule;

    #[test]
    fn the_daemon_config_of_every_scenario_is_valid() {
        let receiver = std::net::Ipv4Addr::new(10, 77, 3, 2);
        for scenario in Scenario::ALL {
            let classes = scenario.classes();
            let pairs: Vec<(&ClassSpec, u16)> = classes.iter().zip(9000..).collect();
            for marking in [Marking::MqEcn, Marking::PerQueue] {
                let c = link_config(receiver, (LINK_BPS, DEFAULT_LINK_RTT), marking, &pairs)
                    .unwrap_or_else(|e| panic!("{scenario:?} {marking:?}: {e}"));
                assert_eq!(c.classes.len(), classes.len());
                let link = c.link.as_ref().expect("a [link] section");
                assert_eq!(link.rate.bps(), LINK_BPS);
                let rule = match marking {
                    Marking::MqEcn => LinkMarkingRule::MqEcn,
                    Marking::PerQueue => LinkMarkingRule::PerQueue,
                };
                assert_eq!(link.marking.rule, rule);
                for (got, want) in c.classes.iter().zip(&classes) {
                    assert_eq!(got.name, want.name);
                    assert_eq!(
                        got.policy.link.priority.is_some(),
                        want.priority,
                        "{}",
                        want.name
                    );
                    if !want.priority {
                        assert_eq!(got.policy.link.weight, want.weight, "{}", want.name);
                    }
                }
            }
        }
    }

    #[test]
    fn htb_gets_rate_by_weight_ceil_at_the_link_and_a_filter_per_port() {
        let classes = Scenario::Priority.classes();
        let pairs: Vec<(&ClassSpec, u16)> = classes.iter().zip([7000, 7001, 7002]).collect();
        let cmds: Vec<String> = htb_commands("out0", 1_000_000_000, &pairs)
            .iter()
            .map(|c| c.join(" "))
            .collect();
        assert!(cmds[1].contains("classid 1:1 htb rate 1000000000bit ceil 1000000000bit"));
        assert!(cmds
            .iter()
            .any(|c| c.contains("classid 1:10 htb rate 10000000bit ceil 1000000000bit prio 0")));
        assert!(cmds
            .iter()
            .any(|c| c.contains("classid 1:11 htb rate 250000000bit ceil 1000000000bit prio 1")));
        assert!(cmds
            .iter()
            .any(|c| c.contains("classid 1:12 htb rate 750000000bit ceil 1000000000bit prio 1")));
        assert!(cmds
            .iter()
            .any(|c| c.ends_with("match ip dport 7002 0xffff flowid 1:12")));
    }

    #[test]
    fn htb_backlogs_are_read_per_class() {
        let text = "class htb 1:1 root rate 1Gbit ceil 1Gbit burst 1375b cburst 1375b \n \
                    Sent 10 bytes 1 pkt (dropped 0, overlimits 0 requeues 0) \n backlog 0b 0p requeues 0\n\
                    class htb 1:10 parent 1:1 leaf 8001: prio 1 rate 250Mbit ceil 1Gbit\n \
                    Sent 10 bytes 1 pkt (dropped 0, overlimits 0 requeues 0) \n backlog 3028b 2p requeues 0\n\
                    class htb 1:11 parent 1:1 leaf 8002: prio 1 rate 750Mbit ceil 1Gbit\n \
                    backlog 12Kb 9p requeues 0\n";
        assert_eq!(
            parse_htb_backlogs(text, 3),
            [Some(3028), Some(12 * 1024), None]
        );
    }
}
