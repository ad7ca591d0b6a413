//! The tree's side of the live operations ([`crate::engine`]'s live classes): the checks before
//! a class is added or changed, and its node kept current after.

use super::{Engine, TreeError};
use crate::config::{ClassConfig, MAX_TREE_DEPTH};

impl Engine {
    /// Checks a live `class` against the tree before it is added or changed as state `index`
    /// (`None`: added): its parent is in force, it would not be its own ancestor, the tree
    /// stays within [`MAX_TREE_DEPTH`] levels, and its rate is neither above an ancestor's nor
    /// below a child's.
    pub(in crate::engine) fn tree_check(
        &self,
        class: &ClassConfig,
        index: Option<usize>,
    ) -> Result<(), TreeError> {
        let parent = match &class.tree.parent {
            None => None,
            Some(name) => match self.class_index.get(name.as_str()) {
                Some(&p) if self.in_force(p) && Some(p) != index => Some(p),
                Some(&p) if Some(p) == index => return Err(TreeError::Cycle(class.name.clone())),
                _ => return Err(TreeError::UnknownParent(name.clone())),
            },
        };
        let height = index.map_or(0, |i| self.subtree_height(i));
        if let Some(p) = parent {
            let mut at = Some(p);
            while let Some(a) = at {
                if Some(a) == index {
                    return Err(TreeError::Cycle(class.name.clone()));
                }
                at = self.classes[a].node.parent.map(|x| x as usize);
            }
            if usize::from(self.classes[p].node.depth) + 2 + height > MAX_TREE_DEPTH {
                return Err(TreeError::TooDeep);
            }
        }
        if let Some(rate) = class.policy.rate {
            let mut at = parent;
            while let Some(a) = at {
                let s = &self.classes[a];
                if let Some(limit) = s.node.own_rate {
                    if rate.bps() > limit.bps() {
                        return Err(TreeError::AboveAncestor {
                            rate,
                            limit,
                            ancestor: s.name.clone(),
                        });
                    }
                    break;
                }
                at = s.node.parent.map(|x| x as usize);
            }
            if let Some(i) = index.filter(|&i| self.classes[i].node.children > 0) {
                let faster = self.classes.iter().find_map(|c| {
                    let child_rate = c.node.own_rate?;
                    (c.node.parent == Some(i as u32) && child_rate.bps() > rate.bps())
                        .then(|| (child_rate, c.name.clone()))
                });
                if let Some((child_rate, child)) = faster {
                    return Err(TreeError::BelowChild {
                        rate,
                        child_rate,
                        child,
                    });
                }
            }
        }
        Ok(())
    }

    /// Levels below class `index` (0 for a leaf). Scans the classes when it has children.
    fn subtree_height(&self, index: usize) -> usize {
        if self.classes[index].node.children == 0 {
            return 0;
        }
        let mut height = 0;
        for i in 0..self.classes.len() {
            let mut at = self.classes[i].node.parent;
            let mut steps = 1;
            while let Some(p) = at {
                if p as usize == index {
                    height = height.max(steps);
                    break;
                }
                steps += 1;
                if steps > MAX_TREE_DEPTH {
                    break;
                }
                at = self.classes[p as usize].node.parent;
            }
        }
        height
    }

    /// The tree's side of a live add of `class` as state `index` (its rule placed): its node
    /// under its parent, the parent's rules moved after its own, and the classes waiting for
    /// it as their parent adopted (then the whole tree is recomputed).
    pub(in crate::engine) fn tree_added(&mut self, index: usize, class: &ClassConfig) {
        let node = &mut self.classes[index].node;
        node.parent_name = class.tree.parent.as_deref().map(Into::into);
        node.weight = class.tree.weight;
        if self.tree_adopts(&class.name) {
            self.tree_refresh();
            return;
        }
        let parent = class
            .tree
            .parent
            .as_deref()
            .and_then(|p| self.class_index.get(p).copied())
            .filter(|&p| self.in_force(p));
        let Some(p) = parent else {
            return;
        };
        self.classes[index].node.parent = Some(p as u32);
        let pn = &mut self.classes[p].node;
        pn.children += 1;
        pn.children_weight += u64::from(class.tree.weight.max(1));
        if !pn.member {
            self.tree_node(p);
        }
        self.tree_node(index);
        self.tree.any = true;
        self.after_descendants(index);
    }

    /// The tree's side of a live change of `class`, state `index` (its policy in force): a new
    /// parent, weight or rate of a class with children recomputes the tree; a leaf's node is
    /// recomputed alone.
    pub(in crate::engine) fn tree_changed(&mut self, index: usize, class: &ClassConfig) {
        let node = &self.classes[index].node;
        let moved = node.parent_name.as_deref() != class.tree.parent.as_deref()
            || node.weight != class.tree.weight;
        let node = &mut self.classes[index].node;
        node.parent_name = class.tree.parent.as_deref().map(Into::into);
        node.weight = class.tree.weight;
        if moved || node.children > 0 {
            self.tree_refresh();
            if moved {
                self.after_descendants(index);
            }
        } else if node.member {
            self.tree_node(index);
        }
    }

    /// The tree's side of a live delete of state `index` (a class without children): it leaves
    /// its parent and the pass's list.
    pub(in crate::engine) fn tree_removed(&mut self, index: usize) {
        let node = &mut self.classes[index].node;
        node.gathers = false;
        let weight = u64::from(node.weight.max(1));
        if let Some(p) = node.parent.take() {
            let pn = &mut self.classes[p as usize].node;
            pn.children = pn.children.saturating_sub(1);
            pn.children_weight = pn.children_weight.saturating_sub(weight);
            if pn.children == 0 && pn.parent.is_none() {
                self.tree_node(p as usize);
            }
        }
        if self.classes[index].node.told.take().is_some() {
            self.telemetry.class_parent(index, None);
        }
        let node = &mut self.classes[index].node;
        node.member = false;
        node.ancestors = metronome_core::timestamp::PolicyStack::default();
        if node.busy {
            node.busy = false;
            self.tree.busy.retain(|&i| i as usize != index);
        }
    }

    /// Moves the rules of class `index`'s ancestors after every other rule, nearest first, so
    /// that a class is tried before its ancestors (after its rule was placed last).
    pub(in crate::engine) fn after_descendants(&mut self, index: usize) {
        let mut at = self.classes[index].node.parent;
        let mut steps = 0;
        while let Some(p) = at {
            let p = p as usize;
            if let Some((rule, id)) = self.classes[p].rule {
                if let Some((matcher, class)) = self.classifier.rule(rule).cloned() {
                    if self.classifier.can_push() {
                        self.classifier.remove(rule);
                        let new = self.classifier.push(matcher, class);
                        self.classes[p].rule = Some((new, id));
                    }
                }
            }
            steps += 1;
            if steps >= MAX_TREE_DEPTH {
                break;
            }
            at = self.classes[p].node.parent;
        }
    }
}
