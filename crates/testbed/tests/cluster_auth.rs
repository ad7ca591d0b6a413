//! `[cluster] etcd_user` and `etcd_password_file` against an etcd with authentication on, set up
//! as docs/deploy.md "Cluster classes: etcd with users and roles" says: a root user, and per host
//! a user whose role reads the cluster's prefix and writes only that host's key. Two agents with
//! their users' passwords publish and read each other's records; a host's user cannot write the
//! other host's key (permission denied); an agent with a wrong password gets nowhere.
//!
//! Needs the `etcd` binary (Debian: etcd-server); without it the test fails, or skips saying why
//! under METRONOME_SKIP_PRIVILEGED=1.

use etcd_client::{Client, ConnectOptions, Permission};
#[path = "common/agent.rs"]
mod shared;

use metronome_daemon::ops::cluster::Agent;
use metronome_daemon::ops::metrics::Metrics;
use metronome_testbed::etcd::start_or_skip;
use shared::value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Longest wait for both agents to compute their shares: a few periods of 500 ms, with margin
/// for a loaded machine. A bound on correctness (they must get there), not a speed measurement.
const SHARED_WITHIN: Duration = Duration::from_secs(30);

/// The cluster's prefix and a class key of each host.
const CLUSTER_PREFIX: &str = "/metronome/auth/";
const KEY_A: &str = "/metronome/auth/tenant/a";
const KEY_B: &str = "/metronome/auth/tenant/b";

/// A directory for the password files, removed on drop.
struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes `password` to `dir/name` with mode 0600.
fn password_file(dir: &Path, name: &str, password: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("{password}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn options() -> ConnectOptions {
    ConnectOptions::new().with_timeout(Duration::from_secs(5))
}

/// The users and roles of the module docs, then authentication on.
async fn set_up_users(endpoints: &[String]) {
    let mut root = Client::connect(endpoints, Some(options())).await.unwrap();
    root.user_add("root", "root-password", None).await.unwrap();
    root.user_grant_role("root", "root").await.unwrap();
    for (host, key) in [("a", KEY_A), ("b", KEY_B)] {
        let role = format!("metronome-{host}");
        root.role_add(role.clone()).await.unwrap();
        root.role_grant_permission(role.clone(), Permission::read(CLUSTER_PREFIX).with_prefix())
            .await
            .unwrap();
        root.role_grant_permission(role.clone(), Permission::write(key))
            .await
            .unwrap();
        root.user_add(host, format!("{host}-password"), None)
            .await
            .unwrap();
        root.user_grant_role(host, role).await.unwrap();
    }
    root.auth_enable().await.unwrap();
}

/// An agent of cluster `auth` as host `host`, logging in to etcd as user `host` with the
/// password in `password_file`.
fn agent(url: &str, host: &str, password_file: &Path) -> (Agent, Metrics) {
    let keys = format!(
        "etcd_user = \"{host}\"\netcd_password_file = \"{}\"\n",
        password_file.display()
    );
    shared::agent("auth", url, host, &keys)
}

#[test]
fn agents_with_their_users_share_and_a_host_cannot_write_another_hosts_key() {
    let Some(etcd) = start_or_skip(1, "cluster_auth") else {
        return;
    };
    let endpoints = etcd.all_endpoints();
    let rt = runtime();
    rt.block_on(set_up_users(&endpoints));

    let dir = Dir(std::env::temp_dir().join(format!("mtr-etcd-auth-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let (_a, a) = agent(
        &endpoints[0],
        "a",
        &password_file(&dir.0, "a", "a-password"),
    );
    let (_b, b) = agent(
        &endpoints[0],
        "b",
        &password_file(&dir.0, "b", "b-password"),
    );
    let wrong = password_file(&dir.0, "wrong", "not-b-password");
    let (_intruder, intruder) = agent(&endpoints[0], "b", &wrong);

    // Each publishes its record and reads the other's: two idle hosts, half the limit each
    // once both have measured a period.
    let start = Instant::now();
    let shared = "metronome_cluster_state{state=\"shared\"}";
    let peers = "metronome_cluster_peers{class=\"tenant\"}";
    let share = "metronome_cluster_share_bps{class=\"tenant\"}";
    let half = |m: &Metrics| {
        value(m, shared) == 1.0 && value(m, peers) == 1.0 && value(m, share) == 50_000_000.0
    };
    while !(half(&a) && half(&b) && value(&intruder, "metronome_cluster_etcd_errors_total") >= 1.0)
    {
        assert!(
            start.elapsed() < SHARED_WITHIN,
            "the agents never shared half the limit each, or the intruder never failed:\n\
             a:\n{}\nb:\n{}\nintruder:\n{}",
            a.encode(),
            b.encode(),
            intruder.encode()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for (name, m) in [("a", &a), ("b", &b)] {
        assert!(value(m, "metronome_cluster_writes_total") >= 2.0, "{name}");
        assert_eq!(value(m, "metronome_cluster_etcd_reachable"), 1.0, "{name}");
    }
    // The wrong password: refused at each try, never written, at its floor.
    assert_eq!(value(&intruder, "metronome_cluster_etcd_reachable"), 0.0);
    assert_eq!(value(&intruder, "metronome_cluster_writes_total"), 0.0);
    assert_eq!(
        value(&intruder, "metronome_cluster_share_bps{class=\"tenant\"}"),
        1_000_000.0
    );

    rt.block_on(async {
        let as_a = options().with_user("a", "a-password");
        let mut client = Client::connect(&endpoints, Some(as_a)).await.unwrap();
        // Host a reads the whole cluster, b's record included.
        let records = client
            .get(
                CLUSTER_PREFIX,
                Some(etcd_client::GetOptions::new().with_prefix()),
            )
            .await
            .unwrap();
        let keys: Vec<&[u8]> = records.kvs().iter().map(|kv| kv.key()).collect();
        assert!(keys.contains(&KEY_B.as_bytes()), "{keys:?}");
        // It cannot write b's key, nor a key of a host of its own making.
        for key in [
            KEY_B,
            "/metronome/auth/tenant/fake",
            "/metronome/auth/tenant/ab",
        ] {
            let err = client.put(key, "{}", None).await.unwrap_err();
            assert!(
                err.to_string().contains("permission denied"),
                "{key}: {err}"
            );
        }
        // Without a user nothing is read.
        let mut anonymous = Client::connect(&endpoints, Some(options())).await.unwrap();
        assert!(anonymous.get(KEY_A, None).await.is_err());
    });
}
