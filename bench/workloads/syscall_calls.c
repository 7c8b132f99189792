/* holter trace benchmark workload: N system calls in a tight loop, then
 * prints the mean ns per call, of the thread's CPU time (which includes
 * the probes run in the system call, and not the time other processes
 * had the CPU: the machine may be shared). Mode "getpid" calls getpid(2); "getpriority"
 * calls getpriority(PRIO_PROCESS, i % 1000), whose second argument the
 * histogram query buckets. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	long n = argc > 2 ? atol(argv[2]) : 2000000;
	int prio = argc > 1 && strcmp(argv[1], "getpriority") == 0;
	struct timespec a, b;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
	for (long i = 0; i < n; i++)
		if (prio)
			syscall(SYS_getpriority, 0, 0, i % 1000);
		else
			syscall(SYS_getpid);
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
	printf("%.1f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
	return 0;
}
