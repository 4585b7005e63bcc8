/*
 * fuzz_main.c - the `make fuzz` driver: runs N trees of the differential
 * fuzzer (tests/fuzz.c) from SEED, each in a forked child, optionally in
 * JOBS parallel processes (each a contiguous range of trees), shrinks and
 * reports failures, and ends with "N passed, M failed".
 *
 *     fuzz [--seed S] [--first I] [-n N] [--jobs J] [--findings DIR]
 *          [--modes forward,grad,many[,half]] [--all-configs] [--no-shrink]
 */
#define _DEFAULT_SOURCE
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static int usage(void)
{
    fprintf(stderr, "usage: fuzz [--seed S] [--first I] [-n N] [--jobs J] [--findings DIR]\n"
                    "            [--modes forward,grad,many[,half]] [--all-configs] [--no-shrink]\n");
    return 2;
}

int main(int argc, char **argv)
{
    fuzz_opts o = {.seed = 1, .n = 1000, .modes = FUZZ_ALL, .fork = 1, .shrink = 1,
                   .verbose = 1, .max_report = 1000000};
    int jobs = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--all-configs")) o.all_configs = 1;
        else if (!strcmp(a, "--no-shrink")) o.shrink = 0;
        else if (!strcmp(a, "--print")) o.verbose = 2;
        else if (!v) return usage();
        else if (!strcmp(a, "--seed")) o.seed = strtoull(v, NULL, 10), i++;
        else if (!strcmp(a, "--first")) o.first = strtoll(v, NULL, 10), i++;
        else if (!strcmp(a, "-n")) o.n = strtoll(v, NULL, 10), i++;
        else if (!strcmp(a, "--jobs")) jobs = atoi(v), i++;
        else if (!strcmp(a, "--findings")) o.findings = *v ? v : NULL, i++;
        else if (!strcmp(a, "--modes")) {
            o.modes = (strstr(v, "forward") ? FUZZ_FORWARD : 0) | (strstr(v, "grad") ? FUZZ_GRAD : 0) |
                      (strstr(v, "many") ? FUZZ_MANY : 0);
            i++;
            if (!o.modes) return usage();
            if (strstr(v, "half")) o.modes |= FUZZ_HALF;   /* f16/bf16 too */
        } else return usage();
    }
    if (jobs < 1) jobs = 1;
    fuzz_result *res = mmap(NULL, (size_t)jobs * sizeof *res, PROT_READ | PROT_WRITE,
                            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (res == MAP_FAILED) return 1;
    int64_t total = o.n, per = (total + jobs - 1) / jobs;
    for (int j = 0; j < jobs; j++) {
        fuzz_opts oj = o;
        oj.first = o.first + j * per;
        oj.n = oj.first + per > o.first + total ? o.first + total - oj.first : per;
        if (oj.n <= 0) continue;
        pid_t pid = jobs == 1 ? 0 : fork();
        if (pid == 0) {
            int rc = fuzz_run(&oj, &res[j]);
            if (jobs == 1) {
                if (rc) return 1;
                break;
            }
            _exit(rc ? 1 : 0);
        }
    }
    while (jobs > 1 && wait(NULL) > 0) {}
    long long passed = 0, failed = 0;
    for (int j = 0; j < jobs; j++) passed += res[j].passed, failed += res[j].failed;
    printf("%lld passed, %lld failed\n", passed, failed);
    return failed ? 1 : 0;
}
