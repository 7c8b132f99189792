/* kmem and umem vital workload: map fresh anonymous memory, touch every
 * page (a user page fault and a kernel page allocation each), unmap. */
#include <stdlib.h>
#include <time.h>
#include <sys/mman.h>

#define SIZE (16 << 20)

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void holter_touch_pages(volatile char *p)
{
	for (long i = 0; i < SIZE; i += 4096)
		p[i] = 1;
}

__attribute__((noinline)) void holter_mem_churn(double seconds)
{
	double end = now() + seconds;
	while (now() < end) {
		char *p = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return;
		holter_touch_pages(p);
		munmap(p, SIZE);
	}
}

int main(int argc, char **argv)
{
	holter_mem_churn(argc > 1 ? atof(argv[1]) : 3);
	return 0;
}
