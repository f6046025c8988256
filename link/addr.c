/*
 * Parsing of server addresses (see addr.h). The libraries normalize every
 * address when it is added, so that errors, the hash ring and the dsjob
 * tool all see one spelling of a server ("127.0.0.1" is "127.0.0.1:4730");
 * connecting then only splits the normalized form again. A bare IPv6
 * address is told from "host:port" by inet_pton, since its colons are
 * ambiguous; "[v6]:port" is the way to give it a port.
 */
#include "config.h"
#include "link/addr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/un.h>

#include "proto/decimal.h"

/* Whether s (n bytes) is a decimal port from 1 to 65535. */
static int
port_ok(const char *s, size_t n)
{
    uint64_t v;

    return decimal_parse(s, n, 65535, &v) == 0 && v >= 1;
}

/* Writes "host" + ":" + port into out; returns 0 or -1 when it does not fit. */
static int
put(char *out, size_t cap, const char *open, const char *host, size_t hlen, const char *close,
    const char *port, size_t plen)
{
    int n = snprintf(out, cap, "%s%.*s%s:%.*s", open, (int)hlen, host, close, (int)plen, port);

    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

int
addr_normalize(const char *addr, char *out, size_t cap)
{
    const char *colon, *end;
    size_t n;

    if (addr == NULL || *addr == '\0' || cap == 0)
        return -1;
    n = strlen(addr);
    if (addr[0] == '/') {
        if (n >= sizeof(((struct sockaddr_un *)0)->sun_path) || n >= cap)
            return -1;
        memcpy(out, addr, n + 1);
        return 0;
    }
    if (addr[0] == '[') {
        end = strchr(addr, ']');
        if (end == NULL || end == addr + 1 || memchr(addr + 1, '[', (size_t)(end - addr - 1)))
            return -1;
        if (end[1] == '\0')
            return put(out, cap, "[", addr + 1, (size_t)(end - addr - 1), "]", ADDR_DEFAULT_PORT,
                       strlen(ADDR_DEFAULT_PORT));
        if (end[1] != ':' || !port_ok(end + 2, strlen(end + 2)))
            return -1;
        return put(out, cap, "[", addr + 1, (size_t)(end - addr - 1), "]", end + 2,
                   strlen(end + 2));
    }
    colon = strchr(addr, ':');
    if (colon == NULL)
        return put(out, cap, "", addr, n, "", ADDR_DEFAULT_PORT, strlen(ADDR_DEFAULT_PORT));
    if (strchr(colon + 1, ':') != NULL) {
        struct in6_addr a6;

        if (inet_pton(AF_INET6, addr, &a6) != 1)
            return -1;
        return put(out, cap, "[", addr, n, "]", ADDR_DEFAULT_PORT, strlen(ADDR_DEFAULT_PORT));
    }
    if (colon == addr || !port_ok(colon + 1, strlen(colon + 1)))
        return -1;
    return put(out, cap, "", addr, (size_t)(colon - addr), "", colon + 1, strlen(colon + 1));
}

const char *
addr_split(const char *addr, char *host, size_t cap)
{
    const char *colon = strrchr(addr, ':');
    const char *h = addr;
    size_t hlen;

    if (colon == NULL || cap == 0)
        return NULL;
    hlen = (size_t)(colon - addr);
    if (addr[0] == '[' && hlen >= 2 && addr[hlen - 1] == ']') {
        h = addr + 1;
        hlen -= 2;
    }
    if (hlen >= cap)
        return NULL;
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    return colon + 1;
}
