package planted

// The C programs, one per class, as text/template sources. Each names its
// culprit function {{.Culprit}} and the small function it calls the system
// through {{.Helper}}; both are marked noinline, as a function a profiler
// is to name must exist in the binary. main takes the seconds to run and
// the class's intensity parameters as arguments.

const prelude = `#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

static volatile unsigned long sink;

__attribute__((noinline)) static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

__attribute__((noinline)) static void pause_for(double s)
{
	struct timespec t;
	if (s <= 0)
		return;
	t.tv_sec = (time_t)s;
	t.tv_nsec = (long)((s - t.tv_sec) * 1e9);
	nanosleep(&t, NULL);
}

static void die(const char *what)
{
	perror(what);
	exit(1);
}
`

// cpuHog: threads spinning in the culprit on arithmetic, for duty of every
// 100 ms. Arguments: seconds, threads, duty (0..1].
const cpuHog = prelude + `
static double secs, duty;

__attribute__((noinline)) static void *{{.Culprit}}(void *arg)
{
	unsigned long x = (unsigned long)arg + 1;
	double end = now() + secs;
	while (now() < end) {
		double t0 = now();
		while (now() - t0 < 0.1 * duty)
			for (int i = 0; i < 20000; i++)
				x = x * 6364136223846793005UL + 1442695040888963407UL + (x >> {{.Shift}});
		sink = x;
		pause_for(0.1 * (1 - duty));
	}
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t[16];
	int n = atoi(argv[2]);
	secs = atof(argv[1]);
	duty = atof(argv[3]);
	for (int i = 1; i < n; i++)
		pthread_create(&t[i], NULL, {{.Culprit}}, (void *)(long)i);
	{{.Culprit}}(NULL);
	for (int i = 1; i < n; i++)
		pthread_join(t[i], NULL);
	return 0;
}
`

// userLeak: the culprit allocates chunks of user memory and touches every
// page of them itself (the page faults are its own), and keeps them.
// Arguments: seconds, MiB per second, chunk KiB.
const userLeak = prelude + `
__attribute__((noinline)) static void {{.Culprit}}(double secs, double mibs, long chunk)
{
	double start = now(), end = start + secs;
	long done = 0;
	while (now() < end) {
		char *p = malloc(chunk);
		if (!p)
			die("malloc");
		for (long i = 0; i < chunk; i += 4096)
			p[i] = (char)i;
		done += chunk;
		pause_for(start + done / (mibs * 1048576.0) - now());
	}
}

int main(int argc, char **argv)
{
	{{.Culprit}}(atof(argv[1]), atof(argv[2]), atol(argv[3]) * 1024);
	return 0;
}
`

// kernelLeak: the culprit opens pairs of connected sockets and fills each
// with data nobody reads, kept in kernel buffers, and never closes them.
// Arguments: seconds, MiB per second.
const kernelLeak = prelude + `
__attribute__((noinline)) static ssize_t {{.Helper}}(int fd, const char *buf, size_t n)
{
	return send(fd, buf, n, MSG_DONTWAIT);
}

__attribute__((noinline)) static void {{.Culprit}}(double secs, double mibs)
{
	static char page[4096];
	double start = now(), end = start + secs;
	long done = 0;
	memset(page, 'x', sizeof page);
	while (now() < end) {
		int p[2];
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, p) != 0)
			die("socketpair");
		while ({{.Helper}}(p[0], page, sizeof page) > 0)
			done += sizeof page;
		pause_for(start + done / (mibs * 1048576.0) - now());
	}
}

int main(int argc, char **argv)
{
	{{.Culprit}}(atof(argv[1]), atof(argv[2]));
	return 0;
}
`

// lockStorm: threads taking turns at one mutex, each holding it for a
// stretch of work, so the others wait for it in the kernel. Arguments:
// seconds, threads, µs held, µs between.
const lockStorm = prelude + `
static pthread_mutex_t shared = PTHREAD_MUTEX_INITIALIZER;
static double secs, held, between;

__attribute__((noinline)) static void {{.Helper}}(void)
{
	pthread_mutex_lock(&shared);
}

__attribute__((noinline)) static void spin(double s)
{
	double t0 = now();
	while (now() - t0 < s)
		sink++;
}

__attribute__((noinline)) static void *{{.Culprit}}(void *arg)
{
	double end = now() + secs;
	(void)arg;
	while (now() < end) {
		{{.Helper}}();
		spin(held);
		pthread_mutex_unlock(&shared);
		spin(between);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t[64];
	int n = atoi(argv[2]);
	secs = atof(argv[1]);
	held = atof(argv[3]) / 1e6;
	between = atof(argv[4]) / 1e6;
	for (int i = 0; i < n; i++)
		pthread_create(&t[i], NULL, {{.Culprit}}, NULL);
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	return 0;
}
`

// starvation: a latency-sensitive thread (wakes every period for a moment
// of work) in one process, and in a child of it, threads that keep every
// CPU busy in the culprit. The child runs at a higher priority (nice
// below the parent's), as a batch job started by root may. Arguments:
// seconds, hog threads, period µs, nice difference.
const starvation = prelude + `
static double secs;

__attribute__((noinline)) static void *{{.Culprit}}(void *arg)
{
	unsigned long x = (unsigned long)arg + 7;
	double end = now() + secs;
	while (now() < end)
		for (int i = 0; i < 20000; i++)
			x = x * 2862933555777941757UL + 3037000493UL + (x >> {{.Shift}});
	sink = x;
	return NULL;
}

__attribute__((noinline)) static void {{.Helper}}(double period)
{
	double end = now() + secs;
	while (now() < end) {
		pause_for(period);
		for (int i = 0; i < 2000; i++)
			sink += i;
	}
}

int main(int argc, char **argv)
{
	int n = atoi(argv[2]);
	pid_t hog;
	secs = atof(argv[1]);
	hog = fork();
	if (hog < 0)
		die("fork");
	if (hog == 0) {
		pthread_t t[64];
		if (setpriority(PRIO_PROCESS, 0, -atoi(argv[4])) != 0)
			die("setpriority");
		for (int i = 1; i < n; i++)
			pthread_create(&t[i], NULL, {{.Culprit}}, (void *)(long)i);
		{{.Culprit}}(NULL);
		for (int i = 1; i < n; i++)
			pthread_join(t[i], NULL);
		_exit(0);
	}
	{{.Helper}}(atof(argv[3]) / 1e6);
	waitpid(hog, NULL, 0);
	return 0;
}
`

// failingSyscall: the culprit retries a system call that fails every time
// (kind 0: connect to a closed port; 1: open a file that is not there;
// 2: read from a closed descriptor), with a pause between tries.
// Arguments: seconds, kind, µs between tries.
const failingSyscall = prelude + `
static struct sockaddr_in closed;

__attribute__((noinline)) static long {{.Helper}}(int kind, int fd)
{
	char buf[64];
	switch (kind) {
	case 0:
		return connect(fd, (struct sockaddr *)&closed, sizeof closed);
	case 1:
		return open("/nonexistent/{{.Culprit}}.conf", O_RDONLY);
	default:
		return read(fd, buf, sizeof buf);
	}
}

__attribute__((noinline)) static void {{.Culprit}}(double secs, int kind, double gap)
{
	double end = now() + secs;
	int fd = -1;
	long fails = 0;
	closed.sin_family = AF_INET;
	closed.sin_port = htons(1);
	closed.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	while (now() < end) {
		if (kind == 0 && fd < 0)
			fd = socket(AF_INET, SOCK_STREAM, 0);
		if ({{.Helper}}(kind, kind == 2 ? 999 : fd) < 0) {
			fails++;
			if (kind == 0 && errno != ECONNREFUSED) {
				close(fd);
				fd = -1;
			}
		}
		pause_for(gap);
	}
	sink = fails;
}

int main(int argc, char **argv)
{
	{{.Culprit}}(atof(argv[1]), atoi(argv[2]), atof(argv[3]) / 1e6);
	return 0;
}
`

// diskStall: the culprit writes blocks to a file with O_DIRECT, each
// followed by fdatasync, so every write waits for the device (run it on a
// slow or throttled one). Arguments: seconds, file, KiB per write.
const diskStall = prelude + `
__attribute__((noinline)) static ssize_t {{.Helper}}(int fd, void *buf, size_t n, off_t off)
{
	ssize_t w = pwrite(fd, buf, n, off);
	fdatasync(fd);
	return w;
}

__attribute__((noinline)) static void {{.Culprit}}(double secs, const char *path, size_t size)
{
	double end = now() + secs;
	void *buf;
	off_t off = 0;
	int fd = open(path, O_WRONLY | O_CREAT | O_DIRECT, 0600);
	if (fd < 0)
		die(path);
	if (posix_memalign(&buf, 4096, size) != 0)
		die("posix_memalign");
	memset(buf, 'd', size);
	while (now() < end) {
		if ({{.Helper}}(fd, buf, size, off) < 0)
			die("pwrite");
		off = (off + size) % (64 << 20);
	}
	close(fd);
	unlink(path);
}

int main(int argc, char **argv)
{
	{{.Culprit}}(atof(argv[1]), argv[2], atol(argv[3]) * 1024);
	return 0;
}
`

// slowPeer: a child serves requests on a loopback TCP port, each after a
// delay; the culprit sends a request and waits for the answer, again and
// again. Arguments: seconds, ms the peer takes per answer.
const slowPeer = prelude + `
__attribute__((noinline)) static ssize_t {{.Helper}}(int fd, char *buf, size_t n)
{
	return recv(fd, buf, n, 0);
}

static void peer(int l, double delay)
{
	char buf[256];
	for (;;) {
		int c = accept(l, NULL, NULL);
		if (c < 0)
			die("accept");
		while (read(c, buf, sizeof buf) > 0) {
			pause_for(delay);
			if (write(c, "answer\n", 7) != 7)
				break;
		}
		close(c);
	}
}

__attribute__((noinline)) static void {{.Culprit}}(double secs, struct sockaddr_in *at)
{
	double end = now() + secs;
	char buf[256];
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(fd, (struct sockaddr *)at, sizeof *at) != 0)
		die("connect");
	while (now() < end) {
		if (write(fd, "question\n", 9) != 9)
			die("write");
		if ({{.Helper}}(fd, buf, sizeof buf) <= 0)
			die("recv");
	}
	close(fd);
}

int main(int argc, char **argv)
{
	struct sockaddr_in at = {.sin_family = AF_INET};
	socklen_t len = sizeof at;
	pid_t child;
	int l = socket(AF_INET, SOCK_STREAM, 0);
	at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(l, (struct sockaddr *)&at, sizeof at) != 0 || listen(l, 4) != 0 ||
	    getsockname(l, (struct sockaddr *)&at, &len) != 0)
		die("listen");
	child = fork();
	if (child < 0)
		die("fork");
	if (child == 0)
		peer(l, atof(argv[2]) / 1e3);
	close(l);
	{{.Culprit}}(atof(argv[1]), &at);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	return 0;
}
`

// signalStorm: the culprit sends signals to a child that handles them, as
// fast as it can in bursts of burst, with a pause between bursts.
// Arguments: seconds, signal, burst, µs between bursts.
const signalStorm = prelude + `
static volatile sig_atomic_t got;

static void handler(int sig)
{
	(void)sig;
	got++;
}

__attribute__((noinline)) static int {{.Helper}}(pid_t pid, int sig)
{
	return kill(pid, sig);
}

__attribute__((noinline)) static void {{.Culprit}}(double secs, pid_t target, int sig, int burst, double gap)
{
	double end = now() + secs;
	while (now() < end) {
		for (int i = 0; i < burst; i++)
			if ({{.Helper}}(target, sig) != 0)
				die("kill");
		pause_for(gap);
	}
}

int main(int argc, char **argv)
{
	int sig = atoi(argv[2]);
	struct sigaction sa = {.sa_handler = handler, .sa_flags = SA_RESTART};
	pid_t child;
	sigaction(sig, &sa, NULL);
	child = fork();
	if (child < 0)
		die("fork");
	if (child == 0)
		for (;;)
			pause();
	{{.Culprit}}(atof(argv[1]), child, sig, atoi(argv[3]), atof(argv[4]) / 1e6);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	return 0;
}
`
