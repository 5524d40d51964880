/* libFuzzer target: kubeconfig documents (YAML/JSON) through context
 * selection and user/cluster parsing, and ExecCredential output. Relative
 * file references resolve under a directory that does not exist, so no file
 * is read; nothing is executed at parse time. */
#include "kube/kubeconfig.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct kubeconfig *c = NULL;
    struct tern_err e = {0};
    struct kubeconfig_overrides ov = {.context = (size & 1) ? "dev" : NULL};
    if (kubeconfig_parse((const char *)data, size, &ov, "/nonexistent-fuzz-dir", &c, &e) == 0) {
        if (!c->server || !c->namespace)
            abort();
        kubeconfig_free(c);
    } else if (c) {
        abort(); /* *ret is set only on success */
    }
    struct kubeconfig_creds cr;
    time_t exp;
    if (kubeconfig_parse_exec_credential((const char *)data, size, &cr, &exp, &e) == 0) {
        if (!cr.token && !cr.cert_pem)
            abort();
        kubeconfig_creds_done(&cr);
    }
    return 0;
}
