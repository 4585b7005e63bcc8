/*
 * spawn.c - runs the helper programs optree-bench needs (gnuplot for
 * --plot, python3 for --peers) from an argument vector, with no shell in
 * between: a file name or an expression given on the command line reaches
 * the child as one argument, never as text that a shell could interpret.
 * The child's stdin or stdout is a pipe to the caller.
 */
#define _GNU_SOURCE
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* The pipe end mode reads or writes is ours; the other is the child's
 * stdout ("r") or stdin ("w"). argv[0] is looked up in PATH. */
FILE *spawn_pipe(char *const argv[], const char *mode, pid_t *pid)
{
    bool reading = mode[0] == 'r';
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return NULL;
    int ours = reading ? fds[0] : fds[1], theirs = reading ? fds[1] : fds[0];
    posix_spawn_file_actions_t fa;
    int rc = posix_spawn_file_actions_init(&fa);
    if (!rc) {
        /* dup2 clears close-on-exec on the child's copy only. */
        rc = posix_spawn_file_actions_adddup2(&fa, theirs, reading ? STDOUT_FILENO : STDIN_FILENO);
        if (!rc) rc = posix_spawnp(pid, argv[0], &fa, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
    }
    close(theirs);
    FILE *f = rc ? NULL : fdopen(ours, mode);
    if (!f) {
        close(ours);
        if (!rc) spawn_wait(NULL, *pid);
        errno = rc ? rc : errno;
    }
    return f;
}

/* Closes the pipe (f may be NULL) and waits for the child: 0 when it
 * exited with status 0. */
int spawn_wait(FILE *f, pid_t pid)
{
    if (f) fclose(f);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}
