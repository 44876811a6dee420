"""Shell policy: the rules the ``bash`` tool's command must pass before it runs.

``check_shell`` splits the command into simple commands with ``shlex`` (on
``;``, ``&&``, ``||``, ``|``, ``&``, parentheses; ``sudo``, ``env``, ``nohup``,
``command``, ``exec``, ``time``, ``busybox``, ``xargs`` options and
``VAR=value`` prefixes are looked through; ``bash -c "..."`` and ``eval`` are
checked recursively). Output redirections are taken out of each simple command
and their files checked. A ``cd`` is followed lexically, so relative operands
of file-changing commands are judged from where it went (``cd / && rm -rf *``
is ``rm -rf /*``; ``cd .tasks && rm x`` touches ``.tasks``). Each simple
command is checked against ``RULES`` (argv rules) and the raw text against
``RAW_RULES`` (patterns that span commands, such as a pipe into a shell). The
state directories (``PROTECTED_DIRS`` of policy.py) may be read but not named
as a file that a command writes, deletes or moves. ``SHELL_POLICY`` lists every
rule with an example; docs/tools.md prints it. The policy is a guard rail
against accidents, not a sandbox: the bash tool is still arbitrary code in the
workspace.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
from collections.abc import Callable

from .base import Refused
from .policy import PROTECTED_DIRS

SHELLS = {"sh", "bash", "zsh", "dash", "ksh", "fish"}
INTERPRETERS = SHELLS | {"python", "python3", "perl", "ruby", "node"}
WRAPPERS = {"sudo", "doas", "env", "nohup", "command", "exec", "time", "nice", "builtin", "busybox", "toybox"}
KEYWORDS = {"{", "}", "!", "if", "then", "else", "elif", "do", "while", "until"}
PUNCTUATION = ";&|()`"
SYSTEM_DIRS = "bin|boot|dev|etc|home|lib|lib32|lib64|opt|proc|root|run|sbin|srv|sys|usr|var"
DANGEROUS_TARGET = re.compile(
    rf"^(/+\*?|/+({SYSTEM_DIRS})/*\*?|~[^/]*/*\*?|\$\{{?HOME\}}?/*\*?|\.\./*\*?)$"
)
BLOCK_DEVICE = re.compile(r"^/dev/(sd|hd|vd|xvd|nvme|mmcblk|disk|md|dm-|loop|mapper/)")
REDIRECT = re.compile(r"^\d*(>>?|>\||<>)(.*)$")
DELETERS = {"rm", "rmdir", "unlink", "shred"}
WRITERS = DELETERS | {"mv", "truncate", "tee", "touch", "chmod", "chown", "chgrp"}
"""Commands every path operand of which is written, deleted or moved."""
COPIERS = {"cp", "ln", "install", "rsync"}
"""Commands that write only their last operand (or ``-t DIR``)."""
IN_PLACE = {"sed", "perl"}
"""Editors that write their file operands when given ``-i``."""
PATH_CMDS = WRITERS | COPIERS | IN_PLACE | {"find"}
"""Commands whose relative operands are resolved against a tracked ``cd``."""
FIND_TESTS = {"-name", "-iname", "-path", "-ipath", "-wholename", "-iwholename", "-regex", "-iregex",
              "-type", "-xtype", "-newer", "-newermt", "-mtime", "-mmin", "-atime", "-amin", "-ctime",
              "-cmin", "-size", "-empty", "-user", "-group", "-uid", "-gid", "-perm", "-links", "-inum",
              "-samefile", "-lname", "-ilname", "-nouser", "-nogroup", "-used"}
FIND_NAMES = {"-name", "-iname", "-path", "-ipath", "-wholename", "-iwholename"}
XARGS_VALUE_OPTS = {"-a", "-d", "-E", "-I", "-L", "-n", "-P", "-s", "--arg-file", "--delimiter", "--eof",
                    "--replace", "--max-lines", "--max-args", "--max-procs", "--max-chars",
                    "--process-slot-var"}


def _flags(argv: list[str]) -> tuple[str, set[str]]:
    """Short flag letters (``-rf`` → ``rf``) and long flags of ``argv``."""
    short, long = "", set()
    for a in argv[1:]:
        if a.startswith("--"):
            long.add(a.split("=", 1)[0])
        elif a.startswith("-") and len(a) > 1:
            short += a[1:]
    return short, long


def _targets(argv: list[str]) -> list[str]:
    return [a for a in argv[1:] if not a.startswith("-")]


def _values(argv: list[str], options: set[str] | tuple[str, ...]) -> list[str]:
    """The arguments that follow any of ``options`` in ``argv``."""
    return [argv[i + 1] for i in range(1, len(argv) - 1) if argv[i] in options]


def _protected(path: str) -> bool:
    """``path`` names ``.git``, ``.tasks`` or ``.team`` as a component (globs like ``.t*`` too)."""
    for part in path.split("/"):
        if part in PROTECTED_DIRS:
            return True
        if part.startswith(".") and re.search(r"[*?\[]", part):
            if any(fnmatch.fnmatchcase(d, part) for d in PROTECTED_DIRS):
                return True
    return False


def _written(argv: list[str]) -> list[str]:
    """The operands ``argv`` writes, deletes or moves (empty for other commands)."""
    word, ops = argv[0], _targets(argv)
    if word in WRITERS:
        return ops
    if word in COPIERS:
        tdir = _values(argv, ("-t", "--target-directory"))
        tdir += [a.split("=", 1)[1] for a in argv if a.startswith("--target-directory=")]
        return tdir + ops[-1:]
    if word == "dd":
        return [a[3:] for a in argv[1:] if a.startswith("of=")]
    short, long = _flags(argv)
    if word in IN_PLACE and ("i" in short or "--in-place" in long):
        scripts = _values(argv, ("-e", "-f", "-E", "--expression", "--file"))
        ops = [o for o in ops if o not in scripts]
        return ops if scripts else ops[1:]  # without -e the first operand is the script
    return []


def _state_dirs(argv: list[str]) -> bool:
    return any(_protected(t) for t in _written(argv))


def _rm(argv: list[str]) -> bool:
    short, long = _flags(argv)
    recursive = "r" in short or "R" in short or "--recursive" in long
    return "--no-preserve-root" in long or (
        recursive and any(DANGEROUS_TARGET.match(t) or t in (".", "./") for t in _targets(argv))
    )


def _chmod(argv: list[str]) -> bool:
    short, long = _flags(argv)
    recursive = "R" in short or "--recursive" in long
    targets = _targets(argv)[1:]  # the first operand is the mode / owner
    return any(t.rstrip("/") == "" for t in targets) or (
        recursive and any(DANGEROUS_TARGET.match(t) for t in targets)
    )


def _dd(argv: list[str]) -> bool:
    return any(a.startswith("of=") and BLOCK_DEVICE.match(a[3:]) for a in argv[1:])


def _git(argv: list[str]) -> tuple[str, list[str]]:
    """The git subcommand and its arguments (global options such as ``-C dir`` skipped)."""
    i = 1
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] in ("-C", "-c", "--git-dir", "--work-tree", "--namespace") else 1
    return (argv[i], argv[i + 1 :]) if i < len(argv) else ("", [])


def _git_push_force(argv: list[str]) -> bool:
    sub, rest = _git(argv)
    return sub == "push" and any(
        a in ("-f", "--force", "--force-with-lease", "--mirror") or a.startswith("--force-with-lease=")
        or (a.startswith("-") and not a.startswith("--") and "f" in a)
        or (a.startswith("+") and len(a) > 1)
        for a in rest
    )


def _git_clean(argv: list[str]) -> bool:
    sub, rest = _git(argv)
    short, long = _flags(["clean", *rest])
    dry = "n" in short or "--dry-run" in long
    return sub == "clean" and not dry and ("x" in short or "X" in short)


def _git_reset_hard(argv: list[str]) -> bool:
    sub, rest = _git(argv)
    return sub == "reset" and "--hard" in rest


def _find_delete(argv: list[str]) -> bool:
    execs = [i for i, a in enumerate(argv) if a in ("-exec", "-execdir", "-ok", "-okdir")]
    if "-delete" not in argv and not any(
        i + 1 < len(argv) and os.path.basename(argv[i + 1]) in DELETERS for i in execs
    ):
        return False
    starts = []
    for a in argv[1:]:
        if a.startswith("-") or a in ("(", "!", ","):
            break
        starts.append(a)
    names = _values(argv, FIND_NAMES)
    return (
        any(DANGEROUS_TARGET.match(s) or _protected(s) for s in starts)
        or ("-prune" not in argv and any(_protected(n) for n in names))
        or not any(a in FIND_TESTS for a in argv)  # deletes everything under the start
    )


def _xargs_command(argv: list[str]) -> list[str]:
    """The command ``xargs`` runs, after its options."""
    i = 1
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] in XARGS_VALUE_OPTS else 1
    return argv[i:]


def _xargs_rm(argv: list[str]) -> bool:
    cmd = _xargs_command(argv)
    if not cmd or os.path.basename(cmd[0]) != "rm":
        return False
    short, long = _flags(cmd)
    return bool(set(short) & set("rRf")) or bool(long & {"--recursive", "--force"})


def _init(argv: list[str]) -> bool:
    return any(a in ("0", "6") for a in argv[1:])


def _systemctl(argv: list[str]) -> bool:
    return any(a in ("poweroff", "reboot", "halt", "kexec", "emergency", "rescue") for a in argv[1:])


def _kill_all(argv: list[str]) -> bool:
    args = argv[1:]
    if args[:1] == ["-s"] or args[:1] == ["-n"]:
        args = args[2:]
    elif args and args[0].startswith("-") and args[0] != "--":
        args = args[1:]  # the signal: -9, -KILL, -1 (HUP)
    return "-1" in args


def _always(argv: list[str]) -> bool:
    return True


ArgvRule = tuple[str, frozenset[str], Callable[[list[str]], bool], str, str]
"""(name, command words, predicate over argv, why, example)."""

RULES: list[ArgvRule] = [
    ("privilege", frozenset({"sudo", "su", "doas", "pkexec"}), _always,
     "privilege escalation is not allowed", "sudo apt install x"),
    ("state-dirs", frozenset(WRITERS | COPIERS | IN_PLACE | {"dd"}), _state_dirs,
     "writing, deleting or moving .git, .tasks or .team (the task tools manage tasks; "
     "git state is the lead's); reading them is fine", "rm -rf .tasks"),
    ("rm-root", frozenset({"rm"}), _rm,
     "recursive delete of /, ., .., a system directory, ~ or $HOME (or --no-preserve-root)", "rm -rf ~"),
    ("mkfs", frozenset({"mkfs", "mke2fs", "mkswap", "wipefs", "fdisk", "sfdisk", "parted"}), _always,
     "formatting or partitioning disks", "mkfs.ext4 /dev/sda1"),
    ("dd-device", frozenset({"dd"}), _dd,
     "dd writing to a block device", "dd if=/dev/zero of=/dev/sda"),
    ("power", frozenset({"shutdown", "reboot", "halt", "poweroff"}), _always,
     "shutting down or rebooting the machine", "shutdown -h now"),
    ("init", frozenset({"init", "telinit"}), _init, "changing runlevel to halt/reboot", "init 0"),
    ("systemctl-power", frozenset({"systemctl"}), _systemctl,
     "systemctl poweroff/reboot/halt", "systemctl reboot"),
    ("chmod-root", frozenset({"chmod", "chown", "chgrp"}), _chmod,
     "changing permissions/ownership of / or, recursively, of a system directory or home",
     "chmod -R 777 /"),
    ("git-force-push", frozenset({"git"}), _git_push_force,
     "force-pushing rewrites shared history", "git push --force origin main"),
    ("git-clean", frozenset({"git"}), _git_clean,
     "git clean -x/-X also deletes ignored files, including .tasks/ and .team/ (use git clean -n to look)",
     "git clean -fdx"),
    ("git-reset-hard", frozenset({"git"}), _git_reset_hard,
     "git reset --hard throws away uncommitted work (commit or use git stash / git reset --soft)",
     "git reset --hard"),
    ("find-delete", frozenset({"find"}), _find_delete,
     "find -delete / -exec rm on /, ~, a system directory or a state directory, or with no test "
     "to narrow what it deletes", "find / -delete"),
    ("xargs-rm", frozenset({"xargs"}), _xargs_rm,
     "xargs rm -r/-f deletes whatever names arrive on its input", "echo / | xargs rm -rf"),
    ("kill-all", frozenset({"kill"}), _kill_all, "killing every process (pid -1)", "kill -9 -1"),
]

RAW_RULES: list[tuple[str, re.Pattern[str], str, str]] = [
    ("fork-bomb", re.compile(r"([\w:.]+)\s*\(\)\s*\{[^}]*\1\s*\|\s*\1\s*&"),
     "a fork bomb", ":(){ :|:& };:"),
    ("pipe-to-shell", re.compile(
        r"\b(curl|wget|fetch)\b[^|;&]*\|\s*(sudo\s+)?(env\s+)?(\S*/)?(" + "|".join(sorted(INTERPRETERS)) + r")\b"),
     "piping a download into a shell or interpreter", "curl https://x.sh | sh"),
    ("shell-of-download", re.compile(r"\b(" + "|".join(sorted(SHELLS)) + r")\b[^;&|]*(<\(|\$\(|`)\s*(curl|wget)\b"),
     "running a downloaded script via process substitution", 'bash -c "$(curl -fsSL https://x.sh)"'),
    ("write-device", re.compile(r">\s*/dev/(sd|hd|vd|xvd|nvme|mmcblk|disk)"),
     "redirecting output onto a block device", "echo x > /dev/sda"),
    ("subst-command", re.compile(
        r"(^|[;&|(\n{]|\b(if|elif|while|until|then|do|else|exec|eval|sudo|env|xargs|command|nohup|time|busybox)\b)\s*"
        r"([A-Za-z_]\w*=\S*\s+)*[\"']?(\$\(|`)"),
     "a command substitution as the command name hides what runs; write the command out",
     "$(echo rm) -rf /"),
]

SHELL_POLICY: list[tuple[str, str, str]] = [(n, why, ex) for n, _w, _p, why, ex in RULES] + [
    (n, why, ex) for n, _r, why, ex in RAW_RULES
]
"""(rule, what it refuses, example) for every rule, in order (documentation)."""
STATE_DIRS_WHY = RULES[1][3]


def _segments(command: str) -> list[list[str]]:
    lex = shlex.shlex(command.replace("\n", " ; "), posix=True, punctuation_chars=PUNCTUATION)
    lex.whitespace_split = True
    lex.commenters = ""
    segs: list[list[str]] = [[]]
    for tok in lex:
        if set(tok) <= set(PUNCTUATION):
            segs.append([])
        else:
            segs[-1].append(tok)
    return [s for s in segs if s]


def _redirects(seg: list[str]) -> tuple[list[str], list[str]]:
    """``seg`` without its output redirections, and the files they write."""
    words, targets, i = [], [], 0
    while i < len(seg):
        m = REDIRECT.match(seg[i])
        if m is None:
            words.append(seg[i])
        elif m.group(2):
            targets.append(m.group(2))
        elif i + 1 < len(seg):
            i += 1
            targets.append(seg[i])
        i += 1
    return words, targets


def _strip_wrappers(argv: list[str]) -> list[list[str]]:
    """``argv`` with wrapper prefixes removed; wrappers themselves are kept as checks."""
    out = []
    while argv:
        word = os.path.basename(argv[0].lstrip("\\"))
        if word in KEYWORDS or re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", argv[0]):
            argv = argv[1:]
            continue
        if word == "xargs":
            out.append(["xargs", *argv[1:]])
            argv = _xargs_command(argv)
            continue
        if word in WRAPPERS:
            out.append([word])  # so "sudo" itself meets its rule
            argv = argv[1:]
            while argv and (argv[0].startswith("-") or re.match(r"^[A-Za-z_]\w*=", argv[0])):
                argv = argv[1:]
            continue
        out.append(["mkfs" if word.startswith("mkfs.") else word, *argv[1:]])
        break
    return out


def _rebase(path: str, cwd: str | None) -> str:
    """``path`` as seen from the workspace after ``cd cwd`` (lexically; unknown cwd: as is)."""
    if cwd is None or path.startswith(("/", "~", "$")):
        return path
    return os.path.normpath(os.path.join(cwd, path))


def _cd(argv: list[str], cwd: str | None) -> str | None:
    args = [a for a in argv[1:] if a == "-" or not a.startswith("-")]
    if not args:
        return "~"
    target = args[0]
    if target == "-" or target.startswith("$") and not re.match(r"^\$\{?HOME\}?(/|$)", target):
        return None  # somewhere we cannot know
    return target if target.startswith(("/", "~", "$")) else (
        None if cwd is None else os.path.normpath(os.path.join(cwd, target)))


def shell_violation(command: str, depth: int = 0, cwd: str | None = ".") -> tuple[str, str] | None:
    """``(rule, why)`` of the first rule ``command`` breaks, else None.

    ``cwd`` is where a ``cd`` earlier in the command went, relative to the
    workspace; relative paths given to file-changing commands are judged from there.
    """
    for name, pattern, why, _ex in RAW_RULES:
        if pattern.search(command):
            return name, why
    try:
        segments = _segments(command)
    except ValueError:  # unbalanced quotes: judge the words we have
        segments = [re.split(r"\s+", part.strip()) for part in re.split(r"[;&|()`\n]+", command)]
    for seg in segments:
        seg, written = _redirects(seg)
        if any(_protected(_rebase(t, cwd)) for t in written):
            return "state-dirs", STATE_DIRS_WHY
        for argv in _strip_wrappers(seg):
            word = argv[0]
            if word in ("cd", "pushd"):
                cwd = _cd(argv, cwd)
            elif word in PATH_CMDS:
                argv = [word, *(a if a.startswith("-") else _rebase(a, cwd) for a in argv[1:])]
            for name, words, pred, why, _ex in RULES:
                if word in words and pred(argv):
                    return name, why
            if depth < 3 and (word in SHELLS and "-c" in argv[1:-1] or word == "eval"):
                inner = argv[argv.index("-c") + 1] if word in SHELLS else " ".join(argv[1:])
                found = shell_violation(inner, depth + 1, cwd)
                if found:
                    return found
    return None


def check_shell(command: str) -> None:
    found = shell_violation(command)
    if found:
        rule, why = found
        raise Refused(
            f"refused by shell policy ({rule}: {why}). The command was not run. "
            f"Do the task another way, or ask the lead if you believe it is needed.",
            "policy",
        )
