//! The daemon's per-packet cost against the number of classes (`metronome bench --daemon
//! --classes N,..`): the real `Engine` end to end, as [`Stage::Engine`] of the breakdown, on a
//! configuration of `N` classes, class `i` matching destination `/32` number `i` with an
//! aggregate rate, and the [`FLOWS`] flows of the workload spread evenly over the classes (flow
//! `f` to class `f × N / FLOWS`), so that the classifier's rules are hit from the first to the
//! last. Each class's rate is the offered load over the classes with traffic, plus 4 %, so every
//! class keeps up and the backlog stays steady, as in the breakdown's workload.
//!
//! Besides ns per packet, each row says what building the configuration and the engine took
//! (parsing and validating the text, then `Engine::new`): the part of a daemon's start-up that
//! grows with the classes (the ports, the pool and the wheel are the same at every `N`); what
//! encoding that engine's metrics takes and weighs, the body of one scrape, and what one scrape
//! through the endpoint on loopback takes; and the resident memory per class, idle and with
//! traffic.

use super::{Rig, Stage, FLOWS, FRAME_LEN, OFFERED_BPS};
use metronome_core::Duration;
use metronome_daemon::ops::config::Config;
use metronome_daemon::ops::metrics::Metrics;
use std::fmt::Write as _;
use std::time::Instant;

/// One `N` of [`run`].
#[derive(Clone, Debug, serde::Serialize)]
pub struct ClassesRow {
    /// Classes in the configuration (the leaves, with a tree).
    pub classes: usize,
    /// Parents of the leaves in a three-level class tree ([`tree_text`]); 0: the classes stand
    /// alone.
    pub parents: usize,
    /// Classes that receive traffic (at most [`FLOWS`]).
    pub active: usize,
    /// Median ns per packet, end to end.
    pub ns_per_packet: f64,
    /// Every repetition's ns per packet.
    pub repetitions_ns: Vec<f64>,
    /// Milliseconds to parse and validate the configuration text.
    pub parse_ms: f64,
    /// Milliseconds for `Engine::new` on it.
    pub engine_ms: f64,
    /// Milliseconds to encode that engine's metrics in the Prometheus text format: what a scrape
    /// of the metrics endpoint costs before it is sent.
    pub encode_ms: f64,
    /// Bytes of that text.
    pub encode_bytes: usize,
    /// Milliseconds for one scrape of that engine's metrics through the endpoint on loopback
    /// (`GET /metrics`, the whole body read; `metronome_daemon::ops::metrics::http`); NaN when
    /// the endpoint could not be served or scraped.
    pub scrape_http_ms: f64,
    /// Resident memory the configuration and the engine added, per class: the process's
    /// resident set after `Engine::new` less before parsing, over `classes` (0 where
    /// `/proc/self/statm` cannot be read). Memory freed by earlier rows may be reused, so read
    /// it at large `classes`, where the classes dominate.
    pub bytes_per_class: f64,
    /// Resident memory the traffic added, per class with traffic: after the warm-up less
    /// before it, over `active` (the engine allocates nothing per packet, so this stays near
    /// 0).
    pub bytes_per_active_class: f64,
    /// Packets the engine dropped in its last repetition (should be 0).
    pub dropped: u64,
}

/// The `i`-th destination address of the workload: 10.(2 + i / 65 536).(i / 256 % 256).(i % 256).
fn address(i: usize) -> [u8; 4] {
    [10, 2 + (i >> 16) as u8, (i >> 8) as u8, i as u8]
}

/// The configuration text of `n` classes (see the module docs).
pub fn config_text(n: usize) -> String {
    let active = n.clamp(1, FLOWS);
    let rate = OFFERED_BPS / active as u64 * 104 / 100;
    let mut text = String::from(
        "[interfaces]\ninside = \"bench-in\"\noutside = \"bench-out\"\n\n\
         [wheel]\ngranularity = \"2us\"\nhorizon = \"2s\"\n",
    );
    for i in 0..n {
        let [a, b, c, d] = address(i);
        let _ = write!(
            text,
            "\n[[class]]\nname = \"c{i}\"\nmatch = {{ dst = \"{a}.{b}.{c}.{d}\" }}\nrate = {rate}\nburst = \"15k\"\n"
        );
    }
    text
}

/// Classes at the top of the tree of [`tree_text`]: one per 100 parents.
fn roots(parents: usize) -> usize {
    parents.div_ceil(100).max(1)
}

/// [`config_text`]'s `n` classes as the leaves of a three-level class tree: `parents` parents
/// (leaf `i` under parent `i × parents / n`) under one class per 100 parents (parent `j` under
/// top class `j × tops / parents`). Every class above a leaf has the sum of its leaves' rates,
/// so the same traffic keeps up as in the flat configuration, and no `match`: it only gathers.
/// What the tree costs a packet is then the tree's own work: its ancestors' stamps at release
/// and the allocation passes.
pub fn tree_text(n: usize, parents: usize) -> String {
    let active = n.clamp(1, FLOWS);
    let rate = OFFERED_BPS / active as u64 * 104 / 100;
    let parents = parents.clamp(1, n.max(1));
    let tops = roots(parents);
    let mut text = String::from(
        "[interfaces]\ninside = \"bench-in\"\noutside = \"bench-out\"\n\n\
         [wheel]\ngranularity = \"2us\"\nhorizon = \"2s\"\n",
    );
    let leaves_of = |k: usize, of: usize| (n * (k + 1)).div_ceil(of) - (n * k).div_ceil(of);
    for t in 0..tops {
        let leaves = leaves_of(t, tops).max(1) as u64;
        let _ = write!(
            text,
            "\n[[class]]\nname = \"top{t}\"\nrate = {}\nburst = \"15k\"\n",
            rate * leaves
        );
    }
    for p in 0..parents {
        let leaves = leaves_of(p, parents).max(1) as u64;
        let _ = write!(
            text,
            "\n[[class]]\nname = \"p{p}\"\nparent = \"top{}\"\nrate = {}\nburst = \"15k\"\n",
            p * tops / parents,
            rate * leaves
        );
    }
    for i in 0..n {
        let [a, b, c, d] = address(i);
        let _ = write!(
            text,
            "\n[[class]]\nname = \"c{i}\"\nparent = \"p{}\"\nmatch = {{ dst = \"{a}.{b}.{c}.{d}\" }}\nrate = {rate}\nburst = \"15k\"\n",
            i * parents / n.max(1)
        );
    }
    text
}

/// [`FLOWS`] full-size TCP frames, flow `f` to the address of class `f × n / FLOWS`.
pub fn frames(n: usize) -> Vec<Vec<u8>> {
    (0..FLOWS)
        .map(|f| {
            let class = f * n.max(1) / FLOWS;
            let mut frame = vec![0u8; FRAME_LEN];
            let [hh, hl] = (f as u16).to_be_bytes();
            let spec = metronome_packet::build::TcpFrame {
                src_ip: [10, 1, hh, hl],
                dst_ip: address(class),
                src_port: 40_000 + f as u16,
                dst_port: 5_000,
                ecn: metronome_packet::Ecn::Ect0,
                seq: 1,
            };
            // FRAME_LEN holds the headers and is below the frame limit, so this cannot fail.
            let _ = metronome_packet::build::write_tcp_frame(&mut frame, &spec);
            frame
        })
        .collect()
}

/// Measures each of `counts`: `packets` per repetition, `repetitions` repetitions (median),
/// batches of `batch`; with `tree`, each count again as the leaves of a three-level tree of
/// that many parents ([`tree_text`]), beside its flat row. Every row is built and warmed up in
/// turn; then the repetitions take turns among the rows (the first of each row's, then the
/// second of each, ...), so that a machine whose speed drifts over the run changes every row
/// alike and the ratios between rows hold. Progress goes to `progress`.
pub fn run(
    counts: &[usize],
    tree: Option<usize>,
    batch: usize,
    packets: u64,
    repetitions: usize,
    mut progress: impl FnMut(&str),
) -> Vec<ClassesRow> {
    let shapes: Vec<(usize, usize)> = counts
        .iter()
        .flat_map(|&n| std::iter::once((n, 0)).chain(tree.map(|p| (n, p.clamp(1, n.max(1))))))
        .collect();
    let mut built: Vec<(ClassesRow, Rig)> = shapes
        .into_iter()
        .map(|(n, parents)| build(n, parents, batch, &mut progress))
        .collect();
    for _ in 0..repetitions.max(1) {
        for (row, rig) in &mut built {
            let start = Instant::now();
            let done = rig.steps(packets);
            row.repetitions_ns
                .push(start.elapsed().as_nanos() as f64 / done.max(1) as f64);
        }
    }
    built
        .into_iter()
        .map(|(mut row, rig)| {
            let mut sorted = row.repetitions_ns.clone();
            sorted.sort_by(f64::total_cmp);
            row.ns_per_packet = sorted[sorted.len() / 2];
            row.dropped = rig.totals().dropped;
            row
        })
        .collect()
}

/// Row `n` classes (under `parents`, with a tree) without its repetitions: the configuration
/// parsed and the engine built (timed), its metrics encoded and scraped, then the rig that the
/// repetitions run, warmed up (so that the memory the traffic adds is measured in its row,
/// before the next row is built).
fn build(
    n: usize,
    parents: usize,
    batch: usize,
    progress: &mut impl FnMut(&str),
) -> (ClassesRow, Rig) {
    let text = if parents == 0 {
        progress(&format!("{n} classes"));
        config_text(n)
    } else {
        progress(&format!("{n} classes under {parents} parents"));
        tree_text(n, parents)
    };
    let rss_before = resident_bytes();
    let start = Instant::now();
    let config = Config::from_toml_str(&text, "bench_classes.toml")
        .expect("the generated configuration is valid");
    let parse_ms = start.elapsed().as_secs_f64() * 1e3;
    let metrics = Metrics::new();
    let start = Instant::now();
    let engine = crate::pipeline::daemon_engine(&config, 1024, &metrics);
    let engine_ms = start.elapsed().as_secs_f64() * 1e3;
    let rss_built = resident_bytes();
    let start = Instant::now();
    let text = metrics.encode();
    let encode_ms = start.elapsed().as_secs_f64() * 1e3;
    let scrape_http_ms = scrape_ms(&metrics);
    drop(engine);
    let mut rig = Rig::new(&config, &frames(n), batch, Stage::Engine);
    let rss_idle = resident_bytes();
    rig.warm_up(Duration::from_millis(200));
    let rss_active = resident_bytes();
    let row = ClassesRow {
        classes: n,
        parents,
        active: n.clamp(1, FLOWS),
        ns_per_packet: 0.0,
        repetitions_ns: Vec::new(),
        parse_ms,
        engine_ms,
        encode_ms,
        encode_bytes: text.len(),
        scrape_http_ms,
        bytes_per_class: rss_built.saturating_sub(rss_before) as f64 / n as f64,
        bytes_per_active_class: rss_active.saturating_sub(rss_idle) as f64
            / n.clamp(1, FLOWS) as f64,
        dropped: 0,
    };
    (row, rig)
}

/// Milliseconds for one `GET /metrics` of `metrics` served on loopback, the body read whole
/// (at most [`SCRAPE_MAX_BYTES`]); NaN on failure.
fn scrape_ms(metrics: &Metrics) -> f64 {
    let Ok(server) = metrics.serve(std::net::SocketAddr::from(([127, 0, 0, 1], 0))) else {
        return f64::NAN;
    };
    let start = Instant::now();
    let deadline = std::time::Duration::from_secs(30);
    match metronome_daemon::ops::metrics::scrape_bounded(server.addr(), SCRAPE_MAX_BYTES, deadline)
    {
        Ok(_) => start.elapsed().as_secs_f64() * 1e3,
        Err(_) => f64::NAN,
    }
}

/// Largest scrape [`scrape_ms`] reads, 1 GiB: above the text of [`MAX_CLASSES`] classes (about
/// 900 bytes a class).
///
/// [`MAX_CLASSES`]: metronome_daemon::ops::config::MAX_CLASSES
const SCRAPE_MAX_BYTES: usize = 1 << 30;

/// The process's resident set in bytes (`/proc/self/statm`'s second field, in pages of 4 KiB,
/// the page size of the x86-64 and aarch64 Linux this runs on); 0 where it cannot be read.
fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_flow_lands_in_its_class_and_the_classes_span_the_rules() {
        let n = 5_000;
        let config = Config::from_toml_str(&config_text(n), "t.toml").unwrap();
        assert_eq!(config.classes.len(), n);
        let classifier = config.classifier();
        let frames = frames(n);
        let mut seen = Vec::new();
        for (f, frame) in frames.iter().enumerate() {
            let metronome_packet::Parsed::Ip(ip) = metronome_packet::parse(frame) else {
                panic!("flow {f}: not an IP frame");
            };
            let class = classifier.class_of(&ip);
            assert_eq!(class.index(), f * n / FLOWS + 1, "flow {f}");
            seen.push(class);
        }
        assert_eq!(seen.last().unwrap().index(), n - n / FLOWS + 1);
    }

    #[test]
    fn classes_past_sixteen_bit_ids_all_get_their_state_and_series() {
        // More than a 16-bit class id numbers (65 535 with the default class).
        let n = 70_000;
        let config = Config::from_toml_str(&config_text(n), "t.toml").unwrap();
        let metrics = Metrics::new();
        let _engine = crate::pipeline::daemon_engine(&config, 1024, &metrics);
        let series = metrics
            .encode()
            .lines()
            .filter(|l| l.starts_with("metronome_class_packets_total{"))
            .count();
        assert_eq!(series, n + 1, "every class and the default one");
    }

    #[test]
    fn a_small_run_forwards_without_drops() {
        let rows = run(&[10, 300], None, 64, 2_000, 1, |_| {});
        assert_eq!(rows.len(), 2);
        for r in &rows {
            assert_eq!(r.dropped, 0, "{r:?}");
            assert!(r.ns_per_packet > 0.0);
        }
    }

    #[test]
    fn the_tree_has_three_levels_and_its_leaves_keep_up_as_the_flat_classes_do() {
        let (n, parents) = (2_000, 20);
        let config = Config::from_toml_str(&tree_text(n, parents), "t.toml").unwrap();
        assert_eq!(config.classes.len(), 1 + parents + n);
        let tops = config
            .classes
            .iter()
            .filter(|c| c.tree.parent.is_none())
            .count();
        assert_eq!(tops, 1);
        assert!(config.classes[..1 + parents]
            .iter()
            .all(|c| c.tree.gathers_only));
        let rows = run(&[n], Some(parents), 32, 20_000, 1, |_| {});
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].parents, rows[1].parents), (0, parents));
        assert!(rows.iter().all(|r| r.dropped == 0), "{rows:?}");
    }
}
