/*
 * http_floor.c - the least CPU an HTTP/1.1 client spends per GET on this
 * host: a measuring stick for bench/remote_latency.py --floor, not part of
 * sluice (whose client is libcurl's).
 *
 * It keeps CONNS keep-alive connections to 127.0.0.1:PORT, sends one plain
 * GET per path read from standard input (cycled until COUNT responses have
 * arrived), reads each response with recv() into one reused buffer and
 * throws the body away: no signing, no parsing beyond Content-Length, no
 * copy, no allocation per request, no second thread. What it spends is
 * then mostly the kernel's (the socket calls, TCP on loopback, epoll), which
 * any client pays; the rest of a real client's cost per request is above it.
 *
 * Usage: http_floor PORT CONNS COUNT < paths
 * Prints one line: requests, bytes, CPU seconds (user, system), and CPU
 * microseconds per request (getrusage of the process).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct {
  int fd;
  long need, got; /* body bytes: Content-Length, received so far */
  int inHeader;
  int headerLen;
  char header[8192];
} Conn;

static char **paths;
static int npaths, sent, port;

static void fail(const char *what) {
  perror(what);
  exit(1);
}

static void connectTo(int ep, Conn *c) {
  struct sockaddr_in a;
  int one = 1;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons((unsigned short)port);
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  c->fd = socket(AF_INET, SOCK_STREAM, 0);
  if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&a, sizeof a) != 0)
    fail("connect");
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
  if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) != 0)
    fail("epoll_ctl");
}

static void request(Conn *c, const char *path) {
  char req[2048];
  int n = snprintf(req, sizeof req,
                   "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", path, port);
  if (send(c->fd, req, (size_t)n, 0) != n)
    fail("send");
  c->inHeader = 1;
  c->headerLen = 0;
  c->need = -1;
  c->got = 0;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: http_floor PORT CONNS COUNT < paths\n");
    return 2;
  }
  port = atoi(argv[1]);
  int conns = atoi(argv[2]);
  long count = atol(argv[3]), done = 0, bytes = 0;
  char line[1024];
  int cap = 1024;
  paths = malloc(sizeof(char *) * (size_t)cap);
  while (fgets(line, sizeof line, stdin)) {
    line[strcspn(line, "\r\n")] = 0;
    if (!*line)
      continue;
    if (npaths == cap)
      paths = realloc(paths, sizeof(char *) * (size_t)(cap *= 2));
    paths[npaths++] = strdup(line);
  }
  if (npaths == 0 || conns < 1 || count < 1) {
    fprintf(stderr, "http_floor: no paths, connections or count\n");
    return 2;
  }
  int ep = epoll_create1(0);
  Conn *cs = calloc((size_t)conns, sizeof(Conn));
  static char buf[1 << 20];
  for (int i = 0; i < conns && sent < count; i++) {
    connectTo(ep, &cs[i]);
    request(&cs[i], paths[sent++ % npaths]);
  }
  struct epoll_event evs[64];
  while (done < count) {
    int n = epoll_wait(ep, evs, 64, 10000);
    if (n <= 0) {
      fprintf(stderr, "http_floor: no response in 10 s\n");
      return 1;
    }
    for (int k = 0; k < n; k++) {
      Conn *c = evs[k].data.ptr;
      long r = recv(c->fd, buf, sizeof buf, 0);
      if ((r == 0 || (r < 0 && errno == ECONNRESET)) && c->inHeader &&
          c->headerLen == 0) {
        /* The server closed an idle connection (its keep-alive limit; a
           reset when the request arrived after its close): send the same
           request on a new one. */
        close(c->fd);
        connectTo(ep, c);
        request(c, paths[(sent - 1) % npaths]);
        continue;
      }
      if (r <= 0)
        fail("recv");
      long off = 0;
      if (c->inHeader) {
        long take = r;
        if (take > (long)sizeof c->header - 1 - c->headerLen)
          take = (long)sizeof c->header - 1 - c->headerLen;
        memcpy(c->header + c->headerLen, buf, (size_t)take);
        c->headerLen += (int)take;
        c->header[c->headerLen] = 0;
        char *end = strstr(c->header, "\r\n\r\n");
        if (!end)
          continue;
        if (strncmp(c->header, "HTTP/1.1 200", 12) != 0) {
          fprintf(stderr, "http_floor: %.40s\n", c->header);
          return 1;
        }
        char *len = strcasestr(c->header, "\r\ncontent-length:");
        if (!len) {
          fprintf(stderr, "http_floor: no Content-Length\n");
          return 1;
        }
        c->need = atol(len + 17);
        off = (long)(end + 4 - c->header) - (c->headerLen - take);
        c->inHeader = 0;
      }
      c->got += r - off;
      bytes += r - off;
      if (c->got >= c->need) {
        ++done;
        if (sent < count)
          request(c, paths[sent++ % npaths]);
      }
    }
  }
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  double user = (double)u.ru_utime.tv_sec + (double)u.ru_utime.tv_usec / 1e6;
  double sys = (double)u.ru_stime.tv_sec + (double)u.ru_stime.tv_usec / 1e6;
  printf("%ld requests, %ld bytes, user %.3f s, system %.3f s, %.1f us per "
         "request\n",
         done, bytes, user, sys, (user + sys) / (double)done * 1e6);
  return 0;
}
