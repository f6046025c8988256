/*
 * The text admin protocol on the binary port: status, workers, show jobs,
 * maxqueue, cancel, shutdown and the rest, answered in gearmand's format
 * so that gearadmin and monitoring scripts read dsjobd as they read it.
 */
#ifndef DSJOB_SERVER_ADMIN_H
#define DSJOB_SERVER_ADMIN_H

#include <stddef.h>

struct conn;

/* admin_line answers one admin line (without its newline) from c. */
void admin_line(struct conn *c, const char *line, size_t len);

#endif
