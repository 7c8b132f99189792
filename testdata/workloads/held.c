/* Rule #7 workload: a process held from scheduling. The parent makes itself
 * SCHED_IDLE and shares CPU 0 with a child that spins at the normal policy;
 * the parent wakes every millisecond for a moment of work, and each time
 * waits for the CPU behind the spinner: long scheduling delay, little CPU
 * used. Arguments: seconds. */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

volatile unsigned long sink;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void holter_spin(double end)
{
	while (now() < end)
		for (int i = 0; i < 100000; i++)
			sink += i;
}

__attribute__((noinline)) void holter_held(double end)
{
	struct timespec ms = {0, 1000000};

	while (now() < end) {
		nanosleep(&ms, NULL);
		for (int i = 0; i < 1000; i++)
			sink += i;
	}
}

int main(int argc, char **argv)
{
	struct sched_param none = {0};
	double end = now() + (argc > 1 ? atof(argv[1]) : 3);
	cpu_set_t one;
	pid_t hog;

	CPU_ZERO(&one);
	CPU_SET(0, &one);
	if (sched_setaffinity(0, sizeof(one), &one) != 0) {
		perror("sched_setaffinity");
		return 1;
	}
	hog = fork();
	if (hog < 0) {
		perror("fork");
		return 1;
	}
	if (hog == 0) {
		holter_spin(end);
		_exit(0);
	}
	if (sched_setscheduler(0, SCHED_IDLE, &none) != 0) {
		perror("sched_setscheduler");
		kill(hog, SIGKILL);
		return 1;
	}
	holter_held(end);
	waitpid(hog, NULL, 0);
	return 0;
}
