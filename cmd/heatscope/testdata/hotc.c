// Fixture workload: main -> outer -> inner -> hot_c_function burns CPU for
// the number of seconds given as the first argument (default: forever).
#include <stdlib.h>
#include <time.h>

volatile unsigned long sink;

__attribute__((noinline)) void hot_c_function(void) {
	for (unsigned long i = 0; i < 1000000; i++)
		sink += i * i;
}

__attribute__((noinline)) void inner(void) { hot_c_function(); }
__attribute__((noinline)) void outer(void) { inner(); }

int main(int argc, char **argv) {
	double seconds = argc > 1 ? atof(argv[1]) : 1e9;
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	do {
		outer();
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while ((now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 < seconds);
	return 0;
}
