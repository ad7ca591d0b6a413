//! Opening a port again by name ([`crate::PacketPort::reopen`]) after its interface was deleted
//! and re-created with a new index: sockets bound to the old index neither receive nor send.
//!
//! * The port is opened again with the options it was opened with ([`AfPacketConfig`]).
//! * A port in a fanout group (per-core silos, Carousel §5.3) cannot join its old group: its
//!   members were bound to the deleted device. The first silo to reopen creates a new group on
//!   the new interface and the others join it ([`rejoin_group`]), so the kernel's flow hash
//!   spreads the new interface's packets over every silo again.

use super::{AfPacketConfig, AfPacketPort, Fanout};
use crate::port::{PacketPort, PortCounters, PortError};
use std::sync::{Mutex, PoisonError};

impl AfPacketPort {
    /// [`crate::PacketPort::reopen`]: see the module docs.
    pub(super) fn open_again(&mut self) -> Result<PortCounters, PortError> {
        let ifname = self.ifname.clone();
        let config = self.config;
        let open = |fanout| AfPacketPort::open(&ifname, &AfPacketConfig { fanout, ..config });
        let new = match self.fanout_group() {
            None => open(None)?,
            Some(old) => {
                let index =
                    crate::sys::if_index(&ifname).map_err(|_| PortError::NoSuchInterface {
                        ifname: ifname.clone(),
                    })?;
                rejoin_group(old, index, |f| open(Some(f)))?
            }
        };
        let mut old = std::mem::replace(self, new);
        Ok(old.counters())
    }
}

/// One fanout group made by a reopening: the silos whose first group was `root` join `group`
/// on the interface of index `index`.
#[derive(Clone, Copy, Debug)]
struct Rejoined {
    root: u16,
    index: u32,
    group: u16,
}

/// Every group made by a reopening in this process (one entry per re-created interface and
/// silo set: a few bytes each, on the cold path). Group ids are unique per host
/// (`PACKET_FANOUT_FLAG_UNIQUEID`), so a root names one daemon's set of silos on one interface.
static REJOINED: Mutex<Vec<Rejoined>> = Mutex::new(Vec::new());

/// Opens a port (with `open`) in the fanout group that replaces group `old` on the interface of
/// index `index`: the first silo to reopen creates it ([`Fanout::NewGroup`]), the others join
/// it, so the kernel's flow hash spreads the new interface's packets over every silo again. The
/// old group cannot be joined: its members were bound to the deleted device.
pub fn rejoin_group(
    old: u16,
    index: u32,
    open: impl FnOnce(Fanout) -> Result<AfPacketPort, PortError>,
) -> Result<AfPacketPort, PortError> {
    let mut table = REJOINED.lock().unwrap_or_else(PoisonError::into_inner);
    rejoin_in(&mut table, old, index, open, AfPacketPort::fanout_group)
}

/// [`rejoin_group`] over `table`, for any port whose group `group` reads.
fn rejoin_in<P>(
    table: &mut Vec<Rejoined>,
    old: u16,
    index: u32,
    open: impl FnOnce(Fanout) -> Result<P, PortError>,
    group: impl Fn(&P) -> Option<u16>,
) -> Result<P, PortError> {
    let root = table
        .iter()
        .find(|r| r.group == old)
        .map_or(old, |r| r.root);
    if let Some(r) = table.iter().find(|r| r.root == root && r.index == index) {
        return open(Fanout::Join(r.group));
    }
    let port = open(Fanout::NewGroup)?;
    if let Some(g) = group(&port) {
        table.push(Rejoined {
            root,
            index,
            group: g,
        });
    }
    Ok(port)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Opens a fake port: a new group gets the next id from `next`, a join keeps its id.
    fn open_fake(next: &mut u16) -> impl FnMut(Fanout) -> Result<u16, PortError> + '_ {
        move |f| {
            Ok(match f {
                Fanout::NewGroup => {
                    *next += 1;
                    *next
                }
                Fanout::Join(g) => g,
            })
        }
    }

    #[test]
    fn the_silos_of_a_recreated_interface_rejoin_one_new_group() {
        let mut table = Vec::new();
        let mut next = 100;
        let mut rejoin = |old, index| {
            rejoin_in(&mut table, old, index, open_fake(&mut next), |g| Some(*g)).unwrap()
        };
        // Two silos in group 7; the interface comes back as index 5: the first silo makes a
        // new group, the second joins it, not the old one (bound to the deleted device).
        let a = rejoin(7, 5);
        assert_ne!(a, 7);
        assert_eq!(rejoin(7, 5), a);
        // Re-created again (index 6), the silos reopening in the other order: one group again.
        let b = rejoin(a, 6);
        assert_ne!(b, a);
        assert_eq!(rejoin(a, 6), b);
        // A silo that missed the intermediate interface (still in group 7) joins that group too.
        assert_eq!(rejoin(7, 6), b);
        // Another daemon's silos (group 9) on an interface of the same index get their own.
        let c = rejoin(9, 6);
        assert!(c != b && c != a);
        assert_eq!(rejoin(9, 6), c);
    }
}
