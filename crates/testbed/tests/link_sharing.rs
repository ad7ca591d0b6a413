//! `compare --link-sharing` in short: the two-class scenario (weights 1:3, 16 Cubic flows each,
//! ECN on) on a 1 Gbit/s link through Metronome's `[link]` and through kernel HTB, 1 s warm-up
//! and 2 s measured. Asserts that every class gets traffic through and that each shaper divides
//! the link by the weights within the tolerance below. Skips, saying why, without
//! CAP_NET_ADMIN (and fails instead under `METRONOME_REQUIRE_PRIVILEGED=1`); the topology is
//! removed on every path.

use metronome_testbed::compare::link_sharing::{self, LinkOptions, LinkShaper, Scenario};
use metronome_testbed::netns;
use std::time::Duration;

/// Largest distance of a class's share from its weight's share, percentage points: the spread
/// measured over runs of this short form on the loaded 2-core machine, with margin (see the
/// test's comment).
const SHARE_TOLERANCE_PP: f64 = 6.0;

fn short(shapers: Vec<LinkShaper>) -> LinkOptions {
    LinkOptions {
        scenarios: vec![Scenario::Shares],
        warmup: Duration::from_secs(1),
        measure: Duration::from_secs(2),
        shapers,
        ..LinkOptions::quick()
    }
}

#[test]
fn the_link_is_divided_by_the_weights() {
    let options = short(vec![
        LinkShaper::Metronome(link_sharing::Marking::MqEcn),
        LinkShaper::Htb,
    ]);
    let rows = match link_sharing::run(&options, &mut std::io::stdout()) {
        Ok(rows) => rows,
        Err(e) if e.is_missing_privilege() => {
            netns::skip_unprivileged("the_link_is_divided_by_the_weights", &e);
            return;
        }
        Err(e) => panic!("the link-sharing run failed: {e}"),
    };
    assert_eq!(rows.len(), 2 * options.shapers.len(), "{rows:#?}");
    for r in &rows {
        let expected = r.expected_share_pct.expect("weighted class");
        let share = r.share_pct.expect("weighted class");
        assert!(r.achieved_bps > 0.0, "{r:?}");
        assert!(
            (share - expected).abs() <= SHARE_TOLERANCE_PP,
            "{} class {}: share {share:.2} % against {expected:.2} %",
            r.shaper,
            r.class
        );
    }
}
