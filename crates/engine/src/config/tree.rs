//! The class tree as the configuration states it ([`super::Tree`]): which classes are parents,
//! and the first-match order of the rules, in which a class's match is tried before its
//! ancestors' (a parent's match usually covers its children's).

use super::{ClassConfig, MAX_TREE_DEPTH};
use std::collections::HashMap;

/// Per class of `classes`: its parent's index, `None` at the top or for an unknown parent
/// (validation refuses those; a cycle is cut at [`MAX_TREE_DEPTH`] levels).
pub fn parents(classes: &[ClassConfig]) -> Vec<Option<usize>> {
    let index: HashMap<&str, usize> = classes
        .iter()
        .enumerate()
        .map(|(i, c)| (c.name.as_str(), i))
        .collect();
    classes
        .iter()
        .map(|c| c.tree.parent.as_deref().and_then(|p| index.get(p).copied()))
        .collect()
}

/// Per class: whether another class names it as its parent.
pub fn has_children(classes: &[ClassConfig]) -> Vec<bool> {
    let mut out = vec![false; classes.len()];
    for p in parents(classes).into_iter().flatten() {
        out[p] = true;
    }
    out
}

/// The indices of the classes that have a rule (not [`super::Tree::gathers_only`]), in
/// first-match order: the file's order, except that a class comes after every one of its
/// descendants (it is tried once they did not match).
pub fn rule_order(classes: &[ClassConfig]) -> Vec<usize> {
    let parents = parents(classes);
    let mut last = (0..classes.len()).collect::<Vec<_>>();
    let mut depth = vec![0usize; classes.len()];
    for i in 0..classes.len() {
        let mut at = parents[i];
        let mut steps = 0;
        while let Some(p) = at {
            if steps >= MAX_TREE_DEPTH || p == i {
                break;
            }
            last[p] = last[p].max(i);
            depth[i] += 1;
            steps += 1;
            at = parents[p];
        }
    }
    let mut order: Vec<usize> = (0..classes.len())
        .filter(|&i| !classes[i].tree.gathers_only)
        .collect();
    order.sort_by_key(|&i| (last[i], std::cmp::Reverse(depth[i]), i));
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ClassPolicy, Match, Tree};

    fn class(name: &str, parent: Option<&str>, gathers_only: bool) -> ClassConfig {
        ClassConfig {
            name: name.into(),
            matcher: Match::default(),
            policy: ClassPolicy::unshaped(1500),
            tree: Tree {
                parent: parent.map(Into::into),
                weight: 1,
                gathers_only,
            },
            line: 0,
        }
    }

    #[test]
    fn a_class_is_tried_after_its_descendants_and_a_gathering_one_never() {
        let classes = [
            class("tenant", None, false),
            class("a", Some("tenant"), false),
            class("other", None, false),
            class("b", Some("tenant"), false),
            class("b1", Some("b"), false),
            class("group", None, true),
            class("g1", Some("group"), false),
        ];
        let names: Vec<&str> = rule_order(&classes)
            .into_iter()
            .map(|i| classes[i].name.as_str())
            .collect();
        assert_eq!(names, ["a", "other", "b1", "b", "tenant", "g1"]);
        assert_eq!(
            has_children(&classes),
            [true, false, false, true, false, true, false]
        );
    }

    #[test]
    fn a_cycle_does_not_loop() {
        let classes = [class("x", Some("y"), false), class("y", Some("x"), false)];
        assert_eq!(rule_order(&classes).len(), 2);
    }
}
