//! The allocation pass ([`super`]'s "Sharing by allocation"): each busy parent's share
//! water-filled among its busy children, bottom up for the demands, top down for the shares.

use super::{Engine, DEMAND_SMOOTHING, PASS_NS_PER_CLASS, TREE_PERIOD, UNLIMITED};
use metronome_core::{Duration, Rate, Timestamp};

/// Weighted max-min: splits `total` among `items` of `(demand, weight)`, none above its
/// demand, into `out` (same order); the sum is at most `total`.
pub fn water_fill(total: u64, items: &[(u64, u64)], out: &mut Vec<u64>) {
    out.clear();
    out.resize(items.len(), 0);
    let mut order: Vec<usize> = (0..items.len()).collect();
    // By demand per unit of weight, smallest first (cross-multiplied, exact).
    order.sort_by(|&a, &b| {
        let (da, wa) = (items[a].0 as u128, items[a].1.max(1) as u128);
        let (db, wb) = (items[b].0 as u128, items[b].1.max(1) as u128);
        (da * wb).cmp(&(db * wa))
    });
    let mut left = total as u128;
    let mut weights: u128 = items.iter().map(|i| i.1.max(1) as u128).sum();
    for (k, &i) in order.iter().enumerate() {
        let (d, w) = (items[i].0 as u128, items[i].1.max(1) as u128);
        if d * weights <= left * w {
            out[i] = d as u64;
            left -= d;
            weights -= w;
            continue;
        }
        // Every one from here wants more than its part of what is left: each gets its part.
        for &j in &order[k..] {
            let wj = items[j].1.max(1) as u128;
            out[j] = (left * wj / weights).min(u64::MAX as u128) as u64;
        }
        return;
    }
}

impl Engine {
    /// The allocation pass over the busy classes and their ancestors.
    pub(super) fn tree_pass(&mut self, now: Timestamp) {
        self.tree.passes += 1;
        let elapsed = now.saturating_since(self.tree.last).as_nanos().max(1);
        self.tree.last = now;
        let set = self.tree_pass_set();
        let frame = u64::from(
            self.config
                .mtu
                .saturating_add(crate::config::ETHERNET_HEADER),
        );
        // Bottom up: each class's own demand and sent counts; a parent's demand adds its
        // children's. A class is ready once all its children came (deeper first).
        for &i in &set {
            self.tree_gather(i as usize, now, elapsed, frame);
        }
        // Top down: each parent's share among its busy children (the set is ordered deepest
        // first, children grouped by parent; walk it from the top). Classes that neither hold
        // nor received anything leave the list and get their ceiling.
        let mut busy = std::mem::take(&mut self.tree.set);
        busy.clear();
        // The sort keys, in the set's order: a group is a run of one key.
        let keyed = std::mem::take(&mut self.tree.keyed);
        let mut end = set.len();
        while end > 0 {
            let key = (keyed[end - 1].0, keyed[end - 1].1);
            let mut start = end - 1;
            while start > 0 && (keyed[start - 1].0, keyed[start - 1].1) == key {
                start -= 1;
            }
            let group = &set[start..end];
            match (key.1 != u32::MAX).then_some(key.1) {
                None => {
                    let mut shares = std::mem::take(&mut self.tree.out);
                    shares.clear();
                    shares.extend(group.iter().map(|&r| self.classes[r as usize].node.cap));
                    self.tree_settle(group, &shares, &mut busy);
                    self.tree.out = shares;
                }
                Some(p) => {
                    let shares = self.tree_split(p as usize, group, frame);
                    self.tree_settle(group, &shares, &mut busy);
                    self.tree.out = shares;
                }
            }
            end = start;
        }
        self.tree.keyed = keyed;
        self.tree.busy = busy;
        let period = TREE_PERIOD
            .as_nanos()
            .max(PASS_NS_PER_CLASS.saturating_mul(set.len() as u64));
        self.tree.next = now.saturating_add(Duration::from_nanos(period));
        self.tree.set = set;
        if !self.dirty.is_empty() {
            // The parents' counts reach the metrics even when nothing else is sent.
            self.publish_gauges();
        }
    }

    /// The busy classes and every ancestor of one, deepest first, children grouped by parent
    /// (each class's key read once).
    fn tree_pass_set(&mut self) -> Vec<u32> {
        let mut set = std::mem::take(&mut self.tree.busy);
        let mut k = 0;
        while k < set.len() {
            let i = set[k] as usize;
            if let Some(p) = self.classes[i].node.parent {
                let pn = &mut self.classes[p as usize].node;
                if !pn.busy {
                    pn.busy = true;
                    set.push(p);
                }
            }
            k += 1;
        }
        let mut keyed = std::mem::take(&mut self.tree.keyed);
        keyed.clear();
        keyed.extend(set.iter().map(|&i| {
            let n = &self.classes[i as usize].node;
            (std::cmp::Reverse(n.depth), n.parent.unwrap_or(u32::MAX), i)
        }));
        keyed.sort_unstable();
        set.clear();
        set.extend(keyed.iter().map(|k| k.2));
        self.tree.keyed = keyed;
        set
    }

    /// The bottom-up step of class `index` (its children's came before it): its own demand
    /// and counts since the last pass, its subtree's added to its sent counts, and all of it
    /// handed to its parent.
    fn tree_gather(&mut self, index: usize, now: Timestamp, elapsed: u64, frame: u64) {
        let held_bytes = self.class_held(index).1;
        // What waits for its own policy (not for an ancestor's): its rate is what holds it.
        let own_wait = self.classes[index]
            .aggregate
            .and_then(|p| self.stamper.backlog(p, now))
            .map_or(0, |d| d.as_nanos());
        let fair_bytes = u128::from(self.fair_class_load(index).1);
        let s = &mut self.classes[index];
        let share = u128::from(s.node.share_or(s.node.cap).min(UNLIMITED - 1));
        let waiting = u128::from(own_wait) * share / 8_000_000_000 + fair_bytes;
        let stamped = s.stamped_bytes.saturating_sub(s.node.last_stamped);
        let refused = s.refused_bytes.saturating_sub(s.node.last_refused);
        let came = stamped + refused;
        s.node.last_stamped = s.stamped_bytes;
        s.node.last_refused = s.refused_bytes;
        // It wants more than it gets: its own rate holds a backlog back, or its arrivals
        // were refused. (What waits for an ancestor says that the parent is busy, not that
        // this class wants more.)
        let greedy = waiting > 2 * u128::from(frame) || refused > 0;
        let rate = u128::from(came) * 8 * 1_000_000_000 / u128::from(elapsed);
        let rate = rate.min(u128::from(UNLIMITED)) as u64;
        // What arrived, smoothed over a few passes (arrivals come in bursts: a TCP
        // super-frame is 64 KiB).
        let arrivals = &mut s.node.arrivals_bps;
        *arrivals = if *arrivals == 0 {
            rate
        } else {
            *arrivals - *arrivals / DEMAND_SMOOTHING + rate / DEMAND_SMOOTHING
        };
        let own = if greedy {
            s.node.cap
        } else {
            s.node.arrivals_bps.min(s.node.cap)
        };
        s.node.demand = s.node.demand.saturating_add(own).min(s.node.cap);
        // Sent counts: what its subtree sent (its children's deltas, gathered before it) is
        // added to its own.
        let sent = (
            s.stats.sent_packets.saturating_sub(s.node.last_sent.0),
            s.stats.sent_bytes.saturating_sub(s.node.last_sent.1),
        );
        let subtree = s.node.delta;
        s.stats.sent_packets += subtree.0;
        s.stats.sent_bytes += subtree.1;
        s.node.last_sent = (s.stats.sent_packets, s.stats.sent_bytes);
        if subtree.0 > 0 {
            s.touch(index, &mut self.dirty);
        }
        let n = &mut s.node;
        n.delta = (subtree.0 + sent.0, subtree.1 + sent.1);
        // What its subtree (its children's, gathered before it) stamped, refused and holds.
        n.sub_stamped += n.pass.stamped;
        n.sub_refused += n.pass.refused;
        n.sub_held = n.pass.held;
        let up = super::Gathered {
            stamped: n.pass.stamped + stamped,
            refused: n.pass.refused + refused,
            held: n.pass.held + held_bytes,
        };
        n.pass = super::Gathered::default();
        n.active |= came > 0 || held_bytes > 0 || n.delta.0 > 0;
        let (demand, delta, active) = (n.demand, n.delta, n.active);
        if let Some(p) = n.parent {
            let pn = &mut self.classes[p as usize].node;
            pn.active |= active;
            pn.demand = pn.demand.saturating_add(demand);
            pn.delta.0 += delta.0;
            pn.delta.1 += delta.1;
            pn.pass.stamped += up.stamped;
            pn.pass.refused += up.refused;
            pn.pass.held += up.held;
        }
    }

    /// Parent `parent`'s share water-filled among `group`, its busy children: by demand,
    /// then what the demands leave by weight up to each one's cap, then at least each one's
    /// weighted part of the parent and at most its cap. In `group`'s order.
    fn tree_split(&mut self, parent: usize, group: &[u32], frame: u64) -> Vec<u64> {
        let total = self.classes[parent]
            .node
            .share_or(self.classes[parent].node.ceiling);
        let all_weight = self.classes[parent].node.children_weight.max(1);
        let mut items = std::mem::take(&mut self.tree.items);
        let mut out = std::mem::take(&mut self.tree.out);
        let mut extra = std::mem::take(&mut self.tree.extra);
        items.clear();
        for &c in group {
            let n = &self.classes[c as usize].node;
            items.push((n.demand.min(total), u64::from(n.weight.max(1))));
        }
        water_fill(total, &items, &mut out);
        let given: u64 = out.iter().sum();
        if given < total {
            for (k, &c) in group.iter().enumerate() {
                let n = &self.classes[c as usize].node;
                items[k].0 = n.cap.min(total).saturating_sub(out[k]);
            }
            water_fill(total - given, &items, &mut extra);
            for (a, e) in out.iter_mut().zip(&extra) {
                *a += e;
            }
        }
        for (k, &c) in group.iter().enumerate() {
            let n = &self.classes[c as usize].node;
            let floor =
                (u128::from(total) * u128::from(n.weight.max(1)) / u128::from(all_weight)) as u64;
            out[k] = out[k].max(floor).min(n.cap).max(frame * 8);
        }
        self.tree.items = items;
        self.tree.extra = extra;
        out
    }

    /// Puts `shares` in force for `group` and resets their scratch; those still busy go to
    /// `busy`, the others get their ceiling and leave the pass.
    fn tree_settle(&mut self, group: &[u32], shares: &[u64], busy: &mut Vec<u32>) {
        for (&c, &share) in group.iter().zip(shares) {
            let index = c as usize;
            let n = &mut self.classes[index].node;
            let active = n.active;
            n.demand = 0;
            n.delta = (0, 0);
            n.active = false;
            if active {
                busy.push(c);
                self.set_share(index, share);
            } else {
                n.busy = false;
                n.arrivals_bps = 0;
                let ceiling = n.ceiling;
                self.set_share(index, ceiling);
            }
        }
    }

    /// Puts `share` bps in force for class `index` (its aggregate policy's rate).
    pub(super) fn set_share(&mut self, index: usize, share: u64) {
        let s = &mut self.classes[index];
        if share == UNLIMITED || share == 0 || s.node.share == share {
            s.node.share = if share == UNLIMITED { 0 } else { share };
            return;
        }
        s.node.share = share;
        s.stats.share_bps = share;
        s.touch(index, &mut self.dirty);
        if let Some(p) = s.aggregate {
            let _ = self.stamper.set_rate(p, Rate::from_bps(share));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::water_fill;

    #[test]
    fn water_filling_is_weighted_max_min() {
        let mut out = Vec::new();
        water_fill(300, &[(u64::MAX, 1), (u64::MAX, 1)], &mut out);
        assert_eq!(out, [150, 150]);
        water_fill(300, &[(50, 1), (u64::MAX, 1)], &mut out);
        assert_eq!(out, [50, 250]);
        water_fill(300, &[(u64::MAX, 1), (u64::MAX, 2)], &mut out);
        assert_eq!(out, [100, 200]);
        water_fill(300, &[(10, 1), (20, 1)], &mut out);
        assert_eq!(out, [10, 20]);
        water_fill(90, &[(100, 1), (20, 1), (100, 1)], &mut out);
        assert_eq!(out, [35, 20, 35]);
        water_fill(0, &[(5, 1)], &mut out);
        assert_eq!(out, [0]);
    }
}
