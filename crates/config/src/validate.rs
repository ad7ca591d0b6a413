//! From the raw, spanned document ([`super::raw`]) to a [`Config`] of core types, checking every
//! value and naming the field and line of the first one that is wrong.
//!
//! Checks beyond the types: rates, sizes and durations parse (tc units); rates are positive;
//! prefixes have no host bits; DSCP is 0..=63; port ranges are not reversed and ports are not
//! asked of ICMP; class names are unique, plain and not `default`; the wheel's granularity is
//! at most its horizon and its slot count and pool are bounded; bursts hold at least one MTU;
//! a class with neither `rate` nor `pacing` sets no `burst`, `horizon_policy` or `backpressure`
//! (they would have no effect).
//!
//! A class and its policy are checked in [`class`], its match in [`matcher`]; the interfaces, the
//! wheel, the daemon section and the scalars every section uses (rates, durations, bounded
//! integers) here.

use super::error::{ConfigError, ErrorKind, ErrorSite};
use super::raw::{
    RawClassMetrics, RawConfig, RawDaemon, RawHorizonPolicy, RawInterfaces, RawLogFormat, RawWheel,
    Scalar,
};
use super::{
    ClassConfig, ClassPolicy, Config, DaemonConfig, Interfaces, LogFormat, DEFAULT_ARRIVAL_SLACK,
    DEFAULT_BATCH_SIZE, DEFAULT_CONTROL, DEFAULT_DRAIN, DEFAULT_EARLY_MULTIPLE, DEFAULT_GSO_SLOTS,
    DEFAULT_HORIZON_POLICY, DEFAULT_LINK_DOWN_GRACE, DEFAULT_MAX_API_CLASSES,
    DEFAULT_METRICS_LISTEN, DEFAULT_MTU, DEFAULT_NBA_PERIOD, DEFAULT_NICE, DEFAULT_ORIGIN_MARK,
    DEFAULT_POOL_SHARE, DEFAULT_TIMER_SLACK, MAX_BATCH_SIZE, MAX_CLASSES, MAX_CORES,
    MAX_EARLY_MULTIPLE, MAX_GSO_SLOTS, MAX_INTERFACE_NAME, MAX_POOL_PACKETS, MAX_POOL_SHARE,
    MAX_REALTIME_PRIORITY, MAX_WHEEL_SLOTS,
};
use crate::units::parse_duration;
use crate::ClassSeries;
use metronome_core::{Duration, HorizonPolicy, Rate, TimingWheelConfig};
use std::collections::HashMap;
use std::net::SocketAddr;
use toml::Spanned;

mod class;
mod matcher;
mod tree;

pub(super) type Result<T> = core::result::Result<T, ConfigError>;

/// Longest user name in bytes: 32, `useradd`'s limit (`LOGIN_NAME_MAX` of glibc allows more,
/// but no name `useradd` makes is longer).
const MAX_USER_NAME: usize = 32;

/// Longest control socket path in bytes: 107, what `sun_path` of `sockaddr_un` holds (108 bytes
/// with its NUL, unix(7)).
const MAX_CONTROL_PATH: usize = 107;

/// Validates `text`, a `[class]` table ([`super::raw::RawLiveClass`]), as a `[[class]]` of
/// `running` would be (its MTU and `[link]`); the error's field is the class's own
/// (`rate`, `match.dst`).
pub(super) fn parse_live_class(text: &str, running: &Config) -> Result<ClassConfig> {
    let site = ErrorSite::new(text, "control");
    let class = toml::from_str::<super::raw::RawLiveClass>(text)
        .map_err(|e| site.toml_error(&e, false))
        .and_then(|raw| {
            let v = Validator { site };
            if let Some(scope) = &raw.class.get_ref().scope {
                return Err(v.invalid(
                    scope.span(),
                    "class.scope",
                    "cluster classes come from the file (with [cluster]); a class of the \
                     control socket is this daemon's own"
                        .to_string(),
                ));
            }
            let class = v.class(
                &raw.class,
                "class",
                running.interfaces.mtu,
                running.link.as_ref(),
            )?;
            if let Some(key) = super::origin_tags::key_of(&class.matcher) {
                let field = format!("class.match.{}", key.field());
                v.origin_allowed(&key, &running.interfaces)
                    .map_err(|message| v.invalid(raw.class.span(), &field, message))?;
            }
            Ok(class)
        });
    class.map_err(|mut e| {
        e.field = e
            .field
            .strip_prefix("class.")
            .unwrap_or(&e.field)
            .to_string();
        e
    })
}

/// Parses `text` and validates it.
pub(super) fn parse(text: &str, source_name: &str) -> Result<Config> {
    let site = ErrorSite::new(text, source_name);
    // A document that does not deserialize is checked for syntax, so that a syntax error is
    // reported as such and not as a schema error; a valid one is parsed once (with 100 000
    // classes a second pass took a fifth of the start-up).
    let raw: RawConfig = match toml::from_str(text) {
        Ok(raw) => raw,
        Err(e) => {
            if let Err(syntax) = toml::de::DeTable::parse(text) {
                return Err(site.toml_error(&syntax, true));
            }
            return Err(site.toml_error(&e, false));
        }
    };
    let v = Validator { site };
    let interfaces = v.interfaces(&raw.interfaces)?;
    let wheel = v.wheel(&raw.wheel)?;
    let daemon = v.daemon(&raw.daemon)?;
    let link = raw
        .link
        .as_ref()
        .map(|l| v.link(l, interfaces.mtu, &daemon))
        .transpose()?;
    if raw.classes.len() > MAX_CLASSES {
        let span = raw.classes[MAX_CLASSES].span();
        return Err(v.invalid(span, "class", format!("more than {MAX_CLASSES} classes")));
    }
    let mut classes = Vec::with_capacity(raw.classes.len());
    let mut lines: HashMap<String, usize> = HashMap::new();
    for (i, class) in raw.classes.iter().enumerate() {
        let c = v.class(class, &format!("class[{i}]"), interfaces.mtu, link.as_ref())?;
        if let Some(&first_line) = lines.get(&c.name) {
            let span = class
                .get_ref()
                .name
                .as_ref()
                .map_or(class.span(), |n| n.span());
            return Err(v.site.at(
                span,
                &format!("class[{i}].name"),
                ErrorKind::DuplicateClass {
                    name: c.name,
                    first_line,
                },
            ));
        }
        lines.insert(c.name.clone(), c.line);
        classes.push(c);
    }
    v.origins(&mut classes, &raw.classes, &interfaces)?;
    v.tree(&mut classes, &raw.classes)?;
    let default_class = match &raw.default_class {
        Some(d) => v.default_class(d, interfaces.mtu, link.as_ref())?,
        None => {
            let mut policy = ClassPolicy::unshaped(interfaces.mtu);
            policy.link.on_link = link.is_some();
            policy
        }
    };
    if let (Some(l), Some(raw_link)) = (&link, &raw.link) {
        let mut policies = vec![(
            &default_class,
            "default".to_string(),
            raw.default_class.as_ref().map_or(0..0, |d| d.span()),
        )];
        for (i, (c, r)) in classes.iter().zip(&raw.classes).enumerate() {
            let span = r.get_ref().name.as_ref().map_or(r.span(), |n| n.span());
            policies.push((&c.policy, format!("class[{i}]"), span));
        }
        super::link::check_classes(&v, l, raw_link.span(), &policies)?;
    }
    if let Some(scope) = raw
        .default_class
        .as_ref()
        .and_then(|d| d.get_ref().scope.as_ref())
    {
        return Err(v.invalid(
            scope.span(),
            "default.scope",
            "the default class is this daemon's own: give a cluster limit to a named class"
                .to_string(),
        ));
    }
    let cluster = v.cluster_classes(raw.cluster.as_ref(), &raw.classes, &classes)?;
    Ok(Config {
        source_name: source_name.to_string(),
        interfaces,
        wheel,
        daemon,
        classes,
        default_class,
        link,
        cluster,
    })
}

pub(super) struct Validator<'a> {
    pub(super) site: ErrorSite<'a>,
}

impl Validator<'_> {
    pub(super) fn invalid(
        &self,
        span: core::ops::Range<usize>,
        field: &str,
        msg: String,
    ) -> ConfigError {
        self.site.at(span, field, ErrorKind::Invalid(msg))
    }

    pub(super) fn interface_name(&self, name: &Spanned<String>, field: &str) -> Result<()> {
        let n = name.get_ref();
        let bad = n.is_empty()
            || n.len() > MAX_INTERFACE_NAME
            || n == "."
            || n == ".."
            || n.chars().any(|c| c == '/' || c == ':' || c.is_whitespace());
        if bad {
            return Err(self.invalid(
                name.span(),
                field,
                format!(
                    "{n:?} is not an interface name (1 to {MAX_INTERFACE_NAME} bytes, \
                     no '/', ':' or whitespace)"
                ),
            ));
        }
        Ok(())
    }

    fn interfaces(&self, raw: &Spanned<RawInterfaces>) -> Result<Interfaces> {
        let span = raw.span();
        let raw = raw.get_ref();
        let mtu = match &raw.mtu {
            Some(m) => self.int_in(m, "interfaces.mtu", 68, 65_535)? as u32,
            None => DEFAULT_MTU,
        };
        let origin_mark = match &raw.origin_mark {
            Some(m) => {
                let bits = self.int_in(m, "interfaces.origin_mark", 0, i64::from(u32::MAX))? as u32;
                let contiguous = bits == 0
                    || (bits >> bits.trailing_zeros()).trailing_ones() == bits.count_ones();
                if !contiguous || bits.count_ones() > 16 {
                    return Err(self.invalid(
                        m.span(),
                        "interfaces.origin_mark",
                        format!("{bits:#x} is not 1 to 16 contiguous bits (or 0: no mark)"),
                    ));
                }
                bits
            }
            None => DEFAULT_ORIGIN_MARK,
        };
        if raw.attach.is_some() || raw.bridges.is_some() {
            if let Some(other) = raw.inside.as_ref().or(raw.outside.as_ref()) {
                let field = if raw.attach.is_some() {
                    "interfaces.attach"
                } else {
                    "interfaces.bridges"
                };
                return Err(self.invalid(
                    other.span(),
                    field,
                    "attach and bridges (shape in place) and inside/outside (bump in the wire) \
                     exclude each other"
                        .to_string(),
                ));
            }
            let mut names: Vec<String> = Vec::new();
            let mut lists = [Vec::new(), Vec::new()];
            for (list, (key, raw_list)) in lists
                .iter_mut()
                .zip([("attach", &raw.attach), ("bridges", &raw.bridges)])
            {
                let Some(raw_list) = raw_list else { continue };
                if raw_list.get_ref().is_empty() {
                    return Err(self.invalid(
                        raw_list.span(),
                        &format!("interfaces.{key}"),
                        "names no interface".to_string(),
                    ));
                }
                for (i, name) in raw_list.get_ref().iter().enumerate() {
                    let field = format!("interfaces.{key}[{i}]");
                    self.interface_name(name, &field)?;
                    if names.contains(name.get_ref()) {
                        return Err(self.invalid(
                            name.span(),
                            &field,
                            format!("{:?} is listed twice", name.get_ref()),
                        ));
                    }
                    names.push(name.get_ref().clone());
                    list.push(name.get_ref().clone());
                }
            }
            let [attach, bridges] = lists;
            return Ok(Interfaces {
                inside: String::new(),
                outside: String::new(),
                attach,
                bridges,
                origin_mark,
                mtu,
            });
        }
        let (Some(inside), Some(outside)) = (&raw.inside, &raw.outside) else {
            let field = if raw.inside.is_none() {
                "interfaces.inside"
            } else {
                "interfaces.outside"
            };
            return Err(self.invalid(
                span,
                field,
                "missing: give inside and outside (bump in the wire) or attach (in place)"
                    .to_string(),
            ));
        };
        for (field, name) in [
            ("interfaces.inside", inside),
            ("interfaces.outside", outside),
        ] {
            self.interface_name(name, field)?;
        }
        if inside.get_ref() == outside.get_ref() {
            return Err(self.invalid(
                outside.span(),
                "interfaces.outside",
                format!("same interface as inside ({:?})", inside.get_ref()),
            ));
        }
        Ok(Interfaces {
            inside: inside.get_ref().clone(),
            outside: outside.get_ref().clone(),
            attach: Vec::new(),
            bridges: Vec::new(),
            origin_mark,
            mtu,
        })
    }

    fn wheel(&self, raw: &RawWheel) -> Result<TimingWheelConfig> {
        let default = TimingWheelConfig::default();
        let granularity = match &raw.granularity {
            Some(g) => self.positive_duration(g, "wheel.granularity")?,
            None => default.granularity,
        };
        let horizon = match &raw.horizon {
            Some(h) => self.positive_duration(h, "wheel.horizon")?,
            None => default.horizon,
        };
        if granularity > horizon {
            let (span, field) = match (&raw.granularity, &raw.horizon) {
                (Some(g), _) => (g.span(), "wheel.granularity"),
                (None, Some(h)) => (h.span(), "wheel.horizon"),
                (None, None) => (0..0, "wheel"),
            };
            return Err(self.site.at(
                span,
                field,
                ErrorKind::GranularityAboveHorizon {
                    granularity,
                    horizon,
                },
            ));
        }
        let horizon_policy = raw
            .horizon_policy
            .as_ref()
            .map_or(DEFAULT_HORIZON_POLICY, |p| horizon_policy(*p.get_ref()));
        let pool_packets = match &raw.pool_packets {
            Some(p) => self.int_in(p, "wheel.pool_packets", 1, MAX_POOL_PACKETS as i64)? as usize,
            None => default.pool_packets,
        };
        let config = TimingWheelConfig {
            granularity,
            horizon,
            horizon_policy,
            pool_packets,
        };
        if config.slots() > MAX_WHEEL_SLOTS {
            let span = raw.horizon.as_ref().or(raw.granularity.as_ref());
            return Err(self.invalid(
                span.map_or(0..0, |s| s.span()),
                "wheel.horizon",
                format!(
                    "{horizon} / {granularity} makes {} slots, more than {MAX_WHEEL_SLOTS}: \
                     raise the granularity or shorten the horizon",
                    config.slots()
                ),
            ));
        }
        Ok(config)
    }

    fn daemon(&self, raw: &RawDaemon) -> Result<DaemonConfig> {
        let batch_size = match &raw.batch_size {
            Some(b) => self.int_in(b, "daemon.batch_size", 1, MAX_BATCH_SIZE as i64)? as usize,
            None => DEFAULT_BATCH_SIZE,
        };
        let metrics_listen = match &raw.metrics_listen {
            Some(m) => m.get_ref().trim().parse::<SocketAddr>().map_err(|_| {
                self.invalid(
                    m.span(),
                    "daemon.metrics_listen",
                    format!(
                        "{:?} is not an address and port such as \"127.0.0.1:9187\" or \
                         \"[::1]:9187\"",
                        m.get_ref()
                    ),
                )
            })?,
            None => DEFAULT_METRICS_LISTEN
                .parse()
                .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 9187))),
        };
        let control = match &raw.control {
            Some(c) if c.get_ref().is_empty() => None,
            Some(c) if c.get_ref().len() > MAX_CONTROL_PATH || c.get_ref().contains('\0') => {
                return Err(self.invalid(
                    c.span(),
                    "daemon.control",
                    format!(
                        "{:?} is not a socket path (at most {MAX_CONTROL_PATH} bytes, no NUL; \
                         \"\" for no control socket)",
                        c.get_ref()
                    ),
                ))
            }
            Some(c) => Some(std::path::PathBuf::from(c.get_ref())),
            None => Some(std::path::PathBuf::from(DEFAULT_CONTROL)),
        };
        let class_dir = match &raw.class_dir {
            Some(d) if d.get_ref().is_empty() => None,
            Some(d) if d.get_ref().contains('\0') => {
                return Err(self.invalid(
                    d.span(),
                    "daemon.class_dir",
                    format!(
                        "{:?} is not a directory path (no NUL; \"\" for none)",
                        d.get_ref()
                    ),
                ))
            }
            Some(d) => Some(std::path::PathBuf::from(d.get_ref())),
            None => None,
        };
        let max_api_classes = match &raw.max_api_classes {
            Some(m) => self.int_in(m, "daemon.max_api_classes", 0, MAX_CLASSES as i64)? as usize,
            None => DEFAULT_MAX_API_CLASSES,
        };
        let log_format = match raw.log_format.as_ref().map(|f| *f.get_ref()) {
            Some(RawLogFormat::Json) => LogFormat::Json,
            Some(RawLogFormat::Text) | None => LogFormat::Text,
        };
        let cores = match &raw.cores {
            Some(c) => self.int_in(c, "daemon.cores", 1, MAX_CORES as i64)? as usize,
            None => 1,
        };
        let nba_period = match &raw.nba_period {
            Some(p) => self.positive_duration(p, "daemon.nba_period")?,
            None => DEFAULT_NBA_PERIOD,
        };
        let gso_slots = match &raw.gso_slots {
            Some(g) => self.int_in(g, "daemon.gso_slots", 0, i64::from(MAX_GSO_SLOTS))? as u32,
            None => DEFAULT_GSO_SLOTS,
        };
        let duration = |raw: &Option<Spanned<String>>, field: &str, default: Duration| match raw {
            Some(d) => self.duration(d, field),
            None => Ok(default),
        };
        let drain = duration(&raw.drain, "daemon.drain", DEFAULT_DRAIN)?;
        let link_down_grace = duration(
            &raw.link_down_grace,
            "daemon.link_down_grace",
            DEFAULT_LINK_DOWN_GRACE,
        )?;
        let timer_slack = duration(&raw.timer_slack, "daemon.timer_slack", DEFAULT_TIMER_SLACK)?;
        let arrival_slack = duration(
            &raw.arrival_slack,
            "daemon.arrival_slack",
            DEFAULT_ARRIVAL_SLACK,
        )?;
        let user = raw.user.as_ref().map(|u| self.user_name(u)).transpose()?;
        let pool_share = match &raw.pool_share {
            Some(p) => self.int_in(p, "daemon.pool_share", 0, MAX_POOL_SHARE)? as u32,
            None => DEFAULT_POOL_SHARE,
        };
        let nice = match &raw.nice {
            Some(n) => self.int_in(n, "daemon.nice", -20, 19)? as i8,
            None => DEFAULT_NICE,
        };
        let early_multiple = match &raw.early_multiple {
            Some(m) => self.int_in(m, "daemon.early_multiple", 1, MAX_EARLY_MULTIPLE)? as u32,
            None => DEFAULT_EARLY_MULTIPLE,
        };
        let realtime_priority = match &raw.realtime_priority {
            Some(p) => {
                Some(self.int_in(p, "daemon.realtime_priority", 1, MAX_REALTIME_PRIORITY)? as u8)
            }
            None => None,
        };
        let class_metrics = match &raw.class_metrics {
            Some(c) => self.class_metrics(c)?,
            None => ClassSeries::All,
        };
        Ok(DaemonConfig {
            vnet_hdr: raw.vnet_hdr.unwrap_or(true),
            gso_slots,
            gro: raw.gro.unwrap_or(true),
            busy_poll: raw.busy_poll.unwrap_or(false),
            batch_size,
            metrics_listen,
            control,
            class_dir,
            max_api_classes,
            log_format,
            cores,
            nba_period,
            malformed: raw.malformed.unwrap_or_default(),
            non_ip: raw.non_ip.unwrap_or_default(),
            drain,
            link_down_grace,
            timer_slack,
            arrival_slack,
            user,
            pool_share,
            early_refuse: raw.early_refuse.unwrap_or(true),
            early_multiple,
            nice,
            realtime_priority,
            class_metrics,
        })
    }

    /// `daemon.class_metrics`: `"all"`, `"active"` or a list of class names (a name of no
    /// class is kept: such a class may come with a later reload).
    fn class_metrics(&self, raw: &Spanned<RawClassMetrics>) -> Result<ClassSeries> {
        match raw.get_ref() {
            RawClassMetrics::Word(w) if w == "all" => Ok(ClassSeries::All),
            RawClassMetrics::Word(w) if w == "active" => Ok(ClassSeries::Active),
            RawClassMetrics::Word(w) => Err(self.invalid(
                raw.span(),
                "daemon.class_metrics",
                format!("{w:?} is not \"all\", \"active\" or a list of class names"),
            )),
            RawClassMetrics::Names(names) => {
                Ok(ClassSeries::Listed(names.iter().cloned().collect()))
            }
        }
    }

    /// `daemon.user`: a name as `useradd` accepts it (letters, digits, `.`, `_`, `-`, not
    /// starting with `-`, at most [`MAX_USER_NAME`] bytes). Whether the user exists is checked
    /// at start-up, where the daemon switches to it.
    fn user_name(&self, raw: &Spanned<String>) -> Result<String> {
        let name = raw.get_ref();
        let plain = name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if name.is_empty() || name.len() > MAX_USER_NAME || !plain || name.starts_with('-') {
            return Err(self.invalid(
                raw.span(),
                "daemon.user",
                format!(
                    "{name:?} is not a user name (1 to {MAX_USER_NAME} letters, digits, '.', \
                     '_' or '-', not starting with '-')"
                ),
            ));
        }
        Ok(name.clone())
    }

    pub(super) fn rate(&self, raw: &Spanned<Scalar>, field: &str) -> Result<Rate> {
        let rate = match raw.get_ref() {
            Scalar::Text(t) => t.parse::<Rate>().map_err(|error| {
                self.site.at(
                    raw.span(),
                    field,
                    ErrorKind::Rate {
                        value: t.clone(),
                        error,
                    },
                )
            })?,
            Scalar::Int(n) => match u64::try_from(*n) {
                Ok(bps) => Rate::from_bps(bps),
                Err(_) => {
                    return Err(self.invalid(
                        raw.span(),
                        field,
                        format!("{n} is not a rate in bit/s (write it like tc: \"100mbit\")"),
                    ))
                }
            },
        };
        if rate.bps() == 0 {
            return Err(self.invalid(
                raw.span(),
                field,
                "a zero rate never releases a packet; leave the field out for no limit".to_string(),
            ));
        }
        Ok(rate)
    }

    /// A duration (`"200ms"`, `"1.5s"`), zero allowed; its error names `field` at its span.
    pub(super) fn duration(&self, raw: &Spanned<String>, field: &str) -> Result<Duration> {
        parse_duration(raw.get_ref()).map_err(|error| {
            self.site.at(
                raw.span(),
                field,
                ErrorKind::Duration {
                    value: raw.get_ref().clone(),
                    error,
                },
            )
        })
    }

    pub(super) fn positive_duration(&self, raw: &Spanned<String>, field: &str) -> Result<Duration> {
        let d = self.duration(raw, field)?;
        if d == Duration::ZERO {
            return Err(self.invalid(raw.span(), field, "must be longer than zero".to_string()));
        }
        Ok(d)
    }

    pub(super) fn int_in(
        &self,
        raw: &Spanned<i64>,
        field: &str,
        min: i64,
        max: i64,
    ) -> Result<i64> {
        let n = *raw.get_ref();
        if n < min || n > max {
            return Err(self.invalid(raw.span(), field, format!("{n} is outside {min}..={max}")));
        }
        Ok(n)
    }
}

fn horizon_policy(raw: RawHorizonPolicy) -> HorizonPolicy {
    match raw {
        RawHorizonPolicy::Clamp => HorizonPolicy::Clamp,
        RawHorizonPolicy::Reject => HorizonPolicy::Reject,
    }
}
