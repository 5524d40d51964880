/* sandbox_contract.h - the constants the operator's pod spec and the sandbox
 * images must agree on (docs/design.md, "The sandbox" and "Contracts between
 * the parts").
 *
 * The operator builds the sandbox pod from these; sandbox-images/<image>/Dockerfile
 * repeat them (a Dockerfile cannot include a header), and
 * tests/unit/test_sandbox_images.c reads both and fails when they drift;
 * tests/integration/test_images.c checks the images `make images` builds
 * from those Dockerfiles against them too (docs/images.md).
 * Change a value here and in the Dockerfiles in the same commit.
 */
#ifndef TERN_SANDBOX_CONTRACT_H
#define TERN_SANDBOX_CONTRACT_H

/* tern-sandboxd listens on this TCP port in the pod (containerPort). */
#define SANDBOX_PORT            8080
/* The workspace volume's mount path (PVC) and tern-sandboxd's default --workspace. */
#define SANDBOX_WORKSPACE       "/workspace"
/* The non-root user and group the sandbox container runs as
 * (securityContext.runAsUser/runAsGroup/fsGroup; USER in the images). */
#define SANDBOX_UID             65532
#define SANDBOX_GID             65532
#define SANDBOX_USER            "tern"
/* Where the token Secret is mounted and what --token-file points to. */
#define SANDBOX_TOKEN_DIR       "/var/run/tern/sandbox-token"
#define SANDBOX_TOKEN_FILE      "/var/run/tern/sandbox-token/token"
/* The binary's path inside the images. */
#define SANDBOX_BINARY          "/usr/local/bin/tern-sandboxd"
/* Workspace layout: read-only parts, and the default --writable globs. */
#define SANDBOX_READONLY_PARTS  "input/", "task.md", "simple.md", "skills/"
#define SANDBOX_WRITABLE_DEFAULT "working/**,output/**"
/* The hidden directory on the workspace volume holding idempotency records
 * (see idem.h); never served by the API, never writable through it. */
#define SANDBOX_STATE_DIR       ".tern"
/* Variables of tern-sandboxd's own environment that every command gets
 * (the operator sets them on the sandbox container when an egress proxy is
 * configured; docs/egress.md). A request's env may still override them. */
#define SANDBOX_PASS_ENV        "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", \
                                "http_proxy", "https_proxy", "no_proxy"

#endif
