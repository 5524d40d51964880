/* libFuzzer target: controller/artstore. Input: the first byte chooses.
 * 0: the text of a stored set's manifest.json (a ConfigMap anyone with
 * edit rights may change): a manifest that parses has only paths under
 * output/ without "." or ".." segments. Else: the rest split at 0xff bytes
 * into up to 8 files; the set built from them parses back, and each stored
 * file comes back byte for byte (artstore_file's check holds). */
#include "base/limits.h"
#include "base/mem.h"
#include "controller/artstore.h"
#include "json/json.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check_paths(const cJSON *m)
{
    const cJSON *a;
    cJSON_ArrayForEach(a, json_get(m, "artifacts"))
    {
        const char *p = json_get(a, "path")->valuestring;
        if (strncmp(p, "output/", 7) != 0 || strstr(p, "/../") || strstr(p, "/./") ||
            strstr(p, "//"))
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > TERN_ARTIFACTS_MAX_MANIFEST + 16)
        return 0;
    if (data[0] == 0) {
        cJSON *m = NULL;
        if (artstore_parse_manifest((const char *)data + 1, size - 1, &m, NULL) == 0)
            check_paths(m);
        cJSON_Delete(m);
        return 0;
    }
    struct artstore_file f[8];
    char paths[8][32];
    size_t n = 0, start = 1;
    for (size_t i = 1; i <= size && n < 8; i++) {
        if (i == size || data[i] == 0xff) {
            snprintf(paths[n], sizeof paths[n], "output/f%zu", n);
            f[n] = (struct artstore_file){.path = paths[n], .data = data + start,
                                          .len = i - start};
            n++;
            start = i + 1;
        }
    }
    struct artstore_in in = {.session = "s", .ns = "ns", .uid = "u", .turn = 1, .now = 1,
                             .max_file = data[0], .max_total = 4u * data[0], .files = f,
                             .nfiles = n};
    cJSON *cm = NULL, *list = NULL;
    size_t stored = 0;
    artstore_build(&in, &cm, &list, &stored);
    const cJSON *mt = json_get(json_get(cm, "data"), ARTSTORE_MANIFEST);
    cJSON *m = NULL;
    if (artstore_parse_manifest(mt->valuestring, strlen(mt->valuestring), &m, NULL) != 0)
        abort();
    check_paths(m);
    size_t back = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char *raw = NULL;
        size_t len = 0;
        char sha[65];
        int rc = artstore_file(cm, f[i].path, &raw, &len, sha, NULL);
        if (rc == 0) {
            if (len != f[i].len || (len && memcmp(raw, f[i].data, len) != 0))
                abort();
            back++;
        } else if (rc != TERN_ENOTFOUND) {
            abort();
        }
        free(raw);
    }
    if (back != stored)
        abort();
    cJSON_Delete(m);
    cJSON_Delete(cm);
    cJSON_Delete(list);
    return 0;
}
