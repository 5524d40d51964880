/* proxyreq.h - the head of a request to an HTTP proxy (pure parser).
 *
 * Two forms are served (RFC 9110 9.3.6, RFC 9112 3.2):
 *   CONNECT host:port HTTP/1.1          a blind tunnel (TLS passes through untouched)
 *   GET http://host[:port]/path HTTP/1.1  plain HTTP, any method but CONNECT
 * Everything else is refused with a reason: origin-form ("GET / HTTP/1.1":
 * not a proxy request), https:// or other schemes in absolute form, userinfo
 * (user@host), percent-encoded or non-ASCII hosts, obs-fold, missing or
 * malformed ports, ambiguous framing (Content-Length with
 * Transfer-Encoding, two different Content-Lengths), more than
 * TERN_EGRESS_MAX_HEADERS fields.
 *
 * Hosts come out normalised: names lower case without a trailing dot, IPv6
 * literals without brackets, and every IP literal (dotted-quad IPv4 or
 * IPv6) decoded into family/addr. Only strict dotted-quad IPv4 is an
 * address; other numeric forms ("127.1", "0x7f.0.0.1") stay names, which no
 * allowlist entry can match (an entry's last label starts with a letter).
 *
 * Nothing the client sends identifies it: Proxy-Authorization, Forwarded,
 * X-Forwarded-For and the like are never read (the proxy knows the client
 * by its address), and the hop-by-hop ones are not passed on.
 */
#ifndef TERN_PROXYREQ_H
#define TERN_PROXYREQ_H

#include "base/buf.h"
#include "base/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PROXYREQ_MAX_HOST 255 /* bytes of a host as written (names: 253) */

enum proxyreq_kind { PROXYREQ_CONNECT = 1, PROXYREQ_FORWARD };

/* A host and port. family is 0 for a name, AF_INET/AF_INET6 for a literal. */
struct proxyreq_target {
    char host[PROXYREQ_MAX_HOST + 1];
    int family;
    uint8_t addr[16];
    int port;
};

struct proxyreq {
    enum proxyreq_kind kind;
    char method[24];
    struct proxyreq_target target;
    char *path;    /* FORWARD: origin-form target ("/simple/?q"); owned */
    bool http10;   /* the request said HTTP/1.0 */
    /* FORWARD: the end-to-end header fields to pass on, each
     * "Name: value\r\n" (Host, hop-by-hop fields and those named in
     * Connection removed); owned */
    char *headers;
    size_t headers_len;
};

/* Parses a request head: head[0..len) holds the request line and header
 * fields and ends with the empty line ("\r\n\r\n"; bare "\n" line ends are
 * accepted too). Returns 0 and *ret (free with proxyreq_done), or
 * TERN_EPARSE with a one-line reason in err (for a 400 answer). */
int proxyreq_parse(const char *head, size_t len, struct proxyreq *ret, struct tern_err *err);
void proxyreq_done(struct proxyreq *r);

/* Parses "host:port" (authority form; "[v6]:port" for IPv6) from s[0..n).
 * default_port > 0 makes the port optional. Returns 0 and *ret, or
 * TERN_EPARSE with the reason in err. */
int proxyreq_hostport(const char *s, size_t n, int default_port, struct proxyreq_target *ret,
                      struct tern_err *err);

/* Parses an absolute-form URI "http://host[:port][/path][?query]" from
 * s[0..n). Returns 0, *ret and a new *ret_path (origin form, "/" when the
 * URI has no path), or TERN_EPARSE with the reason in err. */
int proxyreq_absolute_uri(const char *s, size_t n, struct proxyreq_target *ret, char **ret_path,
                          struct tern_err *err);

/* The head to send upstream for a FORWARD request: "METHOD path HTTP/1.1",
 * Host from the URI (a client's own Host field is dropped, RFC 9112 3.2.2),
 * the kept fields, "Connection: close" (one request per connection), the
 * empty line. Appended to out. */
void proxyreq_upstream_head(const struct proxyreq *r, struct buf *out);

/* "host:port" as a client would write it ("[::1]:443"), into out. */
void proxyreq_target_str(const struct proxyreq_target *t, char *out, size_t n);

#endif
