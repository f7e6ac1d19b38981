/* stream: how fast this machine streams a cached file through one core right now, as a
 * yardstick for the offline benchmarks (bench/flows.py, bench/offline.py). Not part of tapflow.
 *
 *     stream FILE
 *
 * Maps FILE with its page tables made up front (MAP_POPULATE), then reads one byte of every
 * 64-byte line, front to back, twice, and prints the time of the mapping and of each pass.
 * Nothing is parsed: a pass is the least a reader of FILE from the page cache can cost. Its time
 * moves with the memory bandwidth the host leaves this VM (14.5-17 ms for the 224 MB benchmark
 * trace when the host is quiet, 25-27 ms when it is busy), and so does tapflow's, whose walk of
 * a trace is bound by it (docs/benchmarks.md).
 *
 * Build and run: cc -O2 -o /tmp/stream bench/stream.c && taskset -c 1 /tmp/stream bench/out/big.pcap
 */
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static unsigned long pass(const volatile unsigned char *p, size_t n) {
    unsigned long sum = 0;
    for (size_t i = 0; i < n; i += 64)
        sum += p[i];
    return sum;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: stream FILE\n");
        return 2;
    }
    int fd = open(argv[1], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size == 0) {
        perror(argv[1]);
        return 1;
    }
    size_t n = (size_t)st.st_size;
    double t0 = now_ms();
    const unsigned char *p = mmap(NULL, n, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    double t1 = now_ms();
    unsigned long sum = pass(p, n);
    double t2 = now_ms();
    sum += pass(p, n);
    double t3 = now_ms();
    printf("stream: %zu bytes, map %.1f ms, pass %.1f ms, again %.1f ms (%.1f GB/s) [%lu]\n", n,
           t1 - t0, t2 - t1, t3 - t2, n / (t3 - t2) / 1e6, sum);
    return 0;
}
