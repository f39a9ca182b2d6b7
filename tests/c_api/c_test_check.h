/* The C tests' shared checks: fail() reports the failing call or condition with
 * the library's last error and returns 1, for main to exit with; CHECK and EXPECT
 * return it from the enclosing function. KVPOOL_C_TEST names the test (CMake). */
#ifndef KVPOOL_C_TEST_CHECK_H
#define KVPOOL_C_TEST_CHECK_H

#include <kvpool/c_api.h>

#include <stdio.h>

static int fail(const char* what) {
    fprintf(stderr, KVPOOL_C_TEST ": %s (last error: %s)\n", what, kvpool_last_error());
    return 1;
}

#define CHECK(call)                                                                                \
    do {                                                                                           \
        if ((call) != KVPOOL_OK)                                                                   \
            return fail(#call);                                                                    \
    } while (0)
#define EXPECT(condition)                                                                          \
    do {                                                                                           \
        if (!(condition))                                                                          \
            return fail(#condition);                                                               \
    } while (0)

#endif
