/* One cache line passed back and forth between two threads pinned to two CPUs: the round trip's
 * median over `reps` runs of `trips` round trips, in nanoseconds, on stdout.
 *
 *     core_link [trips=20000] [reps=5] [cpu_a=0] [cpu_b=1]
 *
 * Built and run by benchmarks/core_link.py. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static _Atomic int ball __attribute__((aligned(64)));
static int trips, reps, cpu_b;

static int pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void *returner(void *unused) {
    (void)unused;
    if (pin(cpu_b) != 0) { fprintf(stderr, "core_link: cannot pin to CPU %d\n", cpu_b); exit(2); }
    for (long i = 0; i < (long)trips * reps; i++) {
        while (atomic_load_explicit(&ball, memory_order_acquire) != 1) { }
        atomic_store_explicit(&ball, 0, memory_order_release);
    }
    return NULL;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    trips = argc > 1 ? atoi(argv[1]) : 20000;
    reps = argc > 2 ? atoi(argv[2]) : 5;
    int cpu_a = argc > 3 ? atoi(argv[3]) : 0;
    cpu_b = argc > 4 ? atoi(argv[4]) : 1;
    if (trips < 1 || reps < 1 || reps > 101 || cpu_a == cpu_b) { fprintf(stderr, "core_link: bad arguments\n"); return 2; }
    if (pin(cpu_a) != 0) { fprintf(stderr, "core_link: cannot pin to CPU %d\n", cpu_a); return 2; }
    pthread_t other;
    pthread_create(&other, NULL, returner, NULL);
    double ns[101];
    for (int r = 0; r < reps; r++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int i = 0; i < trips; i++) {
            atomic_store_explicit(&ball, 1, memory_order_release);
            while (atomic_load_explicit(&ball, memory_order_acquire) != 0) { }
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        ns[r] = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / trips;
    }
    pthread_join(other, NULL);
    qsort(ns, reps, sizeof ns[0], by_value);
    printf("%.1f\n", ns[reps / 2]);
    return 0;
}
