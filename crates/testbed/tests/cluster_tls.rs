//! `[cluster.tls]` reaches etcd: a member that serves TLS and asks clients for a certificate
//! signed by its CA (certificates made here with rcgen), and three cluster agents: one with the
//! CA and a client certificate (it connects, publishes and computes its share), one with the CA
//! only, and one without TLS (neither gets anywhere, and both count their failed requests).
//!
//! Needs the `etcd` binary (Debian: etcd-server); without it the test fails, or skips saying why
//! under METRONOME_SKIP_PRIVILEGED=1.

#[path = "common/agent.rs"]
mod shared;

use metronome_daemon::ops::cluster::Agent;
use metronome_daemon::ops::metrics::Metrics;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use shared::value;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Longest wait for the agent with a certificate to compute its share: etcd's start (about a
/// second) and two periods of 500 ms, with margin for a loaded machine.
const SHARED_WITHIN: Duration = Duration::from_secs(30);

/// A TLS etcd member and its directory, killed and removed on drop.
struct TlsMember {
    child: Child,
    dir: PathBuf,
    url: String,
}

impl Drop for TlsMember {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// The CA, etcd's certificate (for 127.0.0.1) and a client certificate, as PEM files in `dir`.
fn certificates(dir: &Path) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = CertifiedIssuer::self_signed(ca, ca_key).unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    for (name, usage) in [
        ("server", ExtendedKeyUsagePurpose::ServerAuth),
        ("client", ExtendedKeyUsagePurpose::ClientAuth),
    ] {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        params.extended_key_usages = vec![usage];
        let cert = params.signed_by(&key, &ca).unwrap();
        std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{name}-key.pem")), key.serialize_pem()).unwrap();
    }
}

fn start_member() -> Option<TlsMember> {
    let binary = std::env::var_os(metronome_testbed::etcd::ETCD_BINARY_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("etcd"));
    let dir = std::env::temp_dir().join(format!("mtr-etcd-tls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    certificates(&dir);
    let (client, peer) = (free_port(), free_port());
    let url = format!("https://127.0.0.1:{client}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let log = std::fs::File::create(dir.join("etcd.log")).unwrap();
    let d = |f: &str| dir.join(f).display().to_string();
    let child = Command::new(&binary)
        .env_clear()
        .args([
            "--name=tls0".to_string(),
            format!("--data-dir={}", d("data")),
            format!("--listen-client-urls={url}"),
            format!("--advertise-client-urls={url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=tls0={peer_url}"),
            format!("--initial-cluster-token=mtr-tls-{}", std::process::id()),
            format!("--cert-file={}", d("server.pem")),
            format!("--key-file={}", d("server-key.pem")),
            format!("--trusted-ca-file={}", d("ca.pem")),
            "--client-cert-auth".to_string(),
            "--logger=zap".to_string(),
            "--log-outputs=stderr".to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn();
    match child {
        Ok(child) => Some(TlsMember { child, dir, url }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let _ = std::fs::remove_dir_all(&dir);
            metronome_testbed::netns::skip_unprivileged(
                "cluster_tls",
                &"no etcd binary (Debian: apt-get install etcd-server)",
            );
            None
        }
        Err(e) => panic!("starting etcd: {e}"),
    }
}

/// An agent of cluster `tls` as host `host` whose `[cluster.tls]` is `tls` (TOML lines).
fn agent(url: &str, host: &str, tls: &str) -> (Agent, Metrics) {
    shared::agent("tls", url, host, tls)
}

#[test]
fn an_agent_with_the_ca_and_a_client_certificate_shares_and_the_others_are_refused() {
    let Some(member) = start_member() else {
        return;
    };
    let path = |f: &str| member.dir.join(f).display().to_string();
    let full = format!(
        "[cluster.tls]\nca = \"{}\"\ncert = \"{}\"\nkey = \"{}\"\n",
        path("ca.pem"),
        path("client.pem"),
        path("client-key.pem")
    );
    let ca_only = format!("[cluster.tls]\nca = \"{}\"\n", path("ca.pem"));
    let (_good, good) = agent(&member.url, "good", &full);
    let (_no_cert, no_cert) = agent(&member.url, "no-cert", &ca_only);
    let (_plain, plain) = agent(&member.url, "plain", "");
    let start = Instant::now();
    while value(&good, "metronome_cluster_state{state=\"shared\"}") != 1.0 {
        let log = std::fs::read_to_string(member.dir.join("etcd.log")).unwrap_or_default();
        assert!(
            start.elapsed() < SHARED_WITHIN,
            "the agent with a certificate never shared: {}\netcd log tail:\n{}",
            good.encode(),
            log.lines().rev().take(10).collect::<Vec<_>>().join("\n")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(value(&good, "metronome_cluster_etcd_reachable"), 1.0);
    assert!(value(&good, "metronome_cluster_writes_total") >= 2.0);
    // The others fail (each counts a failed request) and never reach etcd.
    for (name, m) in [("ca only", &no_cert), ("no TLS", &plain)] {
        let start = Instant::now();
        while value(m, "metronome_cluster_etcd_errors_total") < 1.0
            && start.elapsed() < SHARED_WITHIN
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(
            value(m, "metronome_cluster_etcd_reachable"),
            0.0,
            "{name}: {}",
            m.encode()
        );
        assert!(
            value(m, "metronome_cluster_etcd_errors_total") >= 1.0,
            "{name}: no failed request counted: {}",
            m.encode()
        );
        assert_eq!(value(m, "metronome_cluster_writes_total"), 0.0, "{name}");
        assert_eq!(
            value(m, "metronome_cluster_share_bps{class=\"tenant\"}"),
            1_000_000.0,
            "{name}: not at its floor"
        );
    }
    // The agent with a certificate is alone in etcd: the whole limit.
    assert_eq!(
        value(&good, "metronome_cluster_share_bps{class=\"tenant\"}"),
        100_000_000.0
    );
}
