/* holter run workload for the Shen et al. §4 reproduction: reads DEVICE
 * (a block device or file) for SECONDS with THREADS threads, each with its own
 * descriptor so each has its own readahead state. A thread reads 4 KiB blocks
 * RUNLEN at a time in sequence, then seeks to a random block, sleeping
 * THINK_US microseconds between requests. Reads are buffered, so the device's
 * readahead shapes the requests it sees; the device's cached pages are
 * dropped first, and each run's after it, so that the reads reach it. Prints
 * the throughput as "MB/s: N". */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <linux/fs.h>
#include <time.h>
#include <unistd.h>

#define BLOCK 4096

static const char *device;
static double seconds;
static int runlen, think_us;
static uint64_t blocks;

struct worker {
	pthread_t t;
	unsigned seed;
	uint64_t bytes;
	int err;
};

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *work(void *arg)
{
	struct worker *w = arg;
	char buf[BLOCK];
	int fd = open(device, O_RDONLY);
	if (fd < 0) {
		w->err = 1;
		return NULL;
	}
	double end = now() + seconds;
	while (now() < end) {
		uint64_t b = ((uint64_t)rand_r(&w->seed) << 16 ^ rand_r(&w->seed)) % (blocks - runlen);
		for (int i = 0; i < runlen; i++) {
			if (pread(fd, buf, BLOCK, (b + i) * BLOCK) != BLOCK) {
				w->err = 1;
				close(fd);
				return NULL;
			}
			w->bytes += BLOCK;
			if (think_us)
				usleep(think_us);
		}
		/* Forget the run and what was read ahead of it (1 MiB covers
		 * any readahead setting), so that later runs read the device,
		 * not the pages earlier ones left cached: otherwise a fast
		 * run finds more and more of a small device cached as it goes,
		 * and its requests change size halfway. */
		posix_fadvise(fd, b * BLOCK, (uint64_t)runlen * BLOCK + (1 << 20), POSIX_FADV_DONTNEED);
	}
	close(fd);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 6) {
		fprintf(stderr, "usage: io_bench DEVICE SECONDS THREADS RUNLEN THINK_US\n");
		return 2;
	}
	device = argv[1];
	seconds = atof(argv[2]);
	int threads = atoi(argv[3]);
	runlen = atoi(argv[4]);
	think_us = atoi(argv[5]);
	if (seconds <= 0 || threads < 1 || threads > 64 || runlen < 1 || think_us < 0) {
		fprintf(stderr, "io_bench: bad SECONDS, THREADS (1-64), RUNLEN or THINK_US\n");
		return 2;
	}
	int fd = open(device, O_RDONLY);
	if (fd < 0) {
		perror(device);
		return 1;
	}
	struct stat st;
	uint64_t size = 0;
	if (fstat(fd, &st) == 0 && S_ISBLK(st.st_mode)) {
		if (ioctl(fd, BLKGETSIZE64, &size) != 0)
			size = 0;
	} else if (fstat(fd, &st) == 0) {
		size = st.st_size;
	}
	blocks = size / BLOCK;
	if (blocks <= (uint64_t)runlen) {
		fprintf(stderr, "io_bench: %s is too small for runs of %d blocks\n", device, runlen);
		return 1;
	}
	/* Drop the device's cached pages: BLKFLSBUF for a block device (as
	 * root), else the advice. */
	if (!S_ISBLK(st.st_mode) || ioctl(fd, BLKFLSBUF, 0) != 0)
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	close(fd);
	struct worker *w = calloc(threads, sizeof *w);
	double start = now();
	for (int i = 0; i < threads; i++) {
		w[i].seed = (unsigned)(start * 1e6) + 7919 * i;
		pthread_create(&w[i].t, NULL, work, &w[i]);
	}
	uint64_t bytes = 0;
	int err = 0;
	for (int i = 0; i < threads; i++) {
		pthread_join(w[i].t, NULL);
		bytes += w[i].bytes;
		err |= w[i].err;
	}
	if (err) {
		fprintf(stderr, "io_bench: a read of %s failed\n", device);
		return 1;
	}
	printf("MB/s: %.3f\n", bytes / 1e6 / (now() - start));
	return 0;
}
