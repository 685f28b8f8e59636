"""The real-tools cases: what a user runs in their first commands, and what each tier does
with it today.

Each case prepares a fresh workspace (`fixture`), runs its steps one after another, and
names what must come out the same as on the host: the exit status of every step, the
output of the steps marked `compare`, and the files listed in `outputs`. A tier or backend
where it does not is a declared gap (`gaps`), with a one-line reason and a string the
failure shows (`sign`: a rejection code, an error message), so a gap that starts failing
differently is noticed. docs/tiers.md ("Real tools") lists these gaps; the harness checks
that it lists exactly these.

Policies: "strict" is the built-in default (`tierbox policy init`), "shipped/NAME" a file
of the project's `policies/`, anything else a file of `policies/` here.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import zipfile
from dataclasses import dataclass, field
from typing import Callable

VARIANTS = ("b", "native", "bwrap")
VARIANT_TITLES = {"b": "Tier B", "native": "Tier C native", "bwrap": "Tier C bwrap"}

# Fixed identity and dates: the same commands make the same commits, on the host and in
# every sandbox, so their hashes can be compared.
GIT_ENV = {
    "GIT_AUTHOR_NAME": "Real Tools",
    "GIT_AUTHOR_EMAIL": "real-tools@example.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_NAME": "Real Tools",
    "GIT_COMMITTER_EMAIL": "real-tools@example.invalid",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}


@dataclass(frozen=True)
class Step:
    argv: tuple[str, ...]
    env: dict[str, str]
    cwd: str
    # What else must equal the host's: "stdout" (the whole of it), "stderr" (its last
    # line), "line" (stdout is one non-empty line, whatever it says).
    compare: tuple[str, ...]
    host_exit: int  # what the step exits with on the host; anything else breaks the case


def step(*argv: str, env: dict[str, str] | None = None, cwd: str = "",
         compare: tuple[str, ...] | str = (), host_exit: int = 0) -> Step:
    if isinstance(compare, str):
        compare = (compare,)
    return Step(tuple(argv), dict(env or {}), cwd, tuple(compare), host_exit)


def git(*args: str, compare: tuple[str, ...] | str = ()) -> Step:
    return step("git", *args, env=GIT_ENV, compare=compare)


@dataclass(frozen=True)
class Gap:
    reason: str  # one line: what fails today, and why
    sign: str  # a string the failure shows today (checked, so the reason stays true)


@dataclass
class Case:
    name: str
    title: str  # the commands as a user types them (docs/tiers.md)
    policy: str
    steps: list[Step]
    fixture: Callable | None = None  # fixture(f): f.write, f.mkdir, f.symlink, f.run
    # Paths whose kind, mode and content (directories: recursively) must equal the host's;
    # "PATH:mode" compares kind and mode only (keys, binaries).
    outputs: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()  # programs the host must have (on the policy's PATH)
    # Keys: "b", "native", "bwrap", or "c" for both Tier C backends.
    gaps: dict[str, Gap] = field(default_factory=dict)

    def gap(self, variant: str) -> Gap | None:
        if variant in self.gaps:
            return self.gaps[variant]
        if variant in ("native", "bwrap"):
            return self.gaps.get("c")
        return None


# --- fixtures ---------------------------------------------------------------------------

def git_repo(f) -> None:
    """A repository with one commit, made on the host, then an edit and an untracked file."""
    f.run("git", "-c", "init.defaultBranch=main", "init", "-q")
    f.write("a.txt", "one\n")
    f.run("git", "add", "a.txt")
    f.run("git", "commit", "-q", "-m", "first")
    f.write("a.txt", "one\ntwo\n")
    f.write("b.txt.new", "bee\n")
    f.write("a.txt.stash", "one\ntwo\nstashed\n")


def cargo_crate(f) -> None:
    f.write("hello/Cargo.toml",
            '[package]\nname = "hello"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n')
    f.write("hello/src/main.rs",
            'fn add(a: u32, b: u32) -> u32 {\n    a + b\n}\n\n'
            'fn main() {\n    println!("hello from cargo: {}", add(2, 3));\n}\n\n'
            '#[cfg(test)]\nmod tests {\n    #[test]\n    fn adds() {\n'
            '        assert_eq!(super::add(2, 3), 5);\n    }\n}\n')


def rust_hello(f) -> None:
    f.write("hello.rs", 'fn main() {\n    println!("hello from rustc");\n}\n')


C_HELLO = '#include <stdio.h>\n\nint main(void) {\n    puts("hello from C");\n    return 0;\n}\n'


def c_make(f) -> None:
    f.write("hello.c", C_HELLO)
    f.write("Makefile",
            "PREFIX ?= /usr\n\n"
            "hello: hello.c\n\t$(CC) -O0 -o $@ hello.c\n\n"
            "run: hello\n\t./hello\n\n"
            "prefix:\n\t@echo $(PREFIX)\n\n"
            ".PHONY: run prefix\n")


def c_cmake(f) -> None:
    f.write("hello.c", C_HELLO)
    f.write("CMakeLists.txt",
            "cmake_minimum_required(VERSION 3.13)\nproject(hello C)\nadd_executable(hello hello.c)\n")


def python_script(f) -> None:
    f.write("data.csv", "name,count\nalpha,3\nbeta,5\ngamma,7\n")
    f.write("summarize.py",
            "import csv, json\n\n"
            "with open('data.csv', newline='') as fh:\n"
            "    rows = list(csv.DictReader(fh))\n"
            "total = sum(int(r['count']) for r in rows)\n"
            "with open('summary.json', 'w') as out:\n"
            "    json.dump({'rows': len(rows), 'total': total}, out, sort_keys=True)\n"
            "print('total', total)\n")


def python_tmp(f) -> None:
    f.write("use_tmp.py",
            "import os\n\n"
            "# Programs write /tmp directly (not $TMPDIR): compilers' scratch files, test\n"
            "# fixtures, sockets.\n"
            "path = f'/tmp/real-tools-{os.getpid()}.txt'\n"
            "with open(path, 'w') as fh:\n"
            "    fh.write('scratch')\n"
            "with open(path) as fh:\n"
            "    print(fh.read())\n"
            "os.unlink(path)\n")


def pytest_project(f) -> None:
    f.write("test_sample.py",
            "def double(x):\n    return 2 * x\n\n\n"
            "def test_double():\n    assert double(21) == 42\n\n\n"
            "def test_tmp_path(tmp_path):\n"
            "    (tmp_path / 'f').write_text('x')\n"
            "    assert (tmp_path / 'f').read_text() == 'x'\n")


def _wheel(files: dict[str, str], dist: str) -> bytes:
    """A pure-Python wheel made with zipfile alone: no build backend, no network."""
    def digest(data: bytes) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

    files = dict(files)
    files[f"{dist}.dist-info/METADATA"] = "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n"
    files[f"{dist}.dist-info/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: real-tools\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    record = "".join(f"{name},sha256={digest(text.encode())},{len(text.encode())}\n"
                     for name, text in files.items())
    files[f"{dist}.dist-info/RECORD"] = record + f"{dist}.dist-info/RECORD,,\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in files.items():
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            z.writestr(info, text)
    return buf.getvalue()


def local_wheel(f) -> None:
    f.write("dist/tinypkg-1.0-py3-none-any.whl", _wheel({
        "tinypkg/__init__.py": "def answer():\n    return 42\n",
        "tinypkg/__main__.py": "from tinypkg import answer\n\nprint('the answer is', answer())\n",
    }, "tinypkg-1.0"))


def multiprocessing_script(f) -> None:
    f.write("pool.py",
            "import multiprocessing\n\n\n"
            "def square(x):\n    return x * x\n\n\n"
            "if __name__ == '__main__':\n"
            "    with multiprocessing.Pool(2) as pool:\n"
            "        print(sum(pool.map(square, range(100))))\n")


def pytest_multiprocessing(f) -> None:
    f.write("test_pool.py",
            "import multiprocessing\n\n\n"
            "def square(x):\n    return x * x\n\n\n"
            "def test_pool():\n"
            "    with multiprocessing.Pool(2) as pool:\n"
            "        assert sum(pool.map(square, range(100))) == 328350\n")


def npm_packages(f) -> None:
    f.write("tiny/package.json", json.dumps(
        {"name": "tiny", "version": "1.0.0", "main": "index.js", "license": "MIT"}, indent=2) + "\n")
    f.write("tiny/index.js", "module.exports = () => 'tiny says hi';\n")
    f.write("app/package.json", json.dumps(
        {"name": "app", "version": "1.0.0", "private": True, "license": "MIT"}, indent=2) + "\n")
    f.write("app/main.js", "console.log(require('tiny')());\n")


def mode_tree(f) -> None:
    """A tree whose modes matter: a 0750 directory, 0640 and 0755 files, a 0700 subdirectory
    and a symbolic link."""
    f.write("src/notes.txt", "notes\n", mode=0o640)
    f.write("src/run.sh", "#!/bin/sh\necho run\n", mode=0o755)
    f.write("src/private/secret.txt", "secret\n", mode=0o600)
    f.symlink("notes.txt", "src/link")
    f.chmod("src/private", 0o700)
    f.chmod("src", 0o750)


def mode_tree_and_tarball(f) -> None:
    mode_tree(f)
    f.run("tar", "-cf", "host.tar", "src")


def text_file(f) -> None:
    f.write("notes.txt", "".join(f"line {i}\n" for i in range(200)))


def words(f) -> None:
    f.write("words.txt", "pear\napple\nfig\napple\npear\napple\n")


def linked_data(f) -> None:
    f.write("data/x", "payload\n")
    f.mkdir("sub")


def install_script(f) -> None:
    f.write("tool.sh", "#!/bin/sh\necho tool\n", mode=0o644)


def unicode_files(f) -> None:
    f.write("données-ü.txt", "été\n")
    f.write("日本語.txt", "こんにちは\n")
    f.write("words-utf8.txt", "zèbre\nÄpfel\nétoile\napple\nZoo\nÉcole\n")


# --- the cases --------------------------------------------------------------------------

CASES: list[Case] = [
    Case("os-release", "cat /etc/os-release", "strict",
         [step("cat", "/etc/os-release", compare="stdout")]),
    Case("cpuinfo", "grep -c ^processor /proc/cpuinfo", "strict",
         [step("grep", "-c", "^processor", "/proc/cpuinfo", compare="stdout")]),
    Case("ls-system-path", "ls /usr/bin/git", "strict",
         [step("ls", "/usr/bin/git", compare="stdout")], needs=("git",)),
    # {tmp} is a name of this suite's own in /tmp, removed at the end. Every run's /tmp is
    # its own (Tier B's too, under a root supervisor), so the host copy's file is not the
    # one the runs find; `tmp-write` writes the file where `touch` of an existing one would
    # only set its times (which landlock does not mediate).
    Case("tmp-touch", "touch /tmp/x", "strict",
         [step("touch", "{tmp}-x")]),
    Case("tmp-write", "cp /dev/null /tmp/y", "strict",
         [step("cp", "/dev/null", "{tmp}-y")]),
    Case("tmp-program", "python3 use_tmp.py", "python.toml",
         [step("python3", "use_tmp.py", compare="stdout")], python_tmp, needs=("python3",)),
    Case("whoami", "whoami; id -un", "tools.toml",
         [step("whoami", compare="line"), step("id", "-un", compare="line")]),
    # Linux cannot change a symbolic link's mode: the host fails too, and so must the sandbox,
    # with the same error.
    Case("chmod-symlink",
         "python3 -c \"import os; os.symlink('t','l'); os.chmod('l', 0o644, follow_symlinks=False)\"",
         "inline-code.toml",
         [step("python3", "-c",
               "import os; os.symlink('t','l'); os.chmod('l', 0o644, follow_symlinks=False)",
               compare="stderr", host_exit=1)],
         outputs=("l",), needs=("python3",)),
    Case("sh-dd", "sh -c 'dd if=/dev/zero of=big bs=1k count=64'", "inline-code.toml",
         [step("sh", "-c", "dd if=/dev/zero of=big bs=1k count=64")], outputs=("big",)),
    Case("pipeline",
         "sh -c 'sort words.txt | uniq -c | sort -rn > counts.txt; wc -l < words.txt > lines.txt'",
         "inline-code.toml",
         [step("sh", "-c",
               "sort words.txt | uniq -c | sort -rn > counts.txt; wc -l < words.txt > lines.txt")],
         words, outputs=("counts.txt", "lines.txt")),
    # The version-control preset: the git directory writable, what git executes or follows
    # read-only (`policies/version-control.toml`, docs/policy.md "Version control").
    Case("git", "git add; git commit; git branch; git tag; git checkout; git merge; git stash",
         "shipped/version-control.toml",
         [git("status", "--short", compare="stdout"),
          git("add", "a.txt"),
          git("commit", "-q", "-m", "second"),
          git("branch", "feature"),
          git("tag", "v1"),
          git("checkout", "-q", "feature"),
          step("cp", "b.txt.new", "b.txt"),
          git("add", "b.txt"),
          git("commit", "-q", "-m", "add b"),
          git("checkout", "-q", "main"),
          git("merge", "-q", "--no-ff", "-m", "merge feature", "feature"),
          step("cp", "a.txt.stash", "a.txt"),
          git("stash", "-q"),
          git("stash", "list", compare="stdout"),
          git("log", "--all", "--format=%H %s", compare="stdout"),
          git("tag", "--list", compare="stdout"),
          git("branch", "--list", compare="stdout")],
         git_repo, outputs=("a.txt", "b.txt"), needs=("git",)),
    Case("git-init", "git init; git add; git commit", "shipped/version-control.toml",
         [git("init", "-q", "-b", "main"),
          git("add", "readme.txt"),
          git("commit", "-q", "-m", "init"),
          git("log", "--format=%H %s", compare="stdout")],
         lambda f: f.write("readme.txt", "hello\n"), needs=("git",)),
    Case("cargo", "cargo build --offline; cargo test --offline; cargo run --offline",
         "shipped/build-with-caches.toml",
         [step("cargo", "build", "--offline", cwd="hello"),
          step("cargo", "test", "--offline", cwd="hello", compare="stdout"),
          step("cargo", "run", "-q", "--offline", cwd="hello", compare="stdout")],
         cargo_crate, outputs=("hello/Cargo.lock", "hello/target/debug/hello:mode"),
         needs=("cargo", "rustc", "cc")),
    Case("rustc", "rustc hello.rs", "shipped/build-with-caches.toml",
         [step("rustc", "--edition", "2021", "hello.rs")],
         rust_hello, outputs=("hello:mode",), needs=("rustc", "cc")),
    Case("make", "make; make run; make PREFIX=/usr/local prefix", "shipped/build-with-caches.toml",
         [step("make", "-s"),
          step("make", "-s", "run", compare="stdout"),
          step("make", "-s", "PREFIX=/usr/local", "prefix", compare="stdout")],
         c_make, outputs=("hello:mode",), needs=("make", "cc")),
    Case("cmake", "cmake -S . -B build; cmake --build build", "shipped/build-with-caches.toml",
         [step("cmake", "-S", ".", "-B", "build"),
          step("cmake", "--build", "build")],
         c_cmake, outputs=("build/hello:mode",), needs=("cmake", "cc")),
    Case("python", "python3 summarize.py", "python.toml",
         [step("python3", "summarize.py", compare="stdout")],
         python_script, outputs=("summary.json",), needs=("python3",)),
    Case("pytest", "pytest -q -p no:cacheprovider", "python.toml",
         [step("pytest", "-q", "-p", "no:cacheprovider", compare="stdout")],
         pytest_project, needs=("pytest",)),
    Case("venv-pip",
         "python3 -m venv venv; venv/bin/pip install --no-index dist/tinypkg-1.0-py3-none-any.whl; "
         "venv/bin/python3 -m tinypkg",
         "python.toml",
         [step("python3", "-m", "venv", "venv"),
          step("{ws}/venv/bin/pip", "install", "-q", "--no-index", "--no-deps",
               "dist/tinypkg-1.0-py3-none-any.whl"),
          step("{ws}/venv/bin/python3", "-m", "tinypkg", compare="stdout")],
         local_wheel, needs=("python3",)),
    Case("multiprocessing", "python3 pool.py", "python.toml",
         [step("python3", "pool.py", compare="stdout")],
         multiprocessing_script, needs=("python3",)),
    # The same under the shipped policy for test runs.
    Case("pytest-multiprocessing", "pytest -q -p no:cacheprovider", "shipped/offline-tests.toml",
         [step("pytest", "-q", "-p", "no:cacheprovider", compare="stdout")],
         pytest_multiprocessing, needs=("pytest",)),
    Case("sqlite3", "sqlite3 db.sqlite 'CREATE TABLE …; INSERT …'; sqlite3 db.sqlite 'SELECT …'",
         "tools.toml",
         [step("sqlite3", "db.sqlite", "CREATE TABLE t(x); INSERT INTO t VALUES (1), (2), (3);"),
          step("sqlite3", "db.sqlite", "SELECT sum(x) FROM t;", compare="stdout")],
         needs=("sqlite3",)),
    Case("npm", "npm pack ./tiny; npm install --offline ../tiny-1.0.0.tgz; node main.js", "node.toml",
         [step("npm", "pack", "./tiny", compare="stdout"),
          step("npm", "install", "--offline", "--no-audit", "--no-fund", "../tiny-1.0.0.tgz", cwd="app"),
          step("node", "main.js", cwd="app", compare="stdout")],
         npm_packages, outputs=("tiny-1.0.0.tgz", "app/package.json", "app/node_modules/tiny"),
         needs=("node", "npm")),
    Case("tar", "tar -cf copy.tar src; tar -xf host.tar -C x; tar -xf copy.tar -C y", "strict",
         [step("tar", "-cf", "copy.tar", "src"),
          step("mkdir", "x", "y"),
          step("tar", "-xf", "host.tar", "-C", "x"),
          step("tar", "-xf", "copy.tar", "-C", "y")],
         mode_tree_and_tarball, outputs=("x", "y")),
    Case("tar-gzip", "tar -czf src.tgz src; tar -xzf src.tgz -C z", "strict",
         [step("tar", "-czf", "src.tgz", "src"),
          step("mkdir", "z"),
          step("tar", "-xzf", "src.tgz", "-C", "z")],
         mode_tree, outputs=("z",)),
    Case("gzip", "gzip -kn notes.txt; zcat notes.txt.gz", "strict",
         [step("gzip", "-kn", "notes.txt"),
          step("zcat", "notes.txt.gz", compare="stdout")],
         text_file, outputs=("notes.txt.gz",)),
    Case("zip", "zip -qr src.zip src; unzip -q src.zip -d u", "tools.toml",
         [step("zip", "-qr", "src.zip", "src"),
          step("unzip", "-q", "src.zip", "-d", "u")],
         mode_tree, outputs=("u",), needs=("zip", "unzip")),
    Case("cp-a", "cp -a src dst", "strict",
         [step("cp", "-a", "src", "dst")], mode_tree, outputs=("dst",)),
    Case("install", "install -D -m 0755 tool.sh bin/tool; install -d -m 0750 share", "tools.toml",
         [step("install", "-D", "-m", "0755", "tool.sh", "bin/tool"),
          step("install", "-d", "-m", "0750", "share")],
         install_script, outputs=("bin", "share")),
    Case("ln-s", "ln -s ../data/x sub/x; cat sub/x", "strict",
         [step("ln", "-s", "../data/x", "sub/x"),
          step("cat", "sub/x", compare="stdout")],
         linked_data, outputs=("sub",)),
    # The key is random: its kind and mode are compared, not its bytes.
    Case("ssh-keygen", "ssh-keygen -t ed25519 -N '' -f key", "tools.toml",
         [step("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "real-tools", "-f", "key")],
         outputs=("key:mode", "key.pub:mode"), needs=("ssh-keygen",)),
    Case("flock", "flock lockfile echo locked", "tools.toml",
         [step("flock", "lockfile", "echo", "locked", compare="stdout")],
         outputs=("lockfile",), needs=("flock",)),
    Case("unicode", "ls; cat données-ü.txt; LC_ALL=C.UTF-8 sort words-utf8.txt; locale; locale -a",
         "tools.toml",
         [step("ls", env={"LC_ALL": "C.UTF-8"}, compare="stdout"),
          step("cat", "données-ü.txt", compare="stdout"),
          step("sort", "words-utf8.txt", env={"LC_ALL": "C.UTF-8"}, compare="stdout"),
          step("locale", env={"LC_ALL": "C.UTF-8"}, compare="stdout"),
          step("locale", "-a", compare="stdout")],
         unicode_files, needs=("locale",)),
]
