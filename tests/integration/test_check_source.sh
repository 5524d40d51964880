#!/usr/bin/env bash
# scripts/check-source on small trees of its own: a clean tree passes; an
# include of the embedded cluster (terndev/) from the product (operator/),
# written any of the ways that would resolve there, fails and names the
# line; so do a banned function and an unchecked strtol.
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d /tmp/tern-checksrc-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0
check() { # name, command...
    local name=$1; shift
    if "$@"; then passed=$((passed + 1)); echo "ok   $name"; else failed=$((failed + 1)); echo "FAIL $name"; fi
}
tree() { # dir: a minimal clean tree with the script
    mkdir -p "$1/scripts" "$1/operator/src/base" "$1/terndev/src/kubelet" "$1/terndev/src/devctl" \
        "$1/tests" "$1/bench"
    cp "$here/scripts/check-source" "$1/scripts/"
    printf '#include "base/buf.h"\nint f(void) { return 0; }\n' >"$1/operator/src/base/a.c"
    printf '#include "base/buf.h"\n#include "kubelet/kubelet.h"\n' >"$1/terndev/src/devctl/b.c"
}
fails_with() { # dir, text
    local out
    out=$("$1/scripts/check-source" 2>&1) && return 1
    grep -qF -- "$2" <<<"$out"
}

tree "$tmp/clean"
check clean_tree_passes "$tmp/clean/scripts/check-source"

n=0
for inc in '"kubelet/kubelet.h"' '"devctl/objstore.h"' '"terndev/src/kubelet/kubelet.h"' \
           '"../../terndev/src/devctl/x.h"' '<kubelet/kubelet.h>'; do
    n=$((n + 1))
    d="$tmp/up$n"
    tree "$d"
    printf '#include "base/buf.h"\n  #  include %s\n' "$inc" >"$d/operator/src/base/bad.h"
    check "operator_including_terndev_$n" fails_with "$d" "operator/src/base/bad.h:2:"
done

d="$tmp/banned"
tree "$d"
printf 'void g(char *d) { strcpy(d, "x"); }\n' >"$d/operator/src/base/c.c"
check banned_function_fails fails_with "$d" "operator/src/base/c.c:1:"

d="$tmp/strtol"
tree "$d"
printf 'long h(const char *s) { return strtol(s, NULL, 10); }\n' >"$d/terndev/src/devctl/c.c"
check unchecked_strtol_fails fails_with "$d" "terndev/src/devctl/c.c:1:"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
