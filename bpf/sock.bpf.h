/* SPDX-License-Identifier: GPL-2.0 */
/*
 * sock — socket traffic (Chopstix §4.2): sock:sock_send_length and
 * sock_recv_length, which fire for every socket's sendmsg/recvmsg with the
 * bytes moved. Label: the user-space call site (stable_addr: the same in
 * every run of the program) and the direction. Weight: bytes sent or
 * received (received bytes also go to vitals.secondary).
 *
 * Fields: f[0] 0 send / 1 receive, f[1] family, f[2] protocol, f[3] peer
 * IPv4 address or the first half of the IPv6 one, f[4] second half of
 * the IPv6 address, f[5] peer port, f[6] local port, f[7] bytes.
 */
static __always_inline void sock_event(void *ctx, struct sock *sk, int ret, __u64 dir)
{
	struct hl_control *ctl = get_control();
	struct task_struct *task;
	struct mm_struct *mm;
	struct hl_sample *s;
	struct hl_stats *st;
	struct hot_slot *h;
	struct verdict v;
	__u64 proc, site;
	__u16 family;

	if (!record_current(ctl, VITAL_SOCK) || ret <= 0 || !sk)
		return;
	st = run_stats(ctl, VITAL_SOCK);
	if (!st)
		return;
	if (dir)
		st->secondary += ret;
	task = bpf_get_current_task_btf();
	mm = task->mm;
	proc = proc_key(mm);
	site = user_site(task);
	if (count_event(st, &h, proc, site, dir, ret))
		return;
	s = current_event(ctx, ctl, VITAL_SOCK, st, h, proc, site, dir,
			  stable_addr(mm, site), dir, current_who(task), ret, &v);
	if (!s)
		return;
	family = sk->__sk_common.skc_family;
	s->f[0] = dir;
	s->f[1] = family;
	s->f[2] = sk->sk_protocol;
	if (family == 10 /* AF_INET6 */) {
		s->f[3] = *(__u64 *)&sk->__sk_common.skc_v6_daddr.in6_u.u6_addr8[0];
		s->f[4] = *(__u64 *)&sk->__sk_common.skc_v6_daddr.in6_u.u6_addr8[8];
	} else {
		s->f[3] = sk->__sk_common.skc_daddr;
	}
	s->f[5] = bpf_ntohs(sk->__sk_common.skc_dport);
	s->f[6] = sk->__sk_common.skc_num;
	s->f[7] = ret;
	sample_submit(s, VITAL_SOCK, &v);
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(vital_sock_send, struct sock *sk, int ret, int flags)
{
	sock_event(ctx, sk, ret, 0);
	return 0;
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(vital_sock_recv, struct sock *sk, int ret, int flags)
{
	sock_event(ctx, sk, ret, 1);
	return 0;
}
