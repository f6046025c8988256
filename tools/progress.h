/*
 * The progress bar that dsjob submit draws on a terminal while a
 * foreground job reports WORK_STATUS: a pure formatter, testable without a
 * terminal, and a small drawing state that redraws one line with \r and
 * clears it before other output and at the end.
 */
#ifndef DSJOB_TOOLS_PROGRESS_H
#define DSJOB_TOOLS_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>

/* A bar being drawn on one file descriptor. */
struct progress {
    int fd;             /* where it is drawn (stderr) */
    bool drawn;         /* a line is on the screen now */
    size_t drawn_len;   /* its length, to blank it out */
    double start;       /* when the job was submitted (seconds, monotonic) */
    double first;       /* when the first report came, 0 before */
    unsigned first_num; /* the numerator of the first report */
    double last_draw;   /* when the line was last drawn */
};

/*
 * progress_format writes one bar line for numerator/denominator, elapsed
 * seconds since the submit and rate (numerator units per second, negative
 * when not known yet) into buf (cap bytes, NUL-terminated, truncated to
 * fit), using at most width - 1 columns (the last one is left free so
 * the terminal does not wrap). A denominator of 0 means the total is not
 * known: no percentage, an empty bar. A numerator above the denominator
 * (7/3) is shown as given, with 100% and a full bar. Returns the length
 * written.
 */
size_t progress_format(char *buf, size_t cap, unsigned num, unsigned den, double elapsed,
                       double rate, unsigned width);

/* progress_init starts a bar on fd, not drawn yet; the elapsed time counts from now. */
void progress_init(struct progress *p, int fd);

/*
 * progress_update records a report and redraws the line, at most ten
 * times a second (a report that reaches the denominator is always drawn).
 */
void progress_update(struct progress *p, unsigned num, unsigned den);

/* progress_clear blanks the line if one is drawn; the next update draws it again. */
void progress_clear(struct progress *p);

/* progress_now returns monotonic seconds. */
double progress_now(void);

#endif
