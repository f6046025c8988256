/*
 * The entry point every fuzz target defines. Built with --enable-fuzzing,
 * each target links libFuzzer; otherwise tests/fuzz/replay.c supplies a
 * main() that feeds it the committed corpus, so make check replays it.
 */
#ifndef DSJOB_TESTS_FUZZ_H
#define DSJOB_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
