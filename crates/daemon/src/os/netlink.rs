//! The few rtnetlink requests attach mode makes ([`crate::os::attach`]): create a veth pair, bring
//! a link up, set its MTU, delete a link, ask a link's master (its bridge), and a link's attributes
//! for `metronome-cni` ([`get_link`]). Each is one request on a fresh `NETLINK_ROUTE` socket,
//! acknowledged by the kernel (`NLM_F_ACK`) or answered; the kernel's error comes back as an
//! `io::Error` with its errno. Messages are built with `netlink-packet-route`, sent with `netlink-sys`.

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL,
    NLM_F_REQUEST,
};
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoVeth, LinkAttribute, LinkFlags, LinkInfo, LinkMessage,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
use std::io;

/// Bytes of the receive buffer for the kernel's answer (32 KiB): an ACK, an error quoting the
/// request, or one link's attributes, statistics included (a few KiB).
const ANSWER_BYTES: usize = 32 * 1024;

/// Sends `message` with `flags` (beside `NLM_F_REQUEST`) on a fresh socket of the calling
/// thread's namespace and returns the kernel's first answer.
fn exchange(
    message: RouteNetlinkMessage,
    flags: u16,
) -> io::Result<NetlinkMessage<RouteNetlinkMessage>> {
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | flags;
    header.sequence_number = 1;
    let mut packet = NetlinkMessage::new(header, NetlinkPayload::from(message));
    packet.finalize();
    let mut buf = vec![0u8; packet.buffer_len()];
    packet.serialize(&mut buf);
    let mut socket = Socket::new(NETLINK_ROUTE)?;
    socket.bind_auto()?;
    socket.connect(&SocketAddr::new(0, 0))?;
    socket.send(&buf, 0)?;
    let mut answer = Vec::with_capacity(ANSWER_BYTES);
    let n = socket.recv(&mut answer, 0)?;
    NetlinkMessage::<RouteNetlinkMessage>::deserialize(&answer[..n])
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
}

/// Sends `message` with `flags` (beside `NLM_F_REQUEST | NLM_F_ACK`) and waits for the kernel's
/// answer.
fn request(message: RouteNetlinkMessage, flags: u16) -> io::Result<()> {
    match exchange(message, NLM_F_ACK | flags)?.payload {
        NetlinkPayload::Error(e) if e.code.is_some() => Err(e.to_io()),
        _ => Ok(()),
    }
}

/// One `RTM_GETLINK` for the link `message` names (by `header.index`, or an `IfName`
/// attribute), in the calling thread's namespace: `Ok(None)` when there is no such link.
pub fn get_link(message: LinkMessage) -> io::Result<Option<LinkMessage>> {
    match exchange(RouteNetlinkMessage::GetLink(message), 0)?.payload {
        NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(link)) => Ok(Some(link)),
        NetlinkPayload::Error(e) => match e.code {
            Some(code) if code.get() == -(nix::errno::Errno::ENODEV as i32) => Ok(None),
            Some(_) => Err(e.to_io()),
            None => Ok(None),
        },
        other => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unexpected rtnetlink answer: {other:?}"),
        )),
    }
}

/// Creates the veth pair `name` - `peer` with `mtu` on both ends, both down.
pub fn create_veth(name: &str, peer: &str, mtu: u32) -> io::Result<()> {
    let mut peer_message = LinkMessage::default();
    peer_message
        .attributes
        .push(LinkAttribute::IfName(peer.to_string()));
    peer_message.attributes.push(LinkAttribute::Mtu(mtu));
    let mut message = LinkMessage::default();
    message
        .attributes
        .push(LinkAttribute::IfName(name.to_string()));
    message.attributes.push(LinkAttribute::Mtu(mtu));
    message.attributes.push(LinkAttribute::LinkInfo(vec![
        LinkInfo::Kind(InfoKind::Veth),
        LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer_message))),
    ]));
    request(
        RouteNetlinkMessage::NewLink(message),
        NLM_F_CREATE | NLM_F_EXCL,
    )
}

/// Brings the link of `ifindex` up.
pub fn set_up(ifindex: u32) -> io::Result<()> {
    let mut message = LinkMessage::default();
    message.header.index = ifindex;
    message.header.flags = LinkFlags::Up;
    message.header.change_mask = LinkFlags::Up;
    request(RouteNetlinkMessage::SetLink(message), 0)
}

/// The index of the master (the bridge) of the link of `ifindex`, `None` when it has none
/// (`IFLA_MASTER` of `RTM_GETLINK`), asked in the calling thread's network namespace (unlike
/// `/sys/class/net`, which shows the namespace `/sys` was mounted in).
pub fn master(ifindex: u32) -> io::Result<Option<u32>> {
    let mut message = LinkMessage::default();
    message.header.index = ifindex;
    let link = get_link(message)?.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("RTM_GETLINK: no link of index {ifindex}"),
        )
    })?;
    Ok(master_of(&link))
}

/// The index of `link`'s master (`IFLA_MASTER`), `None` when it has none.
fn master_of(link: &LinkMessage) -> Option<u32> {
    link.attributes.iter().find_map(|a| match a {
        LinkAttribute::Controller(m) => Some(*m),
        _ => None,
    })
}

/// Deletes the link of `ifindex` (a veth's peer goes with it).
pub fn delete(ifindex: u32) -> io::Result<()> {
    let mut message = LinkMessage::default();
    message.header.index = ifindex;
    request(RouteNetlinkMessage::DelLink(message), 0)
}

/// What [`link_ties`] learns of one link: how frames sent on it can come back on another.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkTies {
    /// The link's index.
    pub index: u32,
    /// The index of its veth peer when the peer is in the same namespace (`IFLA_LINK` of a
    /// `veth` without `IFLA_LINK_NETNSID`).
    pub veth_peer: Option<u32>,
    /// The index of its master, the bridge it is a port of (`IFLA_MASTER`).
    pub master: Option<u32>,
    /// Whether the link is itself a bridge.
    pub bridge: bool,
}

/// The [`LinkTies`] of the link named `name` in the calling thread's namespace; `Ok(None)` when
/// there is no such link.
pub fn link_ties(name: &str) -> io::Result<Option<LinkTies>> {
    let mut message = LinkMessage::default();
    message
        .attributes
        .push(LinkAttribute::IfName(name.to_string()));
    let Some(link) = get_link(message)? else {
        return Ok(None);
    };
    let kind = link.attributes.iter().find_map(|a| match a {
        LinkAttribute::LinkInfo(infos) => infos.iter().find_map(|i| match i {
            LinkInfo::Kind(k) => Some(k.clone()),
            _ => None,
        }),
        _ => None,
    });
    let other_namespace = link
        .attributes
        .iter()
        .any(|a| matches!(a, LinkAttribute::LinkNetNsId(_)));
    let link_index = link.attributes.iter().find_map(|a| match a {
        LinkAttribute::Link(i) => Some(*i),
        _ => None,
    });
    Ok(Some(LinkTies {
        index: link.header.index,
        veth_peer: match kind {
            Some(InfoKind::Veth) if !other_namespace => link_index,
            _ => None,
        },
        master: master_of(&link),
        bridge: kind == Some(InfoKind::Bridge),
    }))
}
