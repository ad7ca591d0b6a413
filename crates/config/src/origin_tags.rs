//! Attach mode's origin tags: the number each `from` interface, `to` interface and `cgroup` of
//! the classes is known by in the BPF maps, the packets' marks and the engine's classifier
//! (`metronome_daemon::os::attach`).
//!
//! Tags are allocated per name and kept while any class (of the file or of the control socket)
//! names it ([`assign`] with the tags in force as `previous`), so that a reload or a live class
//! never renumbers a tag an engine or a BPF map holds; a name no class names any more frees its
//! tag. A new name takes the lowest free tag. Without tags in force (a file validated on its
//! own) the `from` interfaces come first in file order, then the `to` interfaces, then the
//! cgroups: 1, 2, 3, ...
//!
//! A `from` tag travels in the `[interfaces] origin_mark` bits of the packet's mark, so it must
//! fit them, and the value with all those bits set is reserved: the daemon sends the frames it
//! shaped through a bridge with that mark, which tells the `capture` program at the bridge
//! port's egress that they are shaped already (`crates/daemon/bpf/attach.bpf.c`). Hence at most
//! 2^bits - 2 `from` interfaces. `to` and `cgroup` tags never travel in the mark: any tag
//! 1..=65 535 (0 means "no origin known").

use super::{ClassConfig, Match};
use std::collections::HashMap;

/// What a tag is allocated for.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OriginKey {
    /// A `match.from` interface.
    From(String),
    /// A `match.to` interface.
    To(String),
    /// A `match.cgroup` path.
    Cgroup(String),
}

impl OriginKey {
    /// The interface's name or the cgroup's path.
    pub fn name(&self) -> &str {
        match self {
            OriginKey::From(n) | OriginKey::To(n) | OriginKey::Cgroup(n) => n,
        }
    }

    /// The match key that names it (`from`, `to`, `cgroup`).
    pub fn field(&self) -> &'static str {
        match self {
            OriginKey::From(_) => "from",
            OriginKey::To(_) => "to",
            OriginKey::Cgroup(_) => "cgroup",
        }
    }
}

/// The origin `m` names, if any (validation allows at most one of `from`, `to`, `cgroup`).
pub fn key_of(m: &Match) -> Option<OriginKey> {
    if let Some(f) = &m.from {
        Some(OriginKey::From(f.clone()))
    } else if let Some(t) = &m.to {
        Some(OriginKey::To(t.clone()))
    } else {
        m.cgroup.as_ref().map(|g| OriginKey::Cgroup(g.clone()))
    }
}

/// The highest tag a `from` interface may take with `origin_mark` = `mark`: 2^bits - 2 (the
/// all-ones value is reserved, see the module docs); 65 535 with no mark (the tag then never
/// travels in the mark).
pub fn from_capacity(mark: u32) -> u16 {
    if mark == 0 {
        u16::MAX
    } else {
        u16::try_from((1u32 << mark.count_ones()) - 2).unwrap_or(u16::MAX)
    }
}

/// The tags `classes` hold, by origin.
pub fn tags_of(classes: &[ClassConfig]) -> HashMap<OriginKey, u16> {
    classes
        .iter()
        .filter_map(|c| Some((key_of(&c.matcher)?, c.matcher.origin?)))
        .collect()
}

/// Why [`assign`] could not give a tag.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "no origin tag is free for {kind} {name:?}: origin_mark {mark:#x} carries at most {from_capacity} \
     from interfaces (the all-ones value is reserved), and there are 65 535 origins in all"
)]
pub struct TagsExhausted {
    /// `from`, `to` or `cgroup`.
    pub kind: &'static str,
    /// The name that got none.
    pub name: String,
    /// `[interfaces] origin_mark`.
    pub mark: u32,
    /// [`from_capacity`] of the mark.
    pub from_capacity: u16,
}

/// Sets the tag of every class of `classes` that names an origin: the tag `previous` gives
/// that origin, else the lowest tag free (neither in `previous` for an origin still named nor
/// given here), new `from` interfaces first, then `to`, then cgroups, each in class order.
/// Classes naming no origin get `None`.
pub fn assign(
    classes: &mut [ClassConfig],
    previous: &HashMap<OriginKey, u16>,
    mark: u32,
) -> Result<(), TagsExhausted> {
    let mut named: Vec<OriginKey> = Vec::new();
    for c in classes.iter() {
        if let Some(k) = key_of(&c.matcher) {
            if !named.contains(&k) {
                named.push(k);
            }
        }
    }
    let mut tags: HashMap<OriginKey, u16> = HashMap::new();
    let mut used = vec![false; usize::from(u16::MAX) + 1];
    used[0] = true;
    for k in &named {
        if let Some(&t) = previous.get(k) {
            tags.insert(k.clone(), t);
            used[usize::from(t)] = true;
        }
    }
    let rank = |k: &OriginKey| match k {
        OriginKey::From(_) => 0,
        OriginKey::To(_) => 1,
        OriginKey::Cgroup(_) => 2,
    };
    let mut new: Vec<&OriginKey> = named.iter().filter(|k| !tags.contains_key(*k)).collect();
    new.sort_by_key(|k| rank(k));
    let from_max = from_capacity(mark);
    // The lowest tag that may be free (every tag below it is taken).
    let mut next = 1usize;
    for k in new {
        let max = if matches!(k, OriginKey::From(_)) {
            usize::from(from_max)
        } else {
            usize::from(u16::MAX)
        };
        let mut t = next;
        while t <= max && used[t] {
            t += 1;
        }
        if t > max {
            return Err(TagsExhausted {
                kind: k.field(),
                name: k.name().to_string(),
                mark,
                from_capacity: from_max,
            });
        }
        used[t] = true;
        let tag = u16::try_from(t).expect("at most u16::MAX");
        tags.insert(k.clone(), tag);
        // Every tag below `t` is taken: the next search starts above it.
        next = t + 1;
    }
    for c in classes.iter_mut() {
        c.matcher.origin = key_of(&c.matcher).and_then(|k| tags.get(&k).copied());
    }
    Ok(())
}

/// The tag of `key` for a class added to classes holding `current`: the tag `current` gives it,
/// else the lowest tag no origin of `current` holds (within [`from_capacity`] for a `from`).
pub fn tag_for(
    key: &OriginKey,
    current: &HashMap<OriginKey, u16>,
    mark: u32,
) -> Result<u16, TagsExhausted> {
    if let Some(&t) = current.get(key) {
        return Ok(t);
    }
    let held: std::collections::HashSet<u16> = current.values().copied().collect();
    let max = match key {
        OriginKey::From(_) => from_capacity(mark),
        _ => u16::MAX,
    };
    (1..=max)
        .find(|t| !held.contains(t))
        .ok_or_else(|| TagsExhausted {
            kind: key.field(),
            name: key.name().to_string(),
            mark,
            from_capacity: from_capacity(mark),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ClassPolicy;

    fn class(
        name: &str,
        from: Option<&str>,
        to: Option<&str>,
        cgroup: Option<&str>,
    ) -> ClassConfig {
        ClassConfig {
            name: name.to_string(),
            matcher: Match {
                from: from.map(str::to_string),
                to: to.map(str::to_string),
                cgroup: cgroup.map(str::to_string),
                ..Match::default()
            },
            policy: ClassPolicy::unshaped(1500),
            tree: Default::default(),
            line: 0,
        }
    }

    fn tags(classes: &[ClassConfig]) -> Vec<Option<u16>> {
        classes.iter().map(|c| c.matcher.origin).collect()
    }

    #[test]
    fn a_fresh_set_numbers_from_then_to_then_cgroups() {
        let mut cs = vec![
            class("g", None, None, Some("/a")),
            class("t", None, Some("veth-t"), None),
            class("f", Some("veth-f"), None, None),
            class("f2", Some("veth-f"), None, None),
            class("plain", None, None, None),
        ];
        assign(&mut cs, &HashMap::new(), 0x0fff_0000).unwrap();
        assert_eq!(tags(&cs), [Some(3), Some(2), Some(1), Some(1), None]);
    }

    #[test]
    fn a_name_keeps_its_tag_while_named_and_frees_it_after() {
        let mut cs = vec![
            class("a", Some("va"), None, None),
            class("b", Some("vb"), None, None),
            class("c", None, Some("vc"), None),
        ];
        assign(&mut cs, &HashMap::new(), 0x0fff_0000).unwrap();
        assert_eq!(tags(&cs), [Some(1), Some(2), Some(3)]);
        // `a` goes; a new `from` and a new `to` come, placed before the others: the kept
        // names keep their tags, the new ones take the lowest free.
        let previous = tags_of(&cs);
        let mut next = vec![
            class("d", None, Some("vd"), None),
            class("e", Some("ve"), None, None),
            class("b", Some("vb"), None, None),
            class("c", None, Some("vc"), None),
        ];
        assign(&mut next, &previous, 0x0fff_0000).unwrap();
        assert_eq!(tags(&next), [Some(4), Some(1), Some(2), Some(3)]);
        // Everything goes and comes back: numbered afresh.
        let mut again = vec![class("z", None, None, Some("/z"))];
        assign(&mut again, &tags_of(&[]), 0x0fff_0000).unwrap();
        assert_eq!(tags(&again), [Some(1)]);
    }

    #[test]
    fn from_tags_fit_the_mark_without_the_all_ones_value() {
        assert_eq!(from_capacity(0x3), 2);
        assert_eq!(from_capacity(0x0fff_0000), 4094);
        assert_eq!(from_capacity(0), u16::MAX);
        assert_eq!(from_capacity(0xffff), u16::MAX - 1);
        let mut cs = vec![
            class("a", Some("va"), None, None),
            class("b", Some("vb"), None, None),
        ];
        assign(&mut cs, &HashMap::new(), 0x3).unwrap();
        cs.push(class("c", Some("vc"), None, None));
        let previous = tags_of(&cs[..2]);
        let e = assign(&mut cs, &previous, 0x3).unwrap_err();
        assert_eq!(
            (e.kind, e.name.as_str(), e.from_capacity),
            ("from", "vc", 2)
        );
        // A `to` or a cgroup is not bound by the mark.
        let mut cs = vec![
            class("a", Some("va"), None, None),
            class("b", Some("vb"), None, None),
            class("t", None, Some("vt"), None),
            class("g", None, None, Some("/g")),
        ];
        assign(&mut cs, &HashMap::new(), 0x3).unwrap();
        assert_eq!(tags(&cs), [Some(1), Some(2), Some(3), Some(4)]);
        // A `to` that took a low tag leaves a new `from` the next one within the mark.
        let previous: HashMap<OriginKey, u16> = [(OriginKey::To("vt".into()), 1)].into();
        let mut cs = vec![
            class("t", None, Some("vt"), None),
            class("a", Some("va"), None, None),
            class("b", Some("vb"), None, None),
        ];
        let e = assign(&mut cs, &previous, 0x3).unwrap_err();
        assert_eq!(e.name, "vb");
    }

    #[test]
    fn a_live_class_takes_the_tag_in_force_or_the_lowest_free() {
        let current: HashMap<OriginKey, u16> = [
            (OriginKey::From("va".into()), 1),
            (OriginKey::To("vt".into()), 3),
        ]
        .into();
        let mark = 0x3;
        assert_eq!(tag_for(&OriginKey::To("vt".into()), &current, mark), Ok(3));
        assert_eq!(
            tag_for(&OriginKey::From("vb".into()), &current, mark),
            Ok(2)
        );
        assert_eq!(
            tag_for(&OriginKey::Cgroup("/g".into()), &current, mark),
            Ok(2)
        );
        let full: HashMap<OriginKey, u16> = [
            (OriginKey::From("va".into()), 1),
            (OriginKey::To("vt".into()), 2),
        ]
        .into();
        let e = tag_for(&OriginKey::From("vb".into()), &full, mark).unwrap_err();
        assert_eq!(e.kind, "from");
        assert_eq!(tag_for(&OriginKey::To("vu".into()), &full, mark), Ok(3));
    }
}
