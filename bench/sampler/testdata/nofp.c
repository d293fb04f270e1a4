// Benchmark workload for -unwind: one per CPU, pinned, built with -O2
// -fomit-frame-pointer. Its time is spent three and four calls below main:
// a leaf loop, libc's snprintf and atoi (Debian's libc has no frame
// pointers either) and a qsort comparator under libc's sort. A stack
// reaches main only if every frame between is unwound.
#include <stdio.h>
#include <stdlib.h>

static volatile long sink;

__attribute__((noinline)) long leaf_work(long n) {
	long s = 0;
	for (long i = 0; i < n; i++)
		sink = s += i * i;
	return s;
}

__attribute__((noinline)) long middle_layer(long n) {
	char buf[64];
	snprintf(buf, sizeof buf, "%ld", n);
	return leaf_work(n + atoi(buf) % 3) + 1;
}

__attribute__((noinline)) long outer_layer(long n) { return middle_layer(n) * 2; }

__attribute__((noinline)) int compare(const void *a, const void *b) {
	for (int i = 0; i < 20; i++)
		sink += i;
	return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

__attribute__((noinline)) void sort_some(void) {
	static int v[2048];
	for (int i = 0; i < 2048; i++)
		v[i] = (i * 7919) % 2048;
	qsort(v, 2048, sizeof v[0], compare);
}

int main(void) {
	for (;;) {
		sink += outer_layer(200000);
		sort_some();
	}
}
