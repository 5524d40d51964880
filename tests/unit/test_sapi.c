/* Unit tests for streamapi/sapi_parse.c: the aggregated API's request head. */
#include "harness.h"

#include "streamapi/sapi.h"

#include <stdio.h>
#include <string.h>

static int parse(const char *head, struct sapi_req *r)
{
    struct tern_err e = {0};
    return sapi_parse(head, strlen(head), r, &e);
}

TEST(routes_and_query)
{
    static struct sapi_req r;
    ASSERT_OK(parse("GET /apis/stream.tern.dev/v1alpha1/namespaces/team-a/sessions/demo/log"
                    "?follow=true&sinceSeq=17&timeoutSeconds=30 HTTP/1.1\r\nHost: x\r\n"
                    "X-Remote-User: alice\r\nx-remote-group: dev\r\nX-Remote-Group: ops\r\n\r\n",
                    &r));
    ASSERT_EQ_INT(r.route, SAPI_LOG);
    ASSERT_EQ_STR(r.ns, "team-a");
    ASSERT_EQ_STR(r.name, "demo");
    ASSERT_TRUE(r.follow);
    ASSERT_EQ_INT(r.since_seq, 17);
    ASSERT_EQ_INT(r.timeout_s, 30);
    ASSERT_EQ_STR(sapi_header(&r, "x-remote-user", 0), "alice");
    ASSERT_EQ_STR(sapi_header(&r, "x-remote-group", 0), "dev");
    ASSERT_EQ_STR(sapi_header(&r, "x-remote-group", 1), "ops");
    ASSERT_TRUE(sapi_header(&r, "x-remote-group", 2) == NULL);
    ASSERT_OK(parse("GET /apis/stream.tern.dev/v1alpha1/namespaces/ns/sessions/s/content"
                    "?path=%2Foutput%2Freport%20v2.md HTTP/1.1\r\n\r\n",
                    &r));
    ASSERT_EQ_INT(r.route, SAPI_CONTENT);
    ASSERT_EQ_STR(r.path, "output/report v2.md");
    ASSERT_OK(parse("GET /apis/stream.tern.dev/v1alpha1/sessions HTTP/1.1\r\n\r\n", &r));
    ASSERT_EQ_INT(r.route, SAPI_SESSIONS);
    ASSERT_EQ_STR(r.ns, "");
    ASSERT_OK(parse("GET /apis/stream.tern.dev/v1alpha1 HTTP/1.1\r\n\r\n", &r));
    ASSERT_EQ_INT(r.route, SAPI_VERSION_DOC);
    ASSERT_OK(parse("GET /apis HTTP/1.0\r\n\r\n", &r));
    ASSERT_EQ_INT(r.route, SAPI_APIS);
    ASSERT_OK(parse("GET /openapi/v3/apis/stream.tern.dev/v1alpha1 HTTP/1.1\r\n\r\n", &r));
    ASSERT_EQ_INT(r.route, SAPI_OPENAPI_V3);
    ASSERT_OK(parse("GET /apis/stream.tern.dev/v1alpha1/namespaces/n/sessions/s/files?depth=3 "
                    "HTTP/1.1\r\n\r\n",
                    &r));
    ASSERT_EQ_INT(r.depth, 3);
    ASSERT_EQ_STR(r.path, "");
}

TEST(refused_heads)
{
    static struct sapi_req r;
    /* not served */
    ASSERT_EQ_INT(parse("GET /api/v1/pods HTTP/1.1\r\n\r\n", &r), TERN_ENOTFOUND);
    ASSERT_EQ_INT(parse("GET /apis/stream.tern.dev/v1alpha1/namespaces/n/sessions/s/exec "
                        "HTTP/1.1\r\n\r\n", &r),
                  TERN_ENOTFOUND);
    ASSERT_EQ_INT(parse("GET /apis/stream.tern.dev/v2/sessions HTTP/1.1\r\n\r\n", &r),
                  TERN_ENOTFOUND);
    /* a session outside a namespace */
    ASSERT_EQ_INT(parse("GET /apis/stream.tern.dev/v1alpha1/sessions/s HTTP/1.1\r\n\r\n", &r),
                  TERN_ENOTFOUND);
    /* names */
    ASSERT_EQ_INT(parse("GET /apis/stream.tern.dev/v1alpha1/namespaces/Team/sessions/s "
                        "HTTP/1.1\r\n\r\n", &r),
                  TERN_EINVALID);
    ASSERT_EQ_INT(parse("GET /apis/stream.tern.dev/v1alpha1/namespaces/n/sessions/s%2F..%2Fx "
                        "HTTP/1.1\r\n\r\n", &r),
                  TERN_EINVALID);
    ASSERT_EQ_INT(parse("GET /apis/stream.tern.dev/v1alpha1/namespaces/n/sessions/a..b "
                        "HTTP/1.1\r\n\r\n", &r),
                  TERN_EINVALID); /* found by fuzz_sapi_request */
    ASSERT_EQ_INT(parse("GET /apis/stream.tern.dev/v1alpha1/namespaces/n/sessions/a.-b "
                        "HTTP/1.1\r\n\r\n", &r),
                  TERN_EINVALID);
    ASSERT_OK(parse("GET /apis/stream.tern.dev/v1alpha1/namespaces/n/sessions/a.b-c "
                    "HTTP/1.1\r\n\r\n", &r));
    ASSERT_EQ_INT(parse("GET /apis/stream.tern.dev/v1alpha1/namespaces/n/sessions/a%00b "
                        "HTTP/1.1\r\n\r\n", &r),
                  TERN_EINVALID);
    /* query */
    ASSERT_EQ_INT(parse("GET /apis/stream.tern.dev/v1alpha1/namespaces/n/sessions/s/events"
                        "?limit=99999 HTTP/1.1\r\n\r\n", &r),
                  TERN_EINVALID);
    ASSERT_EQ_INT(parse("GET /apis/stream.tern.dev/v1alpha1/namespaces/n/sessions/s/events"
                        "?sinceSeq=-1 HTTP/1.1\r\n\r\n", &r),
                  TERN_EINVALID);
    ASSERT_EQ_INT(parse("GET /apis/stream.tern.dev/v1alpha1/namespaces/n/sessions/s/content"
                        "?path=a%0Ab HTTP/1.1\r\n\r\n", &r),
                  TERN_EINVALID);
    /* heads */
    ASSERT_EQ_INT(parse("GET /apis HTTP/2\r\n\r\n", &r), TERN_EINVALID);
    ASSERT_EQ_INT(parse("GET /apis HTTP/1.1\r\nX-Remote-User: a\r\n", &r), TERN_EINVALID);
    ASSERT_EQ_INT(parse("GET /apis HTTP/1.1\r\nX-Remote-User: a\r\n folded\r\n\r\n", &r),
                  TERN_EINVALID);
    ASSERT_EQ_INT(parse("GET /apis HTTP/1.1\r\nX-Remote-User: a\x01\r\n\r\n", &r),
                  TERN_EINVALID);
    char many[8192];
    size_t n = (size_t)snprintf(many, sizeof many, "GET /apis HTTP/1.1\r\n");
    for (int i = 0; i < 70; i++)
        n += (size_t)snprintf(many + n, sizeof many - n, "X-A: b\r\n");
    snprintf(many + n, sizeof many - n, "\r\n");
    ASSERT_EQ_INT(parse(many, &r), TERN_EINVALID);
}
