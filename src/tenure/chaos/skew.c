/* LD_PRELOAD shim: shift the wall clock (CLOCK_REALTIME) by $SKEW_SECONDS, leave the
   monotonic clock alone (libfaketime moves both, which hangs Python's timed waits). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
/* Shift CLOCK_REALTIME only: the monotonic clock (timed waits, deadlines) stays true. */
static long skew(void) { const char *s = getenv("SKEW_SECONDS"); return s ? atol(s) : 0; }
int clock_gettime(clockid_t clock, struct timespec *tp) {
    static int (*real)(clockid_t, struct timespec *);
    if (!real) real = dlsym(RTLD_NEXT, "clock_gettime");
    int rc = real(clock, tp);
    if (rc == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE))
        tp->tv_sec += skew();
    return rc;
}
int gettimeofday(struct timeval *tv, void *tz) {
    static int (*real)(struct timeval *, void *);
    if (!real) real = dlsym(RTLD_NEXT, "gettimeofday");
    int rc = real(tv, tz);
    if (rc == 0 && tv) tv->tv_sec += skew();
    return rc;
}
time_t time(time_t *out) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    if (out) *out = now.tv_sec;
    return now.tv_sec;
}
