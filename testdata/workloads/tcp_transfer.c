/* sock vital workload: a loopback TCP transfer: a child connects and
 * reads, the parent sends 64 KiB writes. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/wait.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) long holter_tcp_send_once(int fd, const char *buf, size_t n)
{
	return send(fd, buf, n, 0);
}

__attribute__((noinline)) void holter_tcp_send(int fd, double seconds)
{
	static char buf[65536];
	double end = now() + seconds;
	memset(buf, 'h', sizeof(buf));
	while (now() < end)
		if (holter_tcp_send_once(fd, buf, sizeof(buf)) <= 0)
			return;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 3;
	struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(addr);
	int ls = socket(AF_INET, SOCK_STREAM, 0);
	char buf[65536];

	if (ls < 0 || bind(ls, (struct sockaddr *)&addr, sizeof(addr)) || listen(ls, 1) ||
	    getsockname(ls, (struct sockaddr *)&addr, &len))
		return 1;
	pid_t child = fork();
	if (child == 0) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof(addr)))
			return 1;
		while (read(fd, buf, sizeof(buf)) > 0)
			;
		return 0;
	}
	int c = accept(ls, NULL, NULL);
	if (c < 0)
		return 1;
	holter_tcp_send(c, seconds);
	close(c);
	waitpid(child, NULL, 0);
	return 0;
}
