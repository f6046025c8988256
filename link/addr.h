/*
 * Server addresses as the libraries and the dsjob tool take them, in one
 * place: "/path" (a unix socket), "host" or "host:port", "[v6]" or
 * "[v6]:port", or a bare IPv6 address ("::1"). A missing port means 4730,
 * as with the gearman tools. Pure string handling: no sockets, no
 * allocation.
 */
#ifndef DSJOB_LINK_ADDR_H
#define DSJOB_LINK_ADDR_H

#include <stddef.h>

#define ADDR_DEFAULT_PORT "4730" /* the Gearman port, when an address names none */
#define ADDR_EXTRA 8             /* addr_normalize may add "[]" and ":4730" */

/*
 * addr_normalize checks addr (borrowed) and writes its canonical form into
 * out (cap bytes, at least strlen(addr) + ADDR_EXTRA to always fit):
 * "/path" as is, "host:port", "[v6]:port", the port 4730 where none was
 * given and a bare IPv6 address put in brackets. Returns 0, or -1 when addr
 * is none of the forms above (an empty host, a port that is not a number
 * from 1 to 65535, a unix path longer than sun_path) or out is too small.
 */
int addr_normalize(const char *addr, char *out, size_t cap);

/*
 * addr_split splits a normalized "host:port" or "[v6]:port" (borrowed)
 * into its host, written NUL-terminated into host (cap bytes, brackets
 * removed), and returns its port, borrowed from addr. Returns NULL when
 * addr has no port or the host does not fit.
 */
const char *addr_split(const char *addr, char *host, size_t cap);

#endif
