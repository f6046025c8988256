/*
 * Included first (-include) in every object of tests/soak/dsjobd_cut, which
 * compiles server/main.c with main renamed dsjobd_main: its prototype.
 */
#ifndef DSJOB_DSJOBD_MAIN_H
#define DSJOB_DSJOBD_MAIN_H

int dsjobd_main(int argc, char **argv);

#endif
