//! What the cluster agent's tests against one etcd member (`cluster_tls.rs`, `cluster_auth.rs`)
//! share: an agent of one cluster class, and a sum of its series. Included by path (`#[path]`),
//! not through `common/mod.rs`, which is the real-traffic tests'.

use metronome_daemon::ops::cluster::{cells, prepare, Agent};
use metronome_daemon::ops::config::Config;
use metronome_daemon::ops::metrics::Metrics;

/// An agent of cluster `cluster` as host `host` on the etcd member at `url`, with `keys` (TOML
/// lines) added to its `[cluster]`: one class `tenant` of 100 Mbit/s, a period of 500 ms.
pub fn agent(cluster: &str, url: &str, host: &str, keys: &str) -> (Agent, Metrics) {
    let text = format!(
        "[interfaces]\ninside = \"a\"\noutside = \"b\"\n\
         [cluster]\nname = \"{cluster}\"\netcd = [\"{url}\"]\nhost = \"{host}\"\nperiod = \"500ms\"\n\
         lease = \"2s\"\n{keys}\
         [[class]]\nname = \"tenant\"\nrate = \"100mbit\"\nscope = \"cluster\"\n"
    );
    let config = Config::from_toml_str(&text, "test").expect("valid configuration");
    let metrics = Metrics::new();
    let agent = prepare(config.cluster.as_ref().unwrap())
        .expect("the agent's files read")
        .start(cells(&config, 1), metrics.cluster())
        .expect("agent started");
    (agent, metrics)
}

/// The sum of the series that start with `series` (a name, or a name and its labels).
pub fn value(metrics: &Metrics, series: &str) -> f64 {
    metrics
        .encode()
        .lines()
        .filter(|l| l.starts_with(series))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
