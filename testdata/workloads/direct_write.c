/* blio vital workload: O_DIRECT writes, each followed by fdatasync, to a
 * file given on the command line. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BLOCK (64 * 1024)

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) int holter_write_once(int fd, void *buf, off_t off)
{
	if (pwrite(fd, buf, BLOCK, off) != BLOCK)
		return -1;
	return fdatasync(fd);
}

__attribute__((noinline)) int holter_direct_writes(int fd, double seconds)
{
	void *buf;
	double end = now() + seconds;
	off_t off = 0;

	if (posix_memalign(&buf, 4096, BLOCK) != 0)
		return -1;
	memset(buf, 'h', BLOCK);
	while (now() < end) {
		if (holter_write_once(fd, buf, off) != 0)
			return -1;
		off = (off + BLOCK) % (64 * BLOCK);
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: direct_write FILE [SECONDS]\n");
		return 2;
	}
	int fd = open(argv[1], O_WRONLY | O_CREAT | O_DIRECT, 0644);
	if (fd < 0) {
		perror("open");
		return 1;
	}
	if (holter_direct_writes(fd, argc > 2 ? atof(argv[2]) : 3) != 0) {
		perror("write");
		return 1;
	}
	return 0;
}
