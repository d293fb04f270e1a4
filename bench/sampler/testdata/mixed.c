// Benchmark workload: one per CPU, pinned. It interleaves two user-space
// hot functions and one-byte reads of /dev/zero (kernel time) in a cycle of
// about 100 µs, far shorter than a 99 Hz sampling period, so a profiler
// sampling at any phase sees the same shares. Each step's length is drawn
// at random (half to one and a half times its mean): a cycle of fixed
// length aliases with a fixed sampling period (10101 µs is 72.15 cycles of
// 140 µs, so every sample lands on one of 20 phases), and two profilers at
// different phase offsets then see shares a few points apart. (Three busy
// tasks time-sliced on two CPUs did too: the hot functions could trade 4
// percentage points in 30 s.) On SIGTERM it prints the cycles it
// completed, a measure of the work done.
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

volatile unsigned long sink;
static volatile sig_atomic_t stop;

// jitter returns a number drawn evenly from [n/2, 3n/2) (xorshift64).
static unsigned long jitter(unsigned long n) {
	static unsigned long x = 88172645463325252UL;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return n / 2 + x % n;
}

__attribute__((noinline)) void mix_arith(unsigned long n) {
	for (unsigned long i = 0; i < n; i++)
		sink += i * i;
}

__attribute__((noinline)) void mix_hash(unsigned long n) {
	unsigned long h = sink;
	for (unsigned long i = 0; i < n; i++)
		h = (h ^ i) * 0x100000001b3UL;
	sink = h;
}

__attribute__((noinline)) void mix_syscalls(int fd, unsigned long n) {
	char c;
	for (unsigned long i = 0; i < n; i++)
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
		mix_arith(jitter(20000));
		mix_hash(jitter(10000));
		mix_syscalls(fd, jitter(40));
		cycles++;
	}
	printf("%lu\n", cycles);
	return 0;
}
