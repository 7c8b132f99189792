package findings

import (
	"path/filepath"
	"strings"

	"github.com/holter-dev/holter/internal/symbol"
)

// Wait is what a blocked thread waited for, read from where it slept: its
// kernel stack, and for a futex its user stack.
type Wait string

const (
	// WaitIdle is waiting for work: a poll, select or epoll, a timer, a
	// child, a condition variable, a kernel thread's work queue, a pipe
	// or a local socket's next message, an accept. Normal.
	WaitIdle Wait = "idle"
	// WaitDisk is a read, a write or a flush waiting for a block device.
	WaitDisk Wait = "disk"
	// WaitSocket is a network socket waiting for its peer: data to
	// receive, room to send, a connection to complete.
	WaitSocket Wait = "socket"
	// WaitLock is a lock held by another thread: a kernel mutex or
	// semaphore, or a futex under a user-space mutex.
	WaitLock Wait = "lock"
	// WaitMemory is reclaiming memory to allocate.
	WaitMemory Wait = "memory"
	// WaitOther is anything else.
	WaitOther Wait = "other"
)

// Resource names the resource a wait is for, as incidents say it.
func (w Wait) Resource() string {
	switch w {
	case WaitDisk:
		return "disk"
	case WaitSocket:
		return "network peer"
	case WaitLock:
		return "lock"
	case WaitMemory:
		return "memory"
	}
	return string(w)
}

// The kernel functions that say what a thread waited for, checked from the
// innermost frame out: the first one of any list decides.
var (
	diskWaits = set("io_schedule", "io_schedule_timeout", "folio_wait_bit_common", "folio_wait_bit", "folio_wait_writeback",
		"__folio_lock", "__folio_lock_killable", "submit_bio_wait", "blk_mq_get_tag", "__iomap_dio_rw", "iomap_dio_rw",
		"blkdev_issue_flush", "jbd2_log_wait_commit", "__wait_on_buffer", "bit_wait_io", "__filemap_fdatawait_range",
		"file_write_and_wait_range", "balance_dirty_pages", "blk_wait_io", "wait_on_page_writeback", "__blkdev_direct_IO",
		"__blkdev_direct_IO_simple", "blkdev_direct_IO", "ext4_sync_file", "xfs_file_fsync", "do_fsync", "filemap_read_folio")
	memoryWaits = set("__alloc_pages_slowpath", "try_to_free_pages", "throttle_direct_reclaim", "mem_cgroup_handle_over_high",
		"__perform_reclaim", "out_of_memory", "reclaim_throttle", "try_to_free_mem_cgroup_pages", "__alloc_pages_direct_compact")
	kernelLockWaits = set("rwsem_down_read_slowpath", "rwsem_down_write_slowpath", "__mutex_lock", "mutex_lock_killable",
		"mutex_lock_interruptible", "__rt_mutex_slowlock_locked", "rt_mutex_slowlock", "percpu_rwsem_wait", "__down_common",
		"__percpu_down_read")
	socketWaits = set("sk_wait_data", "sk_stream_wait_memory", "sk_stream_wait_connect", "inet_wait_for_connect",
		"__skb_wait_for_more_packets", "tcp_recvmsg_locked", "udp_recvmsg", "wait_for_tcp_memory", "sock_wait_for_wmem",
		"__inet_stream_connect")
	// Local sockets and pipes carry messages between a process and its
	// neighbours, most of whom wait on them for work; accept waits for a
	// client.
	idleWaits = set("do_epoll_wait", "ep_poll", "do_select", "do_sys_poll", "poll_schedule_timeout", "do_nanosleep",
		"hrtimer_nanosleep", "do_wait", "kernel_wait4", "do_sigtimedwait", "sigsuspend", "__x64_sys_pause", "sys_pause",
		"unix_stream_read_generic", "__unix_dgram_recvmsg", "unix_wait_for_peer", "anon_pipe_read", "pipe_read", "pipe_write",
		"anon_pipe_write", "inet_csk_accept", "inet_csk_wait_for_connect", "worker_thread", "smpboot_thread_fn",
		"kthread_worker_fn", "rescuer_thread", "io_cqring_wait", "inotify_read", "wait_woken_select", "n_tty_read",
		"fanotify_read", "signalfd_dequeue", "eventfd_read", "timerfd_read", "do_idle", "rcu_gp_kthread", "rcu_gp_fqs_loop",
		"kswapd", "kcompactd", "khugepaged")
	// User-space functions that wait on a futex for a lock (glibc's and
	// the C++ and Rust runtimes' mutexes); any other futex wait (a
	// condition variable, a thread pool's parked worker, a Go runtime
	// thread) is waiting for work.
	userLockWaits = set("__lll_lock_wait", "__GI___lll_lock_wait", "__lll_lock_wait_private", "pthread_mutex_lock",
		"__pthread_mutex_lock", "___pthread_mutex_lock", "__pthread_mutex_lock_full", "pthread_rwlock_rdlock",
		"pthread_rwlock_wrlock", "__pthread_rwlock_rdlock", "__pthread_rwlock_wrlock", "___pthread_rwlock_rdlock",
		"___pthread_rwlock_wrlock", "__pthread_rwlock_rdlock_full64", "__pthread_rwlock_wrlock_full64",
		"pthread_mutex_timedlock", "__pthread_mutex_clocklock_common", "std::sys::sync::mutex::futex::Mutex::lock_contended")
	futexWaits = set("futex_wait", "__futex_wait", "futex_wait_queue", "futex_do_wait")
)

func set(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// baseName is a symbol without the compiler's clone suffixes
// ("poll_schedule_timeout.constprop.0") and symbol version
// ("clock_nanosleep@@GLIBC_2.17").
func baseName(frame string) string {
	if i := strings.IndexAny(frame, ".@"); i > 0 {
		return frame[:i]
	}
	return frame
}

// ClassifyWait says what a thread blocked with these stacks waited for.
// A kernel thread's wait (its stack ends in kthread, and it has no user
// stack) is its work queue unless it waits for the disk or memory.
func ClassifyWait(kernel, user *Stack) Wait {
	var kf []string
	if kernel != nil {
		kf = kernel.Frames
	}
	// Reclaim that waits for the disk is waiting for memory.
	for _, f := range kf {
		if memoryWaits[baseName(f)] {
			return WaitMemory
		}
	}
	futex := false
	for _, f := range kf {
		b := baseName(f)
		switch {
		case diskWaits[b]:
			return WaitDisk
		case kernelLockWaits[b]:
			return WaitLock
		case socketWaits[b]:
			return WaitSocket
		case idleWaits[b]:
			return WaitIdle
		case futexWaits[b]:
			futex = true
		}
	}
	if futex {
		if user != nil {
			for _, f := range user.Frames {
				if userLockWaits[baseName(f)] {
					return WaitLock
				}
			}
		}
		return WaitIdle
	}
	for _, f := range kf {
		if b := baseName(f); b == "kthread" || b == "ret_from_fork_asm" {
			return WaitIdle
		}
	}
	return WaitOther
}

// WaitsForWork says whether a thread blocked with this kernel stack waits
// for work (WaitIdle), from the kernel stack alone: a futex wait, whose
// user stack tells a lock from a parked worker, is not said to.
func WaitsForWork(kernel *Stack) bool {
	if kernel == nil {
		return false
	}
	for _, f := range kernel.Frames {
		if futexWaits[baseName(f)] {
			return false
		}
	}
	return ClassifyWait(kernel, nil) == WaitIdle
}

// workCalls are the system calls (x86-64 numbers) that wait for work:
// a sleep, a poll, a child, a signal, a client to accept, events.
var workCalls = map[int]bool{7: true, 23: true, 34: true, 35: true, 43: true, 61: true, 128: true, 130: true, 208: true,
	230: true, 232: true, 247: true, 270: true, 271: true, 281: true, 288: true, 441: true}

// CallWaitsForWork says whether a system call, by its number, waits for
// work (poll, select, pause, nanosleep, accept, wait4, rt_sigtimedwait,
// rt_sigsuspend, io_getevents, clock_nanosleep, epoll_wait, waitid,
// pselect6, ppoll, epoll_pwait, accept4, epoll_pwait2): however long it
// took, its time is not a cost.
func CallWaitsForWork(nr int) bool { return workCalls[nr] }

// Memory is what a page allocation was for, read from its kernel stack.
type Memory string

const (
	// MemoryUser is a page a process touched for the first time (an
	// anonymous page, a copy on write).
	MemoryUser Memory = "user"
	// MemoryCache is the page cache, which the kernel reclaims when it
	// must.
	MemoryCache Memory = "page cache"
	// MemoryKernel is what the kernel keeps on a process's behalf:
	// socket and pipe buffers, slabs, tmpfs files, page tables.
	MemoryKernel Memory = "kernel"
)

var (
	faultFrames = set("do_anonymous_page", "do_huge_pmd_anonymous_page", "do_wp_page", "wp_page_copy", "do_cow_fault",
		"__do_huge_pmd_anonymous_page", "do_swap_page", "handle_mm_fault", "__handle_mm_fault")
	cacheFrames = set("filemap_add_folio", "__filemap_get_folio", "page_cache_ra_unbounded", "page_cache_ra_order",
		"filemap_alloc_folio", "filemap_fault", "filemap_read", "grab_cache_page_write_begin", "ext4_da_write_begin",
		"ext4_write_begin", "generic_perform_write", "iomap_write_begin", "__getblk_slow", "bdev_getblk", "filemap_get_pages")
)

// ClassifyAllocation says what a page allocation with this kernel stack
// was for. Frames are read from the innermost out, so a page-cache fill
// under a page fault (a file mapping) is page cache and a slab grown under
// one is kernel memory.
func ClassifyAllocation(kernel *Stack) Memory {
	if kernel == nil {
		return MemoryKernel
	}
	for _, f := range kernel.Frames {
		b := baseName(f)
		switch {
		case cacheFrames[b]:
			return MemoryCache
		case b == "allocate_slab" || b == "___slab_alloc" || b == "pte_alloc_one" || b == "__pte_alloc":
			return MemoryKernel
		case faultFrames[b]:
			return MemoryUser
		}
	}
	return MemoryKernel
}

// OwnFunction is the function of a process's own code a user stack is in:
// the innermost frame in the process's executable, else the innermost
// named frame outside the C library and the dynamic loader, else the
// innermost named one; "" when no frame has a name. Frame-pointer unwinding
// loses the caller of a library function that keeps no frame pointer, so
// the function found may be that caller's caller; the recorder puts the
// caller back for a system call's wrapper (internal/recorder's
// wrapperCaller), not for other library functions.
func OwnFunction(st *Stack, exe string) string {
	if st == nil {
		return ""
	}
	named := symbol.Named
	base := filepath.Base(exe)
	for i, f := range st.Frames {
		if i < len(st.Modules) && exe != "" && (st.Modules[i] == exe || filepath.Base(st.Modules[i]) == base) && named(f) {
			return f
		}
	}
	for i, f := range st.Frames {
		if named(f) && (i >= len(st.Modules) || !systemLibrary(st.Modules[i])) {
			return f
		}
	}
	for _, f := range st.Frames {
		if named(f) {
			return f
		}
	}
	return ""
}

// systemLibrary: the C library, its threads and the dynamic loader, whose
// functions are where a program calls the system rather than what it does.
func systemLibrary(module string) bool {
	b := filepath.Base(module)
	for _, p := range []string{"libc.so", "libc-", "ld-linux", "libpthread", "linux-vdso", "[vdso]", "libm.so"} {
		if strings.HasPrefix(b, p) {
			return true
		}
	}
	return false
}

// TopFrames is up to n named frames of a stack, innermost first.
func TopFrames(st *Stack, n int) []string {
	if st == nil {
		return nil
	}
	var out []string
	for _, f := range st.Frames {
		if len(out) == n {
			break
		}
		out = append(out, f)
	}
	return out
}
