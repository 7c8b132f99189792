// rare: one rare label per vital, with exact ground truth, for holter's
// coverage benchmark (bench/coverage.sh, Chopstix §5.3). Every PERIOD ms, at
// a random offset, the process does one event of each vital it provokes and
// logs the wall-clock interval the events fell in:
//   syscall  one getppid()
//   signal   one SIGUSR1 sent to itself (handled)
//   sock     one 1-byte UDP datagram over loopback, sent and received
//   umem     one fault on a freshly mapped anonymous page (also kmem: the
//            fault allocates the page)
//   blck     one 3 ms sleep
//   blio     one 4 KiB O_DIRECT write and fdatasync of FILE
// Output lines: "<start_ns> <end_ns>" (CLOCK_REALTIME, like the store).
// Run copies of the binary under distinct names: the labels of most vitals
// include the executable, so each copy's events are labels of their own.
//
// usage: rare SECONDS PERIOD_MS FILE
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static long long wall(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_ns(long long ns)
{
	struct timespec ts = {ns / 1000000000LL, ns % 1000000000LL};
	while (nanosleep(&ts, &ts))
		;
}

static void on_usr1(int sig) { (void)sig; }

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: rare SECONDS PERIOD_MS FILE\n");
		return 2;
	}
	long long end = wall() + atoll(argv[1]) * 1000000000LL;
	long long period = atoll(argv[2]) * 1000000LL;
	srand(getpid());
	signal(SIGUSR1, on_usr1);

	int us = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof(a);
	if (us < 0 || bind(us, (struct sockaddr *)&a, sizeof(a)) || getsockname(us, (struct sockaddr *)&a, &alen)) {
		perror("socket");
		return 1;
	}
	int fd = open(argv[3], O_RDWR | O_CREAT | O_DIRECT, 0600);
	void *buf;
	if (fd < 0 || posix_memalign(&buf, 4096, 4096)) {
		perror(argv[3]);
		return 1;
	}
	memset(buf, 'r', 4096);
	long pg = sysconf(_SC_PAGESIZE);

	for (long long next = wall(); next < end; next += period) {
		sleep_ns(next - wall() + (long long)(rand() % 700) * period / 1000);
		long long t0 = wall();
		syscall(SYS_getppid);
		kill(getpid(), SIGUSR1);
		char c = 'x';
		sendto(us, &c, 1, 0, (struct sockaddr *)&a, sizeof(a));
		recv(us, &c, 1, 0);
		char *p = mmap(NULL, pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p != MAP_FAILED) {
			*(volatile char *)p = 1;
			munmap(p, pg);
		}
		sleep_ns(3000000);
		if (pwrite(fd, buf, 4096, 0) != 4096 || fdatasync(fd)) {
			perror("pwrite");
			return 1;
		}
		printf("%lld %lld\n", t0, wall());
		fflush(stdout);
		long long now = wall();
		if (next + period < now)
			next = now - period + period / 10;
	}
	return 0;
}
