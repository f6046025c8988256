/*
 * An in-process fake job server for the client library targets: a thread
 * that accepts on a unix socket and plays the fuzz input as the server's
 * bytes, so the real library code connects, sends and parses them.
 */
#ifndef DSJOB_TESTS_FUZZ_FAKEPEER_H
#define DSJOB_TESTS_FUZZ_FAKEPEER_H

#include <stddef.h>
#include <stdint.h>

/*
 * fakepeer_start starts the thread (once per process) and returns the
 * socket's path, for dsjob_client_add_server or dsjob_worker_add_server.
 */
const char *fakepeer_start(void);

/*
 * fakepeer_arm sets what the next round serves: the first connection
 * accepted gets data (copied), then end of file, and its bytes are read
 * and dropped until the library closes it. After that connection ends,
 * done(arg) is called in the peer's thread (NULL: nothing); a further
 * connection in the same round is closed at once.
 */
void fakepeer_arm(const uint8_t *data, size_t size, void (*done)(void *arg), void *arg);

/*
 * fakepeer_finish ends the round: the peer stops reading and closes its
 * connection (calling done), and this waits until that and any other
 * connection of the round are closed, so no byte of a round reaches the next.
 */
void fakepeer_finish(void);

#endif
