//! Runs one scenario (optionally from a TOML file given as the first argument) and prints its
//! report as JSON, speed included:
//! `cargo run --profile optimised -p metronome-sim --example speed`.

use metronome_sim::{run, BackpressureMode, Scenario, ShaperSpec};

fn main() {
    let scenario = match std::env::args().nth(1) {
        Some(path) => {
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("cannot read {path}: {e}");
                    std::process::exit(2);
                }
            };
            match toml::from_str::<Scenario>(&text) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("bad scenario {path}: {e}");
                    std::process::exit(2);
                }
            }
        }
        None => Scenario {
            flows: 16_000,
            duration_ns: 2_000_000_000,
            warmup_ns: 500_000_000,
            line_rate_bps: 10_000_000_000,
            shaper: ShaperSpec::TimingWheel {
                granularity_ns: 2_000,
                horizon_ns: 2_000_000_000,
                aggregate_bps: Some(5_000_000_000),
                per_flow_bps: None,
                capacity_packets: 70_000,
            },
            backpressure: BackpressureMode::default(),
            start_spread_ns: 100_000_000,
            ..Scenario::default()
        },
    };
    match run(&scenario) {
        Ok(r) => {
            println!("{}", serde_json::to_string_pretty(&r).unwrap_or_default());
        }
        Err(e) => {
            eprintln!("invalid scenario: {e}");
            std::process::exit(2);
        }
    }
}
