use super::*;
use crate::classes::class_name;
use serde_json::json;

fn conf(extra: &str) -> NetConf {
    NetConf::parse(format!(r#"{{"cniVersion":"1.0.0","name":"n","type":"t"{extra}}}"#).as_bytes())
        .unwrap()
}

const NAMESPACES: &str = r#","namespaceBandwidth":{"egressRate":1000000000,"ingressRate":500000000,
    "namespaces":{"batch":{"egressRate":2000000}}}"#;

#[test]
fn names_are_plain_bounded_and_never_a_pods() {
    let key = namespace_key("team-a");
    assert_eq!(key.len(), 16);
    assert_eq!(
        aggregate_name("team-a", Direction::Egress),
        format!("cni-ns.team-a.{key}.egress")
    );
    // Odd characters are replaced for the reader; the key is of the whole string.
    let odd = "a b/é;x";
    let name = aggregate_name(odd, Direction::Ingress);
    assert_eq!(
        name,
        format!("cni-ns.a_b___x.{}.ingress", namespace_key(odd))
    );
    // The longest: 64 bytes, the daemon's limit.
    let longest = aggregate_name(&"n".repeat(63), Direction::Ingress);
    assert_eq!(longest.len(), 64, "{longest}");
    // FNV-1a of its definition.
    assert_eq!(
        namespace_key(""),
        format!("{:016x}", 0xcbf2_9ce4_8422_2325_u64)
    );
    // A pod's class name is never an aggregate's, whatever its container and interface.
    for (id, ifname) in [("ns", "x"), ("-ns", "eth0"), ("cni-ns", "a")] {
        assert!(!class_name(id, ifname, Direction::Egress).starts_with(NS_PREFIX));
    }
}

#[test]
fn namespaces_whose_readable_parts_agree_get_names_of_their_own() {
    let long = "x".repeat(NS_CHARS);
    let namespaces = [
        "a.b".to_owned(),
        "a_b".to_owned(),
        "a/b".to_owned(),
        format!("{long}1"),
        format!("{long}2"),
        "team".to_owned(),
        "Team".to_owned(),
    ];
    let mut names = std::collections::BTreeSet::new();
    for ns in &namespaces {
        for d in Direction::BOTH {
            assert!(names.insert(aggregate_name(ns, d)), "{ns}");
        }
    }
}

#[test]
fn aggregates_gather_at_the_namespaces_rate_and_pods_join_them() {
    let c = conf(NAMESPACES);
    let aggregates = wanted_aggregates(&c, Some("team"));
    assert_eq!(
        Value::Object(aggregates[0].clone()),
        json!({"name": aggregate_name("team", Direction::Egress), "gather": true,
               "rate": "1gbit", "burst": "1514b"})
    );
    assert_eq!(aggregates[1]["rate"], json!("500mbit"));
    // An entry of its own, egress only.
    let batch = wanted_aggregates(&c, Some("batch"));
    assert_eq!(batch.len(), 1);
    assert_eq!(batch[0]["rate"], json!("2mbit"));
    assert!(wanted_aggregates(&c, None).is_empty());
    // A pod without a limit of its own: a class at its namespace's rate, under the aggregate.
    let pod = ("abcdef", "eth0", "veth1");
    let classes = pod_classes(&c, pod, Some("batch"));
    assert_eq!(classes.len(), 1);
    assert_eq!(classes[0]["rate"], json!("2mbit"));
    assert_eq!(
        classes[0]["parent"],
        json!(aggregate_name("batch", Direction::Egress))
    );
    assert!(pod_classes(&c, pod, None).is_empty());
    // Its own limit where it has one; no parent in a direction without an aggregate.
    let c = conf(&format!(
        r#"{NAMESPACES},"runtimeConfig":{{"bandwidth":{{"egressRate":1000000,"ingressRate":3000000}}}}"#
    ));
    let classes = pod_classes(&c, pod, Some("batch"));
    assert_eq!(classes.len(), 2);
    assert_eq!(
        (&classes[0]["rate"], &classes[0]["parent"]),
        (
            &json!("1mbit"),
            &json!(aggregate_name("batch", Direction::Egress))
        )
    );
    assert_eq!(classes[1]["rate"], json!("3mbit"));
    assert!(!classes[1].contains_key("parent"));
    assert_eq!(above_namespace(&c, Some("batch")), None);
}

#[test]
fn a_pod_above_its_namespace_is_found() {
    let c = conf(&format!(
        r#"{NAMESPACES},"runtimeConfig":{{"bandwidth":{{"egressRate":3000000}}}}"#
    ));
    assert_eq!(
        above_namespace(&c, Some("batch")),
        Some((Direction::Egress, 3_000_000, 2_000_000))
    );
    assert_eq!(above_namespace(&c, Some("team")), None);
    assert_eq!(above_namespace(&c, None), None);
}

#[test]
fn only_a_gathering_class_of_the_api_without_a_match_is_an_aggregate() {
    let name = aggregate_name("team", Direction::Egress);
    let shown = |v: Value| match v {
        Value::Object(o) => o,
        _ => unreachable!(),
    };
    let ok = shown(json!({"name": name, "gather": true, "rate": "1gbit", "source": "api"}));
    assert!(is_aggregate(&name, &ok));
    for not in [
        json!({"name": name, "gather": true, "rate": "1gbit", "source": "file"}),
        json!({"name": name, "rate": "1gbit", "source": "api"}),
        json!({"name": name, "gather": true, "match": {"from": "veth1"}, "source": "api"}),
    ] {
        assert!(!is_aggregate(&name, &shown(not.clone())), "{not}");
    }
    let pod = class_name("abc", "eth0", Direction::Egress);
    assert!(!is_aggregate(&pod, &ok));
}

#[test]
fn the_words_are_what_the_daemon_validates() {
    let config = metronome_daemon::Config::from_toml_str(
        "[interfaces]\ninside = \"a\"\noutside = \"b\"\n",
        "t.toml",
    )
    .unwrap();
    let c = conf(&format!(
        r#"{NAMESPACES},"ecn":true,"runtimeConfig":{{"bandwidth":{{"egressRate":1000000}}}}"#
    ));
    let mut objects = wanted_aggregates(&c, Some("odd name/é"));
    objects.extend(pod_classes(
        &c,
        ("abc", "eth0", "veth1"),
        Some("odd name/é"),
    ));
    assert_eq!(objects.len(), 4);
    for mut class in objects {
        class.remove("match");
        let table = metronome_daemon::ops::control::protocol::toml_table(&class).unwrap();
        let valid = config
            .live_class(&table)
            .unwrap_or_else(|e| panic!("{class:?}: {e}"));
        assert!(valid.policy.rate.is_some(), "{class:?}");
    }
}
