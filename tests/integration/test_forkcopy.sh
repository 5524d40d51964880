#!/usr/bin/env bash
# tern-runner copy: a parent sandbox's workspace streamed into a child
# sandbox (snapshot -> restore), as a fork's copy Job does. Two tern-sandboxd
# on free loopback ports; files, modes, symlinks and empty dirs must arrive;
# the child's read-only parts are untouched; a bad token fails the copy.
set -u
BUILD=${TERN_BUILD:-$PWD/build}
tmp=$(mktemp -d /tmp/tern-forkcopy-XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
passed=0 failed=0
check() { # name, command...
    local name=$1; shift
    if "$@"; then passed=$((passed + 1)); echo "ok   $name"; else failed=$((failed + 1)); echo "FAIL $name"; fi
}
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start_sandbox() { # name -> sets ADDR_<name>
    local n=$1 port
    mkdir -p "$tmp/$n/ws/working" "$tmp/$n/ws/output" "$tmp/$n/ws/input"
    echo "task of $n" > "$tmp/$n/ws/task.md"
    echo "tok-$n" > "$tmp/$n/token"
    for _ in 1 2 3 4 5; do
        port=$(free_port)
        "$BUILD/bin/tern-sandboxd" --listen "127.0.0.1:$port" --token-file "$tmp/$n/token" \
            --workspace "$tmp/$n/ws" \
            >"$tmp/$n.log" 2>&1 &
        local pid=$!
        for _ in $(seq 1 100); do
            if curl -sf -H "Authorization: Bearer tok-$n" "http://127.0.0.1:$port/healthz" >/dev/null; then
                pids+=("$pid"); eval "ADDR_$n=127.0.0.1:$port"; return 0
            fi
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.05
        done
        kill "$pid" 2>/dev/null
    done
    echo "sandboxd $n did not start"; cat "$tmp/$n.log"; exit 1
}

start_sandbox parent
start_sandbox child
P=$ADDR_parent C=$ADDR_child
put() { curl -sf -X PUT -H "Authorization: Bearer tok-$1" --data-binary "$3" "http://$2/v1/files/$4" >/dev/null; }
put parent "$P" "hello from the parent" "working/notes.txt"
put parent "$P" "#!/bin/sh\necho run" "working/run.sh?mode=0755"
curl -sf -X POST -H "Authorization: Bearer tok-parent" -H 'Content-Type: application/json' \
    -d '{"cmd":"mkdir -p working/empty && ln -s notes.txt working/link"}' "http://$P/v1/exec" >/dev/null
put child "$C" "child only" "output/old.txt"

echo "tok-parent" > "$tmp/from-token"; echo "tok-child" > "$tmp/to-token"
TERN_FROM_TOKEN_FILE=$tmp/from-token TERN_SANDBOX_TOKEN_FILE=$tmp/to-token \
    "$BUILD/bin/tern-runner" copy --from "$P" --to "$C" >"$tmp/copy.log" 2>&1
check "copy exits 0" test $? -eq 0
check "file arrived" test "$(cat "$tmp/child/ws/working/notes.txt" 2>/dev/null)" = "hello from the parent"
check "mode kept" test -x "$tmp/child/ws/working/run.sh"
check "empty dir kept" test -d "$tmp/child/ws/working/empty"
check "symlink kept" test "$(readlink "$tmp/child/ws/working/link")" = "notes.txt"
check "writable part replaced" test ! -e "$tmp/child/ws/output/old.txt"
check "read-only task.md untouched" test "$(cat "$tmp/child/ws/task.md")" = "task of child"
check "parent unchanged" test "$(cat "$tmp/parent/ws/working/notes.txt")" = "hello from the parent"

echo "wrong" > "$tmp/bad-token"
TERN_FROM_TOKEN_FILE=$tmp/bad-token TERN_SANDBOX_TOKEN_FILE=$tmp/to-token \
    "$BUILD/bin/tern-runner" copy --from "$P" --to "$C" >"$tmp/copy2.log" 2>&1
check "bad parent token fails retryably (75)" test $? -eq 75
TERN_SANDBOX_TOKEN_FILE=$tmp/to-token "$BUILD/bin/tern-runner" copy --from "$P" --to "$C" >/dev/null 2>&1
check "missing token file is a config error (78)" test $? -eq 78
[ "$failed" -gt 0 ] && { echo "--- copy log"; cat "$tmp/copy.log"; }
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
