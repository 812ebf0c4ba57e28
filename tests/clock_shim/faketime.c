/* A clock shim for tests, loaded with LD_PRELOAD into a `solus serve` child:
 * shifts the wall clock (CLOCK_REALTIME and CLOCK_REALTIME_COARSE through
 * clock_gettime, gettimeofday, time) by a number of milliseconds that the
 * test can change while the process runs. The monotonic clocks are left
 * alone, so timers and timeouts behave.
 *
 * The shift is an int64 (little-endian, ms) at offset 0 of the file named by
 * SOLUS_TEST_CLOCK_OFFSET_FILE, mapped shared: a write to the file moves
 * the clock at once. Without the variable (or with an unreadable file) the
 * clock is not shifted. Compiled by tests/clock_shim/mod.rs with `cc`. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);
typedef int (*gettimeofday_fn)(struct timeval *, void *);

static clock_gettime_fn real_clock_gettime;
static gettimeofday_fn real_gettimeofday;
static const int64_t *shift_ms;

__attribute__((constructor)) static void shim_init(void) {
    real_clock_gettime = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
    real_gettimeofday = (gettimeofday_fn)dlsym(RTLD_NEXT, "gettimeofday");
    const char *path = getenv("SOLUS_TEST_CLOCK_OFFSET_FILE");
    if (path == NULL) {
        return;
    }
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        return;
    }
    void *p = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p != MAP_FAILED) {
        shift_ms = (const int64_t *)p;
    }
}

static int64_t current_shift_ms(void) {
    return shift_ms == NULL ? 0 : __atomic_load_n(shift_ms, __ATOMIC_RELAXED);
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    if (real_clock_gettime == NULL) {
        real_clock_gettime = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
    }
    int r = real_clock_gettime(clock, ts);
    if (r == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE)) {
        int64_t ns = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec + current_shift_ms() * 1000000;
        ts->tv_sec = ns / 1000000000;
        ts->tv_nsec = ns % 1000000000;
        if (ts->tv_nsec < 0) {
            ts->tv_sec -= 1;
            ts->tv_nsec += 1000000000;
        }
    }
    return r;
}

int gettimeofday(struct timeval *tv, void *tz) {
    if (real_gettimeofday == NULL) {
        real_gettimeofday = (gettimeofday_fn)dlsym(RTLD_NEXT, "gettimeofday");
    }
    int r = real_gettimeofday(tv, tz);
    if (r == 0) {
        int64_t us = (int64_t)tv->tv_sec * 1000000 + tv->tv_usec + current_shift_ms() * 1000;
        tv->tv_sec = us / 1000000;
        tv->tv_usec = us % 1000000;
        if (tv->tv_usec < 0) {
            tv->tv_sec -= 1;
            tv->tv_usec += 1000000;
        }
    }
    return r;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out != NULL) {
        *out = ts.tv_sec;
    }
    return ts.tv_sec;
}
