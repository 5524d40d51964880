/* keys.c - the journal's key schema (journal.h, top): session uid
 * validation, the /tern/v1/s/<uid>/ prefix, the ev/ and ch/ key names and
 * journal_key_parse, which classifies any key under /tern/v1/s/.
 */
#include "journal_internal.h"

#include "base/mem.h"
#include "base/num.h"

#include <string.h>

bool journal__valid_uid(const char *uid)
{
    size_t n = uid ? strlen(uid) : 0;
    if (n == 0 || n > TERN_JOURNAL_MAX_UID)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = uid[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '-' || ch == '_' || ch == '.'))
            return false;
    }
    return strcmp(uid, ".") != 0 && strcmp(uid, "..") != 0;
}

char *journal_prefix(const char *uid)
{
    return journal__valid_uid(uid) ? xasprintf("/tern/v1/s/%s/", uid) : NULL;
}

char *journal__ev_key(const char *prefix, uint64_t seq)
{
    return xasprintf("%sev/%016llx", prefix, (unsigned long long)seq);
}

char *journal__chunk_key(const char *prefix, uint64_t seq, const char *id, unsigned i)
{
    return xasprintf("%sch/%016llx/%s/%04x", prefix, (unsigned long long)seq, id, i);
}

/* The seq of an ev/ key, or 0 if it is not one. */
uint64_t journal__key_seq(const char *prefix, const char *key)
{
    size_t pl = strlen(prefix);
    if (strncmp(key, prefix, pl) != 0 || strncmp(key + pl, "ev/", 3) != 0 ||
        strlen(key + pl + 3) != 16)
        return 0;
    uint64_t seq = 0;
    if (num_parse_hex64(key + pl + 3, 16, &seq))
        return 0;
    return seq;
}

enum journal_key_kind journal_key_parse(const char *key, char *uid, uint64_t *ret_seq)
{
    size_t pl = strlen(JOURNAL_ALL_PREFIX);
    if (!key || strncmp(key, JOURNAL_ALL_PREFIX, pl) != 0)
        return JOURNAL_KEY_OTHER;
    const char *u = key + pl, *slash = strchr(u, '/');
    if (!slash || slash == u || (size_t)(slash - u) > TERN_JOURNAL_MAX_UID)
        return JOURNAL_KEY_OTHER;
    char tmp[TERN_JOURNAL_MAX_UID + 1];
    memcpy(tmp, u, (size_t)(slash - u));
    tmp[slash - u] = 0;
    if (!journal__valid_uid(tmp))
        return JOURNAL_KEY_OTHER;
    const char *rest = slash + 1;
    enum journal_key_kind k = JOURNAL_KEY_OTHER;
    uint64_t seq = 0;
    if (strcmp(rest, "sum") == 0)
        k = JOURNAL_KEY_SUM;
    else if (strcmp(rest, "meta") == 0)
        k = JOURNAL_KEY_META;
    else if (strcmp(rest, "lock") == 0)
        k = JOURNAL_KEY_LOCK;
    else if (strncmp(rest, "ch/", 3) == 0)
        k = JOURNAL_KEY_CHUNK;
    else if (strncmp(rest, "ev/", 3) == 0 && strlen(rest + 3) == 16 &&
             num_parse_hex64(rest + 3, 16, &seq) == 0 && seq > 0)
        k = JOURNAL_KEY_EVENT;
    if (k == JOURNAL_KEY_OTHER)
        return k;
    memcpy(uid, tmp, (size_t)(slash - u) + 1);
    if (k == JOURNAL_KEY_EVENT && ret_seq)
        *ret_seq = seq;
    return k;
}
