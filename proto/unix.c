/*
 * The Unix socket transport's conventions (PROTOCOL.md §1), shared by the
 * server and its clients so that both look in the same place and name
 * users the same way.
 */
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

#include "aural/proto.h"

int aural_proto_default_socket(char *out, size_t cap) {
  const char *env = getenv("AURAL_SOCKET");
  const char *xdg = getenv("XDG_RUNTIME_DIR");
  int n;
  if (env != NULL && env[0] != '\0')
    n = snprintf(out, cap, "%s", env);
  else if (xdg != NULL && xdg[0] != '\0')
    n = snprintf(out, cap, "%s/aural.sock", xdg);
  else if (geteuid() == 0)
    n = snprintf(out, cap, "%s", AURAL_PROTO_SYSTEM_SOCKET);
  else
    n = snprintf(out, cap, "/tmp/aural-%u/aural.sock", (unsigned)geteuid());
  return n < 0 || (size_t)n >= cap ? -1 : 0;
}

const char *aural_proto_user_name(unsigned uid, char *buf, size_t len) {
  struct passwd pw, *res = NULL;
  char tmp[1024];
  if (getpwuid_r((uid_t)uid, &pw, tmp, sizeof tmp, &res) == 0 && res != NULL)
    snprintf(buf, len, "%s", pw.pw_name);
  else
    snprintf(buf, len, "no such user");
  return buf;
}
