#!/usr/bin/env python3
"""Checks that the man pages document exactly the options the programs have.

    check_man_options.py AURALD AURAL MANDIR

AURALD and AURAL are the built (or installed) programs, MANDIR holds the
formatted-for-install pages aurald.8 and aural.1. For aurald, and for aural
and each of its commands, every option that `--help` prints (short and
long) must appear in the matching part of the man page (aurald.8 OPTIONS;
aural.1 OPTIONS, and the subsection "aural COMMAND" of COMMANDS), and every
option the page defines there (the tag of a .TP item) must be one that
`--help` prints, so that a removed option does not linger in the page.
Every command listed by `aural --help` must have its subsection. Both pages
must format without warnings (groff -ww, man --warnings).

Exit status 0 when all holds, 1 with one line per problem otherwise.
"""

import os
import re
import subprocess
import sys

HELP_OPT = re.compile(
    r"^\s{1,8}(?:(-[A-Za-z0-9]),\s+)?(--[a-z0-9][a-z0-9-]*)")
LONG_OPT = re.compile(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)")
SHORT_OPT = re.compile(r"(?<![\w-])(-[A-Za-z0-9])(?![\w-])")


def help_text(argv):
    r = subprocess.run(argv + ["--help"], capture_output=True, text=True,
                       timeout=30)
    if r.returncode != 0:
        sys.exit("%s --help: exit status %d: %s"
                 % (" ".join(argv), r.returncode, r.stderr.strip()))
    return r.stdout


def help_options(text):
    """Options of a --help text: the set of '-x' and '--long' it defines."""
    opts = set()
    for line in text.splitlines():
        m = HELP_OPT.match(line)
        if m:
            if m.group(1):
                opts.add(m.group(1))
            opts.add(m.group(2))
    return opts


def help_commands(text):
    """Command names listed under 'Commands:' in aural --help."""
    cmds, inside = [], False
    for line in text.splitlines():
        if line.strip() == "Commands:":
            inside = True
        elif inside and not line.strip():
            break
        elif inside:
            cmds.append(line.split()[0])
    return cmds


def plain(roff):
    """Roff source to text good enough for finding option names."""
    s = roff.replace("\\-", "-").replace("\\%", "").replace("\\&", "")
    s = re.sub(r"\\f[BIRP]", "", s)
    return re.sub(r"\\\(\w\w", " ", s)


def sections(roff):
    """{('SH', name) or ('SS', name): [lines]} of a roff page."""
    out, key = {}, None
    for line in roff.splitlines():
        m = re.match(r'^\.(SH|SS)\s+"?([^"]*)"?\s*$', line)
        if m:
            key = (m.group(1), m.group(2))
            out[key] = []
            if m.group(1) == "SS":
                continue
        elif key is not None:
            out[key].append(line)
    return out


def page_options(lines):
    """(every option named in these lines, options defined by .TP tags)."""
    text = plain("\n".join(lines))
    named = set(LONG_OPT.findall(text)) | set(SHORT_OPT.findall(text))
    defined = set()
    for i, line in enumerate(lines[:-1]):
        if line.startswith(".TP"):
            tag = plain(lines[i + 1])
            if tag.startswith((".BR", ".BI", ".B ", ".IR")) or \
                    tag.lstrip().startswith("-"):
                defined |= set(LONG_OPT.findall(tag))
                defined |= set(SHORT_OPT.findall(tag))
    return named, defined


def compare(what, help_opts, lines, problems):
    if lines is None:
        problems.append("%s: no such part in the man page" % what)
        return
    named, defined = page_options(lines)
    for o in sorted(help_opts - named):
        problems.append("%s: %s is in --help but not in the man page"
                        % (what, o))
    for o in sorted(defined - help_opts):
        problems.append("%s: the man page defines %s, which --help does "
                        "not list" % (what, o))


def render_warnings(path, problems):
    env = dict(os.environ, MANWIDTH="80", LC_ALL="C.UTF-8")
    for argv in (["groff", "-man", "-ww", "-z", "-Tutf8", path],
                 ["man", "--warnings", "-l", path]):
        r = subprocess.run(argv, capture_output=True, text=True, env=env,
                           timeout=60)
        if r.returncode != 0 or r.stderr.strip():
            problems.append("%s: %s: %s" % (path, " ".join(argv[:2]),
                                            r.stderr.strip() or
                                            "exit %d" % r.returncode))


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    aurald, aural, mandir = sys.argv[1:]
    problems = []
    pages = {}
    for name in ("aurald.8", "aural.1"):
        path = os.path.join(mandir, name)
        with open(path, encoding="utf-8") as f:
            pages[name] = sections(f.read())
        render_warnings(path, problems)

    compare("aurald", help_options(help_text([aurald])),
            pages["aurald.8"].get(("SH", "OPTIONS")), problems)

    top = help_text([aural])
    compare("aural", help_options(top),
            pages["aural.1"].get(("SH", "OPTIONS")), problems)
    cmds = help_commands(top)
    if not cmds:
        problems.append("aural --help lists no commands")
    n_checked = 0
    for cmd in cmds:
        opts = help_options(help_text([aural, cmd]))
        compare("aural " + cmd, opts,
                pages["aural.1"].get(("SS", "aural " + cmd)), problems)
        n_checked += len(opts)
    documented = {k[1] for k in pages["aural.1"] if k[0] == "SS"}
    for extra in sorted(documented - {"aural " + c for c in cmds}):
        problems.append("aural.1 documents '%s', which aural --help does "
                        "not list" % extra)

    for p in problems:
        print("check_man_options: " + p)
    if problems:
        return 1
    print("check_man_options: aurald and aural with %d commands (%d command "
          "options): all documented" % (len(cmds), n_checked))
    return 0


if __name__ == "__main__":
    sys.exit(main())
