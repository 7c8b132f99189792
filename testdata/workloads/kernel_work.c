/* Rule #4 workload: work the kernel does for user space, on more runnable
 * processes than CPUs. Each of N processes reads /dev/zero into a 64 KiB
 * buffer again and again: nearly all of its CPU time is the kernel
 * clearing memory, and the processes queue for the CPUs. Arguments:
 * processes, seconds. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

static char buf[64 << 10];

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void holter_kernel_work(int fd, double end)
{
	while (now() < end)
		for (int i = 0; i < 100; i++)
			if (read(fd, buf, sizeof(buf)) < 0)
				return;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 4;
	double end = now() + (argc > 2 ? atof(argv[2]) : 3);
	int fd = open("/dev/zero", O_RDONLY);

	if (fd < 0) {
		perror("/dev/zero");
		return 1;
	}
	for (int i = 1; i < n; i++)
		if (fork() == 0) {
			holter_kernel_work(fd, end);
			_exit(0);
		}
	holter_kernel_work(fd, end);
	while (wait(NULL) > 0)
		;
	return 0;
}
