// usdt_args has static markers (SystemTap SDT, <sys/sdt.h>) whose operands
// come in several sizes and places, for holter trace's USDT tests. It reads
// commands from stdin, one a line, and answers each on stdout:
//   run N   fires each marker N times (i = 0..N-1), answers "ok"
//   sem     answers the semaphore of hw:guarded and how many times the
//           code it guards ran
// Markers, for i = 0..N-1:
//   hw:sizes    (int8) i-100, (uint8) 200+i, (int16) -3000+i, (uint16) 60000+i,
//               (int32) -100000*i, (int64) i*5000000000 — mostly in registers
//   hw:places   a volatile int32 local -7*i and int64 local i*3 (memory
//               operands relative to rsp or rbp), the constant 42, and
//               (uint32) 4000000000-i
//   hw:guarded  i, only while its semaphore says a tracer is attached
#define _SDT_HAS_SEMAPHORES 1
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/sdt.h>

// With _SDT_HAS_SEMAPHORES every marker has one: the kernel counts in it
// the tracers attached to the marker.
unsigned short hw_sizes_semaphore __attribute__((section(".probes"))) = 0;
unsigned short hw_places_semaphore __attribute__((section(".probes"))) = 0;
unsigned short hw_guarded_semaphore __attribute__((section(".probes"))) = 0;
static long guarded_runs;

__attribute__((noinline)) static void fire(long i)
{
	int8_t a = (int8_t)(i - 100);
	uint8_t b = (uint8_t)(200 + i);
	int16_t c = (int16_t)(-3000 + i);
	uint16_t d = (uint16_t)(60000 + i);
	int32_t e = (int32_t)(-100000 * i);
	int64_t f = i * 5000000000LL;
	STAP_PROBE6(hw, sizes, a, b, c, d, e, f);
	volatile int32_t m32 = (int32_t)(-7 * i);
	volatile int64_t m64 = i * 3;
	uint32_t u = (uint32_t)(4000000000U - (uint32_t)i);
	STAP_PROBE4(hw, places, m32, m64, 42, u);
	if (hw_guarded_semaphore) {
		guarded_runs++;
		STAP_PROBE1(hw, guarded, i);
	}
}

int main(void)
{
	char line[64];
	setvbuf(stdout, NULL, _IOLBF, 0);
	while (fgets(line, sizeof line, stdin)) {
		long n;
		if (sscanf(line, "run %ld", &n) == 1) {
			for (long i = 0; i < n; i++)
				fire(i);
			printf("ok\n");
		} else if (strncmp(line, "sem", 3) == 0) {
			printf("%u %ld\n", hw_guarded_semaphore, guarded_runs);
		} else {
			printf("?\n");
		}
	}
	return 0;
}
