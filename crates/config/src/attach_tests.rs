//! Attach mode's configuration: `[interfaces] attach` and `bridges`, `origin_mark`, and the
//! `from`, `to` and `cgroup` matches with their origin tags.

use super::*;

fn attach(body: &str) -> Result<Config, ConfigError> {
    Config::from_toml_str(
        &format!("[interfaces]\nattach = [\"eth0\", \"eth1\"]\n{body}"),
        "test.toml",
    )
}

#[test]
fn attach_lists_interfaces_and_leaves_inside_and_outside_empty() {
    let c = attach("").unwrap();
    assert!(c.is_attach());
    assert_eq!(c.interfaces.attach, ["eth0", "eth1"]);
    assert_eq!(
        (c.interfaces.inside.as_str(), c.interfaces.outside.as_str()),
        ("", "")
    );
    assert_eq!(c.interfaces.origin_mark, DEFAULT_ORIGIN_MARK);
    let bump = tests::parse("").unwrap();
    assert!(!bump.is_attach());
}

#[test]
fn attach_and_the_bump_in_the_wire_exclude_each_other() {
    let text = "[interfaces]\nattach = [\"eth0\"]\ninside = \"a\"\n";
    let err = Config::from_toml_str(text, "test.toml").unwrap_err();
    assert_eq!(
        (err.line, err.field.as_str()),
        (Some(3), "interfaces.attach"),
        "{err}"
    );
    let err = Config::from_toml_str("[interfaces]\ninside = \"a\"\n", "test.toml").unwrap_err();
    assert_eq!(err.field, "interfaces.outside", "{err}");
    assert!(err.to_string().contains("attach"), "{err}");
}

#[test]
fn attached_names_are_checked_and_not_repeated() {
    for (list, field) in [
        ("[]", "interfaces.attach"),
        ("[\"eth0\", \"eth0\"]", "interfaces.attach[1]"),
        ("[\"a/b\"]", "interfaces.attach[0]"),
        ("[\"0123456789abcdef\"]", "interfaces.attach[0]"),
    ] {
        let text = format!("[interfaces]\nattach = {list}\n");
        let err = Config::from_toml_str(&text, "test.toml").unwrap_err();
        assert_eq!(
            (err.line, err.field.as_str()),
            (Some(2), field),
            "{list}: {err}"
        );
    }
}

#[test]
fn origin_mark_is_contiguous_bits_or_zero() {
    for (mark, ok) in [
        ("0", true),
        ("0x00ff0000", true),
        ("0xffff", true),
        ("0x1ffff", false),
        ("0x0f0f0000", false),
        ("-1", false),
    ] {
        let r = attach(&format!("origin_mark = {mark}\n"));
        assert_eq!(r.is_ok(), ok, "{mark}: {r:?}");
        if let Err(e) = r {
            assert_eq!(e.field, "interfaces.origin_mark", "{e}");
        }
    }
}

#[test]
fn from_and_cgroup_get_origin_tags_in_file_order() {
    let c = attach(
        "[[class]]\nname = \"a\"\nmatch = { from = \"veth-a\" }\nrate = \"1mbit\"\n\
         [[class]]\nname = \"job\"\nmatch = { cgroup = \"/system.slice/backup.service\" }\n\
         rate = \"1mbit\"\n\
         [[class]]\nname = \"b\"\nmatch = { from = \"veth-b\", protocol = \"tcp\" }\n\
         [[class]]\nname = \"a-udp\"\nmatch = { from = \"veth-a\", protocol = \"udp\" }\n\
         [[class]]\nname = \"plain\"\nmatch = { dst = \"10.0.0.0/8\" }\n",
    )
    .unwrap();
    let tags: Vec<Option<u16>> = c.classes.iter().map(|k| k.matcher.origin).collect();
    assert_eq!(tags, [Some(1), Some(3), Some(2), Some(1), None]);
    let (from, cgroups) = c.origins();
    assert_eq!(from.get("veth-a"), Some(&1));
    assert_eq!(from.get("veth-b"), Some(&2));
    assert_eq!(cgroups.get("/system.slice/backup.service"), Some(&3));
    assert_eq!(c.classes[2].matcher.to_rule().origin, Some(2));
    assert_eq!(c.classes[0].matcher.to_string(), "from veth-a");
}

#[test]
fn from_and_cgroup_need_attach_mode_and_exclude_each_other() {
    let err = tests::error_at(
        "[[class]]\nname = \"a\"\nmatch = { from = \"veth-a\" }\n",
        4,
        "class[0].match.from",
    );
    assert!(err.to_string().contains("attach"), "{err}");
    let err =
        attach("[[class]]\nname = \"a\"\nmatch = { from = \"x\", cgroup = \"/a\" }\n").unwrap_err();
    assert_eq!(err.field, "class[0].match.cgroup", "{err}");
    for bad in ["relative/path", "/sys/fs/cgroup/a", "/a/../b", "/"] {
        let body = format!("[[class]]\nname = \"a\"\nmatch = {{ cgroup = \"{bad}\" }}\n");
        let err = attach(&body).unwrap_err();
        assert_eq!(err.field, "class[0].match.cgroup", "{bad}: {err}");
    }
}

#[test]
fn more_from_interfaces_than_the_mark_carries_are_refused() {
    // Two bits carry tags 1 and 2: the all-ones value (3) is reserved for the frames the
    // daemon sends through a bridge.
    let mut body = String::from("origin_mark = 0x3\n");
    for i in 0..3 {
        body.push_str(&format!(
            "[[class]]\nname = \"c{i}\"\nmatch = {{ from = \"v{i}\" }}\n"
        ));
    }
    let err = attach(&body).unwrap_err();
    assert_eq!(err.field, "interfaces.origin_mark", "{err}");
    assert!(
        err.to_string().contains("at most 2 from interfaces"),
        "{err}"
    );
    let two = body.replace("[[class]]\nname = \"c2\"\nmatch = { from = \"v2\" }\n", "");
    assert!(attach(&two).is_ok());
}

#[test]
fn changing_the_attached_interfaces_needs_a_restart() {
    let old = attach("").unwrap();
    let new = Config::from_toml_str("[interfaces]\nattach = [\"eth0\"]\n", "test.toml").unwrap();
    let plan = old.diff(&new);
    assert!(plan.needs_restart(), "{plan}");
    assert!(plan.to_string().contains("interfaces.attach"), "{plan}");
}

fn with_bridges(interfaces: &str, body: &str) -> Result<Config, ConfigError> {
    Config::from_toml_str(&format!("[interfaces]\n{interfaces}\n{body}"), "test.toml")
}

#[test]
fn bridges_are_attach_mode_with_or_without_attach() {
    let c = with_bridges("bridges = [\"cni0\"]", "").unwrap();
    assert!(c.is_attach());
    assert_eq!((c.interfaces.bridges.len(), c.attached_silos()), (1, 1));
    let c = with_bridges("attach = [\"eth0\"]\nbridges = [\"cni0\", \"br1\"]", "").unwrap();
    assert_eq!(c.interfaces.attach, ["eth0"]);
    assert_eq!(c.interfaces.bridges, ["cni0", "br1"]);
    assert_eq!(c.attached_silos(), 3);
    for (interfaces, line, field) in [
        ("bridges = []", 2, "interfaces.bridges"),
        ("bridges = [\"a/b\"]", 2, "interfaces.bridges[0]"),
        (
            "attach = [\"br\"]\nbridges = [\"br\"]",
            3,
            "interfaces.bridges[0]",
        ),
        (
            "bridges = [\"br\"]\ninside = \"a\"",
            3,
            "interfaces.bridges",
        ),
    ] {
        let err = with_bridges(interfaces, "").unwrap_err();
        assert_eq!(
            (err.line, err.field.as_str()),
            (Some(line), field),
            "{interfaces}: {err}"
        );
    }
    let old = with_bridges("bridges = [\"cni0\"]", "").unwrap();
    let new = with_bridges("bridges = [\"cni1\"]", "").unwrap();
    assert!(old.diff(&new).to_string().contains("interfaces.bridges"));
}

#[test]
fn to_names_a_bridge_port_and_gets_an_origin_tag() {
    let c = with_bridges(
        "attach = [\"eth0\"]\nbridges = [\"cni0\"]",
        "[[class]]\nname = \"in\"\nmatch = { to = \"veth-a\" }\nrate = \"1mbit\"\n\
         [[class]]\nname = \"out\"\nmatch = { from = \"veth-a\" }\nrate = \"1mbit\"\n\
         [[class]]\nname = \"in-udp\"\nmatch = { to = \"veth-a\", protocol = \"udp\" }\n",
    )
    .unwrap();
    let tags: Vec<Option<u16>> = c.classes.iter().map(|k| k.matcher.origin).collect();
    assert_eq!(tags, [Some(2), Some(1), Some(2)]);
    let o = c.origin_set();
    assert_eq!(o.to.get("veth-a"), Some(&2));
    assert_eq!(o.from.get("veth-a"), Some(&1));
    assert_eq!(c.classes[0].matcher.to_string(), "to veth-a");
}

#[test]
fn to_needs_a_bridge_and_the_mark_and_excludes_from_and_cgroup() {
    let class = "[[class]]\nname = \"in\"\nmatch = { to = \"veth-a\" }\n";
    let err = with_bridges("attach = [\"eth0\"]", class).unwrap_err();
    assert_eq!(err.field, "class[0].match.to", "{err}");
    assert!(err.to_string().contains("bridges"), "{err}");
    let err = with_bridges("bridges = [\"br\"]\norigin_mark = 0", class).unwrap_err();
    assert_eq!(err.field, "class[0].match.to", "{err}");
    assert!(err.to_string().contains("origin_mark"), "{err}");
    let err = tests::error_at(class, 4, "class[0].match.to");
    assert!(err.to_string().contains("attach"), "{err}");
    for other in ["from = \"x\"", "cgroup = \"/a\""] {
        let body = format!("[[class]]\nname = \"in\"\nmatch = {{ to = \"v\", {other} }}\n");
        let err = with_bridges("bridges = [\"br\"]", &body).unwrap_err();
        assert!(err.field.starts_with("class[0].match."), "{other}: {err}");
    }
    let err = with_bridges(
        "bridges = [\"br\"]",
        "[[class]]\nname = \"in\"\nmatch = { to = \"a b\" }\n",
    )
    .unwrap_err();
    assert_eq!(err.field, "class[0].match.to", "{err}");
}

#[test]
fn a_reload_keeps_the_tags_of_the_names_still_named() {
    use crate::origin_tags::{assign, tags_of};
    let running = with_bridges(
        "bridges = [\"br\"]",
        "[[class]]\nname = \"a\"\nmatch = { from = \"va\" }\n\
         [[class]]\nname = \"b\"\nmatch = { from = \"vb\" }\n",
    )
    .unwrap();
    // `a` goes, `c` comes before `b`: numbered afresh, `c` would take 1 and `b` 2.
    let mut new = with_bridges(
        "bridges = [\"br\"]",
        "[[class]]\nname = \"c\"\nmatch = { from = \"vc\" }\n\
         [[class]]\nname = \"b\"\nmatch = { from = \"vb\" }\n",
    )
    .unwrap();
    assert_eq!(new.classes[1].matcher.origin, Some(2));
    assign(&mut new.classes, &tags_of(&running.classes), 0x0fff_0000).unwrap();
    let tags: Vec<Option<u16>> = new.classes.iter().map(|k| k.matcher.origin).collect();
    assert_eq!(tags, [Some(1), Some(2)]);
    let mut swapped = with_bridges(
        "bridges = [\"br\"]",
        "[[class]]\nname = \"b\"\nmatch = { from = \"vb\" }\n",
    )
    .unwrap();
    assign(
        &mut swapped.classes,
        &tags_of(&running.classes),
        0x0fff_0000,
    )
    .unwrap();
    assert_eq!(swapped.classes[0].matcher.origin, Some(2));
}
