//! One test per error kind, each checking that the message names the file, the line and the
//! field; then defaults, conversions and the reload plan.

use super::*;
use crate::units::ParseQuantityError;
use metronome_core::rate::ParseRateError;
use metronome_core::Rate;

/// Line 1-3 of every test document.
const HEAD: &str = "[interfaces]\ninside = \"in0\"\noutside = \"out0\"\n";

pub(super) fn parse(body: &str) -> Result<Config, ConfigError> {
    Config::from_toml_str(&format!("{HEAD}{body}"), "test.toml")
}

/// Parses `HEAD + body`, expects an error at `line` about `field`, returns it.
pub(super) fn error_at(body: &str, line: usize, field: &str) -> ConfigError {
    let err = match parse(body) {
        Ok(_) => panic!("accepted:\n{body}"),
        Err(e) => e,
    };
    assert_eq!((err.line, err.field.as_str()), (Some(line), field), "{err}");
    let prefix = if field.is_empty() {
        format!("test.toml:{line}: ")
    } else {
        format!("test.toml:{line}: {field}: ")
    };
    assert!(err.to_string().starts_with(&prefix), "{err}");
    err
}

const CLASS: &str = "[[class]]\nname = \"a\"\n"; // lines 4-5

#[test]
fn syntax_error_names_the_line() {
    let err = error_at("[wheel]\ngranularity = \"2us\n", 5, "");
    assert!(matches!(err.kind, ErrorKind::Syntax(_)), "{err}");
}

#[test]
fn unknown_field_names_the_field() {
    let err = error_at(&format!("{CLASS}rat = \"1mbit\"\n"), 6, "class[0].rat");
    assert!(matches!(err.kind, ErrorKind::Schema(_)));
    assert!(err.to_string().contains("unknown field `rat`"), "{err}");
    error_at("[wheel]\ngranularty = \"2us\"\n", 5, "wheel.granularty");
    error_at("[shaper]\n", 4, "shaper");
    let m = format!("{CLASS}rate = \"1mbit\"\nmatch = {{ dport = 80 }}\n");
    error_at(&m, 7, "class[0].match.dport");
}

#[test]
fn wrong_type_and_missing_field() {
    error_at("[daemon]\nbusy_poll = \"yes\"\n", 5, "daemon.busy_poll");
    let err = error_at("[[class]]\nrate = \"1mbit\"\n", 4, "class[0]");
    assert!(err.to_string().contains("missing field `name`"), "{err}");
    let err = Config::from_toml_str("[interfaces]\ninside = \"a\"\n", "t.toml").unwrap_err();
    assert_eq!(
        err.to_string(),
        "t.toml:1: interfaces.outside: missing: give inside and outside (bump in the wire) \
         or attach (in place)"
    );
}

#[test]
fn bad_rate_names_unit_and_value() {
    let err = error_at(&format!("{CLASS}rate = \"100mbitz\"\n"), 6, "class[0].rate");
    assert!(matches!(
        err.kind,
        ErrorKind::Rate {
            error: ParseRateError::UnknownUnit,
            ..
        }
    ));
    assert!(
        err.to_string()
            .starts_with("test.toml:6: class[0].rate: unknown unit \"mbitz\" in \"100mbitz\""),
        "{err}"
    );
    error_at(
        &format!("{CLASS}pacing = \"-5mbit\"\n"),
        6,
        "class[0].pacing",
    );
    error_at(&format!("{CLASS}rate = \"\"\n"), 6, "class[0].rate");
    error_at(&format!("{CLASS}rate = \"0mbit\"\n"), 6, "class[0].rate");
    error_at(&format!("{CLASS}rate = -3\n"), 6, "class[0].rate");
    let err = error_at(
        &format!("{CLASS}rate = \"99999999tbit\"\n"),
        6,
        "class[0].rate",
    );
    assert!(err.to_string().contains("above 2^64"), "{err}");
    error_at("[default]\nrate = \"1 gigabit\"\n", 5, "default.rate");
}

#[test]
fn bad_duration() {
    let err = error_at("[wheel]\ngranularity = \"2\"\n", 5, "wheel.granularity");
    assert!(matches!(
        err.kind,
        ErrorKind::Duration {
            error: ParseQuantityError::MissingUnit,
            ..
        }
    ));
    error_at("[wheel]\nhorizon = \"2 fortnights\"\n", 5, "wheel.horizon");
    error_at("[wheel]\nhorizon = \"0s\"\n", 5, "wheel.horizon");
    let bp = "rate = \"1mbit\"\nbackpressure = { mode = \"ecn\", threshold = \"5xs\" }\n";
    error_at(
        &format!("{CLASS}{bp}"),
        7,
        "class[0].backpressure.threshold",
    );
}

#[test]
fn bad_size_and_burst_below_mtu() {
    let err = error_at(
        &format!("{CLASS}rate = \"1mbit\"\nburst = \"15q\"\n"),
        7,
        "class[0].burst",
    );
    assert!(matches!(err.kind, ErrorKind::Size { .. }), "{err}");
    let err = error_at(
        &format!("{CLASS}rate = \"1mbit\"\nburst = \"1k\"\n"),
        7,
        "class[0].burst",
    );
    assert_eq!(
        err.kind,
        ErrorKind::BurstBelowMtu {
            burst: 1024,
            mtu: 1500
        }
    );
    let jumbo = "[interfaces]\ninside = \"a\"\noutside = \"b\"\nmtu = 9000\n\
                 [default]\npacing = \"1gbit\"\nburst = 3000\n";
    let err = Config::from_toml_str(jumbo, "j.toml").unwrap_err();
    assert_eq!((err.line, err.field.as_str()), (Some(7), "default.burst"));
}

#[test]
fn bad_prefix() {
    let m = |dst: &str| format!("{CLASS}match = {{ dst = \"{dst}\" }}\n");
    let err = error_at(&m("10.0.0.0/33"), 6, "class[0].match.dst");
    assert!(matches!(err.kind, ErrorKind::Prefix { .. }));
    let err = error_at(&m("10.0.0.1/8"), 6, "class[0].match.dst");
    assert!(
        err.to_string().contains("the network is 10.0.0.0/8"),
        "{err}"
    );
    error_at(&m("example.com"), 6, "class[0].match.dst");
    let mixed = format!("{CLASS}match = {{ dst = \"10.0.0.0/8\", src = \"2001:db8::/32\" }}\n");
    error_at(&mixed, 6, "class[0].match.src");
    assert_eq!(
        parse(&m("192.0.2.7")).unwrap().classes[0].matcher.dst,
        Some("192.0.2.7/32".parse().unwrap())
    );
}

#[test]
fn dscp_out_of_range() {
    let err = error_at(
        &format!("{CLASS}[class.match]\ndscp = 64\n"),
        7,
        "class[0].match.dscp",
    );
    assert_eq!(err.kind, ErrorKind::Dscp(64));
    error_at(
        &format!("{CLASS}[class.match]\ndscp = -1\n"),
        7,
        "class[0].match.dscp",
    );
}

#[test]
fn bad_protocol() {
    let err = error_at(
        &format!("{CLASS}match = {{ protocol = \"sctpx\" }}\n"),
        6,
        "class[0].match.protocol",
    );
    assert!(matches!(err.kind, ErrorKind::Protocol(_)));
    error_at(
        &format!("{CLASS}match = {{ protocol = 256 }}\n"),
        6,
        "class[0].match.protocol",
    );
    let icmp_port = format!("{CLASS}match = {{ protocol = \"icmp\", dst_port = 80 }}\n");
    error_at(&icmp_port, 6, "class[0].match.dst_port");
}

#[test]
fn port_ranges() {
    let port = |p: &str| format!("{CLASS}match = {{ src_port = {p} }}\n");
    let err = error_at(&port("\"2000-1000\""), 6, "class[0].match.src_port");
    assert_eq!(
        err.kind,
        ErrorKind::PortRangeReversed {
            first: 2000,
            last: 1000
        }
    );
    let err = error_at(&port("70000"), 6, "class[0].match.src_port");
    assert!(matches!(err.kind, ErrorKind::Port { .. }));
    error_at(&port("\"80-\""), 6, "class[0].match.src_port");
    error_at(&port("\"http\""), 6, "class[0].match.src_port");
    let ok = parse(&port("\"1000 - 2000\"")).unwrap();
    assert_eq!(ok.classes[0].matcher.src_port, Some((1000, 2000)));
    assert_eq!(
        parse(&port("443")).unwrap().classes[0].matcher.src_port,
        Some((443, 443))
    );
}

#[test]
fn duplicate_and_reserved_class_names() {
    let two = "[[class]]\nname = \"web\"\n\n[[class]]\nname = \"web\"\n";
    let err = error_at(two, 8, "class[1].name");
    assert_eq!(
        err.kind,
        ErrorKind::DuplicateClass {
            name: "web".into(),
            first_line: 5
        }
    );
    error_at("[[class]]\nname = \"default\"\n", 5, "class[0].name");
    error_at("[[class]]\nname = \"has space\"\n", 5, "class[0].name");
    error_at("[default]\nname = \"x\"\n", 5, "default.name");
    error_at("[default]\nmatch = { dscp = 1 }\n", 5, "default.match");
}

#[test]
fn granularity_above_horizon() {
    let err = error_at(
        "[wheel]\ngranularity = \"2s\"\nhorizon = \"1ms\"\n",
        5,
        "wheel.granularity",
    );
    assert!(matches!(
        err.kind,
        ErrorKind::GranularityAboveHorizon { .. }
    ));
    error_at(
        "[wheel]\ngranularity = \"1ns\"\nhorizon = \"10s\"\n",
        6,
        "wheel.horizon",
    );
}

#[test]
fn out_of_range_and_inconsistent_values() {
    error_at("[wheel]\npool_packets = 0\n", 5, "wheel.pool_packets");
    error_at("[daemon]\nbatch_size = 100000\n", 5, "daemon.batch_size");
    error_at(
        "[daemon]\nmetrics_listen = \"localhost\"\n",
        5,
        "daemon.metrics_listen",
    );
    let same = "[interfaces]\ninside = \"a\"\noutside = \"a\"\n";
    let err = Config::from_toml_str(same, "s.toml").unwrap_err();
    assert_eq!(
        err.to_string(),
        "s.toml:3: interfaces.outside: same interface as inside (\"a\")"
    );
    let long = "[interfaces]\ninside = \"a-very-long-interface\"\noutside = \"b\"\n";
    let err = Config::from_toml_str(long, "l.toml").unwrap_err();
    assert_eq!(
        (err.line, err.field.as_str()),
        (Some(2), "interfaces.inside")
    );
    let idle = format!("{CLASS}burst = \"15k\"\n");
    error_at(&idle, 6, "class[0].burst");
    let bp = "rate = \"1mbit\"\nbackpressure = { mode = \"drop\" }\n";
    error_at(&format!("{CLASS}{bp}"), 7, "class[0].backpressure.limit");
    let bp = "rate = \"1mbit\"\nbackpressure = { mode = \"none\", limit = 3 }\n";
    error_at(&format!("{CLASS}{bp}"), 7, "class[0].backpressure.limit");
}

#[test]
fn empty_class_list_is_all_default() {
    let c = parse("").unwrap();
    assert!(c.classes.is_empty());
    assert_eq!(c.default_class, ClassPolicy::unshaped(1500));
    assert_eq!(c.default_class.burst, 1514);
    let wheel = metronome_core::TimingWheelConfig {
        horizon_policy: crate::DEFAULT_HORIZON_POLICY,
        ..metronome_core::TimingWheelConfig::default()
    };
    assert_eq!(c.wheel, wheel);
    assert_eq!(
        c.wheel.horizon_policy,
        metronome_core::HorizonPolicy::Reject
    );
    assert_eq!(c.daemon.metrics_listen.to_string(), DEFAULT_METRICS_LISTEN);
    assert!(c.daemon.metrics_listen.ip().is_loopback());
    assert_eq!(c.daemon.batch_size, DEFAULT_BATCH_SIZE);
    assert!(!c.daemon.busy_poll);
    assert_eq!(c.policy(Config::DEFAULT_CLASS), Some(&c.default_class));
    assert_eq!(c.policy(Config::class_id(0)), None);
}

#[test]
fn converts_to_core_types() {
    let body = "[wheel]\ngranularity = \"1us\"\nhorizon = \"500ms\"\nhorizon_policy = \"reject\"\n\
                [[class]]\nname = \"a\"\nmatch = { protocol = 17, dst = \"2001:db8::/32\" }\n\
                rate = 1000000\npacing = \"1.5mbit\"\nburst = \"4.5k\"\nhorizon_policy = \"clamp\"\n\
                backpressure = { mode = \"ecn\", threshold = \"250us\" }\n";
    let c = parse(body).unwrap();
    assert_eq!(c.wheel.granularity, Duration::from_micros(1));
    assert_eq!(c.wheel.horizon, Duration::from_millis(500));
    assert_eq!(c.wheel.horizon_policy, HorizonPolicy::Reject);
    let a = &c.classes[0];
    assert_eq!(a.line, 9);
    assert_eq!(a.matcher.protocol, Some(17));
    assert_eq!(a.policy.rate, Some(Rate::mbps(1)));
    assert_eq!(a.policy.pacing, Some(Rate::kbps(1500)));
    assert_eq!(a.policy.burst, 4608);
    assert_eq!(
        a.policy.effective_horizon_policy(&c.wheel),
        HorizonPolicy::Clamp
    );
    assert_eq!(
        a.policy.backpressure,
        Backpressure::Ecn {
            threshold: Duration::from_micros(250)
        }
    );
    assert_eq!(c.policy(Config::class_id(0)), Some(&a.policy));
}

#[test]
fn converts_to_classifier_rules() {
    let body = "[[class]]\nname = \"a\"\nmatch = { dst = \"10.0.0.0/8\", dscp = 46 }\n\
                [[class]]\nname = \"b\"\nmatch = { protocol = \"tcp\", src_port = \"1-1023\" }\n";
    let c = parse(body).unwrap();
    let rules = c.class_rules();
    assert_eq!(rules.len(), 2);
    assert_eq!(rules[0].1, metronome_core::ClassId(1));
    assert_eq!(rules[0].0.dst, Some("10.0.0.0/8".parse().unwrap()));
    assert_eq!(rules[0].0.dscp, Some(46));
    assert_eq!(rules[1].1, metronome_core::ClassId(2));
    assert_eq!(rules[1].0.protocol, Some(6));
    assert_eq!(rules[1].0.src_port, Some((1, 1023)));
    assert!(rules.iter().all(|(r, _)| !r.is_unsatisfiable()));
    let _ = c.classifier();
}

#[test]
fn no_panic_on_odd_input() {
    for text in [
        "",
        "\u{0}",
        "[[class]]",
        "class = 5",
        "[interfaces]\ninside = 1\n",
        "= = =",
    ] {
        assert!(Config::from_toml_str(text, "odd.toml").is_err());
    }
}

const RELOAD_BASE: &str = "[[class]]\nname = \"a\"\nrate = \"100mbit\"\n\
                           [[class]]\nname = \"b\"\npacing = \"10mbit\"\n";

#[test]
fn reload_of_the_same_file_changes_nothing() {
    let c = parse(RELOAD_BASE).unwrap();
    let plan = c.diff(&c.clone());
    assert!(plan.is_empty());
    assert_eq!(plan.to_string(), "no change\n");
}

#[test]
fn reload_of_rates_and_classes_is_live() {
    let old = parse(RELOAD_BASE).unwrap();
    let new_text = "[daemon]\nbusy_poll = true\n[[class]]\nname = \"c\"\nrate = \"5mbit\"\n\
                    [[class]]\nname = \"a\"\nrate = \"200mbit\"\n[default]\nrate = \"1gbit\"\n";
    let new = parse(new_text).unwrap();
    let plan = old.diff(&new);
    assert!(!plan.needs_restart(), "{plan}");
    assert_eq!(plan.busy_poll, Some(true));
    assert!(plan
        .classes
        .contains(&ClassChange::Removed { name: "b".into() }));
    assert!(plan.classes.contains(&ClassChange::Added {
        name: "c".into(),
        index: 0
    }));
    assert!(plan.classes.contains(&ClassChange::Moved {
        name: "a".into(),
        from: 0,
        to: 1
    }));
    let rate = FieldChange {
        field: "rate".into(),
        old: "100mbit".into(),
        new: "200mbit".into(),
    };
    assert!(plan.classes.contains(&ClassChange::Changed {
        name: "a".into(),
        fields: vec![rate]
    }));
    assert_eq!(plan.default_class[0].field, "rate");
    assert!(
        plan.to_string()
            .contains("class a: rate: 100mbit -> 200mbit"),
        "{plan}"
    );
}

#[test]
fn reload_of_interfaces_or_wheel_needs_a_restart() {
    let old = parse(RELOAD_BASE).unwrap();
    let text = format!("[wheel]\ngranularity = \"4us\"\n{RELOAD_BASE}");
    let plan = old.diff(&parse(&text).unwrap());
    assert!(plan.needs_restart());
    assert_eq!(plan.restart_required[0].field, "wheel.granularity");
    assert!(plan.classes.is_empty());
    let moved = RELOAD_BASE.to_string();
    let other = Config::from_toml_str(
        &format!("[interfaces]\ninside = \"x\"\noutside = \"out0\"\n{moved}"),
        "o.toml",
    )
    .unwrap();
    let plan = old.diff(&other);
    assert_eq!(plan.restart_required.len(), 1);
    assert!(
        plan.to_string()
            .contains("needs a restart: interfaces.inside"),
        "{plan}"
    );
}

#[test]
fn cores_and_nba_period() {
    let c = parse("").unwrap();
    assert_eq!(
        (c.daemon.cores, c.daemon.nba_period),
        (1, DEFAULT_NBA_PERIOD)
    );
    let c = parse("[daemon]\ncores = 2\nnba_period = \"50ms\"\n").unwrap();
    assert_eq!(c.daemon.cores, 2);
    assert_eq!(c.daemon.nba_period, Duration::from_millis(50));
    error_at("[daemon]\ncores = 0\n", 5, "daemon.cores");
    error_at("[daemon]\ncores = 100000\n", 5, "daemon.cores");
    error_at("[daemon]\nnba_period = \"0ms\"\n", 5, "daemon.nba_period");
    // Both need a restart: the silos and their sockets are made at start-up.
    let plan = c.diff(&parse("[daemon]\ncores = 3\n").unwrap());
    let fields: Vec<&str> = plan
        .restart_required
        .iter()
        .map(|f| f.field.as_str())
        .collect();
    assert_eq!(fields, ["daemon.cores", "daemon.nba_period"]);
}

#[test]
fn super_frame_fields_default_on_and_are_bounded() {
    let c = parse("").unwrap();
    assert!(c.daemon.vnet_hdr && c.daemon.gro);
    assert_eq!(c.daemon.gso_slots, DEFAULT_GSO_SLOTS);
    assert_eq!(c.default_class.gso_burst, DEFAULT_GSO_BURST);
    let c = parse("[daemon]\nvnet_hdr = false\ngro = false\ngso_slots = 0\n").unwrap();
    assert!(!c.daemon.vnet_hdr && !c.daemon.gro);
    assert_eq!(c.daemon.gso_slots, 0);
    error_at("[daemon]\ngso_slots = 4097\n", 5, "daemon.gso_slots");
    let c = parse(&format!("{CLASS}rate = \"1gbit\"\ngso_burst = \"200us\"\n")).unwrap();
    assert_eq!(c.classes[0].policy.gso_burst, Duration::from_micros(200));
    error_at(
        &format!("{CLASS}rate = \"1gbit\"\ngso_burst = \"0s\"\n"),
        7,
        "class[0].gso_burst",
    );
    // Without a rate there is nothing to cut at.
    error_at(
        &format!("{CLASS}gso_burst = \"1ms\"\n"),
        6,
        "class[0].gso_burst",
    );
}

#[test]
fn super_frame_fields_need_a_restart_but_gso_burst_reloads() {
    let old = parse("").unwrap();
    let new = parse("[daemon]\ngso_slots = 512\n").unwrap();
    assert!(old.diff(&new).needs_restart());
    let a = parse(&format!("{CLASS}rate = \"1gbit\"\n")).unwrap();
    let b = parse(&format!("{CLASS}rate = \"1gbit\"\ngso_burst = \"2ms\"\n")).unwrap();
    let plan = a.diff(&b);
    assert!(!plan.needs_restart());
    assert!(plan.to_string().contains("gso_burst"), "{plan}");
}

#[test]
fn fair_needs_a_rate_defaults_off_and_reloads() {
    let c = parse(&format!("{CLASS}rate = \"1gbit\"\n")).unwrap();
    assert!(!c.classes[0].policy.fair && !c.default_class.fair);
    let fair = parse(&format!("{CLASS}rate = \"1gbit\"\nfair = true\n")).unwrap();
    assert!(fair.classes[0].policy.fair);
    // Per-flow pacing alone has no aggregate to share.
    error_at(
        &format!("{CLASS}pacing = \"1gbit\"\nfair = true\n"),
        7,
        "class[0].fair",
    );
    error_at(&format!("{CLASS}fair = false\n"), 6, "class[0].fair");
    let plan = c.diff(&fair);
    assert!(!plan.needs_restart());
    assert!(plan.to_string().contains("fair: false -> true"), "{plan}");
}

/// `[daemon] KEY`, a duration: `default` when absent, parsed (`"1.5s"`), zero accepted, an
/// error at its line for a non-duration, and a change needs a restart.
/// `get` reads the field from a parsed configuration.
fn daemon_duration_field(
    key: &str,
    get: fn(&Config) -> Duration,
    default: Duration,
    sample: &str,
    sample_value: Duration,
) {
    let c = parse("").unwrap();
    let field = format!("daemon.{key}");
    assert_eq!(get(&c), default);
    let d = parse(&format!("[daemon]\n{key} = \"{sample}\"\n")).unwrap();
    assert_eq!(get(&d), sample_value);
    let zero = parse(&format!("[daemon]\n{key} = \"0s\"\n")).unwrap();
    assert_eq!(get(&zero), Duration::ZERO);
    error_at(&format!("[daemon]\n{key} = \"soon\"\n"), 5, &field);
    let plan = c.diff(&d);
    let fields: Vec<&str> = plan
        .restart_required
        .iter()
        .map(|f| f.field.as_str())
        .collect();
    assert_eq!(fields, [field.as_str()]);
}

#[test]
fn link_down_grace_defaults_parses_and_needs_a_restart() {
    daemon_duration_field(
        "link_down_grace",
        |c| c.daemon.link_down_grace,
        DEFAULT_LINK_DOWN_GRACE,
        "1.5s",
        Duration::from_millis(1500),
    );
}

#[test]
fn timer_slack_defaults_parses_and_needs_a_restart() {
    daemon_duration_field(
        "timer_slack",
        |c| c.daemon.timer_slack,
        DEFAULT_TIMER_SLACK,
        "250us",
        Duration::from_micros(250),
    );
}

#[test]
fn arrival_slack_defaults_parses_and_needs_a_restart() {
    daemon_duration_field(
        "arrival_slack",
        |c| c.daemon.arrival_slack,
        DEFAULT_ARRIVAL_SLACK,
        "1ms",
        Duration::from_millis(1),
    );
}

#[test]
fn daemon_user_is_a_plain_name_and_needs_a_restart() {
    assert_eq!(parse("").unwrap().daemon.user, None);
    let c = parse("[daemon]\nuser = \"metronome\"\n").unwrap();
    assert_eq!(c.daemon.user.as_deref(), Some("metronome"));
    for bad in ["", "-x", "a b", "../root", "x:y", &"u".repeat(33)] {
        let err = error_at(&format!("[daemon]\nuser = {bad:?}\n"), 5, "daemon.user");
        assert!(err.to_string().contains("is not a user name"), "{err}");
    }
    error_at("[daemon]\nuser = 0\n", 5, "daemon.user");
    let plan = parse("").unwrap().diff(&c);
    let fields: Vec<&str> = plan
        .restart_required
        .iter()
        .map(|f| f.field.as_str())
        .collect();
    assert_eq!(fields, ["daemon.user"]);
}

#[test]
fn the_line_of_an_offset_is_the_count_of_newlines_before_it() {
    let text = "a\n\nbc\n[x]\ny = 1\n\n";
    let site = super::error::ErrorSite::new(text, "t.toml");
    for offset in 0..=text.len() + 2 {
        assert_eq!(
            site.line(offset),
            super::error::line_of(text, offset),
            "offset {offset}"
        );
    }
    assert_eq!(super::error::ErrorSite::new("", "t.toml").line(0), 1);
}

#[test]
fn class_metrics_words_and_lists() {
    use crate::ClassSeries;
    assert_eq!(parse("").unwrap().daemon.class_metrics, ClassSeries::All);
    let c = parse("[daemon]\nclass_metrics = \"active\"\n").unwrap();
    assert_eq!(c.daemon.class_metrics, ClassSeries::Active);
    let c = parse("[daemon]\nclass_metrics = [\"a\", \"b\"]\n").unwrap();
    let names = ["a".to_owned(), "b".to_owned()].into();
    assert_eq!(c.daemon.class_metrics, ClassSeries::Listed(names));
    error_at(
        "[daemon]\nclass_metrics = \"some\"\n",
        5,
        "daemon.class_metrics",
    );
    // Applied live: the next scrape takes it.
    assert!(!parse("").unwrap().diff(&c).needs_restart());
}

#[test]
fn realtime_priority_is_sched_fifo_s_range_and_needs_a_restart() {
    assert_eq!(parse("").unwrap().daemon.realtime_priority, None);
    let c = parse("[daemon]\nrealtime_priority = 99\n").unwrap();
    assert_eq!(c.daemon.realtime_priority, Some(99));
    for bad in ["0", "100", "-1"] {
        error_at(
            &format!("[daemon]\nrealtime_priority = {bad}\n"),
            5,
            "daemon.realtime_priority",
        );
    }
    error_at(
        "[daemon]\nrealtime_priority = \"high\"\n",
        5,
        "daemon.realtime_priority",
    );
    let old = parse("").unwrap();
    let new = parse("[daemon]\nrealtime_priority = 10\n").unwrap();
    let plan = old.diff(&new);
    assert!(plan.needs_restart(), "{plan}");
    assert!(
        plan.restart_required
            .iter()
            .any(|c| c.field == "daemon.realtime_priority"),
        "{plan}"
    );
}

/// A configuration of `classes` (`[[class]]` tables) on the usual interfaces.
fn with_classes(classes: &str) -> Result<Config, crate::ConfigError> {
    Config::from_toml_str(
        &format!("[interfaces]\ninside = \"in0\"\noutside = \"out0\"\n{classes}"),
        "tree.toml",
    )
}

#[test]
fn a_class_tree_is_read_with_its_parents_weights_and_gathering_classes() {
    let c = with_classes(
        "[[class]]\nname = \"tenant\"\nrate = \"300mbit\"\n\
         [[class]]\nname = \"a\"\nparent = \"tenant\"\nweight = 3\nrate = \"200mbit\"\n\
         match = { dst_port = 9001 }\n\
         [[class]]\nname = \"b\"\nparent = \"tenant\"\nmatch = { dst_port = 9002 }\n\
         [[class]]\nname = \"web\"\nmatch = { dst_port = 80 }\nrate = \"1gbit\"\n\
         [[class]]\nname = \"web-eu\"\nparent = \"web\"\nmatch = { dst_port = 80, dst = \"10.1.0.0/16\" }\n",
    )
    .unwrap();
    let t = |n: &str| c.classes.iter().find(|k| k.name == n).unwrap().tree.clone();
    assert_eq!(t("a").parent.as_deref(), Some("tenant"));
    assert_eq!((t("a").weight, t("b").weight), (3, 1));
    // No match and children: it only gathers them. A match of its own: it keeps its rule,
    // tried after its children's.
    assert!(t("tenant").gathers_only && !t("web").gathers_only);
    let rules: Vec<u32> = c.class_rules().iter().map(|(_, id)| id.0).collect();
    assert_eq!(rules, [2, 3, 5, 4]);
}

#[test]
fn a_class_tree_that_cannot_hold_is_refused_naming_the_field() {
    let err = |classes: &str| with_classes(classes).unwrap_err().to_string();
    let e = err("[[class]]\nname = \"a\"\nparent = \"nobody\"\n");
    assert!(
        e.contains("class[0].parent") && e.contains("no class is named \"nobody\""),
        "{e}"
    );
    let e =
        err("[[class]]\nname = \"a\"\nparent = \"b\"\n[[class]]\nname = \"b\"\nparent = \"a\"\n");
    assert!(
        e.contains("class[0].parent") && e.contains("own ancestor"),
        "{e}"
    );
    let e = err("[[class]]\nname = \"a\"\nparent = \"a\"\n");
    assert!(
        e.contains("class[0].parent") && e.contains("its own parent"),
        "{e}"
    );
    let e = err("[[class]]\nname = \"p\"\nrate = \"100mbit\"\n\
         [[class]]\nname = \"c\"\nparent = \"p\"\nrate = \"200mbit\"\n");
    assert!(
        e.contains("class[1].rate") && e.contains("could never apply"),
        "{e}"
    );
    let mut deep = String::new();
    for level in 0..9 {
        deep.push_str(&format!("[[class]]\nname = \"l{level}\"\n"));
        if level > 0 {
            deep.push_str(&format!("parent = \"l{}\"\n", level - 1));
        }
    }
    let e = err(&deep);
    assert!(e.contains("more than 8 levels"), "{e}");
    let e = err("[[class]]\nname = \"g\"\ngather = true\nmatch = { dst_port = 1 }\n");
    assert!(e.contains("class[0].match") && e.contains("gather"), "{e}");
    let e = err("[default]\nparent = \"x\"\n");
    assert!(e.contains("default.parent"), "{e}");
    let e = err("[[class]]\nname = \"a\"\nweight = 2\n");
    assert!(
        e.contains("class[0].weight") && e.contains("`parent`"),
        "{e}"
    );
}
