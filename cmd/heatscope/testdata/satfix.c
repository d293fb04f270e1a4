// satfix: the cpu-saturation fixture. It starts one thread per CPU listed,
// pins each to its CPU (sched_setaffinity) and makes it run
// saturate_hot for SECONDS, busy DUTY percent of every 20 ms (100: all
// the time). Each thread prints its tid, CPU, the CPU time it got and the
// wall time it ran, so that the test knows what really happened.
//
//	satfix SECONDS DUTY CPU [CPU...]
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double seconds;
static int duty;

static long long now_ns(clockid_t clock) {
	struct timespec ts;
	clock_gettime(clock, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

// saturate_hot is the function the test expects on top: a loop of
// arithmetic, about a millisecond a call.
__attribute__((noinline)) static unsigned long saturate_hot(unsigned long x) {
	for (int i = 0; i < 400000; i++)
		x = x * 6364136223846793005UL + 1442695040888963407UL;
	return x;
}

static void *run(void *arg) {
	int cpu = (int)(long)arg;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof set, &set) != 0) {
		perror("sched_setaffinity");
		exit(1);
	}
	volatile unsigned long sink = 1;
	long long start = now_ns(CLOCK_MONOTONIC), cpu0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
	long long end = start + (long long)(seconds * 1e9), cycle = 20000000LL;
	for (long long t = start; t < end; t = now_ns(CLOCK_MONOTONIC)) {
		long long busy_until = t + cycle * duty / 100;
		if (busy_until > end)
			busy_until = end;
		while (now_ns(CLOCK_MONOTONIC) < busy_until)
			sink = saturate_hot(sink);
		if (duty < 100) {
			long long rest = t + cycle - now_ns(CLOCK_MONOTONIC);
			if (rest > 0) {
				struct timespec ts = {0, rest};
				nanosleep(&ts, NULL);
			}
		}
	}
	long long wall = now_ns(CLOCK_MONOTONIC) - start, busy = now_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
	printf("tid=%ld cpu=%d busy_ns=%lld wall_ns=%lld\n", (long)syscall(SYS_gettid), sched_getcpu(), busy, wall);
	fflush(stdout);
	return NULL;
}

int main(int argc, char **argv) {
	if (argc < 4) {
		fprintf(stderr, "usage: satfix SECONDS DUTY CPU [CPU...]\n");
		return 2;
	}
	seconds = atof(argv[1]);
	duty = atoi(argv[2]);
	int n = argc - 3;
	pthread_t threads[256];
	if (n > 256)
		n = 256;
	printf("pid=%d\n", getpid());
	fflush(stdout);
	for (int i = 0; i < n; i++)
		if (pthread_create(&threads[i], NULL, run, (void *)(long)atoi(argv[3 + i])) != 0) {
			perror("pthread_create");
			return 1;
		}
	for (int i = 0; i < n; i++)
		pthread_join(threads[i], NULL);
	return 0;
}
