//! `metronome bench`: runs the suite of `metronome-bench` and prints a table (or `--json`), with
//! the paper's figures beside ours and the project's targets checked from the measured numbers.

use anyhow::{bail, Context};
use clap::Args;
use metronome_bench::report::{Report, ResultRow};
use metronome_bench::suite::{run_suite, SuiteOptions, STRUCTURES};
use std::io::Write;
use std::path::PathBuf;

/// Options of `metronome bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Stop at 256 000 resident packets (finishes in under a minute).
    #[arg(long)]
    quick: bool,
    /// Print exactly one JSON document on stdout (progress goes to stderr).
    #[arg(long)]
    json: bool,
    /// Write SVG plots into this directory.
    #[arg(long, value_name = "DIR")]
    svg: Option<PathBuf>,
    /// Only these structures (comma-separated).
    #[arg(long, value_delimiter = ',')]
    structures: Vec<String>,
    /// Only these resident counts (comma-separated).
    #[arg(long, value_delimiter = ',')]
    resident: Vec<u64>,
    /// Packets released per repetition.
    #[arg(long)]
    packets: Option<u64>,
    /// Repetitions per row (the median is reported).
    #[arg(long)]
    repetitions: Option<usize>,
    /// Instead of the queue suite, benchmark the daemon's whole per-packet path (parse,
    /// classify, timestamp, wheel, release) through in-memory ports, with a per-stage breakdown.
    #[arg(long)]
    daemon: bool,
    /// With `--daemon`: instead of the breakdown, the engine's per-packet cost with this many
    /// classes (comma-separated, each 1 to 1 048 576), class `i` matching one destination /32.
    #[arg(long, value_delimiter = ',', requires = "daemon")]
    classes: Vec<usize>,
    /// With `--classes`: measure each count again as the leaves of a three-level class tree of
    /// this many parents (under one top class per 100 parents), beside the flat classes.
    #[arg(long, value_name = "PARENTS", requires = "classes")]
    tree: Option<usize>,
}

/// Runs the command.
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    if args.daemon {
        return run_daemon(&args);
    }
    let mut opts = SuiteOptions::new(args.quick);
    if !args.structures.is_empty() {
        for s in &args.structures {
            if !STRUCTURES.contains(&s.as_str()) {
                bail!(
                    "unknown structure {s:?}: expected one of {}",
                    STRUCTURES.join(", ")
                );
            }
        }
        opts.structures = args.structures.clone();
    }
    if !args.resident.is_empty() {
        if let Some(bad) = args.resident.iter().find(|&&n| n == 0) {
            bail!("--resident {bad}: a resident count must be at least 1");
        }
        opts.resident = args.resident.clone();
    }
    if let Some(p) = args.packets {
        opts.packets = p.max(1);
    }
    if let Some(r) = args.repetitions {
        opts.repetitions = r.max(1);
    }
    let report = run_suite(&opts, |what| eprintln!("bench: {what}"));
    if let Some(dir) = &args.svg {
        let files = metronome_bench::plot::write_plots(&report, dir)
            .with_context(|| format!("writing plots into {}", dir.display()))?;
        for f in files {
            eprintln!("bench: wrote {}", f.display());
        }
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer(&mut out, &report)?;
        writeln!(out)?;
    } else {
        print_tables(&mut out, &report)?;
    }
    Ok(())
}

fn find<'a>(rows: &'a [ResultRow], structure: &str, resident: u64) -> Option<&'a ResultRow> {
    rows.iter()
        .find(|r| r.structure == structure && r.resident == resident)
}

fn print_tables(out: &mut impl Write, r: &Report) -> std::io::Result<()> {
    writeln!(out, "metronome bench on {}", r.machine)?;
    let w = &r.workload;
    writeln!(
        out,
        "steady state: {} flows, {} Mpps departures, {} B packets, {} ns steps; wheel {} ns x {} s\n",
        w.flows,
        w.departure_pps as f64 / 1e6,
        w.packet_len,
        w.step_ns,
        w.wheel_granularity_ns,
        w.wheel_horizon_s
    )?;
    let mut residents: Vec<u64> = r.results.iter().map(|x| x.resident).collect();
    residents.dedup();
    let structures: Vec<&str> = STRUCTURES
        .iter()
        .copied()
        .filter(|s| r.results.iter().any(|x| x.structure == *s))
        .collect();
    writeln!(
        out,
        "ns per packet (one enqueue + one dequeue), median of repetitions"
    )?;
    write!(out, "{:>10}", "resident")?;
    for s in &structures {
        write!(out, " {s:>17}")?;
    }
    writeln!(out)?;
    for &n in &residents {
        write!(out, "{n:>10}")?;
        for s in &structures {
            match find(&r.results, s, n) {
                Some(x) if x.rejected == 0 => write!(out, " {:>17.1}", x.ns_per_packet)?,
                Some(x) => write!(out, " {:>9.1} ({}rej)", x.ns_per_packet, x.rejected)?,
                None => write!(out, " {:>17}", "-")?,
            }
        }
        writeln!(out)?;
    }
    writeln!(
        out,
        "{:>10}   harness floor (the same loop around a trivial FIFO): {}",
        "floor",
        r.harness_floor
            .iter()
            .map(|f| format!("{:.1} ns @ {}", f.ns_per_packet, f.resident))
            .collect::<Vec<_>>()
            .join(", ")
    )?;
    writeln!(
        out,
        "\nratio to timing_wheel (higher = timing_wheel faster)"
    )?;
    for &n in &residents {
        let Some(tw) = find(&r.results, "timing_wheel", n) else {
            continue;
        };
        write!(out, "{n:>10}")?;
        for s in &structures {
            match find(&r.results, s, n) {
                Some(x) => write!(out, " {:>16.2}x", x.ns_per_packet / tw.ns_per_packet)?,
                None => write!(out, " {:>17}", "-")?,
            }
        }
        writeln!(out)?;
    }
    writeln!(
        out,
        "\nCarousel Table 1 (2017 hardware): Global Pool 11-12 ns, STDLIST 21-22 ns, flat in N."
    )?;
    print_targets(out, r)?;
    writeln!(
        out,
        "\nshaper memory per queued packet (bytes in use / resident)"
    )?;
    for &n in &residents {
        write!(out, "{n:>10}")?;
        for s in &structures {
            match find(&r.results, s, n) {
                Some(x) => write!(out, " {:>17.1}", x.bytes_per_packet)?,
                None => write!(out, " {:>17}", "-")?,
            }
        }
        writeln!(out)?;
    }
    writeln!(out, "\nmemory of the fixed structure (no packets queued)")?;
    for m in &r.memory {
        writeln!(
            out,
            "  {:<18} {:<16} {:>14} bytes ({:>9.2} MB)  {}",
            m.structure,
            m.config,
            m.bytes,
            m.bytes as f64 / 1e6,
            m.source
        )?;
    }
    writeln!(
        out,
        "  FlowBundler Fig. 9: MLTW ~1.1 MB; Carousel 1 us x 10 s ~236 MB, 0.1 us ~2.3 GB"
    )?;
    writeln!(
        out,
        "\ninter-flow batching: packets per dequeue call (event-driven)"
    )?;
    for b in &r.batching {
        writeln!(
            out,
            "  {:<14} {:>3} destinations: {:>6.2} packets/call  (max early {} ns, max late {} ns)",
            b.structure, b.destinations, b.packets_per_dequeue, b.max_early_ns, b.max_late_ns
        )?;
    }
    writeln!(
        out,
        "  FlowBundler: 7.3x more packets per dequeue than a 1 us timing wheel"
    )?;
    Ok(())
}

/// The project's targets, checked against this run's numbers (never asserted in tests).
fn print_targets(out: &mut impl Write, r: &Report) -> std::io::Result<()> {
    let ns = |s: &str, n: u64| find(&r.results, s, n).map(|x| x.ns_per_packet);
    let floor = |n: u64| {
        r.harness_floor
            .iter()
            .find(|f| f.resident == n)
            .map(|f| f.ns_per_packet)
    };
    let verdict = |ok: bool| if ok { "met" } else { "NOT met" };
    writeln!(out, "\ntargets (this run)")?;
    let worst = r
        .results
        .iter()
        .filter(|x| x.structure == "timing_wheel" && x.resident <= 256_000)
        .max_by(|a, b| a.ns_per_packet.total_cmp(&b.ns_per_packet));
    if let Some(w) = worst {
        let net = floor(w.resident).map_or(f64::NAN, |f| w.ns_per_packet - f);
        writeln!(
            out,
            "  timing_wheel <= 5 ns/packet up to 256k: worst {:.1} ns at {} ({:.1} ns above the harness floor): {}",
            w.ns_per_packet,
            w.resident,
            net,
            verdict(w.ns_per_packet <= 5.0)
        )?;
    }
    if let (Some(big), Some(small)) = (ns("timing_wheel", 20_000_000), ns("timing_wheel", 1_000)) {
        writeln!(
            out,
            "  timing_wheel at 20M <= 2x its 1k cost: {:.2}x: {}",
            big / small,
            verdict(big <= 2.0 * small)
        )?;
    }
    let n = 256_000;
    if let (Some(tw), Some(list)) = (ns("timing_wheel", n), ns("timing_wheel_list", n)) {
        writeln!(
            out,
            "  pool vs per-packet list at {n}: {:.2}x (>= 1.8x): {}",
            list / tw,
            verdict(list / tw >= 1.8)
        )?;
    }
    for other in ["binary_heap", "fq_tree"] {
        if let (Some(tw), Some(o)) = (ns("timing_wheel", n), ns(other, n)) {
            writeln!(
                out,
                "  timing_wheel vs {other} at {n}: {:.2}x (>= 4x): {}",
                o / tw,
                verdict(o / tw >= 4.0)
            )?;
        }
    }
    let worst_mltw = r
        .results
        .iter()
        .filter(|x| x.structure == "mltw")
        .filter_map(|m| ns("timing_wheel", m.resident).map(|tw| (m.ns_per_packet / tw, m.resident)))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    if let Some((ratio, n)) = worst_mltw {
        writeln!(
            out,
            "  mltw within 1.3x of timing_wheel: worst {ratio:.2}x at {n}: {}",
            verdict(ratio <= 1.3)
        )?;
    }
    if let Some(m) = r.memory.iter().find(|m| m.structure == "mltw") {
        writeln!(
            out,
            "  mltw {} covering >= 256 s in <= 1.5 MB: {:.2} MB over {:.3e} s: {}",
            m.config,
            m.bytes as f64 / 1e6,
            m.horizon_s,
            verdict(m.bytes as f64 <= 1.5e6 && m.horizon_s >= 256.0)
        )?;
    }
    let batch = |s: &str| {
        r.batching
            .iter()
            .find(|b| b.structure == s && b.destinations == 16)
            .map(|b| b.packets_per_dequeue)
    };
    if let (Some(m), Some(t)) = (batch("mltw"), batch("timing_wheel")) {
        writeln!(
            out,
            "  mltw packets per dequeue vs 1 us wheel, 16 destinations: {:.1}x (>= 5x): {}",
            m / t,
            verdict(m / t >= 5.0)
        )?;
    }
    Ok(())
}

/// `metronome bench --daemon`: the in-memory pipeline benchmark
/// ([`metronome_bench::pipeline`]).
fn run_daemon(args: &BenchArgs) -> anyhow::Result<()> {
    use metronome_bench::pipeline::{self, PipelineOptions, Stage};
    let mut opts = PipelineOptions::new(args.quick);
    if let Some(p) = args.packets {
        opts.packets = p.max(1);
    }
    if let Some(r) = args.repetitions {
        opts.repetitions = r.max(1);
    }
    if !args.classes.is_empty() {
        return run_classes(args, &opts);
    }
    let report = pipeline::run(&opts, |what| eprintln!("bench --daemon: {what}"));
    let machine = metronome_bench::machine::describe();
    let mut out = std::io::stdout().lock();
    if args.json {
        let mut doc = serde_json::to_value(&report)?;
        doc["machine"] = serde_json::Value::String(machine);
        serde_json::to_writer(&mut out, &doc)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(out, "metronome bench --daemon on {machine}")?;
    writeln!(
        out,
        "workload: {} IPv4 TCP flows of {} B frames in 4 classes (2 aggregate-limited, 1 paced, 1 unshaped), \
         {} Gbit/s offered in simulated time, batches of {}, {} packets x {} repetitions\n",
        report.flows,
        report.frame_len,
        report.offered_bps as f64 / 1e9,
        report.batch,
        report.packets,
        opts.repetitions
    )?;
    writeln!(
        out,
        "{:<16} {:>10} {:>10}  what",
        "stage", "ns/packet", "delta"
    )?;
    let mut prev = 0.0;
    for (stage, row) in Stage::ALL.iter().zip(&report.stages) {
        writeln!(
            out,
            "{:<16} {:>10.1} {:>+10.1}  {}",
            row.stage,
            row.ns_per_packet,
            row.ns_per_packet - prev,
            stage.describe()
        )?;
        prev = row.ns_per_packet;
    }
    writeln!(
        out,
        "\nend to end {:.1} ns/packet; without the port copy (engine - io) {:.1} ns/packet; target {:.0} ns: {}",
        report.end_to_end_ns,
        report.pipeline_ns,
        report.target_ns,
        if report.pipeline_ns <= report.target_ns { "met" } else { "NOT met" }
    )?;
    writeln!(
        out,
        "engine: {} forwarded unshaped, {} released from the wheel, {} dropped, {} queued at the end",
        report.forwarded, report.released, report.dropped, report.queued_at_end
    )?;
    writeln!(
        out,
        "fair queueing (limited classes fair = true): {:.1} ns/packet, {:.2}x the single-FIFO engine; target {:.1}x: {} ({} dropped)",
        report.fair_ns,
        report.fair_ratio,
        report.fair_target_ratio,
        if report.fair_ratio <= report.fair_target_ratio { "met" } else { "NOT met" },
        report.fair_dropped
    )?;
    let sc = &report.scaling;
    writeln!(
        out,
        "\nsilos (Carousel §5.3): each silo a thread with its own engine, in-memory ports and traffic, {} packets per silo",
        sc.packets_per_silo
    )?;
    writeln!(
        out,
        "{:<6} {:>12} {:>12} {:>16}  pinned",
        "silos", "Mpps", "Mpps/silo", "cpu ns/pkt/silo"
    )?;
    for row in [&sc.one, &sc.two] {
        let cpus: Vec<String> = row
            .pinned
            .iter()
            .map(|p| p.map_or("no".to_owned(), |c| format!("cpu {c}")))
            .collect();
        writeln!(
            out,
            "{:<6} {:>12.2} {:>12.2} {:>16.1}  {}",
            row.silos,
            row.packets_per_sec / 1e6,
            row.packets_per_sec / 1e6 / row.silos as f64,
            row.cpu_ns_per_packet,
            cpus.join(", ")
        )?;
    }
    writeln!(
        out,
        "2 silos / 1 silo: {:.2}x; target {:.1}x: {}{}",
        sc.ratio,
        sc.target_ratio,
        if sc.ratio >= sc.target_ratio {
            "met"
        } else {
            "NOT met"
        },
        if sc.dropped > 0 {
            format!(" ({} drops: not like for like)", sc.dropped)
        } else {
            String::new()
        }
    )?;
    writeln!(
        out,
        "with two whole cores (thread CPU time per packet, 2 x one / two): {:.2}x",
        sc.cpu_ratio
    )?;
    Ok(())
}

/// `metronome bench --daemon --classes N,..` ([`metronome_bench::pipeline::classes`]).
fn run_classes(
    args: &BenchArgs,
    opts: &metronome_bench::pipeline::PipelineOptions,
) -> anyhow::Result<()> {
    use metronome_bench::pipeline::classes;
    let max = metronome_daemon::ops::config::MAX_CLASSES;
    if let Some(bad) = args.classes.iter().find(|&&n| n == 0 || n > max) {
        bail!("--classes {bad}: between 1 and {max} classes");
    }
    if args.tree == Some(0) {
        bail!("--tree 0: at least one parent");
    }
    let rows = classes::run(
        &args.classes,
        args.tree,
        opts.batch,
        opts.packets,
        opts.repetitions,
        |what| eprintln!("bench --daemon --classes: {what}"),
    );
    let machine = metronome_bench::machine::describe();
    let mut out = std::io::stdout().lock();
    if args.json {
        let doc = serde_json::json!({ "machine": machine, "classes": rows });
        serde_json::to_writer(&mut out, &doc)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(out, "metronome bench --daemon --classes on {machine}")?;
    writeln!(
        out,
        "the real Engine end to end; class i matches destination /32 number i; {} flows spread \
         over the classes",
        metronome_bench::pipeline::FLOWS
    )?;
    writeln!(
        out,
        "{:>8} {:>7} {:>7} {:>12} {:>9} {:>10} {:>10} {:>10} {:>11} {:>10} {:>11} {:>12} {:>8}",
        "classes",
        "parents",
        "active",
        "ns/packet",
        "vs base",
        "parse ms",
        "engine ms",
        "scrape ms",
        "scrape MB",
        "http ms",
        "B/class",
        "B/active",
        "dropped"
    )?;
    // A tree's row is read against the flat row of its count just before it, a flat row
    // against the first.
    let first = rows.first().map_or(1.0, |r| r.ns_per_packet);
    let mut flat = first;
    for r in &rows {
        let base = if r.parents == 0 {
            flat = r.ns_per_packet;
            first
        } else {
            flat
        };
        writeln!(
            out,
            "{:>8} {:>7} {:>7} {:>12.1} {:>8.2}x {:>10.1} {:>10.1} {:>10.1} {:>11.2} {:>10.1} {:>11.0} {:>12.0} {:>8}",
            r.classes,
            r.parents,
            r.active,
            r.ns_per_packet,
            r.ns_per_packet / base,
            r.parse_ms,
            r.engine_ms,
            r.encode_ms,
            r.encode_bytes as f64 / 1e6,
            r.scrape_http_ms,
            r.bytes_per_class,
            r.bytes_per_active_class,
            r.dropped
        )?;
    }
    Ok(())
}
