/* signal vital workload: the parent sends SIGUSR1 to a child, which has a
 * handler, every millisecond. */
#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

static volatile sig_atomic_t got;

static void on_usr1(int sig)
{
	(void)sig;
	got++;
}

__attribute__((noinline)) int holter_send_signal(pid_t pid)
{
	return kill(pid, SIGUSR1);
}

__attribute__((noinline)) void holter_signal_child(pid_t child, double seconds)
{
	for (int i = 0; i < seconds * 1000; i++) {
		holter_send_signal(child);
		usleep(1000);
	}
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 3;
	struct sigaction sa = {.sa_handler = on_usr1};

	sigaction(SIGUSR1, &sa, NULL); /* inherited, so no signal is lost before the child is ready */
	pid_t child = fork();
	if (child == 0) {
		for (;;)
			pause();
	}
	holter_signal_child(child, seconds);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	return 0;
}
