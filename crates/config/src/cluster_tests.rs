//! `[cluster]` and `scope = "cluster"`: defaults, every check naming its field, and a reload
//! that touches them needing a restart.

use super::cluster::{ClusterFloor, DEFAULT_CLUSTER_FLOOR_PPM};
use super::*;
use metronome_core::{Duration, Rate};

const BUMP: &str = "[interfaces]\ninside = \"a\"\noutside = \"b\"\n";
const CLUSTER: &str = "[cluster]\nname = \"tenants\"\netcd = [\"http://127.0.0.1:2379\"]\n";
const CLASS: &str = "[[class]]\nname = \"t\"\nrate = \"300mbit\"\nscope = \"cluster\"\n";

fn parse(body: &str) -> Result<Config, ConfigError> {
    Config::from_toml_str(&format!("{BUMP}{body}"), "test.toml")
}

fn field(body: &str) -> String {
    let err = parse(body).unwrap_err();
    assert!(!err.to_string().is_empty());
    err.field
}

#[test]
fn a_cluster_class_takes_the_defaults_and_its_rate_is_the_limit() {
    let c = parse(&format!("{CLUSTER}{CLASS}")).unwrap();
    let s = c.cluster.unwrap();
    assert_eq!(s.name, "tenants");
    assert_eq!(s.etcd, ["http://127.0.0.1:2379"]);
    assert_eq!(s.host, None);
    assert_eq!(s.period, Duration::from_secs(1));
    assert_eq!(s.lease, Duration::from_secs(3));
    assert_eq!(s.hold, s.lease);
    assert_eq!(
        s.floor,
        ClusterFloor::PartsPerMillion(DEFAULT_CLUSTER_FLOOR_PPM)
    );
    assert_eq!(s.floor.rate(Rate::mbps(300)), Rate::mbps(3));
    assert_eq!(s.weight, 1);
    assert_eq!(s.max_hosts, metronome_core::cluster::DEFAULT_MAX_HOSTS);
    assert_eq!(s.auth, None);
    assert_eq!(s.classes.len(), 1);
    assert_eq!(
        (s.classes[0].name.as_str(), s.classes[0].limit),
        ("t", Rate::mbps(300))
    );
    assert_eq!(s.class_prefix("t"), "/metronome/tenants/t/");
    // A class without `scope`, or with "host", is the daemon's own.
    let own = parse(&format!(
        "{CLUSTER}[[class]]\nname = \"x\"\nrate = \"1mbit\"\nscope = \"host\"\n"
    ))
    .unwrap();
    assert!(own.cluster.unwrap().classes.is_empty());
    assert_eq!(parse("").unwrap().cluster, None);
}

#[test]
fn every_key_is_read() {
    let c = parse(
        "[cluster]\nname = \"n\"\netcd = [\"https://e1:2379\", \"http://e2:2379\"]\n\
         host = \"h-1\"\nperiod = \"500ms\"\nlease = \"2s\"\nhold = \"10s\"\nfloor = \"5mbit\"\n\
         weight = 3\nprefix = \"/x/y\"\nmax_hosts = 64\netcd_user = \"node-a\"\n\
         etcd_password_file = \"/etc/metronome/etcd-password\"\n[cluster.tls]\nca = \"/ca.pem\"\ncert = \"/c.pem\"\n\
         key = \"/k.pem\"\ndomain = \"etcd.local\"\n",
    )
    .unwrap();
    let s = c.cluster.unwrap();
    assert_eq!(s.host.as_deref(), Some("h-1"));
    assert_eq!(s.period, Duration::from_millis(500));
    assert_eq!(s.lease, Duration::from_secs(2));
    assert_eq!(s.hold, Duration::from_secs(10));
    assert_eq!(s.floor, ClusterFloor::Rate(5_000_000));
    assert_eq!(s.weight, 3);
    assert_eq!(s.max_hosts, 64);
    let auth = s.auth.clone().unwrap();
    assert_eq!(auth.user, "node-a");
    assert_eq!(
        auth.password_file.to_str(),
        Some("/etc/metronome/etcd-password")
    );
    assert_eq!(s.class_prefix("t"), "/x/y/n/t/");
    let tls = s.tls.unwrap();
    assert_eq!(tls.domain.as_deref(), Some("etcd.local"));
    assert_eq!(tls.ca.unwrap().to_str(), Some("/ca.pem"));
    // Zero, as an integer or as text: fail closed.
    for zero in ["0", "\"0\"", "\"0%\""] {
        let c = parse(&format!("{CLUSTER}floor = {zero}\n")).unwrap();
        assert_eq!(c.cluster.unwrap().floor.rate(Rate::mbps(300)).bps(), 0);
    }
    let c = parse(&format!("{CLUSTER}floor = \"2.5%\"\n")).unwrap();
    let floor = c.cluster.unwrap().floor;
    assert_eq!(floor, ClusterFloor::PartsPerMillion(25_000));
    assert_eq!(floor.to_string(), "2.5%");
}

#[test]
fn bad_values_name_their_field() {
    let cases = [
        ("[cluster]\netcd = [\"http://e:1\"]\n", "cluster"),
        ("[cluster]\nname = \"n\"\n", "cluster"),
        (
            "[cluster]\nname = \"a/b\"\netcd = [\"http://e:1\"]\n",
            "cluster.name",
        ),
        ("[cluster]\nname = \"n\"\netcd = []\n", "cluster.etcd"),
        (
            "[cluster]\nname = \"n\"\netcd = [\"e:2379\"]\n",
            "cluster.etcd[0]",
        ),
        (
            "[cluster]\nname = \"n\"\netcd = [\"http://\"]\n",
            "cluster.etcd[0]",
        ),
        (&format!("{CLUSTER}host = \"a b\"\n"), "cluster.host"),
        (&format!("{CLUSTER}period = \"10ms\"\n"), "cluster.period"),
        (&format!("{CLUSTER}lease = \"2500ms\"\n"), "cluster.lease"),
        (&format!("{CLUSTER}lease = \"1s\"\n"), "cluster.lease"),
        (
            &format!("{CLUSTER}period = \"2s\"\nlease = \"3s\"\n"),
            "cluster.lease",
        ),
        (&format!("{CLUSTER}hold = \"soon\"\n"), "cluster.hold"),
        (&format!("{CLUSTER}floor = \"120%\"\n"), "cluster.floor"),
        (&format!("{CLUSTER}floor = \"fast\"\n"), "cluster.floor"),
        (&format!("{CLUSTER}weight = 0\n"), "cluster.weight"),
        (&format!("{CLUSTER}weight = 1000001\n"), "cluster.weight"),
        (&format!("{CLUSTER}max_hosts = 1\n"), "cluster.max_hosts"),
        (
            &format!("{CLUSTER}max_hosts = 100001\n"),
            "cluster.max_hosts",
        ),
        (
            &format!("{CLUSTER}max_hosts = \"many\"\n"),
            "cluster.max_hosts",
        ),
        (
            &format!("{CLUSTER}etcd_user = \"a\"\n"),
            "cluster.etcd_password_file",
        ),
        (
            &format!("{CLUSTER}etcd_password_file = \"/p\"\n"),
            "cluster.etcd_user",
        ),
        (
            &format!("{CLUSTER}etcd_user = \"a b\"\netcd_password_file = \"/p\"\n"),
            "cluster.etcd_user",
        ),
        (
            &format!("{CLUSTER}etcd_user = \"a\"\netcd_password_file = \"\"\n"),
            "cluster.etcd_password_file",
        ),
        (&format!("{CLUSTER}prefix = \"x\"\n"), "cluster.prefix"),
        (
            &format!("{CLUSTER}[cluster.tls]\ncert = \"/c.pem\"\n"),
            "cluster.tls",
        ),
        (CLASS, "class[0].scope"),
        (
            &format!("{CLUSTER}[[class]]\nname = \"t\"\npacing = \"1mbit\"\nscope = \"cluster\"\n"),
            "class[0].scope",
        ),
        (
            &format!("{CLUSTER}[[class]]\nname = \"t\"\nrate = \"1mbit\"\nscope = \"world\"\n"),
            "class[0].scope",
        ),
        (
            &format!("{CLUSTER}[default]\nrate = \"1mbit\"\nscope = \"cluster\"\n"),
            "default.scope",
        ),
    ];
    for (body, want) in cases {
        assert_eq!(field(body), want, "{body}");
    }
    let err = parse(&format!("{CLUSTER}bogus = 1\n")).unwrap_err();
    assert!(err.to_string().contains("bogus"), "{err}");
}

#[test]
fn a_class_of_the_control_socket_cannot_be_a_cluster_class() {
    let c = parse(CLUSTER).unwrap();
    let class: toml::Table =
        toml::from_str("name = \"x\"\nrate = \"1mbit\"\nscope = \"cluster\"\n").unwrap();
    let err = c.live_class(&class).unwrap_err();
    assert_eq!(err.field, "scope", "{err}");
}

#[test]
fn a_reload_that_touches_the_cluster_needs_a_restart() {
    let old = parse(&format!("{CLUSTER}{CLASS}")).unwrap();
    let same = parse(&format!("{CLUSTER}{CLASS}")).unwrap();
    assert!(!old.diff(&same).needs_restart());
    let limit = parse(&format!("{CLUSTER}{}", CLASS.replace("300mbit", "200mbit"))).unwrap();
    let plan = old.diff(&limit);
    assert!(plan.needs_restart(), "{plan}");
    assert!(plan.to_string().contains("cluster"), "{plan}");
    let period = parse(&format!("{CLUSTER}period = \"500ms\"\n{CLASS}")).unwrap();
    assert!(old.diff(&period).needs_restart());
    let max_hosts = parse(&format!("{CLUSTER}max_hosts = 16\n{CLASS}")).unwrap();
    assert!(old.diff(&max_hosts).needs_restart());
}

#[test]
fn a_cluster_class_may_have_children_on_each_host() {
    let c = parse(&format!(
        "{CLUSTER}{CLASS}[[class]]\nname = \"t-web\"\nparent = \"t\"\nweight = 2\n\
         match = {{ dst_port = 80 }}\n[[class]]\nname = \"t-batch\"\nparent = \"t\"\n\
         rate = \"100mbit\"\nmatch = {{ dst_port = 9000 }}\n"
    ))
    .unwrap();
    let s = c.cluster.unwrap();
    // The cluster's share of `t` is what this host's children share; `t` only gathers them.
    assert_eq!(s.classes.len(), 1);
    assert!(c.classes[0].tree.gathers_only);
    assert_eq!(c.classes[1].tree.parent.as_deref(), Some("t"));
    assert_eq!(c.classes[1].tree.weight, 2);
}
