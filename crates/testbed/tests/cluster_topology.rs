//! The sites of the cluster classes' tests (`metronome_testbed::netns::cluster`): every shaper
//! namespace reaches every etcd member through the management bridge (its `/health` answers
//! healthy from inside the namespace), not through the host's loopback (which it does not
//! see), the sites' subnets and names do not collide, and dropping the topology removes the
//! namespaces, the bridge and the host ends of the veths.
//!
//! Needs CAP_NET_ADMIN and the `etcd` binary; without them it fails, or skips saying why under
//! METRONOME_SKIP_PRIVILEGED=1.

use metronome_testbed::etcd::{EtcdCluster, EtcdError};
use metronome_testbed::netns::cluster::{cluster_or_skip, MGMT_IF};
use metronome_testbed::netns::{namespace_exists, run_command, skip_unprivileged, Namespace};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;

/// `GET /health` of the etcd client URL `url` (`http://IP:PORT`) from inside `ns`: the body, or
/// the error.
fn health_from(ns: &Namespace, url: &str) -> Result<String, String> {
    let addr: SocketAddr = url
        .strip_prefix("http://")
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| format!("not an http URL: {url}"))?;
    let stream = ns
        .run(move || TcpStream::connect_timeout(&addr, Duration::from_secs(2)))
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let mut stream = stream;
    stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(|e| e.to_string())?;
    write!(stream, "GET /health HTTP/1.0\r\nHost: {addr}\r\n\r\n").map_err(|e| e.to_string())?;
    let mut text = String::new();
    stream
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    Ok(text)
}

#[test]
fn every_shaper_namespace_reaches_every_etcd_member_through_the_bridge() {
    let test = "every_shaper_namespace_reaches_every_etcd_member_through_the_bridge";
    let Some(topo) = cluster_or_skip("mtr-tclt", 3, test) else {
        return;
    };
    let etcd = match EtcdCluster::start_with(3, IpAddr::V4(topo.host_addr)) {
        Ok(c) => c,
        Err(e @ EtcdError::MissingBinary) => {
            skip_unprivileged(test, &e);
            return;
        }
        Err(e) => panic!("starting etcd: {e}"),
    };
    let extra = etcd.extra_endpoints();
    assert_eq!(extra.len(), 3, "{extra:?}");
    let host = topo.host_addr.to_string();
    assert!(
        extra.iter().all(|e| e.contains(&host)),
        "{extra:?} not on {host}"
    );
    let mut addrs = Vec::new();
    for site in &topo.sites {
        let shaper = &site.topo.shaper;
        let shown = shaper
            .ip(&["-o", "-4", "addr", "show", "dev", MGMT_IF])
            .unwrap();
        assert!(shown.contains(&site.mgmt_addr.to_string()), "{shown}");
        addrs.push(site.mgmt_addr);
        for url in &extra {
            let answer = health_from(shaper, url).unwrap_or_else(|e| {
                panic!("{} cannot reach {url}: {e}", shaper.name());
            });
            assert!(
                answer.contains("\"health\":\"true\""),
                "{} asked {url}: {answer}",
                shaper.name()
            );
        }
        // The host's loopback is not the namespace's: the loopback endpoints are not there.
        let loopback = &etcd.all_endpoints()[0];
        assert!(
            health_from(shaper, loopback).is_err(),
            "{} reached {loopback}",
            shaper.name()
        );
    }
    addrs.sort();
    addrs.dedup();
    assert_eq!(addrs.len(), 3, "management addresses collide: {addrs:?}");

    // A second topology of the same process gets another subnet and other names.
    let other = cluster_or_skip("mtr-tclt", 1, test).unwrap();
    assert_ne!(other.bridge, topo.bridge);
    assert_ne!(other.host_addr.octets()[2], topo.host_addr.octets()[2]);

    let namespaces: Vec<String> = topo
        .sites
        .iter()
        .flat_map(|s| s.topo.namespaces().map(|n| n.name().to_owned()))
        .collect();
    let bridge = topo.bridge.clone();
    drop(etcd);
    topo.remove().expect("removing the topology");
    for ns in &namespaces {
        assert!(!namespace_exists(ns), "{ns} left");
    }
    let links = run_command("ip", &["-o", "link", "show"]).unwrap();
    assert!(
        !links.contains(&format!(" {bridge}:")),
        "{bridge} left:\n{links}"
    );
    let pid = std::process::id().to_string();
    let prefix = format!("mtc{pid}v");
    let left: Vec<&str> = links.lines().filter(|l| l.contains(&prefix)).collect();
    // The other topology's one veth is still there, and nothing of the removed one.
    assert_eq!(left.len(), 1, "{left:?}");
    drop(other);
}
