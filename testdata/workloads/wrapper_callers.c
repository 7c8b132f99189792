/* Functions that call the C library's system call wrappers directly, for
 * the recorder to find above the wrapper in their user stacks:
 * holter_waits_in_recv waits in recv on a socket nobody writes to (woken
 * by its receive timeout every 100 ms), holter_syncs_writes writes a
 * block with pwrite and waits in fdatasync, again and again;
 * holter_opens_missing, called by holter_retries_open, opens a file that
 * is not there, every 100 µs: glibc's open keeps the frame pointer's
 * register for its own use, and the walk past it must be mended.
 *
 * Arguments: seconds, a file to write, and "threads" to run the three in
 * threads of their own (the wrappers take their multi-threaded path, which
 * saves registers on the stack) or "single" to run them one after the
 * other in the one thread (the path that saves nothing). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double seconds;
static const char *path;

__attribute__((noinline)) void holter_waits_in_recv(int fd, double until)
{
	char buf[16];

	while (now() < until)
		if (recv(fd, buf, sizeof buf, 0) > 0)
			exit(1); /* nobody writes */
}

__attribute__((noinline)) void holter_syncs_writes(int fd, double until)
{
	static char block[4096];

	memset(block, 'w', sizeof block);
	while (now() < until)
		if (pwrite(fd, block, sizeof block, 0) != sizeof block || fdatasync(fd) != 0)
			exit(1);
}

__attribute__((noinline)) int holter_opens_missing(const char *missing)
{
	return open(missing, O_RDONLY);
}

__attribute__((noinline)) void holter_retries_open(double until)
{
	while (now() < until) {
		if (holter_opens_missing("/nonexistent/holter-wrapper-callers") >= 0)
			exit(1);
		usleep(100);
	}
}

static void *opener(void *arg)
{
	holter_retries_open(*(double *)arg);
	return NULL;
}

static void *receiver(void *arg)
{
	int sv[2];
	struct timeval tv = {.tv_usec = 100000};

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0 ||
	    setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0)
		exit(1);
	holter_waits_in_recv(sv[0], *(double *)arg);
	return NULL;
}

static void *writer(void *arg)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	if (fd < 0)
		exit(1);
	holter_syncs_writes(fd, *(double *)arg);
	close(fd);
	return NULL;
}

int main(int argc, char **argv)
{
	double start = now(), third, two, end;
	pthread_t r, w, o;

	if (argc != 4)
		return 2;
	seconds = atof(argv[1]);
	path = argv[2];
	end = start + seconds;
	third = start + seconds / 3;
	two = start + 2 * seconds / 3;
	if (strcmp(argv[3], "threads") == 0) {
		if (pthread_create(&r, NULL, receiver, &end) != 0 || pthread_create(&w, NULL, writer, &end) != 0 ||
		    pthread_create(&o, NULL, opener, &end) != 0)
			return 1;
		pthread_join(r, NULL);
		pthread_join(w, NULL);
		pthread_join(o, NULL);
	} else {
		receiver(&third);
		writer(&two);
		opener(&end);
	}
	unlink(path);
	return 0;
}
