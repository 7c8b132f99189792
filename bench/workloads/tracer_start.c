/* holter trace benchmark helper: when a tracer's probes are attached, and
 * its peak RSS, measured the same way for any tracer.
 *
 *   tracer_start run HOLD CMD ARGS...  runs CMD (its output discarded); prints the ms from just
 *       before its exec to its first attached probe, then SIGINTs it HOLD
 *       seconds later and prints its peak RSS in KB once it ended:
 *       "ATTACH_MS MAXRSS_KB".
 *   tracer_start exit CMD ARGS...      runs CMD to its end; prints the ms
 *       it took and its peak RSS: "EXIT_MS MAXRSS_KB" (a floor: the cost
 *       of starting the binary at all).
 *   tracer_start wait PID              returns once process PID has a
 *       probe attached (exit 1 after 30 s).
 *
 * A probe is attached when the process holds a perf event with a BPF
 * program on it, which BPF_TASK_FD_QUERY reports (what bpftool perf
 * lists); the file descriptors are polled every 100 us. */
#define _GNU_SOURCE
#include <dirent.h>
#include <linux/bpf.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* attached says whether process pid holds a perf event with a BPF program. */
static int attached(pid_t pid)
{
	char dir[64], path[384], link[64];
	snprintf(dir, sizeof dir, "/proc/%d/fd", pid);
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	int found = 0;
	struct dirent *e;
	while (!found && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		ssize_t n = readlink(path, link, sizeof link - 1);
		if (n <= 0)
			continue;
		link[n] = 0;
		if (strcmp(link, "anon_inode:[perf_event]") != 0)
			continue;
		union bpf_attr a;
		memset(&a, 0, sizeof a);
		a.task_fd_query.pid = pid;
		a.task_fd_query.fd = atoi(e->d_name);
		found = syscall(SYS_bpf, BPF_TASK_FD_QUERY, &a, sizeof a) == 0;
	}
	closedir(d);
	return found;
}

static int wait_attached(pid_t pid, double limit_ms)
{
	struct timespec poll = {0, 100000};
	double start = now_ms();
	while (!attached(pid)) {
		if (now_ms() - start > limit_ms || waitpid(pid, NULL, WNOHANG) == pid)
			return 0;
		nanosleep(&poll, NULL);
	}
	return 1;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "wait") == 0)
		return wait_attached(atoi(argv[2]), 30000) ? 0 : 1;
	int run = argc >= 4 && strcmp(argv[1], "run") == 0;
	int ex = argc >= 3 && strcmp(argv[1], "exit") == 0;
	if (!run && !ex) {
		fprintf(stderr, "usage: tracer_start run HOLD CMD ARGS... | exit CMD ARGS... | wait PID\n");
		return 2;
	}
	char **cmd = argv + (run ? 3 : 2);
	double t0 = now_ms();
	pid_t pid = fork();
	if (pid == 0) {
		/* The tracer's output is not ours to print. */
		freopen("/dev/null", "w", stdout);
		freopen("/dev/null", "w", stderr);
		execvp(cmd[0], cmd);
		perror(cmd[0]);
		_exit(127);
	}
	double ms = -1;
	if (run) {
		if (wait_attached(pid, 30000))
			ms = now_ms() - t0;
		struct timespec hold = {atoi(argv[2]), 0};
		nanosleep(&hold, NULL);
	}
	/* bpftrace 0.17 on a loaded machine sometimes misses a SIGINT that
	 * comes soon after it attached: ask again every 3 s. */
	int status;
	struct rusage ru;
	struct timespec tick = {0, 10000000};
	for (int i = 0;; i++) {
		if (run && i % 300 == 0)
			kill(pid, SIGINT);
		pid_t w = wait4(pid, &status, WNOHANG, &ru);
		if (w == pid)
			break;
		if (w < 0) {
			perror("wait4");
			return 1;
		}
		nanosleep(&tick, NULL);
	}
	if (ex)
		ms = now_ms() - t0;
	printf("%.2f %ld\n", ms, ru.ru_maxrss);
	return ms < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}
