// SPDX-License-Identifier: GPL-2.0 OR MIT
//
// `admit`, the socket filter of the daemon's receiving sockets (crates/daemon/src/os/early.rs
// has the design, docs/config.md the operator's view). Compiled by crates/daemon/build.rs with
// clang. It runs in the kernel for every frame that reaches one of the shaping loop's receive
// sockets, before the frame is queued on the socket, and refuses what a class cannot take
// before it costs the loop a copy, a parse and a classification:
//
// - the frame is parsed (Ethernet, at most two VLAN tags, IPv4 with options or IPv6 with at
//   most MAX_EXT extension headers, TCP and UDP ports) and classified by the first RULES
//   entries in first-match order, the rules the daemon's classifier holds;
// - each class with a rate has a bucket (GCRA: a theoretical arrival time advanced by each
//   frame's bytes at `multiple` times the class's rate, a tolerance of the class's queue bound
//   in bytes at that rate). A frame that does not conform is refused and counted under its
//   bucket and OVER_RATE; one that does passes on to the loop, which shapes it as before;
// - malformed and non-IP frames go to a bucket of the default class's rate of their own, pass,
//   or are refused, as `[daemon] malformed` and `non_ip` say;
// - while the loop is overloaded (SETTINGS[S_OVERLOAD], set by the daemon) the multiple is 1:
//   a class gets no more than its rate into the loop, so the frames of the classes within
//   their rates are the ones the loop spends its time on.
//
// Buckets are shared by every CPU without a lock: two CPUs that update one bucket at once
// lose one of the two updates, which lets a frame more through, never one less.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/in.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

// Rules held (crates/daemon/src/os/early.rs, `MAX_RULES`).
#define MAX_RULES 64
// Buckets: one per rule, then the default class's, then NO_CLASS (frames refused by the
// `drop` action of `malformed` or `non_ip`, no class's), then the default class's again for
// the malformed and non-IP frames charged to it (a state of its own, so that a flood of
// garbage does not take the bucket of the default class's IP packets).
#define DEFAULT_BUCKET MAX_RULES
#define DROP_BUCKET (MAX_RULES + 1)
#define UNCLASSIFIED_BUCKET (MAX_RULES + 2)
#define BUCKETS_N (MAX_RULES + 3)
// IPv6 extension headers walked at most; a longer chain counts as malformed here.
#define MAX_EXT 4

// Reasons of a refusal (`Reason` in early.rs).
#define OVER_RATE 0
#define MALFORMED 1
#define NON_IP 2
#define REASONS 3

// SETTINGS indexes.
#define S_RULES 0 // rules in RULES
#define S_COMPLETE 1 // 1: RULES holds every rule of the classifier (no match = default class)
#define S_MALFORMED 2 // action for malformed frames: 0 default, 1 pass, 2 drop
#define S_NON_IP 3 // action for non-IP frames, the same values
#define S_MULTIPLE 4 // the buckets' multiple of the class's rate (at least 1)
#define S_OVERLOAD 5 // 1: the loop is overloaded, the multiple is 1
#define S_ORIGIN_TAGS 6 // 1: the skb's VLAN tag is the origin tag (attach mode)
#define SETTINGS_N 8

#define ACT_DEFAULT 0
#define ACT_PASS 1

// Rule fields present (`flags`).
#define F_DST 1
#define F_SRC 2
#define F_DSCP 4
#define F_PROTOCOL 8
#define F_DST_PORT 16
#define F_SRC_PORT 32
#define F_ORIGIN 64

// One rule, laid out as `Rule` in early.rs. Addresses and masks are in network byte order,
// IPv4 in the first word; `family` 4 or 6 when the rule has a prefix.
struct rule {
	__u32 dst[4];
	__u32 dst_mask[4];
	__u32 src[4];
	__u32 src_mask[4];
	__u16 flags;
	__u8 dst_family;
	__u8 src_family;
	__u8 dscp;
	__u8 protocol;
	__u16 origin;
	__u16 dst_lo;
	__u16 dst_hi;
	__u16 src_lo;
	__u16 src_hi;
	__u32 bucket;
};

// A class's bucket, laid out as `Bucket` in early.rs. `ps_per_byte` 0: no rate, no bucket.
struct bucket {
	__u64 ps_per_byte; // picoseconds per byte at the class's rate
	__u64 tolerance_ns; // the class's queue bound in bytes, at its rate
	__u64 tat; // theoretical arrival time, ns of bpf_ktime_get_ns
};

struct tally {
	__u64 frames;
	__u64 bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_RULES);
	__type(key, __u32);
	__type(value, struct rule);
} RULES SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, BUCKETS_N);
	__type(key, __u32);
	__type(value, struct bucket);
} BUCKETS SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SETTINGS_N);
	__type(key, __u32);
	__type(value, __u64);
} SETTINGS SEC(".maps");

// Refusals by bucket * REASONS + reason.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, BUCKETS_N * REASONS);
	__type(key, __u32);
	__type(value, struct tally);
} REFUSED SEC(".maps");

// What the classifier reads of a packet.
struct key {
	__u32 src[4];
	__u32 dst[4];
	__u8 family;
	__u8 dscp;
	__u8 protocol;
	__u8 has_ports;
	__u16 src_port;
	__u16 dst_port;
	__u16 origin;
};

static __always_inline __u64 setting(__u32 which)
{
	__u64 *v = bpf_map_lookup_elem(&SETTINGS, &which);
	return v ? *v : 0;
}

// The parse's outcome.
#define P_IP 0
#define P_MALFORMED 1
#define P_NON_IP 2

static __always_inline int parse(struct __sk_buff *skb, struct key *k)
{
	__u32 off = ETH_HLEN;
	__u16 proto;
	int tags = 0;
	if (skb->len < ETH_HLEN)
		return P_MALFORMED;
	if (bpf_skb_load_bytes(skb, 12, &proto, 2))
		return P_MALFORMED;
	if (skb->vlan_present) {
		if (setting(S_ORIGIN_TAGS))
			k->origin = skb->vlan_tci;
		else
			tags = 1; // re-inserted in the frame by the daemon's port
	}
	for (int i = 0; i < 3; i++) {
		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD) &&
		    proto != bpf_htons(0x9100))
			break;
		if (tags == 2)
			return P_MALFORMED;
		if (bpf_skb_load_bytes(skb, off + 2, &proto, 2))
			return P_MALFORMED;
		off += 4;
		tags++;
	}
	__u8 l4 = 0;
	__u32 l4_off = 0;
	int later_fragment = 0;
	__u32 ip_len = skb->len - off;
	if (proto == bpf_htons(ETH_P_IP)) {
		__u8 h[20];
		if (bpf_skb_load_bytes(skb, off, h, 20))
			return P_MALFORMED;
		if ((h[0] >> 4) != 4 || (h[0] & 15) < 5)
			return P_MALFORMED;
		__u32 hlen = (h[0] & 15) * 4;
		__u32 total = ((__u32)h[2] << 8) | h[3];
		if (total < hlen || total > ip_len)
			return P_MALFORMED;
		k->family = 4;
		k->dscp = h[1] >> 2;
		l4 = h[9];
		__builtin_memcpy(&k->src[0], &h[12], 4);
		__builtin_memcpy(&k->dst[0], &h[16], 4);
		later_fragment = (((__u32)(h[6] & 0x1f) << 8) | h[7]) != 0;
		l4_off = off + hlen;
		ip_len = total - hlen;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		__u8 h[40];
		if (bpf_skb_load_bytes(skb, off, h, 40))
			return P_MALFORMED;
		if ((h[0] >> 4) != 6)
			return P_MALFORMED;
		__u32 payload = ((__u32)h[4] << 8) | h[5];
		if (payload + 40 > ip_len)
			return P_MALFORMED;
		k->family = 6;
		k->dscp = (((h[0] & 15) << 4) | (h[1] >> 4)) >> 2;
		__builtin_memcpy(k->src, &h[8], 16);
		__builtin_memcpy(k->dst, &h[24], 16);
		l4 = h[6];
		l4_off = off + 40;
		ip_len = payload;
		for (int i = 0; i <= MAX_EXT; i++) {
			if (l4 != 0 && l4 != 43 && l4 != 44 && l4 != 60 && l4 != 51)
				break;
			if (i == MAX_EXT)
				return P_MALFORMED;
			__u8 e[8];
			if (bpf_skb_load_bytes(skb, l4_off, e, 8))
				return P_MALFORMED;
			__u32 elen;
			if (l4 == 44) {
				elen = 8;
				later_fragment |= ((((__u32)e[2] << 8) | e[3]) & 0xfff8) != 0;
			} else if (l4 == 51) {
				elen = ((__u32)e[1] + 2) * 4;
			} else {
				elen = ((__u32)e[1] + 1) * 8;
			}
			if (elen > ip_len)
				return P_MALFORMED;
			l4 = e[0];
			l4_off += elen;
			ip_len -= elen;
		}
	} else {
		return P_NON_IP;
	}
	k->protocol = l4;
	if (later_fragment || (l4 != IPPROTO_TCP && l4 != IPPROTO_UDP))
		return P_IP;
	__u16 ports[2];
	if (ip_len < 4 || bpf_skb_load_bytes(skb, l4_off, ports, 4))
		return P_MALFORMED;
	k->src_port = bpf_ntohs(ports[0]);
	k->dst_port = bpf_ntohs(ports[1]);
	k->has_ports = 1;
	return P_IP;
}

static __always_inline int prefix(const __u32 *addr, const __u32 *net, const __u32 *mask)
{
	return ((addr[0] & mask[0]) == net[0]) && ((addr[1] & mask[1]) == net[1]) &&
	       ((addr[2] & mask[2]) == net[2]) && ((addr[3] & mask[3]) == net[3]);
}

static __always_inline int matches(const struct rule *r, const struct key *k)
{
	__u16 f = r->flags;
	if ((f & F_DST) && (r->dst_family != k->family || !prefix(k->dst, r->dst, r->dst_mask)))
		return 0;
	if ((f & F_SRC) && (r->src_family != k->family || !prefix(k->src, r->src, r->src_mask)))
		return 0;
	if ((f & F_DSCP) && r->dscp != k->dscp)
		return 0;
	if ((f & F_PROTOCOL) && r->protocol != k->protocol)
		return 0;
	if ((f & F_DST_PORT) &&
	    (!k->has_ports || k->dst_port < r->dst_lo || k->dst_port > r->dst_hi))
		return 0;
	if ((f & F_SRC_PORT) &&
	    (!k->has_ports || k->src_port < r->src_lo || k->src_port > r->src_hi))
		return 0;
	if ((f & F_ORIGIN) && r->origin != k->origin)
		return 0;
	return 1;
}

// The bucket of the packet `k`: its class's, or BUCKETS_N when no rule held here decides it.
static __always_inline __u32 classify(const struct key *k)
{
	__u32 n = setting(S_RULES);
	// Unrolled: the verifier cannot follow a loop counter that is also a map key on the stack.
#pragma clang loop unroll(full)
	for (__u32 i = 0; i < MAX_RULES; i++) {
		if (i < n) {
			__u32 at = i;
			struct rule *r = bpf_map_lookup_elem(&RULES, &at);
			if (r && matches(r, k))
				return r->bucket;
		}
	}
	return setting(S_COMPLETE) ? DEFAULT_BUCKET : BUCKETS_N;
}

static __always_inline void refuse(__u32 bucket, __u32 reason, __u32 len)
{
	__u32 at = bucket * REASONS + reason;
	struct tally *t = bpf_map_lookup_elem(&REFUSED, &at);
	if (t) {
		t->frames += 1;
		t->bytes += len;
	}
}

// Whether `len` bytes conform to bucket `index` now; advances it when they do.
static __always_inline int conforms(__u32 index, __u32 len)
{
	struct bucket *b = bpf_map_lookup_elem(&BUCKETS, &index);
	if (!b || b->ps_per_byte == 0)
		return 1;
	__u64 multiple = setting(S_OVERLOAD) ? 1 : setting(S_MULTIPLE);
	if (multiple == 0)
		multiple = 1;
	__u64 now = bpf_ktime_get_ns();
	__u64 cost = (__u64)len * b->ps_per_byte / (1000 * multiple);
	__u64 tolerance = b->tolerance_ns / multiple;
	__u64 tat = b->tat > now ? b->tat : now;
	if (tat - now > tolerance)
		return 0;
	b->tat = tat + cost;
	return 1;
}

SEC("socket")
int admit(struct __sk_buff *skb)
{
	__u32 len = skb->len;
	if (skb->pkt_type == PACKET_OUTGOING)
		return len;
	struct key k = {};
	int parsed = parse(skb, &k);
	__u32 bucket;
	__u32 reason = OVER_RATE;
	if (parsed == P_IP) {
		bucket = classify(&k);
		if (bucket >= BUCKETS_N)
			return len;
	} else {
		reason = parsed == P_NON_IP ? NON_IP : MALFORMED;
		__u64 action = setting(parsed == P_NON_IP ? S_NON_IP : S_MALFORMED);
		if (action == ACT_PASS)
			return len;
		if (action != ACT_DEFAULT) {
			refuse(DROP_BUCKET, reason, len);
			return 0;
		}
		bucket = UNCLASSIFIED_BUCKET;
	}
	if (conforms(bucket, len))
		return len;
	refuse(bucket, reason, len);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
