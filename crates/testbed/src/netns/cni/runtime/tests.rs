use super::*;

fn conflist() -> Conflist {
    Conflist {
        name: "net".into(),
        cni_version: "1.0.0".into(),
        plugins: vec![
            json!({ "type": "bridge", "bridge": "cni0" }),
            json!({ "type": "bandwidth", "capabilities": { "bandwidth": true } }),
            json!({ "type": "other", "capabilities": { "bandwidth": false, "portMappings": true } }),
        ],
    }
}

fn bw() -> Bandwidth {
    Bandwidth {
        ingress_rate: 100_000_000,
        ingress_burst: 800_000,
        egress_rate: 50_000_000,
        egress_burst: 400_000,
    }
}

#[test]
fn every_plugin_gets_the_name_and_version_and_the_previous_result() {
    let list = conflist();
    let rc = RuntimeConfig::bandwidth(bw());
    let first = list.plugin_config(0, None, &rc);
    assert_eq!(first["name"], "net");
    assert_eq!(first["cniVersion"], "1.0.0");
    assert_eq!(first["bridge"], "cni0");
    assert!(first.get("prevResult").is_none(), "{first}");
    let prev = json!({ "cniVersion": "1.0.0", "ips": [] });
    let second = list.plugin_config(1, Some(&prev), &rc);
    assert_eq!(second["prevResult"], prev);
    assert_eq!(second["type"], "bandwidth");
}

#[test]
fn runtime_config_goes_only_to_plugins_asking_for_the_capability() {
    let list = conflist();
    let rc = RuntimeConfig::bandwidth(bw());
    assert!(list
        .plugin_config(0, None, &rc)
        .get("runtimeConfig")
        .is_none());
    let asked = list.plugin_config(1, None, &rc);
    assert_eq!(
        asked["runtimeConfig"]["bandwidth"],
        json!({ "ingressRate": 100_000_000u64, "ingressBurst": 800_000u64,
                "egressRate": 50_000_000u64, "egressBurst": 400_000u64 })
    );
    // Asked for `bandwidth: false` and a capability the runtime has no argument for: nothing.
    assert!(list
        .plugin_config(2, None, &rc)
        .get("runtimeConfig")
        .is_none());
    // No arguments: nothing either.
    let none = list.plugin_config(1, None, &RuntimeConfig::none());
    assert!(none.get("runtimeConfig").is_none(), "{none}");
}

#[test]
fn the_result_gives_the_pod_address_and_its_host_veth() {
    let result = json!({
        "cniVersion": "1.0.0",
        "interfaces": [
            { "name": "cni0", "mac": "aa:bb:cc:dd:ee:ff" },
            { "name": "veth1a2b3c4d", "mac": "aa:bb:cc:dd:ee:01" },
            { "name": "eth0", "mac": "aa:bb:cc:dd:ee:02", "sandbox": "/var/run/netns/p0" }
        ],
        "ips": [{ "interface": 2, "address": "10.79.3.10/24", "gateway": "10.79.3.1" }]
    });
    assert_eq!(result_ipv4(&result), Some(Ipv4Addr::new(10, 79, 3, 10)));
    assert_eq!(result_host_if(&result).as_deref(), Some("veth1a2b3c4d"));
    assert_eq!(result_ipv4(&json!({})), None);
    assert_eq!(result_host_if(&json!({ "interfaces": [] })), None);
}

#[test]
fn a_plugin_type_is_looked_up_in_cni_path_only() {
    let dir = std::env::temp_dir().join(format!("mtr-cni-path-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("fake"), "#!/bin/sh\n").unwrap();
    let rt = CniRuntime::new(&Namespace::new("none"), vec![dir.clone()], conflist());
    assert_eq!(rt.find_plugin("fake").unwrap(), dir.join("fake"));
    assert!(matches!(
        rt.find_plugin("missing"),
        Err(CniError::NotFound(_))
    ));
    // A type is a file name, never a path.
    assert!(matches!(
        rt.find_plugin("../fake"),
        Err(CniError::NotFound(_))
    ));
    assert!(matches!(rt.find_plugin(""), Err(CniError::NotFound(_))));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_error_names_the_plugin_the_command_and_the_code() {
    let e = CniError::Plugin {
        plugin: "metronome-cni".into(),
        command: "CHECK",
        code: 100,
        msg: "limits missing".into(),
        details: "cni.x.eth0.egress".into(),
    };
    assert_eq!(e.code(), Some(100));
    assert_eq!(
        e.to_string(),
        "metronome-cni CHECK: CNI error 100: limits missing (cni.x.eth0.egress)"
    );
}

#[test]
fn metronome_cni_comes_first_in_cni_path() {
    let dirs = cni_path_with(Path::new("/x/target/debug/metronome-cni"));
    assert_eq!(
        dirs,
        [
            PathBuf::from("/x/target/debug"),
            PathBuf::from("/usr/lib/cni")
        ]
    );
}
