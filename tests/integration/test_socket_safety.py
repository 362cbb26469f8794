#!/usr/bin/python3
"""Who owns the socket: its directory, a live socket at the path, the
socket's group, and the identity of the server a client talks to.

  - A non-root user without XDG_RUNTIME_DIR gets /tmp/aural-UID. Another
    local user can create that directory first (mode 777, or a symbolic
    link to one of theirs); aurald must then refuse to start, naming the
    directory, its owner and its mode, and the clients must refuse to use
    it.
  - A client (aural send, aural stats, the Python client) talks only to a
    server run by the user itself, root, or the service's user; one run by
    another user is refused before a byte is sent.
  - aurald does not remove a socket something else is listening on (the
    one of aurald.socket, say): it refuses to start and leaves it alone.
  - With --group G, the socket aurald binds (and a directory it creates
    for it) belongs to group G, so that members of G can connect.

Needs root (it creates users and a group, and runs processes as them);
skipped otherwise. Run by meson (`meson test -C build socket_safety`) with
AURALD_BIN, AURAL_BIN and AURAL_TEST_DATA set; prints
`integration: N passed, M failed` at the end.
"""

import grp
import json
import os
import pwd
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_daemon  # noqa: E402
from test_daemon import AURAL, AURALD, SAMPLE, TINY, DaemonTest  # noqa: E402

PYDIR = os.path.abspath(os.path.join(HERE, "..", "..", "tools", "python"))
AURALD_ABS = os.path.abspath(AURALD)
AURAL_ABS = os.path.abspath(AURAL)
TINY_ABS = os.path.abspath(TINY)

# Users and a group of this test only; removed at the end.
USER_A = "auralsk-a"     # the victim, a member of GROUP
USER_B = "auralsk-b"     # another local user
GROUP = "auralsk-g"

# A listener run as another user: it accepts connections and reports how
# many bytes each client sent before closing ("got N" per connection).
LISTENER = r"""
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1])
os.chmod(sys.argv[1], 0o777)
s.listen(16)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    c.settimeout(3)
    n = 0
    try:
        while True:
            b = c.recv(65536)
            if not b:
                break
            if b == b"\0report\0":
                sys.exit(0)
            n += len(b)
            c.close()
            break
    except OSError:
        pass
    print("got %d" % n, flush=True)
    c.close()
"""

# The Python client as some user: prints "ok" or the error it raised.
PY_CLIENT = r"""
import sys
sys.path.insert(0, %r)
import aural_client as ac
try:
    with ac.Client(sys.argv[1] if len(sys.argv) > 1 else None, timeout=5) as c:
        c.ping(b"p")
    print("ok")
except Exception as e:
    print("refused: %%s: %%s" %% (type(e).__name__, e))
""" % PYDIR

# A raw HELLO: prints the type of the first reply (2 = WELCOME).
PROBE = r"""
import socket, struct, json, sys
s = socket.socket(socket.AF_UNIX); s.settimeout(5)
s.connect(sys.argv[1])
p = json.dumps({"versions": [1]}).encode()
s.sendall(struct.pack("<IBBHII", 0x4C525541, 1, 1, 0, 0, len(p)) + p)
h = s.recv(16)
print(h[5])
"""


def sh(*args):
    return subprocess.run(list(args), capture_output=True, text=True)


def remove_user(name):
    if sh("getent", "passwd", name).returncode == 0:
        sh("userdel", name)
    if sh("getent", "group", name).returncode == 0:
        sh("groupdel", name)


def add_with_retry(*args):
    # /etc/passwd may be locked for a moment by another useradd.
    for _ in range(50):
        p = sh(*args)
        if p.returncode == 0:
            return
        time.sleep(0.1)
    raise AssertionError("%s: %s" % (" ".join(args), p.stderr))


def user_env(**extra):
    """The environment of a user's process: no XDG_RUNTIME_DIR and no
    AURAL_SOCKET, so that the default path is /tmp/aural-UID."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("XDG_RUNTIME_DIR", "AURAL_SOCKET",
                        "AURAL_SERVER_USER")}
    env["HOME"] = "/"
    env.update(extra)
    return env


@unittest.skipUnless(os.geteuid() == 0, "needs root to create users")
class SocketSafetyTest(DaemonTest):
    @classmethod
    def setUpClass(cls):
        for u in (USER_A, USER_B):
            remove_user(u)
        if sh("getent", "group", GROUP).returncode == 0:
            sh("groupdel", GROUP)
        add_with_retry("groupadd", GROUP)
        add_with_retry("useradd", "-M", "-U", "-s", "/usr/sbin/nologin",
                       "-G", GROUP, USER_A)
        add_with_retry("useradd", "-M", "-U", "-s", "/usr/sbin/nologin",
                       USER_B)
        cls.a = pwd.getpwnam(USER_A)
        cls.b = pwd.getpwnam(USER_B)
        cls.gid = grp.getgrnam(GROUP).gr_gid
        cls.a_dir = "/tmp/aural-%d" % cls.a.pw_uid

    @classmethod
    def tearDownClass(cls):
        cls.clean_dir(cls.a_dir)
        for u in (USER_A, USER_B):
            remove_user(u)
        sh("groupdel", GROUP)

    @staticmethod
    def clean_dir(path):
        if os.path.islink(path) or os.path.isfile(path):
            os.unlink(path)
        elif os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)

    def setUp(self):
        super().setUp()
        os.chmod(self.tmp, 0o755)  # the users reach what is under it
        self.clean_dir(self.a_dir)
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        self.clean_dir(self.a_dir)
        super().tearDown()

    def as_user(self, pw):
        return ["setpriv", "--reuid=%d" % pw.pw_uid, "--regid=%d" % pw.pw_gid,
                "--init-groups"]

    def aurald_as(self, pw, *args, timeout=20):
        """Runs aurald as user pw with the default socket path. Returns
        (exit status, output), or (None, output) when it started serving
        (it is then stopped)."""
        log_path = os.path.join(self.tmp, "aurald-%d.log" % time.monotonic_ns())
        with open(log_path, "w") as log:
            p = subprocess.Popen(
                self.as_user(pw) + [AURALD_ABS, "-m", TINY_ABS, "--no-config",
                                    "--threads", "1"] + list(args),
                stdout=log, stderr=subprocess.STDOUT, env=user_env(),
                cwd="/")
            self.procs.append(p)
            deadline = time.monotonic() + timeout
            while p.poll() is None and time.monotonic() < deadline:
                with open(log_path) as f:
                    if "aurald info: serving" in f.read():
                        break
                time.sleep(0.05)
            serving = p.poll() is None
            if serving:
                p.send_signal(signal.SIGTERM)
                p.wait(10)
            with open(log_path) as f:
                out = f.read()
        return (None if serving else p.returncode), out

    def listener_as(self, pw, path):
        p = subprocess.Popen(self.as_user(pw) + [sys.executable, "-c",
                                                 LISTENER, path],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=user_env(), cwd="/")
        self.procs.append(p)
        self.assertEqual(p.stdout.readline().strip(), "ready", p.stderr)
        return p

    def listener_report(self, p, path):
        """The byte counts the listener saw, one per connection. The clients
        have exited, so their connections wait in the listen queue ahead of
        this one, which asks the listener to stop: no connection is missed
        however slowly the listener got to them."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(path)
            s.sendall(b"\0report\0")
            out, _ = p.communicate(10)
        return [int(line.split()[1]) for line in out.splitlines()
                if line.startswith("got ")]

    def client_as(self, pw, *args, env=None):
        return subprocess.run(self.as_user(pw) + list(args),
                              capture_output=True, text=True, timeout=30,
                              env=env or user_env(), cwd="/")

    def assert_clean(self, text):
        """No sanitizer report (a refusal exits 1, so its status cannot
        carry LeakSanitizer's verdict)."""
        for mark in ("Sanitizer", "runtime error", "ThreadSanitizer"):
            self.assertNotIn(mark, text)

    def assert_refused_dir(self, rc, out, what):
        self.assertIsNotNone(rc, "aurald started in %s:\n%s" % (what, out))
        self.assertNotEqual(rc, 0, out)
        self.assert_clean(out)
        self.assertIn(self.a_dir, out)
        self.assertIn(what, out)

    # --- the directory of the default socket --------------------------------

    def test_own_default_dir_is_private_and_used(self):
        """Nothing at /tmp/aural-UID: aurald makes it, mode 0700, and the
        clients find the daemon there by default."""
        log = open(os.path.join(self.tmp, "a.log"), "w")
        p = subprocess.Popen(
            self.as_user(self.a) + [AURALD_ABS, "-m", TINY_ABS, "--no-config",
                                    "--threads", "1"],
            stdout=log, stderr=subprocess.STDOUT, env=user_env(), cwd="/")
        self.procs.append(p)
        deadline = time.monotonic() + 20
        while "aurald info: serving" not in open(log.name).read():
            # (the socket file exists from bind(), before listen())
            self.assertIsNone(p.poll(), open(log.name).read())
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        st = os.lstat(self.a_dir)
        self.assertTrue(stat.S_ISDIR(st.st_mode))
        self.assertEqual(st.st_uid, self.a.pw_uid)
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o700)
        r = self.client_as(self.a, AURAL_ABS, "stats", "--json")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r = self.client_as(self.a, sys.executable, "-c", PY_CLIENT)
        self.assertEqual(r.stdout.strip(), "ok", r.stdout + r.stderr)
        p.send_signal(signal.SIGTERM)
        self.assertEqual(p.wait(10), 0, open(log.name).read())
        log.close()

    def test_default_dir_open_to_others_is_refused(self):
        """User B did 'mkdir -m 777 /tmp/aural-<uid of A>' first."""
        os.mkdir(self.a_dir)
        os.chown(self.a_dir, self.b.pw_uid, self.b.pw_gid)
        os.chmod(self.a_dir, 0o777)
        rc, out = self.aurald_as(self.a)
        self.assert_refused_dir(rc, out, "owned by uid %d" % self.b.pw_uid)
        self.assertIn("0777", out)
        self.assertEqual(os.listdir(self.a_dir), [], "aurald used it")

    def test_own_default_dir_writable_by_others_is_refused(self):
        os.mkdir(self.a_dir)
        os.chown(self.a_dir, self.a.pw_uid, self.a.pw_gid)
        os.chmod(self.a_dir, 0o777)
        rc, out = self.aurald_as(self.a)
        self.assert_refused_dir(rc, out, "mode 0777")

    def test_default_dir_owned_by_another_user_is_refused(self):
        os.mkdir(self.a_dir)
        os.chown(self.a_dir, self.b.pw_uid, self.b.pw_gid)
        os.chmod(self.a_dir, 0o755)
        rc, out = self.aurald_as(self.a)
        self.assert_refused_dir(rc, out, "owned by uid %d" % self.b.pw_uid)

    def test_default_dir_symlink_is_refused(self):
        target = os.path.join(self.tmp, "b-dir")
        os.mkdir(target)
        os.chown(target, self.b.pw_uid, self.b.pw_gid)
        os.chmod(target, 0o777)
        os.symlink(target, self.a_dir)
        rc, out = self.aurald_as(self.a)
        self.assert_refused_dir(rc, out, "symbolic link")
        self.assertEqual(os.listdir(target), [], "aurald followed the link")

    def test_default_dir_symlink_to_own_dir_is_refused(self):
        # Even a link to a directory of A's: the link itself is B's.
        target = os.path.join(self.tmp, "a-dir")
        os.mkdir(target, 0o700)
        os.chown(target, self.a.pw_uid, self.a.pw_gid)
        os.symlink(target, self.a_dir)
        os.lchown(self.a_dir, self.b.pw_uid, self.b.pw_gid)
        rc, out = self.aurald_as(self.a)
        self.assert_refused_dir(rc, out, "symbolic link")

    # --- clients check whom they talk to ------------------------------------

    def b_socket_dir(self):
        d = os.path.join(self.tmp, "b")
        os.mkdir(d)
        os.chown(d, self.b.pw_uid, self.b.pw_gid)
        os.chmod(d, 0o755)
        return os.path.join(d, "aural.sock")

    def test_clients_refuse_a_server_of_another_user(self):
        """B listens at a path A's clients are given with -s: they connect
        but send nothing, and say whose server it is."""
        path = self.b_socket_dir()
        lis = self.listener_as(self.b, path)
        runs = [
            ("aural stats", self.client_as(self.a, AURAL_ABS, "stats", "-s",
                                           path)),
            ("aural send", self.client_as(self.a, AURAL_ABS, "send", "-q",
                                          "-s", path, SAMPLE)),
        ]
        py = self.client_as(self.a, sys.executable, "-c", PY_CLIENT, path)
        # root's clients too: root trusts only root and the service user.
        root = subprocess.run([AURAL_ABS, "stats", "-s", path],
                              capture_output=True, text=True, timeout=30,
                              env=user_env())
        got = self.listener_report(lis, path)
        # Four connections (they did reach B's listener), no byte sent.
        self.assertEqual(got, [0, 0, 0, 0])
        for what, r in runs + [("aural stats as root", root)]:
            self.assertNotEqual(r.returncode, 0, what)
            self.assert_clean(r.stderr)
            self.assertIn("uid %d" % self.b.pw_uid, r.stderr, what)
            self.assertIn(USER_B, r.stderr, what)
        self.assertTrue(py.stdout.startswith("refused: ConnectionError"),
                        py.stdout + py.stderr)
        self.assertIn("uid %d" % self.b.pw_uid, py.stdout)

    def test_client_trusts_a_named_server_user(self):
        """AURAL_SERVER_USER names one more user whose server is trusted."""
        path = self.b_socket_dir()
        lis = self.listener_as(self.b, path)
        r = self.client_as(self.a, AURAL_ABS, "stats", "-s", path,
                           env=user_env(AURAL_SERVER_USER=USER_B))
        py = self.client_as(self.a, sys.executable, "-c", PY_CLIENT, path,
                            env=user_env(AURAL_SERVER_USER=USER_B))
        got = self.listener_report(lis, path)
        self.assertNotEqual(r.returncode, 0)  # no WELCOME from the listener
        self.assertNotIn("uid %d" % self.b.pw_uid, r.stderr)
        self.assertFalse(py.stdout.startswith("refused: ConnectionError: "
                                              "%s: served by" % path),
                         py.stdout)
        self.assertEqual(len(got), 2)
        self.assertTrue(all(n > 0 for n in got), got)  # HELLO was sent

    def test_clients_refuse_a_hijacked_default_dir(self):
        """B made /tmp/aural-<uid of A> (mode 777) and listens in it; A's
        clients, with no -s, do not use it."""
        os.mkdir(self.a_dir)
        os.chown(self.a_dir, self.b.pw_uid, self.b.pw_gid)
        os.chmod(self.a_dir, 0o777)
        path = os.path.join(self.a_dir, "aural.sock")
        lis = self.listener_as(self.b, path)
        stats = self.client_as(self.a, AURAL_ABS, "stats")
        send = self.client_as(self.a, AURAL_ABS, "send", "-q", SAMPLE)
        py = self.client_as(self.a, sys.executable, "-c", PY_CLIENT)
        got = self.listener_report(lis, path)
        self.assertEqual(got, [], "the clients connected to B's socket")
        for what, r in (("aural stats", stats), ("aural send", send)):
            self.assertNotEqual(r.returncode, 0, what)
            self.assert_clean(r.stderr)
            self.assertIn(self.a_dir + " belongs to another user", r.stderr,
                          what)
        self.assertTrue(py.stdout.startswith("refused: ConnectionError"),
                        py.stdout + py.stderr)
        self.assertIn(self.a_dir + " belongs to another user", py.stdout)

    # --- a live socket is not stale -----------------------------------------

    def test_live_socket_is_not_removed(self):
        """Something (aurald.socket, say) listens at the path: aurald
        refuses to start and leaves the socket alone, at start and exit."""
        path = os.path.join(self.tmp, "live.sock")
        lis = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        lis.bind(path)
        lis.listen(8)
        lis.settimeout(5)
        ino = os.lstat(path).st_ino
        log_path = os.path.join(self.tmp, "live.log")
        with open(log_path, "w") as log:
            p = subprocess.Popen([AURALD, "-m", TINY, "-s", path,
                                  "--no-config", "--threads", "1"],
                                 stdout=log, stderr=subprocess.STDOUT)
            self.procs.append(p)
            try:
                rc = p.wait(20)
            except subprocess.TimeoutExpired:
                rc = None
                p.send_signal(signal.SIGTERM)
                p.wait(10)
        with open(log_path) as f:
            out = f.read()
        self.assertIsNotNone(rc, "aurald took over a live socket:\n" + out)
        self.assertNotEqual(rc, 0, out)
        self.assertIn("socket %s is in use" % path, out)
        self.assert_clean(out)
        st = os.lstat(path)
        self.assertTrue(stat.S_ISSOCK(st.st_mode))
        self.assertEqual(st.st_ino, ino, "the socket was replaced")
        self.assertFalse(os.path.exists(path + ".lock"), "lock file left")
        # Our listener still gets the connections made to the path.
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.settimeout(5)
        c.connect(path)
        peer, _ = lis.accept()
        peer.close()
        c.close()
        lis.close()

    # --- --group on a socket aurald binds -----------------------------------

    def test_group_members_can_connect(self):
        """root runs aurald --group G; a member of G (not root's group, and
        only a supplementary member) connects and is welcomed."""
        # The socket in a directory that exists (root's, 0755) ...
        path = os.path.join(self.tmp, "aural.sock")
        d = self.start("--group", GROUP, socket_path=path)
        r = self.client_as(self.a, sys.executable, "-c", PROBE, path)
        self.assertEqual(r.stdout.strip(), "2", r.stdout + r.stderr)
        st = os.lstat(path)
        self.assertEqual(st.st_gid, self.gid)
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o660)
        # ... and B, not in G, is kept out by the socket's mode.
        r = self.client_as(self.b, sys.executable, "-c", PROBE, path)
        self.assertIn("PermissionError", r.stderr)
        self.stop_clean(d)
        # In a directory aurald makes: it gets group G, mode 0710.
        sub = os.path.join(self.tmp, "sub")
        path = os.path.join(sub, "aural.sock")
        d = self.start("--group", GROUP, socket_path=path)
        r = self.client_as(self.a, sys.executable, "-c", PROBE, path)
        self.assertEqual(r.stdout.strip(), "2", r.stdout + r.stderr)
        st = os.lstat(sub)
        self.assertEqual((st.st_uid, st.st_gid), (0, self.gid))
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o710)
        self.assertEqual(os.lstat(path).st_gid, self.gid)
        self.stop_clean(d)


if __name__ == "__main__":
    test_daemon.main(__name__)
