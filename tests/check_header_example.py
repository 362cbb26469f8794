#!/usr/bin/python3
"""Compiles, links and runs the usage example at the top of a public header
(its indented code lines), as the body of main(), so that the example a
reader copies is real code.

    check_header_example.py CC HEADER INCLUDE_DIR LIBRARY MODEL [SANITIZE]

The example reads float samples on standard input and may name
"model.safetensors", which is replaced by MODEL. Fed 1.5 s of a tone (raw
float32), it must exit 0 and print its chunks, the last one final.
SANITIZE is the build's b_sanitize ("none" or e.g. "address,undefined"):
the example is built with the same sanitizers as the library.
"""
import math
import os
import struct
import subprocess
import sys
import tempfile


def example(header):
    """The code lines of the header's first comment, without ' *   '."""
    lines = open(header).read().split("*/", 1)[0].splitlines()
    code = [ln[5:] for ln in lines if ln.startswith(" *   ")]
    if not code:
        sys.exit("check_header_example: %s has no example" % header)
    return code


def main():
    cc, header, inc, lib, model = sys.argv[1:6]
    sanitize = sys.argv[6] if len(sys.argv) > 6 else "none"
    flags = [] if sanitize == "none" else ["-fsanitize=" + sanitize]
    code = example(header)
    includes = [ln for ln in code if ln.startswith("#include")]
    body = [ln for ln in code if not ln.startswith("#include")]
    src = "\n".join(["#include <stdio.h>", "#include <stdlib.h>"] + includes +
                    ["int main(void) {"] +
                    ["  " + ln.replace('"model.safetensors"', '"%s"' % model)
                     for ln in body] + ["  return 0;", "}", ""])
    with tempfile.TemporaryDirectory() as tmp:
        c = os.path.join(tmp, "example.c")
        exe = os.path.join(tmp, "example")
        with open(c, "w") as f:
            f.write(src)
        p = subprocess.run([cc] + flags + ["-std=c11", "-Wall", "-Wextra",
                            "-Werror",
                            ] + ["-I" + d for d in inc.split(os.pathsep)] + [
                            c, lib, "-lm", "-o", exe,
                            "-Wl,-rpath," + os.path.dirname(os.path.abspath(lib))],
                           capture_output=True, text=True)
        if p.returncode != 0:
            print(src)
            sys.exit("check_header_example: %s's example does not build:\n%s"
                     % (header, p.stderr))
        tone = struct.pack("<%df" % 66150, *(
            0.3 * math.sin(2 * math.pi * 440 * i / 44100)
            for i in range(66150)))
        r = subprocess.run([exe], input=tone, capture_output=True,
                           timeout=120)
    out = r.stdout.decode()
    if r.returncode != 0 or "(final)" not in out:
        sys.exit("check_header_example: the example exited %d:\n%s%s"
                 % (r.returncode, out, r.stderr.decode()))
    print(out, end="")
    print("check_header_example: %s builds and runs" %
          os.path.basename(header))


if __name__ == "__main__":
    main()
