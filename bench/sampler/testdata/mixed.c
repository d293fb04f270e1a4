// Benchmark workload: one per CPU, pinned. It interleaves two user-space
// hot functions and one-byte reads of /dev/zero (kernel time) in a cycle of
// about 100 µs, far shorter than a 99 Hz sampling period and unrelated to
// it, so a profiler sampling at any phase sees the same shares. (Three busy
// tasks time-sliced on two CPUs did not: the scheduler's slices and both
// profilers' 99 Hz timers alias, and a 30 s run could see the hot functions
// trade 4 percentage points.) On SIGTERM it prints the cycles it completed,
// a measure of the work done.
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

volatile unsigned long sink;
static volatile sig_atomic_t stop;

__attribute__((noinline)) void mix_arith(void) {
	for (unsigned long i = 0; i < 20000; i++)
		sink += i * i;
}

__attribute__((noinline)) void mix_hash(void) {
	unsigned long h = sink;
	for (unsigned long i = 0; i < 10000; i++)
		h = (h ^ i) * 0x100000001b3UL;
	sink = h;
}

__attribute__((noinline)) void mix_syscalls(int fd) {
	char c;
	for (int i = 0; i < 40; i++)
		if (read(fd, &c, 1) != 1)
			_exit(1);
}

static void on_term(int sig) { (void)sig; stop = 1; }

int main(void) {
	int fd = open("/dev/zero", O_RDONLY);
	if (fd < 0)
		return 1;
	signal(SIGTERM, on_term);
	unsigned long cycles = 0;
	while (!stop) {
		mix_arith();
		mix_hash();
		mix_syscalls(fd);
		cycles++;
	}
	printf("%lu\n", cycles);
	return 0;
}
