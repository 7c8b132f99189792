/* syscall vital workload: a tight loop of getppid(2) calls. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) long holter_syscall_once(void)
{
	return syscall(SYS_getppid);
}

__attribute__((noinline)) void holter_syscall_loop(double seconds)
{
	double end = now() + seconds;
	while (now() < end)
		for (int i = 0; i < 1000; i++)
			holter_syscall_once();
}

int main(int argc, char **argv)
{
	holter_syscall_loop(argc > 1 ? atof(argv[1]) : 3);
	return 0;
}
