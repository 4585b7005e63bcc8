/*
 * test_fuzz.c - the fuzzer's fixed budget in the unit suite: trees from
 * fixed seeds, forward, gradient and assign_many, each in its own case to
 * stay within the case timeout. `make fuzz` runs as many as asked.
 */
#include "test.h"

#include "fuzz.h"

#if defined(__SANITIZE_ADDRESS__)
#define FUZZ_BUDGET 60
#else
#define FUZZ_BUDGET 600
#endif

static void fuzz_case(uint64_t seed, int modes, int64_t n)
{
    fuzz_opts o = {.seed = seed, .n = n, .modes = modes, .fork = 1, .shrink = 1, .max_report = 3};
    fuzz_result r;
    CHECK_INT(fuzz_run(&o, &r), 0);
    CHECK_INT(r.failed, 0);
    CHECK_INT(r.passed, n);
}

TEST(fuzz_forward_a) { fuzz_case(1, FUZZ_FORWARD, FUZZ_BUDGET); }
TEST(fuzz_forward_b) { fuzz_case(2, FUZZ_FORWARD, FUZZ_BUDGET); }
TEST(fuzz_grad) { fuzz_case(3, FUZZ_GRAD, FUZZ_BUDGET / 2); }
TEST(fuzz_many) { fuzz_case(4, FUZZ_MANY, FUZZ_BUDGET / 2); }
