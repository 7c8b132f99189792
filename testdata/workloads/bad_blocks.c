/* Rule #3 workload: O_DIRECT writes to a block device whose blocks beyond
 * its first MiB cannot be written (the test backs a loop device with a
 * sparse file on a 1 MiB tmpfs, so the loop driver's writes fail with
 * ENOSPC): each request completes with an error status. Errors are
 * expected and counted, not fatal. Arguments: device, seconds. */
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

__attribute__((noinline)) int holter_write_bad(int fd, void *buf, off_t off)
{
	return pwrite(fd, buf, BLOCK, off) == BLOCK ? 0 : -1;
}

int main(int argc, char **argv)
{
	void *buf;
	double end;
	long ok = 0, failed = 0;
	off_t off = 4 << 20;
	int fd;

	if (argc < 3) {
		fprintf(stderr, "usage: bad_blocks DEVICE SECONDS\n");
		return 2;
	}
	fd = open(argv[1], O_WRONLY | O_DIRECT);
	if (fd < 0) {
		perror(argv[1]);
		return 1;
	}
	if (posix_memalign(&buf, 4096, BLOCK) != 0)
		return 1;
	memset(buf, 'b', BLOCK);
	end = now() + atof(argv[2]);
	while (now() < end) {
		if (holter_write_bad(fd, buf, off) == 0)
			ok++;
		else
			failed++;
		off += BLOCK;
		if (off >= 32 << 20)
			off = 4 << 20;
		usleep(2000);
	}
	printf("writes: %ld ok, %ld failed\n", ok, failed);
	return 0;
}
