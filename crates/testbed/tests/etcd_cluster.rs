//! What a cluster-wide limit needs from etcd, checked against real etcd members on loopback
//! (`metronome_testbed::etcd`) through the etcd-client crate: put and get, a lease that expires
//! once its holder stops the keep-alives (its key disappears), a watch from a past revision that
//! replays a put, put and get still working with one of three members killed, and a put that
//! fails with an error once all members are gone.
//!
//! Needs the `etcd` binary (Debian: etcd-server); without it the tests fail, or skip saying why
//! under METRONOME_SKIP_PRIVILEGED=1.

// Only the etcd helper of the shared test module: the rest is for the real-traffic tests.
#[path = "common/etcd.rs"]
mod etcd_common;

use etcd_client::{Client, ConnectOptions, EventType, PutOptions, WatchOptions};
use etcd_common::leader_index;
use metronome_testbed::etcd::start_or_skip;
use std::time::{Duration, Instant};

/// The per-request deadline of the clients here (etcd-client's `with_timeout`): a request to a
/// cluster without a quorum fails after it instead of waiting for one.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// The lease's time to live, seconds (etcd's unit for TTLs).
const LEASE_TTL_S: i64 = 2;

/// How long the lease's holder keeps it alive before stopping: longer than the TTL, so the key
/// outliving this proves the keep-alives work.
const KEEP_ALIVE_FOR: Duration = Duration::from_secs(3);

/// Upper bound for the lease's key to disappear after the keep-alives stop: the TTL plus etcd's
/// expiry check (every 500 ms, `lease/lessor.go`), with margin for a loaded machine. A bound
/// on correctness (the key must go), not a speed measurement.
const EXPIRY_BOUND: Duration = Duration::from_secs(20);

/// Upper bound for a request to fail once every member is gone: the request timeout plus the
/// connection attempts, with margin.
const FAILURE_BOUND: Duration = Duration::from_secs(30);

/// Upper bound for the two remaining members to elect a leader after the leader is killed: a
/// few election timeouts (etcd's default 1 000 ms) with margin for a loaded machine.
const RECOVERY_BOUND: Duration = Duration::from_secs(30);

fn options() -> ConnectOptions {
    ConnectOptions::new()
        .with_timeout(REQUEST_TIMEOUT)
        .with_connect_timeout(Duration::from_secs(1))
}

async fn connect(endpoints: &[String]) -> Client {
    Client::connect(endpoints, Some(options()))
        .await
        .unwrap_or_else(|e| panic!("connecting to {endpoints:?}: {e}"))
}

async fn value(client: &mut Client, key: &str) -> Option<Vec<u8>> {
    let response = client
        .get(key, None)
        .await
        .unwrap_or_else(|e| panic!("get {key}: {e}"));
    response.kvs().first().map(|kv| kv.value().to_vec())
}

#[tokio::test]
async fn single_member_put_get() {
    let Some(cluster) = start_or_skip(1, "single_member_put_get") else {
        return;
    };
    eprintln!("1 member healthy after {:?}", cluster.started_in());
    let mut client = connect(&cluster.all_endpoints()).await;
    client.put("/mtr/one", "1", None).await.unwrap();
    assert_eq!(
        value(&mut client, "/mtr/one").await.as_deref(),
        Some(&b"1"[..])
    );
}

#[tokio::test]
async fn three_members_lease_watch_and_failures() {
    let Some(mut cluster) = start_or_skip(3, "three_members_lease_watch_and_failures") else {
        return;
    };
    eprintln!(
        "3 members healthy after {:?}: {:?}",
        cluster.started_in(),
        cluster.all_endpoints()
    );
    let mut client = connect(&cluster.all_endpoints()).await;

    // Put and get.
    let put = client.put("/mtr/k", "v", None).await.unwrap();
    let put_revision = put.header().unwrap().revision();
    assert!(put_revision > 0);
    assert_eq!(
        value(&mut client, "/mtr/k").await.as_deref(),
        Some(&b"v"[..])
    );

    // A lease: its key lives while the holder keeps it alive, and goes once it stops.
    let lease = client.lease_grant(LEASE_TTL_S, None).await.unwrap().id();
    client
        .put(
            "/mtr/leased",
            "here",
            Some(PutOptions::new().with_lease(lease)),
        )
        .await
        .unwrap();
    let (mut keeper, mut responses) = client.lease_keep_alive(lease).await.unwrap();
    let holding = Instant::now();
    while holding.elapsed() < KEEP_ALIVE_FOR {
        keeper.keep_alive().await.unwrap();
        let response = responses
            .message()
            .await
            .unwrap()
            .expect("keep-alive answered");
        assert!(response.ttl() > 0, "the lease expired while kept alive");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(
        value(&mut client, "/mtr/leased").await.as_deref(),
        Some(&b"here"[..]),
        "the key of a lease kept alive past its TTL is gone"
    );
    drop((keeper, responses));
    let stopped = Instant::now();
    loop {
        if value(&mut client, "/mtr/leased").await.is_none() {
            break;
        }
        assert!(
            stopped.elapsed() < EXPIRY_BOUND,
            "the leased key outlived its stopped keep-alives by {EXPIRY_BOUND:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "leased key gone {:?} after the keep-alives stopped (TTL {LEASE_TTL_S} s)",
        stopped.elapsed()
    );

    // A watch from a past revision replays the put made at that revision, then sees a new one.
    let mut watch = client
        .watch(
            "/mtr/k",
            Some(WatchOptions::new().with_start_revision(put_revision)),
        )
        .await
        .unwrap();
    let mut seen = Vec::new();
    while seen.is_empty() {
        let response = watch.message().await.unwrap().expect("watch stream open");
        seen.extend(response.events().iter().map(|event| {
            let kv = event.kv().unwrap();
            (event.event_type(), kv.mod_revision(), kv.value().to_vec())
        }));
    }
    assert_eq!(seen[0], (EventType::Put, put_revision, b"v".to_vec()));
    let again = client.put("/mtr/k", "w", None).await.unwrap();
    let again_revision = again.header().unwrap().revision();
    let mut live = None;
    while live.is_none() {
        let response = watch.message().await.unwrap().expect("watch stream open");
        live = response
            .events()
            .iter()
            .map(|event| {
                (
                    event.kv().unwrap().mod_revision(),
                    event.kv().unwrap().value().to_vec(),
                )
            })
            .find(|(revision, _)| *revision == again_revision);
    }
    assert_eq!(live, Some((again_revision, b"w".to_vec())));
    drop(watch);

    // The leader killed (the worst member to lose: the others must elect a new one first): the
    // two others keep a quorum, and once they report healthy again (a leader among them), put
    // and get through them work. Requests in between may time out; a daemon rides that out.
    let leader = leader_index(&cluster.all_endpoints(), Some(options())).await;
    cluster.kill(leader).unwrap();
    let killed = Instant::now();
    cluster.wait_healthy(RECOVERY_BOUND).unwrap();
    eprintln!(
        "member {leader} (the leader) killed; the two others healthy again after {:?}",
        killed.elapsed()
    );
    let mut survivors = connect(&cluster.running_endpoints()).await;
    survivors.put("/mtr/after-kill", "ok", None).await.unwrap();
    assert_eq!(
        value(&mut survivors, "/mtr/after-kill").await.as_deref(),
        Some(&b"ok"[..])
    );
    // The client given every endpoint (as a daemon's configuration would) too, once its
    // balancer has dropped the dead one: a few attempts, each failing only on that endpoint.
    let mut last_error = None;
    let mut worked = false;
    for _ in 0..10 {
        match client.put("/mtr/after-kill-all", "ok", None).await {
            Ok(_) => {
                worked = true;
                break;
            }
            Err(e) => last_error = Some(e.to_string()),
        }
    }
    assert!(
        worked,
        "a client given all endpoints could not put with one of three members killed: {last_error:?}"
    );
    if let Some(e) = last_error {
        eprintln!("the all-endpoint client's attempts before one succeeded failed with: {e}");
    }

    // All of etcd gone: a put fails with an error, within the request timeout and margin.
    cluster.stop_all().unwrap();
    let asked = Instant::now();
    let outcome = tokio::time::timeout(FAILURE_BOUND, client.put("/mtr/gone", "x", None)).await;
    let error = match outcome {
        Err(_) => panic!("a put with every etcd member stopped neither failed nor succeeded within {FAILURE_BOUND:?}"),
        Ok(Ok(_)) => panic!("a put succeeded with every etcd member stopped"),
        Ok(Err(e)) => e,
    };
    eprintln!(
        "with every member stopped a put failed after {:?}: {error}",
        asked.elapsed()
    );
}
