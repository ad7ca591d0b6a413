// SPDX-License-Identifier: GPL-2.0 OR MIT
//
// The programs `metronome run` attaches in attach mode (crates/daemon/src/os/attach.rs has the
// design; docs/deploy.md the operator's view). Compiled by crates/daemon/build.rs with clang.
//
// - `capture`, tcx egress of each attached interface: every IPv4 and IPv6 packet about to leave
//   gets an 802.1Q tag in the skb's metadata whose TCI is its origin tag (0: none known) and is
//   redirected to the daemon's capture veth for that interface. The daemon reads it there with
//   AF_PACKET (the kernel hands the tag over as auxiliary data, not in the frame), and sends it
//   out of the interface with PACKET_QDISC_BYPASS, whose transmit does not pass this hook
//   again. Anything else (ARP, LLDP, ...) goes on unshaped.
//   Also at the tcx egress of each port of a bridge a class names with `to` (`TO_IF`): the
//   packet's tag is that `to` tag, and it is redirected to the capture veth of the port's
//   bridge. The daemon sends it out of the bridge itself, which forwards it by its FDB to the
//   port, whose `capture` sees it again: the daemon's socket marks it with all the
//   `origin_mark` bits set (a value no origin tag takes), and such a packet passes, the bits
//   cleared. A multicast or broadcast frame to a `to` port goes on unshaped: sent through the
//   bridge it would be flooded to every port.
// - `stamp`, tcx ingress of each interface a class matches with `from`: writes the interface's
//   origin tag into the bits `origin_mark` of the packet's mark, so that the tag survives
//   bridging and routing to the uplink, where `capture` reads it and clears those bits again.
// - `discard`, tcx ingress of the capture veth's receiving end: the daemon's socket has its copy
//   by then (packet taps run before the ingress hook); nothing captured goes up the stack.
//
// Origins: the mark's bits first, then the interface the packet entered the host on, then the
// cgroup v2 of the local socket that sent it and its ancestors, deepest first.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

// tcx verdicts (enum tcx_action_base in newer linux/bpf.h): go on to the next program or the
// classic tc hook, pass now, drop.
#define TCX_NEXT -1
#define TCX_DROP 2

// Ancestor levels of a socket's cgroup looked up, deepest first (cgroup v2 trees of hosts are a
// few levels deep: /system.slice/backup.service is level 2).
#define CGROUP_LEVELS 16

// Indexes of `counters`: what `capture` did with the packets it saw. Read by the daemon
// (crates/daemon/src/os/attach.rs, `AttachCounter`).
enum counter {
	C_CAPTURED = 0, // redirected to the capture veth
	C_NOT_IP = 1, // not IPv4/IPv6: passed on unshaped
	C_TAG_FAILED = 2, // the metadata tag could not be pushed: passed on unshaped
	C_SHAPED_PASS = 3, // sent by the daemon through a bridge (all mark bits set): passed on
	C_NOT_UNICAST = 4, // multicast or broadcast to a `to` port: passed on unshaped
	C_COUNT = 5,
};

// Attached interface's (or `to` port's) ifindex -> the capture veth's ifindex (for a `to`
// port: its bridge's).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u32);
} CAPTURE SEC(".maps");

// Interface ifindex -> origin tag (`from` interfaces).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u16);
} ORIGIN_IF SEC(".maps");

// Interface ifindex -> origin tag (`to` interfaces: ports of a bridge the daemon sends through).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u16);
} TO_IF SEC(".maps");

// cgroup v2 id -> origin tag (`cgroup` matches).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, __u16);
} ORIGIN_CGROUP SEC(".maps");

// [0] = the mark bits that carry an origin tag (0: the mark is not used), [1] = their shift.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u32);
} SETTINGS SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, C_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} COUNTERS SEC(".maps");

static __always_inline void count(__u32 which)
{
	__u64 *c = bpf_map_lookup_elem(&COUNTERS, &which);
	if (c)
		*c += 1;
}

static __always_inline __u32 setting(__u32 which)
{
	__u32 *v = bpf_map_lookup_elem(&SETTINGS, &which);
	return v ? *v : 0;
}

static __always_inline __u16 origin_of(struct __sk_buff *skb)
{
	__u32 mask = setting(0);
	if (mask) {
		__u32 tag = (skb->mark & mask) >> setting(1);
		if (tag) {
			skb->mark &= ~mask;
			return (__u16)tag;
		}
	}
	__u32 in = skb->ingress_ifindex;
	__u16 *by_if = bpf_map_lookup_elem(&ORIGIN_IF, &in);
	if (by_if)
		return *by_if;
	if (!skb->sk)
		return 0;
	for (int level = CGROUP_LEVELS; level >= 1; level--) {
		__u64 id = bpf_skb_ancestor_cgroup_id(skb, level);
		if (!id)
			continue;
		__u16 *by_cg = bpf_map_lookup_elem(&ORIGIN_CGROUP, &id);
		if (by_cg)
			return *by_cg;
	}
	return 0;
}

SEC("classifier/capture")
int capture(struct __sk_buff *skb)
{
	__u32 mask = setting(0);
	if (mask && (skb->mark & mask) == mask) {
		skb->mark &= ~mask;
		count(C_SHAPED_PASS);
		return TCX_NEXT;
	}
	if (skb->protocol != bpf_htons(ETH_P_IP) && skb->protocol != bpf_htons(ETH_P_IPV6)) {
		count(C_NOT_IP);
		return TCX_NEXT;
	}
	__u32 ifindex = skb->ifindex;
	__u32 *target = bpf_map_lookup_elem(&CAPTURE, &ifindex);
	if (!target)
		return TCX_NEXT;
	__u32 to = *target;
	__u16 tag;
	__u16 *to_tag = bpf_map_lookup_elem(&TO_IF, &ifindex);
	if (to_tag) {
		__u8 dst0;
		if (bpf_skb_load_bytes(skb, 0, &dst0, 1) || (dst0 & 1)) {
			count(C_NOT_UNICAST);
			return TCX_NEXT;
		}
		tag = *to_tag;
		skb->mark &= ~mask;
	} else {
		tag = origin_of(skb);
	}
	if (bpf_skb_vlan_push(skb, bpf_htons(ETH_P_8021Q), tag)) {
		count(C_TAG_FAILED);
		return TCX_NEXT;
	}
	count(C_CAPTURED);
	return bpf_redirect(to, 0);
}

SEC("classifier/stamp")
int stamp(struct __sk_buff *skb)
{
	__u32 mask = setting(0);
	if (!mask)
		return TCX_NEXT;
	__u32 ifindex = skb->ifindex;
	__u16 *tag = bpf_map_lookup_elem(&ORIGIN_IF, &ifindex);
	if (tag)
		skb->mark = (skb->mark & ~mask) | (((__u32)*tag << setting(1)) & mask);
	return TCX_NEXT;
}

SEC("classifier/discard")
int discard(struct __sk_buff *skb)
{
	return TCX_DROP;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
