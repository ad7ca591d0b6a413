//! The few rtnetlink requests attach mode makes ([`crate::os::attach`]): create a veth pair, bring
//! a link up, set its MTU, delete a link, ask a link's master (its bridge). Each is one request on a fresh `NETLINK_ROUTE` socket,
//! acknowledged by the kernel (`NLM_F_ACK`); the kernel's error comes back as an `io::Error`
//! with its errno. Messages are built with `netlink-packet-route`, sent with `netlink-sys`.

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

/// Bytes of the receive buffer for the kernel's answer: an ACK or an error quoting the request.
const ANSWER_BYTES: usize = 16 * 1024;

/// Sends `message` with `flags` (beside `NLM_F_REQUEST | NLM_F_ACK`) and waits for the kernel's
/// answer.
fn request(message: RouteNetlinkMessage, flags: u16) -> io::Result<()> {
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_ACK | flags;
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
    let reply = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&answer[..n])
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
    match reply.payload {
        NetlinkPayload::Error(e) if e.code.is_some() => Err(e.to_io()),
        _ => Ok(()),
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
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST;
    header.sequence_number = 1;
    let mut packet = NetlinkMessage::new(
        header,
        NetlinkPayload::from(RouteNetlinkMessage::GetLink(message)),
    );
    packet.finalize();
    let mut buf = vec![0u8; packet.buffer_len()];
    packet.serialize(&mut buf);
    let mut socket = Socket::new(NETLINK_ROUTE)?;
    socket.bind_auto()?;
    socket.connect(&SocketAddr::new(0, 0))?;
    socket.send(&buf, 0)?;
    let mut answer = Vec::with_capacity(ANSWER_BYTES);
    let n = socket.recv(&mut answer, 0)?;
    let reply = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&answer[..n])
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
    match reply.payload {
        NetlinkPayload::Error(e) if e.code.is_some() => Err(e.to_io()),
        NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(link)) => {
            Ok(link.attributes.iter().find_map(|a| match a {
                LinkAttribute::Controller(m) => Some(*m),
                _ => None,
            }))
        }
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "RTM_GETLINK: no link in the answer",
        )),
    }
}

/// Deletes the link of `ifindex` (a veth's peer goes with it).
pub fn delete(ifindex: u32) -> io::Result<()> {
    let mut message = LinkMessage::default();
    message.header.index = ifindex;
    request(RouteNetlinkMessage::DelLink(message), 0)
}
