/* Rule #5 workload: threads blocked on a kernel lock. Four threads write
 * 8 MiB at offset 0 of one file on a tmpfs, again and again; each write
 * holds the inode's lock (i_rwsem) while it copies, so the others sleep on
 * it: blocked time mirrored by lock contention. Arguments: file, seconds. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define THREADS 4
#define SIZE (8 << 20)

static int fd;
static double end;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void *holter_lock_writer(void *arg)
{
	char *buf = malloc(SIZE);

	(void)arg;
	if (!buf)
		return NULL;
	memset(buf, 'l', SIZE);
	while (now() < end)
		if (pwrite(fd, buf, SIZE, 0) != SIZE)
			break;
	free(buf);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t[THREADS];

	if (argc < 3) {
		fprintf(stderr, "usage: lock_block FILE SECONDS\n");
		return 2;
	}
	fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0) {
		perror(argv[1]);
		return 1;
	}
	end = now() + atof(argv[2]);
	for (int i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, holter_lock_writer, NULL);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	return 0;
}
