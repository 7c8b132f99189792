// lat: per-operation latencies in the manner of lmbench's lat_syscall,
// lat_select, lat_sig, lat_pipe and lat_proc, for the rows of Chopstix
// Table 1. Written for holter's bench/table1.sh, not copied from lmbench.
//
// usage: lat [SECONDS_PER_ROW]
// Prints one line per row: "name<TAB>microseconds", the median of seven
// timed batches, each batch sized to take about SECONDS_PER_ROW/7.
#define _GNU_SOURCE
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static int devzero, devnull, select_fds[500], nselect;
static const char *statpath;
static char *fault_page;
static long pagesize;
static int ping[2], pong[2];
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

// measure times op and prints the median per-operation latency in µs.
static void measure(const char *name, void (*op)(void), double secs)
{
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
	double per[BATCHES];
	for (int b = 0; b < BATCHES; b++) {
		double t0 = now();
		for (long i = 0; i < batch; i++)
			op();
		per[b] = (now() - t0) / batch * 1e6;
	}
	// insertion sort, take the median
	for (int i = 1; i < BATCHES; i++)
		for (int j = i; j > 0 && per[j] < per[j - 1]; j--) {
			double x = per[j];
			per[j] = per[j - 1], per[j - 1] = x;
		}
	printf("%s\t%.4f\n", name, per[BATCHES / 2]);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 1.0;
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
	pid_t echo = fork();
	if (echo < 0)
		die("fork");
	if (echo == 0) {
		char c;
		close(ping[1]);
		close(pong[0]);
		while (read(ping[0], &c, 1) == 1)
			if (write(pong[1], &c, 1) != 1)
				_exit(1);
		_exit(0);
	}

	measure("getpid", op_getpid, secs);
	measure("read", op_read, secs);
	measure("write", op_write, secs);
	measure("stat", op_stat, secs);
	measure("fstat", op_fstat, secs);
	measure("open/close", op_open_close, secs);
	nselect = 10;
	measure("select (10 fds)", op_select, secs);
	nselect = 500;
	measure("select (500 fds)", op_select, secs);
	measure("signal handler", op_signal, secs);
	measure("protection fault", op_prot_fault, secs);
	measure("pipe latency", op_pipe, secs);
	measure("fork+exit", op_fork_exit, secs);
	measure("fork+execve", op_fork_exec, secs);

	close(ping[1]);
	close(pong[0]);
	waitpid(echo, NULL, 0);
	unlink(tmpl);
	return 0;
}
