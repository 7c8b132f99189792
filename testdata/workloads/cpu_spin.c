/* cpu vital workload: one thread spinning in a function of its own. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

volatile unsigned long sink;

__attribute__((noinline)) void holter_cpu_spin(double seconds)
{
	double end = now() + seconds;
	while (now() < end)
		for (int i = 0; i < 100000; i++)
			sink += i * i;
}

int main(int argc, char **argv)
{
	holter_cpu_spin(argc > 1 ? atof(argv[1]) : 3);
	return 0;
}
