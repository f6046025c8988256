/*
 * dsjob_client_set_after's parents go with the next submit call alone,
 * whatever becomes of it: refused by the server (an unknown parent), or
 * refused by the library before anything is sent (an empty function name,
 * a negative epoch). A later, unrelated submit waits for nothing.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include <dsjob/client.h>

#include "lib/peer.h"
#include "tap.h"

int
main(void)
{
    const char *parents[1] = {"H:nosuch:1"};
    char addr[64], handle[DSJOB_HANDLE_MAX];
    struct dsjob_client *c;
    struct daemon d;

    daemon_start(&d, NULL);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", d.port);
    c = dsjob_client_new();
    if (c == NULL || dsjob_client_add_server(c, addr) != DSJOB_OK)
        tap_bail("client");

    tap_is_int(dsjob_client_set_after(c, parents, 1, DSJOB_AFTER_FAIL), DSJOB_OK, "set_after");
    tap_is_int(
        dsjob_client_submit_bg(c, "af", NULL, "x", 1, DSJOB_PRIO_NORMAL, handle, sizeof(handle)),
        DSJOB_ERR_SERVER, "a submit after an unknown job is refused by the server");
    tap_ok(strstr(dsjob_client_errmsg(c), "no job H:nosuch:1") != NULL, "saying so: %s",
           dsjob_client_errmsg(c));
    tap_is_int(
        dsjob_client_submit_bg(c, "af", NULL, "x", 1, DSJOB_PRIO_NORMAL, handle, sizeof(handle)),
        DSJOB_OK, "the next submit waits for nothing");

    dsjob_client_set_after(c, parents, 1, DSJOB_AFTER_FAIL);
    tap_is_int(
        dsjob_client_submit_bg(c, "", NULL, "x", 1, DSJOB_PRIO_NORMAL, handle, sizeof(handle)),
        DSJOB_ERR_ARG, "a submit the library refuses (no function name)");
    tap_is_int(
        dsjob_client_submit_bg(c, "af", NULL, "x", 1, DSJOB_PRIO_NORMAL, handle, sizeof(handle)),
        DSJOB_OK, "spends the parents too: the next submit waits for nothing");

    dsjob_client_set_after(c, parents, 1, DSJOB_AFTER_FAIL);
    tap_is_int(dsjob_client_submit_epoch(c, "af", NULL, "x", 1, -1, handle, sizeof(handle)),
               DSJOB_ERR_ARG, "a negative epoch is refused");
    tap_is_int(
        dsjob_client_submit_bg(c, "af", NULL, "x", 1, DSJOB_PRIO_NORMAL, handle, sizeof(handle)),
        DSJOB_OK, "and spends the parents too");

    dsjob_client_free(c);
    daemon_stop(&d);
    return tap_done();
}
