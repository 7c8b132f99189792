// lat: per-operation latencies in the manner of lmbench's lat_syscall,
// lat_select, lat_sig, lat_pipe and lat_proc, for the rows of Chopstix
// Table 1. Written for holter's bench/table1.sh, not copied from lmbench.
//
// usage: lat [SECONDS_PER_ROW [WARMUP_SECONDS [ROW...]]]
//        lat storm SECONDS ROW
// Each row's operation runs WARMUP_SECONDS (default 2) untimed, so that a
// monitor which adapts within that time is measured adapted, then is timed.
// Prints one line per row: "name<TAB>wall µs<TAB>CPU µs", the medians over
// seven timed batches, each batch sized to take about SECONDS_PER_ROW/7, of
// the elapsed time per operation and of the CPU time it used: this
// process's, its echo processes' and its reaped children's (forks). On a
// quiet machine the two agree but for the time a row waits across CPUs;
// on a loaded one the elapsed time includes other processes' turns, and
// the CPU time does not. ROWs (names, as printed) pick the rows; all by
// default.
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BATCHES 7

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static clockid_t echo_clocks[2];
static int nechoes;

// cpu_time is the CPU time used so far by this process, its echo processes
// and its reaped children, in seconds.
static double cpu_time(void)
{
	struct timespec ts;
	struct rusage ru;
	double t = 0;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	t += ts.tv_sec + ts.tv_nsec * 1e-9;
	for (int i = 0; i < nechoes; i++)
		if (!clock_gettime(echo_clocks[i], &ts))
			t += ts.tv_sec + ts.tv_nsec * 1e-9;
	getrusage(RUSAGE_CHILDREN, &ru);
	t += ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
	return t;
}

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static int devzero, devnull, select_fds[500], nselect;
static const char *statpath;
static char *fault_page;
static long pagesize;
static int ping[2], pong[2];     /* to the echo process on any CPU */
static int cping[2], cpong[2];   /* to the echo process sharing our CPU */
static volatile sig_atomic_t caught;

static void on_usr1(int sig)
{
	(void)sig;
	caught++;
}

static void on_segv(int sig, siginfo_t *si, void *uc)
{
	(void)sig, (void)si, (void)uc;
	// let the faulting write succeed when the handler returns
	if (mprotect(fault_page, pagesize, PROT_READ | PROT_WRITE))
		_exit(3);
}

static void op_getpid(void) { syscall(SYS_getpid); }

static void op_read(void)
{
	char c;
	if (read(devzero, &c, 1) != 1)
		die("read");
}

static void op_write(void)
{
	char c = 0;
	if (write(devnull, &c, 1) != 1)
		die("write");
}

static void op_stat(void)
{
	struct stat st;
	if (stat(statpath, &st))
		die("stat");
}

static void op_fstat(void)
{
	struct stat st;
	if (fstat(devnull, &st))
		die("fstat");
}

static void op_open_close(void)
{
	int fd = open(statpath, O_RDONLY);
	if (fd < 0)
		die("open");
	close(fd);
}

static void op_select(void)
{
	fd_set r;
	FD_ZERO(&r);
	int max = 0;
	for (int i = 0; i < nselect; i++) {
		FD_SET(select_fds[i], &r);
		if (select_fds[i] > max)
			max = select_fds[i];
	}
	struct timeval tv = {0, 0};
	if (select(max + 1, NULL, &r, NULL, &tv) < 0)
		die("select");
}

static void op_signal(void)
{
	kill(getpid(), SIGUSR1);
}

static void op_prot_fault(void)
{
	if (mprotect(fault_page, pagesize, PROT_READ))
		die("mprotect");
	*(volatile char *)fault_page = 1;
}

static void op_pipe(void)
{
	char c = 'x';
	if (write(ping[1], &c, 1) != 1 || read(pong[0], &c, 1) != 1)
		die("pipe");
}

#define FAULT_PAGES 64

// op_page_faults maps FAULT_PAGES anonymous pages, touches each (a page
// fault and a page allocation each) and unmaps them.
static void op_page_faults(void)
{
	char *p = mmap(NULL, FAULT_PAGES * pagesize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		die("mmap");
	for (long i = 0; i < FAULT_PAGES; i++)
		p[i * pagesize] = 1;
	munmap(p, FAULT_PAGES * pagesize);
}

// op_ctxsw passes a byte to the echo process pinned to this CPU and back:
// two context switches (lmbench's lat_ctx with two processes, size 0).
static void op_ctxsw(void)
{
	char c = 'x';
	if (write(cping[1], &c, 1) != 1 || read(cpong[0], &c, 1) != 1)
		die("ctxsw pipe");
}

static void op_fork_exit(void)
{
	pid_t p = fork();
	if (p < 0)
		die("fork");
	if (p == 0)
		_exit(0);
	waitpid(p, NULL, 0);
}

static void op_fork_exec(void)
{
	pid_t p = fork();
	if (p < 0)
		die("fork");
	if (p == 0) {
		char *argv[] = {"true", NULL};
		execve("/bin/true", argv, environ);
		_exit(127);
	}
	waitpid(p, NULL, 0);
}

static double warmup = 2;
static char **only;
static int nonly;
static int storm; // only loop the one row's operation, for warmup seconds

// echo answers each byte read on in with one on out, until in closes;
// the child closes other, the parent's ends of another echo's pipes.
static pid_t echo(int in[2], int out[2], int cpu, int other[2])
{
	pid_t p = fork();
	if (p < 0)
		die("fork");
	if (p == 0) {
		char c;
		if (cpu >= 0) {
			cpu_set_t set;
			CPU_ZERO(&set);
			CPU_SET(cpu, &set);
			sched_setaffinity(0, sizeof(set), &set);
		}
		close(in[1]);
		close(out[0]);
		if (other) {
			close(other[0]);
			close(other[1]);
		}
		while (read(in[0], &c, 1) == 1)
			if (write(out[1], &c, 1) != 1)
				_exit(1);
		_exit(0);
	}
	close(in[0]);
	close(out[1]);
	if (clock_getcpuclockid(p, &echo_clocks[nechoes]))
		die("clock_getcpuclockid");
	nechoes++;
	return p;
}

static double median(double *x)
{
	for (int i = 1; i < BATCHES; i++)
		for (int j = i; j > 0 && x[j] < x[j - 1]; j--) {
			double t = x[j];
			x[j] = x[j - 1], x[j - 1] = t;
		}
	return x[BATCHES / 2];
}

// measure times op and prints the median per-operation latency in µs,
// divided by per (the operations one call of op makes).
static void measure(const char *name, void (*op)(void), double secs, int per)
{
	if (nonly) {
		int want = 0;
		for (int i = 0; i < nonly; i++)
			want |= !strcmp(only[i], name);
		if (!want)
			return;
	}
	for (double t0 = now(); now() - t0 < warmup;)
		for (int i = 0; i < 100; i++)
			op();
	if (storm)
		return;
	// size a batch from a short calibration run
	long n = 1;
	double t;
	for (;;) {
		double t0 = now();
		for (long i = 0; i < n; i++)
			op();
		t = now() - t0;
		if (t > 0.01)
			break;
		n *= 4;
	}
	long batch = (long)(n * (secs / BATCHES) / t) + 1;
	double lat[BATCHES], cpu[BATCHES];
	for (int b = 0; b < BATCHES; b++) {
		double t0 = now(), c0 = cpu_time();
		for (long i = 0; i < batch; i++)
			op();
		cpu[b] = (cpu_time() - c0) / batch / per * 1e6;
		lat[b] = (now() - t0) / batch / per * 1e6;
	}
	printf("%s\t%.4f\t%.4f\n", name, median(lat), median(cpu));
	fflush(stdout);
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 1.0;
	if (argc > 2)
		warmup = atof(argv[2]);
	only = argv + 3;
	nonly = argc > 3 ? argc - 3 : 0;
	if (argc == 4 && !strcmp(argv[1], "storm"))
		storm = 1, secs = 0, only = argv + 3, nonly = 1;
	else if (argc > 1 && !strcmp(argv[1], "storm")) {
		fprintf(stderr, "usage: lat storm SECONDS ROW\n");
		return 2;
	}
	char tmpl[] = "/tmp/holter-lat-XXXXXX";
	int tfd = mkstemp(tmpl);
	if (tfd < 0)
		die("mkstemp");
	close(tfd);
	statpath = tmpl;
	if ((devzero = open("/dev/zero", O_RDONLY)) < 0 || (devnull = open("/dev/null", O_WRONLY)) < 0)
		die("open /dev");
	for (int i = 0; i < 500; i++)
		if ((select_fds[i] = open("/dev/null", O_WRONLY)) < 0)
			die("open select fds");

	pagesize = sysconf(_SC_PAGESIZE);
	fault_page = mmap(NULL, pagesize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (fault_page == MAP_FAILED)
		die("mmap");
	struct sigaction sa = {0};
	sa.sa_handler = on_usr1;
	sigaction(SIGUSR1, &sa, NULL);
	struct sigaction sv = {0};
	sv.sa_sigaction = on_segv;
	sv.sa_flags = SA_SIGINFO;
	sigaction(SIGSEGV, &sv, NULL);

	if (pipe(ping) || pipe(pong))
		die("pipe");
	// the context-switch row: this process and its echo share one CPU
	int cpu = sched_getcpu();
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	pid_t echo_any = echo(ping, pong, -1, NULL);
	if (pipe(cping) || pipe(cpong))
		die("pipe");
	pid_t echo_same = echo(cping, cpong, cpu, (int[2]){ping[1], pong[0]});

	measure("getpid", op_getpid, secs, 1);
	measure("read", op_read, secs, 1);
	measure("write", op_write, secs, 1);
	measure("stat", op_stat, secs, 1);
	measure("fstat", op_fstat, secs, 1);
	measure("open/close", op_open_close, secs, 1);
	nselect = 10;
	measure("select (10 fds)", op_select, secs, 1);
	nselect = 500;
	measure("select (500 fds)", op_select, secs, 1);
	measure("signal handler", op_signal, secs, 1);
	measure("protection fault", op_prot_fault, secs, 1);
	measure("page fault", op_page_faults, secs, FAULT_PAGES);
	measure("pipe latency", op_pipe, secs, 1);
	if (sched_setaffinity(0, sizeof(set), &set))
		die("sched_setaffinity");
	measure("context switch", op_ctxsw, secs, 2);
	sched_setaffinity(0, sizeof(cpu_set_t), &(cpu_set_t){{~0UL}});
	measure("fork+exit", op_fork_exit, secs, 1);
	measure("fork+execve", op_fork_exec, secs, 1);

	close(ping[1]);
	close(pong[0]);
	close(cping[1]);
	close(cpong[0]);
	waitpid(echo_any, NULL, 0);
	waitpid(echo_same, NULL, 0);
	unlink(tmpl);
	return 0;
}
