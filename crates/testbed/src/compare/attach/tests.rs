//! The attach comparison's options, configurations and rows.

use super::*;

#[test]
fn the_quick_grid_is_a_subset_of_the_full_one() {
    let (full, quick) = (AttachOptions::full(), AttachOptions::quick());
    assert!(quick
        .targets_bps
        .iter()
        .all(|t| full.targets_bps.contains(t)));
    assert_eq!(quick.flows, [16]);
    assert_eq!(quick.workloads, 8);
    assert_eq!(full.flows, [16, 256]);
    assert_eq!(
        full.targets_bps,
        [100_000_000, 1_000_000_000, 10_000_000_000]
    );
    assert_eq!(full.workload_shapers.len(), 3);
}

#[test]
fn the_host_config_names_the_uplink_and_the_rate() {
    let text = host_config_text(
        "up0",
        std::net::Ipv4Addr::new(10, 78, 0, 2),
        1_000,
        (true, true, true),
        &crate::compare::DaemonLoop::default(),
    );
    assert!(text.contains("attach = [\"up0\"]"), "{text}");
    assert!(text.contains("rate = 1000\n"), "{text}");
    assert!(text.contains("fair = true"), "{text}");
    assert!(
        text.contains(&format!("gso_slots = {FAIR_GSO_SLOTS}")),
        "{text}"
    );
    assert!(!text.contains("pace_sockets"), "{text}");
    let plain = host_config_text(
        "up0",
        std::net::Ipv4Addr::new(10, 78, 0, 2),
        1_000,
        (false, false, false),
        &crate::compare::DaemonLoop {
            busy_poll: false,
            timer_slack: None,
            arrival_slack: Some(metronome_core::Duration::ZERO),
        },
    );
    assert!(!plain.contains("fair"), "{plain}");
    assert!(plain.contains("pace_sockets = false\n"), "{plain}");
    assert!(text.contains("mode = \"ecn\""), "{text}");
    assert!(!plain.contains("backpressure"), "{plain}");
    assert!(
        plain.contains("[daemon]\narrival_slack = \"0ns\"\n"),
        "{plain}"
    );
    assert_eq!(
        daemon_config(&plain).unwrap().daemon.arrival_slack,
        metronome_core::Duration::ZERO
    );
    daemon_config(&text).unwrap();
}

#[test]
fn a_refused_config_is_an_error_not_a_figure() {
    let e = daemon_config("[interfaces]\nnonsense = 1\n").unwrap_err();
    assert!(e.starts_with("the daemon refused"), "{e}");
}

#[test]
fn ports_wrap_before_the_last_port() {
    let mut p = Ports(LAST_PORT - 3);
    assert_eq!(p.take(2), LAST_PORT - 3);
    assert_eq!(p.take(2), BASE_PORT);
}
