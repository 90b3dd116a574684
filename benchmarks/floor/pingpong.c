/* The machine's own floor for `npm run bench:floor` (floor-bench.ts): no Node, no
 * database. A C client paced at a fixed rate (latency from each request's
 * scheduled send time) posts a small HTTP/1.1 request on one keep-alive loopback
 * TCP connection to a C server (a forked child) that answers at once.
 * Usage: pingpong <rate per s> <seconds> [port]: with a port, to the server
 * already listening there on 127.0.0.1 instead. Prints one JSON line:
 * {"count":N,"p50":ms,"p99":ms,"max":ms,"over5":N,"errors":N} (errors: answers other than 200). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
static int by_value(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

/* Reads one whole HTTP message (headers + Content-Length body) into buf; returns its length, -1 on EOF. */
static int read_message(int fd, char *buf, int size, int *have) {
  for (;;) {
    buf[*have] = 0;
    char *end = strstr(buf, "\r\n\r\n");
    if (end) {
      char *cl = strcasestr(buf, "content-length:");
      int need = (int)(end - buf) + 4 + (cl && cl < end ? atoi(cl + 15) : 0);
      if (*have >= need) return need;
    }
    int r = read(fd, buf + *have, size - 1 - *have);
    if (r <= 0) return -1;
    *have += r;
  }
}

int main(int argc, char **argv) {
  if (argc != 3 && argc != 4) { fprintf(stderr, "usage: pingpong <rate> <seconds> [port]\n"); return 2; }
  double rate = atof(argv[1]); int n = (int)(rate * atof(argv[2]));
  if (rate <= 0 || n <= 0) { fprintf(stderr, "pingpong: rate and seconds must be positive\n"); return 2; }
  int one = 1, listener = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = 0 };
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  socklen_t len = sizeof addr;
  if (bind(listener, (struct sockaddr *)&addr, sizeof addr) || listen(listener, 4) || getsockname(listener, (struct sockaddr *)&addr, &len)) { perror("pingpong: listen"); return 1; }
  char buf[65536]; int have = 0;
  pid_t server = -1;
  if (argc == 4) { close(listener); addr.sin_port = htons(atoi(argv[3])); } else server = fork();
  if (server == 0) {
    const char *resp = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
    int c = accept(listener, NULL, NULL);
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    for (int m; (m = read_message(c, buf, sizeof buf, &have)) > 0; ) {
      if (write(c, resp, strlen(resp)) < 0) break;
      memmove(buf, buf + m, have - m); have -= m;
    }
    _exit(0);
  }
  int s = socket(AF_INET, SOCK_STREAM, 0);
  setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (connect(s, (struct sockaddr *)&addr, sizeof addr)) { perror("pingpong: connect"); if (server > 0) kill(server, SIGKILL); return 1; }
  const char *body = "{\"jurisdiction\":\"DE\",\"amount\":{\"value\":10000,\"currency\":\"EUR\"}}";
  double *lat = malloc(sizeof(double) * n), start = now_ms() + 50, interval = 1000.0 / rate;
  char req[512];
  int errors = 0;
  for (int i = 0; i < n; i++) {
    double at = start + i * interval, wait = at - now_ms();
    if (wait > 0) { struct timespec ts = { (time_t)(wait / 1e3), (long)((wait - (time_t)(wait / 1e3) * 1e3) * 1e6) }; nanosleep(&ts, NULL); }
    int l = snprintf(req, sizeof req, "POST /q HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nIdempotency-Key: floor-%d-%d\r\nContent-Length: %zu\r\n\r\n%s", (int)getpid(), i, strlen(body), body);
    int m;
    if (write(s, req, l) != l || (m = read_message(s, buf, sizeof buf, &have)) < 0) { perror("pingpong: request"); if (server > 0) kill(server, SIGKILL); return 1; }
    lat[i] = now_ms() - at;
    if (strncmp(buf, "HTTP/1.1 200 ", 13) != 0) errors++;
    memmove(buf, buf + m, have - m); have -= m;
  }
  close(s);
  if (server > 0) waitpid(server, NULL, 0);
  qsort(lat, n, sizeof(double), by_value);
  int over5 = 0;
  for (int i = 0; i < n; i++) over5 += lat[i] >= 5;
  printf("{\"count\":%d,\"p50\":%.3f,\"p99\":%.3f,\"max\":%.3f,\"over5\":%d,\"errors\":%d}\n", n, lat[(n - 1) / 2], lat[(int)((n - 1) * 0.99)], lat[n - 1], over5, errors);
  return 0;
}
