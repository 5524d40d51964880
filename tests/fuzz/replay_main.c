/* replay_main.c - replays a fuzz target's seed corpus as ordinary tests.
 *
 * Linked with one tests/fuzz/fuzz_X.c (which defines LLVMFuzzerTestOneInput)
 * in the normal and ASan builds; `replay DIR|FILE...` feeds every file to the
 * target. A crash or sanitizer report aborts the process, which the suite
 * runner counts as a failure. Prints "N passed, N failed". */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static unsigned passed, failed;

static void run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "FAIL %s: cannot open\n", path);
        failed++;
        return;
    }
    uint8_t *data = NULL;
    size_t len = 0, cap = 0, n;
    uint8_t chunk[65536];
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (len + n > cap) {
            cap = (len + n) * 2;
            data = realloc(data, cap);
            if (!data)
                abort();
        }
        memcpy(data + len, chunk, n);
        len += n;
    }
    fclose(f);
    /* give the target its own exact-size copy so ASan sees overreads */
    uint8_t *exact = malloc(len ? len : 1);
    if (!exact)
        abort();
    if (len)
        memcpy(exact, data, len);
    free(data);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    passed++;
}

static int cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void run_path(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "FAIL %s: missing\n", path);
        failed++;
        return;
    }
    if (!S_ISDIR(st.st_mode)) {
        run_file(path);
        return;
    }
    DIR *d = opendir(path);
    if (!d) {
        failed++;
        return;
    }
    char **names = NULL;
    size_t nn = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        names = realloc(names, (nn + 1) * sizeof *names);
        if (!names)
            abort();
        size_t l = strlen(path) + strlen(e->d_name) + 2;
        names[nn] = malloc(l);
        if (!names[nn])
            abort();
        snprintf(names[nn], l, "%s/%s", path, e->d_name);
        nn++;
    }
    closedir(d);
    qsort(names, nn, sizeof *names, cmp);
    for (size_t i = 0; i < nn; i++) {
        run_path(names[i]);
        free(names[i]);
    }
    free(names);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        run_path(argv[i]);
    printf("%u passed, %u failed\n", passed, failed);
    return failed ? 1 : 0;
}
