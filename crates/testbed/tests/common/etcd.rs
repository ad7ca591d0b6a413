//! What the etcd tests (`etcd_cluster.rs`, `cluster_agent.rs`) share: which member leads.
//! Included by path (`#[path]`), not through `common/mod.rs`, which is the real-traffic tests'.

use etcd_client::{Client, ConnectOptions};

/// The index (in `endpoints`) of the member that its peers follow, asked of each member
/// (connecting with `options`).
pub async fn leader_index(endpoints: &[String], options: Option<ConnectOptions>) -> usize {
    for (index, endpoint) in endpoints.iter().enumerate() {
        let mut one = Client::connect(std::slice::from_ref(endpoint), options.clone())
            .await
            .unwrap_or_else(|e| panic!("connecting to {endpoint}: {e}"));
        let status = one
            .status()
            .await
            .unwrap_or_else(|e| panic!("status of {endpoint}: {e}"));
        let member = status.header().unwrap().member_id();
        if status.leader() == member {
            return index;
        }
    }
    panic!("no member of {endpoints:?} says it is the leader");
}
