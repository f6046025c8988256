/* The server's clocks: see clock.h. */
#include "config.h"
#include "clock.h"

#include <sys/time.h>
#include <time.h>

#include <event2/event.h>

int64_t
clock_now(void)
{
    struct timeval tv;

    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec;
}

int64_t
clock_now_ms(void)
{
    struct timeval tv;

    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

int64_t
clock_uptime(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec + 1;
}

uint32_t
clock_loop_ms(struct event_base *base)
{
    struct timeval tv;

    if (base == NULL || event_base_gettimeofday_cached(base, &tv) != 0)
        gettimeofday(&tv, NULL);
    return (uint32_t)((uint64_t)tv.tv_sec * 1000u + (uint64_t)tv.tv_usec / 1000u);
}
