/* Rule #6 workload: a process paging its data in from disk, the signature
 * of swapping (user page faults, blocked, block I/O) without needing swap
 * configured. A private, MADV_RANDOM mapping of a file whose page cache is
 * dropped before each pass: every write fault reads one page from the disk
 * (no readahead) and blocks for it. Four threads fault at once, each in its
 * quarter of the mapping, as a process short of memory does. Arguments:
 * file (created, 32 MiB), seconds. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>

#define SIZE (32 << 20)

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

#define THREADS 4

static double end;

/* A stride over the pages of one quarter, so that neighbouring pages are
 * not read one after another. */
__attribute__((noinline)) void *holter_page_in(void *arg)
{
	volatile char *p = arg;

	for (long start = 0; start < 64 && now() < end; start++)
		for (long i = start * 4096; i < SIZE / THREADS; i += 64 * 4096)
			p[i]++;
	return NULL;
}

int main(int argc, char **argv)
{
	static char buf[1 << 20];
	pthread_t t[THREADS];
	int fd;

	if (argc < 3) {
		fprintf(stderr, "usage: page_in FILE SECONDS\n");
		return 2;
	}
	fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0) {
		perror(argv[1]);
		return 1;
	}
	memset(buf, 'p', sizeof(buf));
	for (int i = 0; i < SIZE / (int)sizeof(buf); i++)
		if (write(fd, buf, sizeof(buf)) != sizeof(buf)) {
			perror("write");
			return 1;
		}
	fsync(fd);
	end = now() + atof(argv[2]);
	while (now() < end) {
		char *p;

		posix_fadvise(fd, 0, SIZE, POSIX_FADV_DONTNEED);
		p = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
		if (p == MAP_FAILED) {
			perror("mmap");
			return 1;
		}
		madvise(p, SIZE, MADV_RANDOM);
		for (int k = 0; k < THREADS; k++)
			pthread_create(&t[k], NULL, holter_page_in, p + (long)k * (SIZE / THREADS));
		for (int k = 0; k < THREADS; k++)
			pthread_join(t[k], NULL);
		munmap(p, SIZE);
	}
	return 0;
}
