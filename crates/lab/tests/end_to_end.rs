//! A tiny wheel-granularity plan run end to end: the runner, the `--json` document, the files
//! written to a scratch directory and the table with the paper's rows.

use metronome_lab::output::{json_document, print_table, write_all, CSV_FILE, JSON_FILE};
use metronome_lab::{experiments, plans, run_plan, Plan, Progress, RunOptions};

/// The embedded plan cut down to a debug-build budget: 1 Gbit/s for 20 ms, 3 + 2 points.
fn tiny_plan() -> Plan {
    let mut plan = plans::load("wheel-granularity").expect("embedded plan loads");
    let text = r#"
        target_bps = 1_000_000_000
        flows = 4
        packets_per_flow = 4
        duration_ms = 20
        window_ms = 10
    "#;
    let overrides: toml::Table = toml::from_str(text).expect("overrides parse");
    plan.base.extend(overrides);
    plan.quick = Default::default();
    plan.sweeps[0].params.insert(
        "granularity_ns".into(),
        toml::Value::Array(vec![2_000.into(), 1_000_000.into(), 4_000_000.into()]),
    );
    plan.sweeps[1].params.insert(
        "granularity_ns".into(),
        toml::Value::Array(vec![4_000_000.into()]),
    );
    plan.sweeps[1]
        .params
        .insert("flows".into(), toml::Value::Array(vec![1.into(), 4.into()]));
    plan
}

fn run(plan: &Plan, jobs: usize) -> metronome_lab::Results {
    let experiment = experiments::lookup(&plan.experiment.name).expect("registered");
    run_plan(
        plan,
        experiment.run,
        &RunOptions { quick: false, jobs },
        &Progress::Hidden,
    )
    .expect("plan runs")
}

#[test]
fn wheel_granularity_is_deterministic_whatever_the_threads() {
    let plan = tiny_plan();
    let one = run(&plan, 1);
    let two = run(&plan, 2);
    assert_eq!(one, two);
    assert_eq!(one.rows.len(), 5);
    let sweeps: Vec<&str> = one.rows.iter().map(|r| r.sweep.as_str()).collect();
    assert_eq!(
        sweeps,
        [
            "granularity",
            "granularity",
            "granularity",
            "flows",
            "flows"
        ]
    );
}

#[test]
fn json_document_has_the_documented_shape() {
    let plan = tiny_plan();
    let results = run(&plan, 2);
    let text = serde_json::to_string(&json_document(&results)).expect("serialises");
    assert!(!text.contains('\n'), "one line");
    assert!(
        text.starts_with(r#"{"experiment":"wheel-granularity","rows":[{"shaper":"#),
        "{text}"
    );
    let doc: serde_json::Value = serde_json::from_str(&text).expect("parses back");
    let object = doc.as_object().expect("an object");
    assert_eq!(object.keys().collect::<Vec<_>>(), ["experiment", "rows"]);
    assert_eq!(doc["experiment"], "wheel-granularity");
    let rows = doc["rows"].as_array().expect("rows is an array");
    assert_eq!(rows.len(), 5);
    let mut columns: Vec<&str> = plan.column_names().collect();
    columns.sort_unstable();
    for row in rows {
        // serde_json::Value sorts keys; the order itself is checked on the text above and in
        // the CSV header below.
        let keys: Vec<&str> = row
            .as_object()
            .expect("row is an object")
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, columns, "row keys are exactly [columns]");
        assert!(row["deviation_pct"].is_number() && row["shaper"].is_string());
    }
    for pair in results.rows.iter().map(|r| &r.row) {
        assert_eq!(
            pair.columns().collect::<Vec<_>>(),
            plan.column_names().collect::<Vec<_>>()
        );
    }
}

#[test]
fn csv_json_and_plots_are_written() {
    let plan = tiny_plan();
    let results = run(&plan, 2);
    let dir = std::env::temp_dir().join(format!("metronome-lab-e2e-{}", std::process::id()));
    let written = write_all(&plan, &results, &dir).expect("outputs are written");
    let names: Vec<&str> = written
        .iter()
        .filter_map(|p| p.file_name()?.to_str())
        .collect();
    assert_eq!(
        names,
        [
            CSV_FILE,
            JSON_FILE,
            "deviation_vs_granularity.svg",
            "achieved_vs_granularity.svg",
            "deviation_vs_flows.svg"
        ]
    );
    let csv = std::fs::read_to_string(dir.join(CSV_FILE)).expect("csv readable");
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("shaper,target_bps,flows,granularity_ns,deviation_pct,achieved_bps")
    );
    assert_eq!(lines.count(), 5);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(JSON_FILE)).expect("json readable"))
            .expect("json parses");
    let expected = serde_json::to_value(json_document(&results)).expect("serialises");
    assert_eq!(json, expected);
    let svg = std::fs::read_to_string(dir.join("deviation_vs_flows.svg")).expect("svg readable");
    assert!(svg.contains("<svg") && svg.contains("granularity_ns=4000000"));
    std::fs::remove_dir_all(&dir).expect("scratch directory is removed");
}

#[test]
fn table_puts_the_paper_beside_ours() {
    let plan = tiny_plan();
    let results = run(&plan, 2);
    let mut out = Vec::new();
    print_table(&plan, &results, &mut out).expect("table prints");
    let text = String::from_utf8(out).expect("utf-8");
    assert!(
        text.contains("sweep granularity") && text.contains("sweep flows"),
        "{text}"
    );
    assert!(
        text.contains("paper granularity_ns=4000000: deviation_pct=6"),
        "{text}"
    );
    assert!(
        text.contains("flows=1 deviation_pct=") && text.contains("(sweep flows)"),
        "{text}"
    );
    assert!(
        text.contains("paper granularity_ns=8000:") && text.contains("ours: no row"),
        "{text}"
    );
}
