/* run.h - `ftsbx run` (run.c), for the ftsbx command table. */
#ifndef FTSBX_RUN_H
#define FTSBX_RUN_H
int cmd_run(int argc, char **argv);
#endif
