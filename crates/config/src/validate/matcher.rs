//! Validation of a class's `match`: prefixes without host bits, DSCP in 0..=63, protocols by
//! name or number, port ranges that are not reversed and ports asked only of TCP and UDP.

use super::{Result, Validator};
use crate::error::ErrorKind;
use crate::raw::{RawMatch, Scalar};
use crate::{origin_tags, Match};
use ipnet::IpNet;
use std::net::IpAddr;
use toml::Spanned;

impl Validator<'_> {
    pub(super) fn matcher(&self, raw: &RawMatch, path: &str) -> Result<Match> {
        let dst = raw
            .dst
            .as_ref()
            .map(|p| self.prefix(p, &format!("{path}.dst")))
            .transpose()?;
        let src = raw
            .src
            .as_ref()
            .map(|p| self.prefix(p, &format!("{path}.src")))
            .transpose()?;
        if let (Some(d), Some(s), Some(raw_src)) = (dst, src, &raw.src) {
            if matches!(d, IpNet::V4(_)) != matches!(s, IpNet::V4(_)) {
                return Err(self.invalid(
                    raw_src.span(),
                    &format!("{path}.src"),
                    format!("{s} and dst {d} are of different IP versions: nothing would match"),
                ));
            }
        }
        let dscp = match &raw.dscp {
            Some(d) if (0..=63).contains(d.get_ref()) => Some(*d.get_ref() as u8),
            Some(d) => {
                return Err(self.site.at(
                    d.span(),
                    &format!("{path}.dscp"),
                    ErrorKind::Dscp(i128::from(*d.get_ref())),
                ))
            }
            None => None,
        };
        let protocol = raw
            .protocol
            .as_ref()
            .map(|p| self.protocol(p, &format!("{path}.protocol")))
            .transpose()?;
        let mut ports = [None, None];
        for (slot, (name, raw_port)) in ports
            .iter_mut()
            .zip([("dst_port", &raw.dst_port), ("src_port", &raw.src_port)])
        {
            let Some(p) = raw_port else { continue };
            let field = format!("{path}.{name}");
            if let Some(proto @ (1 | 58)) = protocol {
                let which = if proto == 1 { "icmp" } else { "icmpv6" };
                return Err(self.invalid(
                    p.span(),
                    &field,
                    format!("protocol {which} has no ports"),
                ));
            }
            *slot = Some(self.port_range(p, &field)?);
        }
        let from = raw
            .from
            .as_ref()
            .map(|name| {
                self.interface_name(name, &format!("{path}.from"))
                    .map(|()| name.get_ref().clone())
            })
            .transpose()?;
        let to = raw
            .to
            .as_ref()
            .map(|name| {
                self.interface_name(name, &format!("{path}.to"))
                    .map(|()| name.get_ref().clone())
            })
            .transpose()?;
        let cgroup = raw
            .cgroup
            .as_ref()
            .map(|c| self.cgroup(c, &format!("{path}.cgroup")))
            .transpose()?;
        if let (Some(_), Some(c)) = (&from, &raw.cgroup) {
            return Err(self.invalid(
                c.span(),
                &format!("{path}.cgroup"),
                "a packet comes from an interface or from a local socket, not both: \
                 use two classes"
                    .to_string(),
            ));
        }
        if let (Some(t), true) = (&raw.to, from.is_some() || cgroup.is_some()) {
            return Err(self.invalid(
                t.span(),
                &format!("{path}.to"),
                "to (the bridge port a packet leaves through) excludes from and cgroup (where \
                 it came from): use two classes"
                    .to_string(),
            ));
        }
        Ok(Match {
            dst,
            src,
            dscp,
            protocol,
            dst_port: ports[0],
            src_port: ports[1],
            from,
            to,
            cgroup,
            origin: None,
        })
    }

    /// A cgroup v2 path below `/sys/fs/cgroup`: absolute, no `..`, written without the mount
    /// point (`"/system.slice/backup.service"`).
    fn cgroup(&self, raw: &Spanned<String>, field: &str) -> Result<String> {
        let p = raw.get_ref();
        let ok = p.starts_with('/')
            && !p.starts_with("/sys/fs/cgroup")
            && p.split('/').all(|part| part != ".." && part != ".")
            && p.len() > 1;
        if !ok {
            return Err(self.invalid(
                raw.span(),
                field,
                format!(
                    "{p:?} is not a cgroup path: write it from the cgroup v2 root, \
                     as in \"/system.slice/backup.service\""
                ),
            ));
        }
        Ok(p.trim_end_matches('/').to_string())
    }

    /// Gives each distinct `from` interface, `to` interface and `cgroup` of `classes` an origin
    /// tag ([`crate::origin_tags::assign`], numbered afresh), refusing them outside
    /// attach mode, a `to` without a bridge or without `origin_mark`, and more origins than the
    /// tags carry.
    pub(super) fn origins(
        &self,
        classes: &mut [crate::ClassConfig],
        raw: &[Spanned<crate::raw::RawClass>],
        interfaces: &crate::Interfaces,
    ) -> Result<()> {
        for (i, c) in classes.iter().enumerate() {
            let Some(key) = origin_tags::key_of(&c.matcher) else {
                continue;
            };
            let field = format!("class[{i}].match.{}", key.field());
            self.origin_allowed(&key, interfaces)
                .map_err(|message| self.invalid(raw[i].span(), &field, message))?;
        }
        origin_tags::assign(classes, &Default::default(), interfaces.origin_mark).map_err(|e| {
            let last = classes.len().saturating_sub(1);
            self.invalid(
                raw.get(last).map_or(0..0, |r| r.span()),
                "interfaces.origin_mark",
                e.to_string(),
            )
        })
    }

    /// Why a class of `interfaces` may not name origin `key`, if it may not.
    pub(super) fn origin_allowed(
        &self,
        key: &origin_tags::OriginKey,
        interfaces: &crate::Interfaces,
    ) -> core::result::Result<(), String> {
        if interfaces.attach.is_empty() && interfaces.bridges.is_empty() {
            return Err("only in attach mode ([interfaces] attach or bridges)".to_string());
        }
        if let origin_tags::OriginKey::To(_) = key {
            if interfaces.bridges.is_empty() {
                return Err(
                    "needs a bridge the interface is a port of in [interfaces] bridges".to_string(),
                );
            }
            if interfaces.origin_mark == 0 {
                return Err(
                    "needs [interfaces] origin_mark (not 0): the frames shaped through \
                            a bridge carry its all-ones value"
                        .to_string(),
                );
            }
        }
        Ok(())
    }

    fn prefix(&self, raw: &Spanned<String>, field: &str) -> Result<IpNet> {
        let text = raw.get_ref().trim();
        let err = |reason: String| {
            self.site.at(
                raw.span(),
                field,
                ErrorKind::Prefix {
                    value: raw.get_ref().clone(),
                    reason,
                },
            )
        };
        let net = match text.parse::<IpNet>() {
            Ok(n) => n,
            Err(_) => match text.parse::<IpAddr>() {
                Ok(addr) => IpNet::from(addr),
                Err(_) => {
                    return Err(err(
                        "expected an address with a prefix length, e.g. \"10.0.0.0/8\"".to_string(),
                    ))
                }
            },
        };
        if net.trunc() != net {
            return Err(err(format!(
                "host bits are set; the network is {}",
                net.trunc()
            )));
        }
        Ok(net)
    }

    fn protocol(&self, raw: &Spanned<Scalar>, field: &str) -> Result<u8> {
        let err = |text: String| self.site.at(raw.span(), field, ErrorKind::Protocol(text));
        match raw.get_ref() {
            Scalar::Int(n) => u8::try_from(*n).map_err(|_| err(n.to_string())),
            Scalar::Text(t) => match t.trim().to_ascii_lowercase().as_str() {
                "tcp" => Ok(6),
                "udp" => Ok(17),
                "icmp" => Ok(1),
                "icmpv6" | "ipv6-icmp" => Ok(58),
                other => other.parse::<u8>().map_err(|_| err(t.clone())),
            },
        }
    }

    fn port_range(&self, raw: &Spanned<Scalar>, field: &str) -> Result<(u16, u16)> {
        let err = |value: String, reason: &str| {
            self.site.at(
                raw.span(),
                field,
                ErrorKind::Port {
                    value,
                    reason: reason.to_string(),
                },
            )
        };
        const RANGE: &str = "expected a port 0..=65535 or a range \"first-last\"";
        let (first, last) = match raw.get_ref() {
            Scalar::Int(n) => {
                let p = u16::try_from(*n).map_err(|_| err(n.to_string(), RANGE))?;
                (p, p)
            }
            Scalar::Text(t) => {
                let port = |s: &str| s.trim().parse::<u16>().map_err(|_| err(t.clone(), RANGE));
                match t.split_once('-') {
                    Some((a, b)) => (port(a)?, port(b)?),
                    None => {
                        let p = port(t)?;
                        (p, p)
                    }
                }
            }
        };
        if first > last {
            return Err(self.site.at(
                raw.span(),
                field,
                ErrorKind::PortRangeReversed { first, last },
            ));
        }
        Ok((first, last))
    }
}
