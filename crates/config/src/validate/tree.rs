//! Validation of the class tree as a whole, once every class is read: each `parent` names a
//! class of the file, no class is its own ancestor, at most [`MAX_TREE_DEPTH`] levels, and no
//! class's `rate` is above an ancestor's (a limit that could never apply). A class without
//! `match` that has children only gathers them ([`crate::Tree::gathers_only`]).

use super::{Result, Validator};
use crate::raw::RawClass;
use crate::{ClassConfig, MAX_TREE_DEPTH};
use metronome_engine::config::tree;
use toml::Spanned;

impl Validator<'_> {
    pub(super) fn tree(
        &self,
        classes: &mut [ClassConfig],
        raw: &[Spanned<RawClass>],
    ) -> Result<()> {
        if classes.iter().all(|c| c.tree.parent.is_none()) {
            return Ok(());
        }
        let parents = tree::parents(classes);
        let parent_span = |i: usize| {
            raw[i]
                .get_ref()
                .parent
                .as_ref()
                .map_or(raw[i].span(), |p| p.span())
        };
        for (i, c) in classes.iter().enumerate() {
            let Some(name) = &c.tree.parent else { continue };
            if parents[i].is_none() {
                return Err(self.invalid(
                    parent_span(i),
                    &format!("class[{i}].parent"),
                    format!("no class is named {name:?}: a parent is a [[class]] of the file"),
                ));
            }
            let mut chain = vec![c.name.as_str()];
            let mut at = parents[i];
            while let Some(p) = at {
                chain.push(classes[p].name.as_str());
                if p == i {
                    return Err(self.invalid(
                        parent_span(i),
                        &format!("class[{i}].parent"),
                        format!(
                            "{:?} would be its own ancestor ({})",
                            c.name,
                            chain.join(" -> ")
                        ),
                    ));
                }
                if chain.len() > MAX_TREE_DEPTH {
                    return Err(self.invalid(
                        parent_span(i),
                        &format!("class[{i}].parent"),
                        format!(
                            "more than {MAX_TREE_DEPTH} levels ({} ...): a packet passes every \
                             level's policy",
                            chain.join(" -> ")
                        ),
                    ));
                }
                at = parents[p];
            }
        }
        for (i, c) in classes.iter().enumerate() {
            let Some(rate) = c.policy.rate else { continue };
            let mut at = parents[i];
            while let Some(p) = at {
                if let Some(limit) = classes[p].policy.rate {
                    if rate.bps() > limit.bps() {
                        let span = raw[i]
                            .get_ref()
                            .rate
                            .as_ref()
                            .map_or(raw[i].span(), |r| r.span());
                        return Err(self.invalid(
                            span,
                            &format!("class[{i}].rate"),
                            format!(
                                "{rate} is above the {limit} of its ancestor {:?}: a limit that \
                                 could never apply",
                                classes[p].name
                            ),
                        ));
                    }
                    break;
                }
                at = parents[p];
            }
        }
        let has_children = tree::has_children(classes);
        for (i, c) in classes.iter_mut().enumerate() {
            if has_children[i] && raw[i].get_ref().matcher.is_none() {
                c.tree.gathers_only = true;
            }
        }
        Ok(())
    }
}
