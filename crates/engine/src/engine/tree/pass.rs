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
        // The busy classes and every ancestor of one, by depth.
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
        set.sort_unstable_by_key(|&i| {
            let n = &self.classes[i as usize].node;
            (std::cmp::Reverse(n.depth), n.parent.unwrap_or(u32::MAX))
        });
        let frame = u64::from(
            self.config
                .mtu
                .saturating_add(crate::config::ETHERNET_HEADER),
        );
        // Bottom up: each class's own demand and sent counts; a parent's demand adds its
        // children's. A class is ready once all its children came (deeper first).
        for &i in &set {
            let i = i as usize;
            let held_bytes = self.class_held(i).1;
            // What waits for its own policy (not for an ancestor's): its rate is what holds it.
            let own_wait = self.classes[i]
                .aggregate
                .and_then(|p| self.stamper.backlog(p, now))
                .map_or(0, |d| d.as_nanos());
            let fair_bytes = u128::from(self.fair_class_load(i).1);
            let s = &mut self.classes[i];
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
            let active = came > 0 || held_bytes > 0 || s.node.active;
            s.node.delta.0 += s.stats.sent_packets.saturating_sub(s.node.last_sent.0);
            s.node.delta.1 += s.stats.sent_bytes.saturating_sub(s.node.last_sent.1);
            // What its subtree (its children's, gathered before it) stamped, refused and holds.
            let n = &mut s.node;
            n.sub_stamped += n.pass.stamped;
            n.sub_refused += n.pass.refused;
            n.sub_held = n.pass.held;
            let up = super::Gathered {
                stamped: n.pass.stamped + stamped,
                refused: n.pass.refused + refused,
                held: n.pass.held + held_bytes,
            };
            n.pass = super::Gathered::default();
            n.active = active || n.delta.0 > 0;
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
        // Sent counts: each class's own since the last pass plus its subtree's.
        for &i in &set {
            let i = i as usize;
            let s = &mut self.classes[i];
            let own = (
                s.stats.sent_packets.saturating_sub(s.node.last_sent.0),
                s.stats.sent_bytes.saturating_sub(s.node.last_sent.1),
            );
            let subtree = (
                s.node.delta.0.saturating_sub(own.0),
                s.node.delta.1.saturating_sub(own.1),
            );
            s.stats.sent_packets += subtree.0;
            s.stats.sent_bytes += subtree.1;
            s.node.last_sent = (s.stats.sent_packets, s.stats.sent_bytes);
            if subtree.0 > 0 {
                s.touch(i, &mut self.dirty);
            }
        }
        // Top down: each parent's share among its busy children (the set is ordered deepest
        // first, children grouped by parent; walk it from the top).
        let mut items = Vec::new();
        let mut out = Vec::new();
        let mut members = Vec::new();
        let mut end = set.len();
        while end > 0 {
            let i = set[end - 1] as usize;
            let key = (self.classes[i].node.depth, self.classes[i].node.parent);
            let mut start = end - 1;
            while start > 0 {
                let j = set[start - 1] as usize;
                if (self.classes[j].node.depth, self.classes[j].node.parent) != key {
                    break;
                }
                start -= 1;
            }
            let group = &set[start..end];
            match key.1 {
                None => {
                    for &r in group {
                        let r = r as usize;
                        let cap = self.classes[r].node.cap;
                        self.set_share(r, cap);
                    }
                }
                Some(p) => {
                    let p = p as usize;
                    let total = self.classes[p].node.share_or(self.classes[p].node.ceiling);
                    let all_weight = self.classes[p].node.children_weight.max(1);
                    items.clear();
                    members.clear();
                    for &c in group {
                        let n = &self.classes[c as usize].node;
                        items.push((n.demand.min(total), u64::from(n.weight.max(1))));
                        members.push(c as usize);
                    }
                    water_fill(total, &items, &mut out);
                    // What the demands leave, by weight up to each one's cap.
                    let given: u64 = out.iter().sum();
                    if given < total {
                        let room: Vec<(u64, u64)> = members
                            .iter()
                            .zip(&out)
                            .map(|(&c, &a)| {
                                let n = &self.classes[c].node;
                                (
                                    n.cap.min(total).saturating_sub(a),
                                    u64::from(n.weight.max(1)),
                                )
                            })
                            .collect();
                        let mut extra = Vec::new();
                        water_fill(total - given, &room, &mut extra);
                        for (a, e) in out.iter_mut().zip(extra) {
                            *a += e;
                        }
                    }
                    for (k, &c) in members.iter().enumerate() {
                        let n = &self.classes[c].node;
                        let floor = (u128::from(total) * u128::from(n.weight.max(1))
                            / u128::from(all_weight)) as u64;
                        let share = out[k].max(floor).min(n.cap).max(frame * 8);
                        self.set_share(c, share);
                    }
                }
            }
            end = start;
        }
        // Reset the scratch; classes that neither hold nor received anything leave the list
        // and get their ceiling.
        let mut busy = Vec::with_capacity(set.len());
        for &i in &set {
            let iu = i as usize;
            let held = self.class_held(iu).0 > 0;
            let n = &mut self.classes[iu].node;
            let active = n.active || held;
            n.demand = 0;
            n.delta = (0, 0);
            n.active = false;
            if active {
                busy.push(i);
            } else {
                n.busy = false;
                n.arrivals_bps = 0;
                let ceiling = n.ceiling;
                self.set_share(iu, ceiling);
            }
        }
        self.tree.busy = busy;
        let period = TREE_PERIOD
            .as_nanos()
            .max(PASS_NS_PER_CLASS.saturating_mul(set.len() as u64));
        self.tree.next = now.saturating_add(Duration::from_nanos(period));
        if !self.dirty.is_empty() {
            // The parents' counts reach the metrics even when nothing else is sent.
            self.publish_gauges();
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
