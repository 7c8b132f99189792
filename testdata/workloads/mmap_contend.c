/* lock vital workload: threads mapping and unmapping memory at once,
 * contending on the process's mmap lock (a kernel rwsem). */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <sys/mman.h>

#define THREADS 8
static double seconds = 3;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void holter_map_unmap(void)
{
	char *p = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return;
	for (int i = 0; i < (1 << 20); i += 4096)
		p[i] = 1;
	munmap(p, 1 << 20);
}

__attribute__((noinline)) void *holter_mmap_contend(void *arg)
{
	double end = now() + seconds;
	(void)arg;
	while (now() < end)
		holter_map_unmap();
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t[THREADS];

	if (argc > 1)
		seconds = atof(argv[1]);
	for (int i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, holter_mmap_contend, NULL);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	return 0;
}
