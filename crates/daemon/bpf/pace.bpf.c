// SPDX-License-Identifier: GPL-2.0 OR MIT
//
// `pace`, the sock_ops program of source pacing (crates/daemon/src/os/pace.rs has the design,
// docs/config.md the operator's view). Compiled by crates/daemon/build.rs with clang and
// attached to the root of the cgroup v2 hierarchy, so that it sees every TCP socket of the host.
//
// The daemon registers each TCP flow of a paced class it sees (`FLOWS`: the network namespace
// cookie of the daemon and the flow's addresses and ports, as the packet leaves, -> the class's
// slot) and keeps each slot's ceiling current (`RATES`, bytes per second). On every RTT sample of
// a socket (BPF_SOCK_OPS_RTT_CB, switched on when the connection is established) the program
// looks its flow up and gives it the ceiling as its SO_MAX_PACING_RATE: the kernel's TCP then
// paces the socket (internal pacing works without fq) and it sends no faster than its share,
// instead of queueing in the daemon. Its congestion window is clamped to four times what the
// ceiling sends in a smoothed round trip of at least CLAMP_FLOOR_US / 4 (and to at least
// MIN_CLAMP segments): on a path of a few hundred microseconds the kernel's TSO autosizing
// (tcp_tso_rtt_log) builds 64 KB bursts, which a socket paced at a few Mbit/s would send at
// once and then wait tens of milliseconds; the window is what bounds a burst. The clamp is
// recomputed when it moves by more than a quarter. The socket's own SO_MAX_PACING_RATE, if it
// set one, is kept (`SOCKS`) and stays the bound; it is put back when the flow is no longer
// paced.
//
// Failing open: `STATE[0]` is the daemon's heartbeat (bpf_ktime_get_ns, CLOCK_MONOTONIC),
// written every few milliseconds. Once it is older than `STATE[1]` nanoseconds (the daemon was
// killed, or stopped), every socket the program slowed gets its own value back at its next RTT
// sample, and the program slows nothing more. The program is pinned, so that it outlives a
// killed daemon and can do that.

#include <linux/bpf.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define SOL_SOCKET 1
#define SOL_TCP 6
#define SO_MAX_PACING_RATE 47
#define NO_CEILING 0xffffffffu
// The congestion window's clamp of a socket without one (the kernel's TCP_INFINITE_SSTHRESH).
#define NO_CLAMP 0x7fffffff
// Fewest segments a slowed socket's window is clamped to.
#define MIN_CLAMP 4
// A slowed socket's window holds at least what its ceiling sends in this long, microseconds.
#define CLAMP_FLOOR_US 1000

// Indexes of `COUNTERS`, read by the daemon (crates/daemon/src/os/pace.rs, `Counter`).
enum counter {
	C_SLOWED = 0, // gauge: sockets that carry a ceiling now
	C_APPLIED = 1, // ceilings set or changed
	C_RESTORED = 2, // sockets given their own value back
	C_FAILED = 3, // bpf_setsockopt refused
	C_CLOSED = 4, // sockets closed while slowed
	C_COUNT = 5,
};

struct flow_key {
	__u64 netns;
	__u32 family;
	__u32 src[4];
	__u32 dst[4];
	__u16 sport;
	__u16 dport;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct flow_key);
	__type(value, __u32);
} FLOWS SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u32);
} RATES SEC(".maps");

// [0] heartbeat (ns, CLOCK_MONOTONIC), [1] how old it may be (ns).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} STATE SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, C_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} COUNTERS SEC(".maps");

// What the program keeps per socket it slowed: the socket's own SO_MAX_PACING_RATE and the
// ceiling in force (0: none).
struct sock_pace {
	__u32 own;
	__u32 applied;
	__u32 clamp;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct sock_pace);
} SOCKS SEC(".maps");

static __always_inline void add(__u32 which, __s64 n)
{
	__u64 *c = bpf_map_lookup_elem(&COUNTERS, &which);
	if (c)
		__sync_fetch_and_add(c, n);
}

static __always_inline __u64 state(__u32 which)
{
	__u64 *v = bpf_map_lookup_elem(&STATE, &which);
	return v ? *v : 0;
}

// The ceiling the daemon wants for this socket's flow, or 0.
static __always_inline __u32 wanted(struct bpf_sock_ops *ops)
{
	__u64 beat = state(0);
	if (!beat || bpf_ktime_get_ns() - beat > state(1))
		return 0;
	struct flow_key key = {};
	key.netns = bpf_get_netns_cookie(ops);
	key.family = ops->family;
	if (ops->family == 2) {
		key.src[0] = ops->local_ip4;
		key.dst[0] = ops->remote_ip4;
	} else if (ops->family == 10) {
		key.src[0] = ops->local_ip6[0];
		key.src[1] = ops->local_ip6[1];
		key.src[2] = ops->local_ip6[2];
		key.src[3] = ops->local_ip6[3];
		key.dst[0] = ops->remote_ip6[0];
		key.dst[1] = ops->remote_ip6[1];
		key.dst[2] = ops->remote_ip6[2];
		key.dst[3] = ops->remote_ip6[3];
	} else {
		return 0;
	}
	key.sport = (__u16)ops->local_port;
	// remote_port is in network byte order, in the upper half on recent kernels, the lower
	// half on older ones: the other half is zero.
	key.dport = (__u16)(bpf_ntohl(ops->remote_port) | bpf_ntohs((__u16)ops->remote_port));
	__u32 *slot = bpf_map_lookup_elem(&FLOWS, &key);
	if (!slot)
		return 0;
	__u32 *rate = bpf_map_lookup_elem(&RATES, slot);
	return rate ? *rate : 0;
}

static __always_inline int set_rate(struct bpf_sock_ops *ops, __u32 rate)
{
	int v = (int)rate;
	int err = bpf_setsockopt(ops, SOL_SOCKET, SO_MAX_PACING_RATE, &v, sizeof(v));
	if (err)
		add(C_FAILED, 1);
	return err;
}

// Four times the segments `rate` bytes a second sends in the socket's smoothed round trip, and
// at least what it sends in CLAMP_FLOOR_US (the daemon's queue target) and MIN_CLAMP: smaller
// bursts cost the host more packets for the same bytes (measured in docs/results/attach.md),
// larger ones a longer queue in the daemon.
static __always_inline __u32 clamp_for(struct bpf_sock_ops *ops, __u32 rate)
{
	__u64 srtt_us = ops->srtt_us >> 3;
	if (srtt_us < CLAMP_FLOOR_US / 4)
		srtt_us = CLAMP_FLOOR_US / 4;
	__u64 mss = ops->mss_cache ? ops->mss_cache : 1448;
	__u64 segs = 4 * (__u64)rate * srtt_us / 1000000 / mss + 1;
	if (segs < MIN_CLAMP)
		segs = MIN_CLAMP;
	if (segs > NO_CLAMP)
		segs = NO_CLAMP;
	return (__u32)segs;
}

static __always_inline void set_clamp(struct bpf_sock_ops *ops, struct sock_pace *p, __u32 clamp)
{
	int v = (int)clamp;
	if (bpf_setsockopt(ops, SOL_TCP, TCP_BPF_SNDCWND_CLAMP, &v, sizeof(v))) {
		add(C_FAILED, 1);
		return;
	}
	p->clamp = clamp;
}

static __always_inline void update(struct bpf_sock_ops *ops)
{
	struct bpf_sock *sk = ops->sk;
	if (!sk)
		return;
	__u32 want = wanted(ops);
	struct sock_pace *p = bpf_sk_storage_get(&SOCKS, sk, 0, 0);
	if (!p) {
		if (!want)
			return;
		p = bpf_sk_storage_get(&SOCKS, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
		if (!p)
			return;
		int own = 0;
		if (bpf_getsockopt(ops, SOL_SOCKET, SO_MAX_PACING_RATE, &own, sizeof(own)))
			own = (int)NO_CEILING;
		p->own = (__u32)own;
		p->applied = 0;
		p->clamp = 0;
	}
	if (want) {
		__u32 ceiling = want < p->own ? want : p->own;
		__u32 clamp = clamp_for(ops, ceiling);
		if (!p->clamp || clamp > p->clamp + p->clamp / 4 || clamp < p->clamp - p->clamp / 4)
			set_clamp(ops, p, clamp);
		if (ceiling == p->applied)
			return;
		if (set_rate(ops, ceiling))
			return;
		if (!p->applied)
			add(C_SLOWED, 1);
		p->applied = ceiling;
		add(C_APPLIED, 1);
	} else if (p->applied) {
		if (set_rate(ops, p->own))
			return;
		if (p->clamp)
			set_clamp(ops, p, NO_CLAMP);
		p->clamp = 0;
		p->applied = 0;
		add(C_SLOWED, -1);
		add(C_RESTORED, 1);
	}
}

SEC("sockops")
int pace(struct bpf_sock_ops *ops)
{
	switch (ops->op) {
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		bpf_sock_ops_cb_flags_set(ops, ops->bpf_sock_ops_cb_flags | BPF_SOCK_OPS_RTT_CB_FLAG |
						       BPF_SOCK_OPS_STATE_CB_FLAG);
		update(ops);
		break;
	case BPF_SOCK_OPS_RTT_CB:
		update(ops);
		break;
	case BPF_SOCK_OPS_STATE_CB:
		if (ops->args[1] == BPF_TCP_CLOSE && ops->sk) {
			struct sock_pace *p = bpf_sk_storage_get(&SOCKS, ops->sk, 0, 0);
			if (p && p->applied) {
				p->applied = 0;
				add(C_SLOWED, -1);
				add(C_CLOSED, 1);
			}
		}
		break;
	}
	return 1;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
