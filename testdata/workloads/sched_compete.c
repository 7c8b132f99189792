/* sched vital workload: two threads pinned to one CPU, so each waits for
 * the other to be preempted: scheduling delay. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double seconds = 3;
volatile unsigned long sink;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void *holter_sched_compete(void *arg)
{
	double end = now() + seconds;
	(void)arg;
	while (now() < end)
		for (int i = 0; i < 100000; i++)
			sink += i;
	return NULL;
}

int main(int argc, char **argv)
{
	cpu_set_t one;
	pthread_t t[2];

	if (argc > 1)
		seconds = atof(argv[1]);
	CPU_ZERO(&one);
	CPU_SET(0, &one);
	if (sched_setaffinity(0, sizeof(one), &one) != 0) {
		perror("sched_setaffinity");
		return 1;
	}
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, holter_sched_compete, NULL);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	return 0;
}
