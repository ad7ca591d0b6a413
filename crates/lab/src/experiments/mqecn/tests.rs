//! The `mqecn` experiment at small scale: the testbed port (1 Gbit/s, 250 µs, 96 KB, K = 32 KB,
//! 4 DWRR queues) for 200 ms of long-lived flows, or 150 web-search flows.

use super::*;
use crate::experiments::simulated::without_speed;

const PORT: &str = "port = \"1g\"\nline_rate_bps = 1_000_000_000\nbase_rtt_us = 250\n\
    buffer_bytes = 96_000\nqueues = 4\nquantum_bytes = 1500\nstandard_threshold_bytes = 32_000\n\
    beta = 0.75\ninitial_cwnd = 10\nrto_min_us = 10_000\nseed = 1\n\
    schemes = [\"per-queue-standard\", \"per-queue-min\", \"per-port\", \"mq-ecn\"]\n";

fn long_lived(flows: &str, senders: &str) -> Point {
    let text = format!(
        "{PORT}workload = \"long_lived\"\nflows = \"{flows}\"\nsenders = \"{senders}\"\n\
         duration_ms = 200\nwarmup_ms = 50\n"
    );
    Point::new(toml::from_str(&text).expect("test point parses"))
}

fn num(rows: &[Row], scheme: &str, column: &str) -> f64 {
    let row = rows
        .iter()
        .find(|r| r.get("scheme").and_then(|v| v.as_str()) == Some(scheme))
        .unwrap_or_else(|| panic!("no {scheme} row"));
    super::super::rows::num(row, column)
}

#[test]
fn one_row_per_scheme_with_mq_ecn_sharing_equally_and_per_port_not() {
    let rows = run(&long_lived("1+4", "per_service")).expect("runs");
    assert_eq!(rows.len(), 4);
    assert!(
        num(&rows, "mq-ecn", "share_max_min_ratio") < 1.05,
        "{rows:?}"
    );
    assert!(
        num(&rows, "per-port", "share_max_min_ratio") > 1.2,
        "{rows:?}"
    );
    assert_eq!(num(&rows, STANDARD, "avg_queue_vs_standard_pct"), 0.0);
    assert!(
        num(&rows, "mq-ecn", "avg_queue_vs_standard_pct") < -30.0,
        "{rows:?}"
    );
    assert_eq!(num(&rows, "mq-ecn", "queues_active"), 2.0);
}

#[test]
fn poisson_rows_have_fct_columns_and_are_deterministic() {
    let text = format!(
        "{PORT}workload = \"poisson\"\nload = 0.5\nflow_count = 120\nservices = 4\nhosts = 8\n\
         drain_ms = 2000\nservice_weights = []\n"
    );
    let p = Point::new(toml::from_str(&text).expect("test point parses"));
    let a = run(&p).expect("runs");
    let b = run(&p).expect("runs");
    assert_eq!(without_speed(&a), without_speed(&b));
    for scheme in ["mq-ecn", STANDARD] {
        assert_eq!(num(&a, scheme, "unfinished_flows"), 0.0);
        assert!(num(&a, scheme, "fct_small_p99_us") >= 250.0);
        assert!(num(&a, scheme, "small_flows") > 30.0);
        let pct = num(&a, scheme, "small_timeout_pct");
        assert!((0.0..=100.0).contains(&pct));
        assert!(num(&a, scheme, "fct_small_p99_no_timeout_us") >= 250.0);
    }
}

#[test]
fn bad_parameters_are_named() {
    let mut p = long_lived("1+x", "per_service");
    assert!(run(&p).unwrap_err().to_string().contains("flows"));
    p = long_lived("1+4", "everywhere");
    assert!(run(&p).unwrap_err().to_string().contains("senders"));
    let text = format!("{PORT}workload = \"long_lived\"\nflows = \"1\"\nsenders = \"per_flow\"\nduration_ms = 10\nwarmup_ms = 1\n")
        .replace("\"mq-ecn\"]", "\"red\"]");
    let p = Point::new(toml::from_str(&text).expect("parses"));
    assert!(run(&p).unwrap_err().to_string().contains("schemes"));
}
