/* test_kpack.c - the informers' packing of cached JSON text (kube/kpack.h). */
#include "harness.h"

#include "base/mem.h"
#include "json/json.h"
#include "kube/kpack.h"

#include <stdlib.h>
#include <string.h>

static void roundtrip(const char *text, size_t *ret_packed)
{
    char *p = kpack_pack(text);
    ASSERT_NOT_NULL(p);
    size_t n = 0;
    char *u = kpack_unpack(p, &n);
    ASSERT_EQ_STR(u, text);
    ASSERT_EQ_INT(n, strlen(text));
    if (ret_packed)
        *ret_packed = strlen(p);
    free(p);
    free(u);
}

TEST(a_session_comes_back_exactly_and_smaller)
{
    const char *session =
        "{\"apiVersion\":\"tern.dev/v1alpha1\",\"kind\":\"AgentSession\",\"metadata\":{"
        "\"creationTimestamp\":\"2026-12-01T21:42:15Z\",\"finalizers\":[\"tern.dev/journal\"],"
        "\"generation\":1,\"name\":\"parked-00000\",\"namespace\":\"default\","
        "\"resourceVersion\":\"313\",\"uid\":\"c1bd09a0-a1e4-4e0c-9ef9-bc0cd9b8321e\"},"
        "\"spec\":{\"approval\":{\"onTimeout\":\"Deny\",\"timeoutSeconds\":2592000}},"
        "\"status\":{\"conditions\":[{\"lastTransitionTime\":\"2026-12-01T21:42:19Z\","
        "\"message\":\"\",\"observedGeneration\":1,\"reason\":\"WaitingForApproval\","
        "\"status\":\"True\",\"type\":\"Ready\"},{\"lastTransitionTime\":"
        "\"2026-12-01T21:42:19Z\",\"message\":\"the sandbox pod is not running\","
        "\"observedGeneration\":1,\"reason\":\"NoSandbox\",\"status\":\"False\","
        "\"type\":\"SandboxReady\"}],\"phase\":\"WaitingForApproval\"}}";
    size_t packed = 0;
    roundtrip(session, &packed);
    ASSERT_TRUE(packed * 10 < strlen(session) * 7); /* at least 30% less */
}

TEST(dictionary_words_inside_values_and_next_to_each_other)
{
    roundtrip("", NULL);
    roundtrip("{}", NULL);
    roundtrip("{\"message\":\"\\\"message\\\":\\\" \\\"status\\\":\\\"True\\\"\"}", NULL);
    roundtrip("\"name\":\"\"name\":\"\"kind\":\"\"True\"\"False\"tern.dev/tern.dev/", NULL);
    roundtrip("\"timeoutSeconds\":Seconds\":\"idleSuspendSeconds\":600", NULL);
    roundtrip("\"},{\"},{\"}", NULL);
    roundtrip("{\"x\":\"caf\xc3\xa9 \xe2\x82\xac\x7f\"}", NULL);
}

TEST(what_the_printer_makes_of_control_characters_packs)
{
    cJSON *o = cJSON_CreateObject();
    json_add_string(o, "message", "a\001b\037c\nd\te");
    char *text = json_print(o);
    roundtrip(text, NULL);
    free(text);
    cJSON_Delete(o);
}

TEST(text_with_raw_control_bytes_is_not_packed)
{
    ASSERT_NULL(kpack_pack("{\"a\":\"\001\"}"));
    ASSERT_NULL(kpack_pack("\n"));
    ASSERT_NULL(kpack_pack("\037"));
}

