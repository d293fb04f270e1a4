// The kernel matrix's workload, built gcc -static -O2 -fomit-frame-pointer
// and installed twice in the VM: as zznofp it spends its time four calls
// below main (main -> zz_nofp_top -> zz_nofp_mid -> zz_nofp_leaf), with no
// frame pointers, so that only the table walk reaches main; as zzsys it
// makes system calls, for kernel stacks.
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

static volatile long sink;

__attribute__((noinline)) long zz_nofp_leaf(long n) {
	long s = 0;
	for (long i = 0; i < n; i++)
		sink = s += i * i;
	return s;
}

__attribute__((noinline)) long zz_nofp_mid(long n) { return zz_nofp_leaf(n + (sink & 1)) + 1; }

__attribute__((noinline)) long zz_nofp_top(long n) { return zz_nofp_mid(n) * 2; }

__attribute__((noinline)) void zz_sys_loop(void) {
	for (;;)
		sink += syscall(SYS_getppid);
}

int main(int argc, char **argv) {
	const char *name = strrchr(argv[0], '/');
	name = name ? name + 1 : argv[0];
	if (strcmp(name, "zzsys") == 0)
		zz_sys_loop();
	for (;;)
		sink += zz_nofp_top(100000);
}
