/*
 * torch_pipe.c - PyTorch reference steps served over a pipe, for the rows
 * whose reference is a PyTorch model step (W14's bench/cnn_torch.py, W16's
 * bench/lm_torch.py). The script prints "ready" once its model is built,
 * then answers each line it reads with one step's loss, so that its steps
 * interleave with optree's in one process run as a reference loop's do
 * (the pipe's round trip, tens of microseconds, is counted on PyTorch's
 * side). A script that cannot import torch exits before "ready": the row
 * then has no reference and its label says so.
 */
#define _POSIX_C_SOURCE 200809L   /* fdopen */
#include "bench.h"

#include <string.h>
#include <unistd.h>

/* Starts `/usr/bin/python3 script arg` with pipes both ways and waits for
 * "ready". 0, or -1 (a note on stderr, p->in NULL) when it did not start. */
int bench_torch_start(bench_torch *p, const char *row, const char *script, const char *arg)
{
    int to[2], from[2];
    p->in = p->out = NULL;
    if (pipe(to) != 0 || pipe(from) != 0) bench_die("%s: pipe failed", row);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) bench_die("%s: fork failed", row);
    if (pid == 0) {
        dup2(to[0], 0);
        dup2(from[1], 1);
        close(to[1]);
        close(from[0]);
        execl("/usr/bin/python3", "python3", script, arg, (char *)NULL);
        _exit(3);
    }
    close(to[0]);
    close(from[1]);
    p->in = fdopen(to[1], "w");
    p->out = fdopen(from[0], "r");
    char line[64];
    if (p->in && p->out && fgets(line, sizeof line, p->out) && strncmp(line, "ready", 5) == 0)
        return 0;
    if (p->in) fclose(p->in);
    if (p->out) fclose(p->out);
    p->in = p->out = NULL;
    fprintf(stderr, "bench: %s: note: PyTorch not importable (or %s not found): no reference\n",
            row, script);
    return -1;
}

/* One step: a line to the server, its loss back (nothing when it did not
 * start). */
void bench_torch_step(bench_torch *p, const char *row)
{
    char line[64];
    if (!p->in) return;
    if (fputs("s\n", p->in) < 0 || fflush(p->in) != 0 || !fgets(line, sizeof line, p->out))
        bench_die("%s: the PyTorch server stopped", row);
}
