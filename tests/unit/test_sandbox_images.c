/* The sandbox images' Dockerfiles agree with the constants the operator puts
 * in the pod spec (operator/src/sandbox/sandbox_contract.h): port, user,
 * paths, flags. `make images` builds the images from these same Dockerfiles;
 * tests/integration/test_images.c runs what it builds (docs/images.md).
 * Runs from the repository root (tests/run-suites does). */
#include "harness.h"

#include "base/buf.h"
#include "base/mem.h"
#include "sandbox/sandbox_contract.h"

#include <stdio.h>
#include <stdlib.h>

#define STR2(x) #x
#define STR(x) STR2(x)

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        th_fail(__FILE__, __LINE__, "cannot open %s (run from the repository root)", path);
    struct buf b;
    buf_init(&b, 1 << 20);
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        ASSERT_OK(buf_append(&b, chunk, n));
    fclose(f);
    return buf_steal(&b);
}

/* The JSON-array ENTRYPOINT line, as one string. */
static const char *entrypoint(const char *df)
{
    const char *e = strstr(df, "\nENTRYPOINT [");
    ASSERT_NOT_NULL(e);
    return e + 1;
}

static void check_image(const char *path)
{
    char *df = slurp(path);
    char *s;
    ASSERT_CONTAINS(df, "FROM debian:12 AS build");
    ASSERT_CONTAINS(df, "make -j\"$(nproc)\" build/bin/tern-sandboxd");
    s = xasprintf("COPY --from=build /src/build/bin/tern-sandboxd %s\n", SANDBOX_BINARY);
    ASSERT_CONTAINS(df, s);
    free(s);
    s = xasprintf("\nEXPOSE %d\n", SANDBOX_PORT);
    ASSERT_CONTAINS(df, s);
    free(s);
    s = xasprintf("\nUSER %d:%d\n", SANDBOX_UID, SANDBOX_GID);
    ASSERT_CONTAINS(df, s);
    free(s);
    s = xasprintf("groupadd --gid %d %s", SANDBOX_GID, SANDBOX_USER);
    ASSERT_CONTAINS(df, s);
    free(s);
    s = xasprintf("useradd --uid %d --gid %d", SANDBOX_UID, SANDBOX_GID);
    ASSERT_CONTAINS(df, s);
    free(s);
    s = xasprintf("\nWORKDIR %s\n", SANDBOX_WORKSPACE);
    ASSERT_CONTAINS(df, s);
    free(s);
    static const char *const parts[] = {"input", "working", "output", "skills"};
    for (size_t i = 0; i < 4; i++) {
        s = xasprintf("%s/%s ", SANDBOX_WORKSPACE, parts[i]);
        ASSERT_CONTAINS(df, s);
        free(s);
    }
    ASSERT_CONTAINS(df, SANDBOX_TOKEN_DIR);
    s = xasprintf("chown %d:%d %s %s/working %s/output", SANDBOX_UID, SANDBOX_GID,
                  SANDBOX_WORKSPACE, SANDBOX_WORKSPACE, SANDBOX_WORKSPACE);
    ASSERT_CONTAINS(df, s);
    free(s);
    const char *ep = entrypoint(df);
    s = xasprintf("ENTRYPOINT [\"%s\", \"--listen\", \":%d\", \"--token-file\", \"%s\", "
                  "\"--workspace\", \"%s\", \"--writable\", \"%s\"]",
                  SANDBOX_BINARY, SANDBOX_PORT, SANDBOX_TOKEN_FILE, SANDBOX_WORKSPACE,
                  SANDBOX_WRITABLE_DEFAULT);
    ASSERT_CONTAINS(ep, s);
    free(s);
    free(df);
}

TEST(base_image_matches_contract)
{
    check_image("sandbox-images/base/Dockerfile");
}

TEST(python_image_matches_contract_and_has_tools)
{
    check_image("sandbox-images/python/Dockerfile");
    char *df = slurp("sandbox-images/python/Dockerfile");
    ASSERT_CONTAINS(df, " git ");
    ASSERT_CONTAINS(df, " python3 ");
    ASSERT_CONTAINS(df, " gcc ");
    free(df);
}

TEST(contract_constants_are_consistent)
{
    ASSERT_EQ_STR(SANDBOX_TOKEN_FILE, SANDBOX_TOKEN_DIR "/token");
    ASSERT_EQ_STR(STR(SANDBOX_PORT), "8080");
    ASSERT_CMP_INT(SANDBOX_UID, !=, 0);
    ASSERT_CMP_INT(SANDBOX_GID, !=, 0);
}
