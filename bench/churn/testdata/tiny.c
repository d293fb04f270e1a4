// A short-lived process of the churn benchmark: about a millisecond of
// work in its own function, then exit.
static volatile unsigned long sink;

__attribute__((noinline)) static void a_little_work(void) {
	for (unsigned long i = 0; i < 300000; i++)
		sink += i;
}

int main(void) {
	a_little_work();
	return 0;
}
