#!/usr/bin/python3
"""Writes the seed corpus of fuzz_daemon: whole client sessions (several
messages each) that reach every request handler, to tests/fuzz/corpus/daemon.
Deterministic; run from the repository's top."""

import json
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus",
                   "daemon")


def msg(mtype, payload=b"", sid=0):
    if isinstance(payload, dict):
        payload = json.dumps(payload, separators=(",", ":")).encode()
    return struct.pack("<IBBHII", 0x4C525541, 1, mtype, 0, sid,
                       len(payload)) + payload


HELLO = msg(1, {"versions": [1], "client": "seed"})
OPEN16 = msg(0x10, {"name": "s", "sample_rate": 16000, "channels": 1,
                    "format": "s16"})
OPENF = msg(0x10, {"sample_rate": 8000, "channels": 2, "format": "f32"})
tone = b"".join(struct.pack("<h", (i * 37) % 2000 - 1000) for i in range(1600))
ftone = b"".join(struct.pack("<ff", 0.1, -0.1) for _ in range(400))

SEEDS = {
    "subscribe_all": HELLO + msg(8, {"all": True, "outputs": ["embeddings",
                                                              "logits",
                                                              "text"],
                                     "dtype": "f16"}),
    "push_and_close": HELLO + msg(8, {"stream": "s"}) + OPEN16 +
    msg(0x12, tone, 1) + msg(0x12, tone, 1) + msg(0x13, b"", 1),
    "push_f32_no_close": HELLO + OPENF + msg(0x12, ftone, 1),
    "stats_list_ping": HELLO + msg(0x15) + msg(6) + msg(4, b"abc"),
    "unsubscribe": HELLO + msg(8, {"stream": "x"}) + msg(0x0A,
                                                         {"subscription": 1}),
    "bad_json": HELLO + msg(8, b'{"all":tru'),
    "no_hello": msg(0x15),
    "garbage": b"GET / HTTP/1.1\r\n\r\n",
    "huge_length": HELLO + struct.pack("<IBBHII", 0x4C525541, 1, 4, 0, 0,
                                       0xFFFFFFFF),
}

os.makedirs(OUT, exist_ok=True)
for name, data in SEEDS.items():
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)
print("wrote %d seeds to %s" % (len(SEEDS), OUT))
