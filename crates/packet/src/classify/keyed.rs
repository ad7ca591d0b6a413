//! The rules of one shape by key ([`Keyed`]), each key's rules in first-match order
//! ([`KeyRules`]).
//!
//! A key's list keeps every rule of the key, in increasing rule id: a rule without port ranges
//! ends the search in its list (it matches whatever the ports), and keeping the rules after it
//! lets [`Keyed::remove`] of that rule uncover them. Most keys hold one rule, stored inline so
//! that a shape of 100 000 keys costs no allocation per key.

use super::shape::{Entry, Key};
use std::collections::HashMap;

/// Number of distinct keys up to which a shape keeps its keys in a list compared one by one
/// (keys): comparing a few keys costs less than hashing one, so a configuration of many shapes
/// with few rules each costs about what a linear scan of its rules costs. Above it, a hash map;
/// a map that shrinks to half of it goes back to a list (half, so that a shape at the boundary
/// does not convert on every insert and remove).
const FEW_KEYS: usize = 8;

/// The rules of one key, in increasing rule id.
#[derive(Clone, Debug)]
pub(super) enum KeyRules {
    /// The common case: one rule, inline.
    One(Entry),
    /// Two rules or more.
    More(Vec<Entry>),
}

impl KeyRules {
    /// The rules, in increasing id.
    #[inline]
    pub(super) fn as_slice(&self) -> &[Entry] {
        match self {
            KeyRules::One(e) => std::slice::from_ref(e),
            KeyRules::More(list) => list,
        }
    }

    /// Appends `entry`, whose id is above every id of the list.
    fn push(&mut self, entry: Entry) {
        match self {
            KeyRules::One(e) => *self = KeyRules::More(vec![e.clone(), entry]),
            KeyRules::More(list) => list.push(entry),
        }
    }

    /// Removes the rule `id`; whether the list is now empty (`None`: `id` was not there).
    /// Costs the length of the list.
    fn remove(&mut self, id: u32) -> Option<bool> {
        match self {
            KeyRules::One(e) => (e.id == id).then_some(true),
            KeyRules::More(list) => {
                let at = list.binary_search_by_key(&id, |e| e.id).ok()?;
                list.remove(at);
                if let [only] = &list[..] {
                    *self = KeyRules::One(only.clone());
                }
                Some(false)
            }
        }
    }
}

/// The rules of one shape by key.
#[derive(Clone, Debug)]
pub(super) enum Keyed {
    /// Up to [`FEW_KEYS`] keys, compared in turn.
    Few(Vec<(Key, KeyRules)>),
    /// More keys, hashed with SipHash under a random key (the module documentation of
    /// [`super`] says why).
    Many(HashMap<Key, KeyRules>),
}

impl Keyed {
    pub(super) fn new() -> Self {
        Keyed::Few(Vec::new())
    }

    /// The rules of `key`, in increasing id; `None` when no rule has it.
    #[inline]
    pub(super) fn get(&self, key: &Key) -> Option<&[Entry]> {
        match self {
            Keyed::Few(list) => list
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, r)| r.as_slice()),
            Keyed::Many(map) => map.get(key).map(KeyRules::as_slice),
        }
    }

    /// Whether no key is left.
    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        match self {
            Keyed::Few(list) => list.is_empty(),
            Keyed::Many(map) => map.is_empty(),
        }
    }

    /// The length of the longest list of rules of a key (tests only).
    #[cfg(test)]
    pub(super) fn longest_list(&self) -> usize {
        let len = |r: &KeyRules| r.as_slice().len();
        match self {
            Keyed::Few(list) => list.iter().map(|(_, r)| len(r)).max().unwrap_or(0),
            Keyed::Many(map) => map.values().map(len).max().unwrap_or(0),
        }
    }

    /// Appends `entry` to the rules of `key`; its id is above every id of the shape.
    /// O(1) amortized.
    pub(super) fn insert(&mut self, key: Key, entry: Entry) {
        match self {
            Keyed::Few(list) => {
                if let Some((_, rules)) = list.iter_mut().find(|(k, _)| *k == key) {
                    rules.push(entry);
                } else if list.len() < FEW_KEYS {
                    list.push((key, KeyRules::One(entry)));
                } else {
                    let mut map: HashMap<Key, KeyRules> = list.drain(..).collect();
                    map.insert(key, KeyRules::One(entry));
                    *self = Keyed::Many(map);
                }
            }
            Keyed::Many(map) => match map.entry(key) {
                std::collections::hash_map::Entry::Occupied(mut o) => o.get_mut().push(entry),
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(KeyRules::One(entry));
                }
            },
        }
    }

    /// Removes rule `id` from the rules of `key`, and the key if it has no rule left; whether
    /// it was there. Costs the rules of the key (and, when a map shrinks to a list,
    /// [`FEW_KEYS`] / 2 moves).
    pub(super) fn remove(&mut self, key: &Key, id: u32) -> bool {
        match self {
            Keyed::Few(list) => {
                let Some(at) = list.iter().position(|(k, _)| k == key) else {
                    return false;
                };
                match list[at].1.remove(id) {
                    None => false,
                    Some(emptied) => {
                        if emptied {
                            list.swap_remove(at);
                        }
                        true
                    }
                }
            }
            Keyed::Many(map) => {
                let Some(rules) = map.get_mut(key) else {
                    return false;
                };
                let Some(emptied) = rules.remove(id) else {
                    return false;
                };
                if emptied {
                    map.remove(key);
                    if map.len() <= FEW_KEYS / 2 {
                        *self = Keyed::Few(map.drain().collect());
                    }
                }
                true
            }
        }
    }
}
