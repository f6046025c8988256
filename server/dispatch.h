/*
 * Binary packet handlers: a table from packet type to handler, with the
 * argument checks done once, in dispatch_packet, before any handler runs.
 */
#ifndef DSJOB_SERVER_DISPATCH_H
#define DSJOB_SERVER_DISPATCH_H

#include "proto/packet.h"

struct conn;

/* dispatch_packet acts on one decoded packet from c. */
void dispatch_packet(struct conn *c, const struct packet *p);

#endif
