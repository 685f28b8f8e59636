#!/usr/bin/env python3
"""Real tools, judged against the host: each case of cases.py runs on the host and through
`tierbox run` in Tier B, Tier C (native backend) and Tier C (bwrap backend), each in a
fresh workspace made the same way, and must end the same: every step's exit status, the
output its steps compare, and the files it names.

Usage:
    python3 tests/real-tools/real_tools_test.py PATH/TO/tierbox [--jobs N] [--only NAME]...
                                                [--keep] [--write-doc]

Prints one line per case and tier: PASS (as on the host), GAP (a declared gap, with its
reason and what the sandbox said), XPASS (a declared gap that now matches the host: remove
it from cases.py and docs/tiers.md), FAIL (an undeclared difference, a gap failing
otherwise than declared, or a broken case), SKIP (a program or backend this host lacks;
FAIL when CI=true). Then a summary, the case × tier table, and exit status 0 only when
nothing failed (1 otherwise, 2 on bad usage or the overall timeout). Also checks that
docs/tiers.md lists exactly the declared gaps (`--write-doc` rewrites that table).
Never reads stdin. Standard library only (Python 3.11+: tomllib).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from dataclasses import dataclass, field

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cases import CASES, GIT_ENV, VARIANT_TITLES, VARIANTS, Case, Step  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TIERS_DOC = os.path.join(REPO, "docs", "tiers.md")
DOC_START, DOC_END = "<!-- real-tools-gaps:start -->", "<!-- real-tools-gaps:end -->"
OVERALL_TIMEOUT_S = 900
STEP_TIMEOUT_S = 300
IN_CI = os.environ.get("CI") == "true"
BACKENDS = {"b": ("b", "tier_b_linux"), "native": ("c", "tier_c_linux_native"), "bwrap": ("c", "tier_c_bwrap")}
# Durations in tool output ("finished in 0.01s", "passed in 0.02s").
DURATION = re.compile(r"\b(in|after) \d+(\.\d+)?m?s\b")

_print_lock = threading.Lock()


def say(line: str) -> None:
    with _print_lock:
        print(line, flush=True)


def _hard_timeout(_signum, _frame) -> None:
    print(f"FAIL: overall timeout of {OVERALL_TIMEOUT_S} s reached; aborting", flush=True)
    os._exit(2)


def one_line(text: str, limit: int = 400) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"


def tail(text: str, lines: int = 3) -> str:
    kept = [line for line in text.splitlines() if line.strip()]
    return " / ".join(kept[-lines:])


# --- policies ---------------------------------------------------------------------------

@dataclass
class Policy:
    name: str
    files: dict[str, str]  # variant -> policy file for that run
    path: str  # the sandbox's PATH, home-expanded: the host run resolves programs in it
    env_set: dict[str, str]
    env_pass: list[str]


def bwrap_variant(text: str) -> str:
    """The policy with `tier.backend = "bwrap"` and landlock optional, as docs/policy.md
    says a bwrap policy must be (bwrap applies no landlock layer)."""
    lines = text.splitlines()
    try:
        start = lines.index("[tier]")
    except ValueError as e:
        raise ValueError("the policy has no [tier] table") from e
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("[")), len(lines))
    body = [line for line in lines[start + 1:end] if not line.startswith("backend")]
    for i, line in enumerate(body):
        if line.startswith("optional_layers") and '"landlock"' not in line:
            body[i] = line.replace("]", ', "landlock"]', 1)
    if not any(line.startswith("optional_layers") for line in body):
        body.append('optional_layers = ["cgroup", "protected_paths", "disk", "landlock"]')
    body.insert(0, 'backend = "bwrap"')
    out = "\n".join(lines[:start + 1] + body + lines[end:]) + "\n"
    tier = tomllib.loads(out)["tier"]
    if tier.get("backend") != "bwrap" or "landlock" not in tier.get("optional_layers", []):
        raise ValueError("could not make the bwrap variant of the policy")
    return out


def expand_home(value: str, home: str) -> str:
    if value.startswith("~/"):
        return os.path.join(home, value[2:])
    if value.startswith("$HOME/"):
        return os.path.join(home, value[6:])
    return value


def load_policy(name: str, binary: str, out_dir: str, home: str) -> Policy:
    if name == "strict":
        text = subprocess.run([binary, "policy", "init"], check=True, capture_output=True,
                              stdin=subprocess.DEVNULL, text=True).stdout
    elif name.startswith("shipped/"):
        with open(os.path.join(REPO, "policies", name[len("shipped/"):]), encoding="utf-8") as fh:
            text = fh.read()
    else:
        with open(os.path.join(HERE, "policies", name), encoding="utf-8") as fh:
            text = fh.read()
    stem = name.replace("/", "-").removesuffix(".toml")
    files = {}
    for variant, body in (("b", text), ("native", text), ("bwrap", bwrap_variant(text))):
        files[variant] = os.path.join(out_dir, f"{stem}.{variant}.toml")
        with open(files[variant], "w", encoding="utf-8") as fh:
            fh.write(body)
    env = tomllib.loads(text).get("env", {})
    path = env.get("path", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    return Policy(
        name, files,
        ":".join(expand_home(entry, home) for entry in path.split(":")),
        {k: expand_home(v, home) for k, v in env.get("set", {}).items()},
        list(env.get("pass", ["HOME", "USER", "LANG", "LC_ALL", "TERM", "TZ"])),
    )


# --- running ----------------------------------------------------------------------------

@dataclass
class StepResult:
    exit: int
    stdout: str
    stderr: str
    stdout_sha256: str = ""  # the raw bytes' digest, when the text view is lossy
    detail: str = ""  # what tierbox said: a rejection, a timeout, a sandbox failure, denials
    tier: str = ""
    backend: str = ""


@dataclass
class UnitResult:
    steps: list[StepResult] = field(default_factory=list)
    files: dict[str, tuple] = field(default_factory=dict)
    ws: str = ""
    error: str = ""  # the unit could not run (a fixture failed)
    seconds: float = 0.0


class Fixture:
    """What a case's fixture may do to its fresh workspace (on the host, before the run)."""

    def __init__(self, ws: str, env: dict[str, str]):
        self.ws, self.env = ws, env

    def path(self, rel: str) -> str:
        return os.path.join(self.ws, rel)

    def write(self, rel: str, data: str | bytes, mode: int | None = None) -> None:
        p = self.path(rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
        if mode is not None:
            os.chmod(p, mode)

    def mkdir(self, rel: str, mode: int | None = None) -> None:
        os.makedirs(self.path(rel), exist_ok=True)
        if mode is not None:
            os.chmod(self.path(rel), mode)

    def chmod(self, rel: str, mode: int) -> None:
        os.chmod(self.path(rel), mode)

    def symlink(self, target: str, rel: str) -> None:
        os.symlink(target, self.path(rel))

    def run(self, *argv: str) -> None:
        done = subprocess.run(argv, cwd=self.ws, env=self.env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
        if done.returncode != 0:
            raise RuntimeError(f"fixture command {list(argv)} exited {done.returncode}: "
                               f"{tail(done.stderr)}")


class Suite:
    def __init__(self, binary: str, root: str):
        self.binary = binary
        self.root = root
        self.state_dir = os.path.join(root, "state")
        os.mkdir(self.state_dir, 0o700)
        os.mkdir(os.path.join(root, "policies"))
        self.home = os.path.expanduser("~")
        self.tmp_prefix = f"/tmp/tierbox-real-tools-{os.getpid()}"
        # tierbox's own environment: fixed, so the sandbox's does not depend on the caller.
        self.tierbox_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self.home,
                            "LANG": "C.UTF-8"}
        if os.environ.get("USER"):
            self.tierbox_env["USER"] = os.environ["USER"]
        self.policies: dict[str, Policy] = {}

    def policy(self, name: str) -> Policy:
        if name not in self.policies:
            self.policies[name] = load_policy(name, self.binary, os.path.join(self.root, "policies"),
                                              self.home)
        return self.policies[name]

    def expand(self, arg: str, ws: str) -> str:
        return arg.replace("{ws}", ws).replace("{tmp}", self.tmp_prefix)

    def host_env(self, policy: Policy, unit_dir: str, step_env: dict[str, str]) -> dict[str, str]:
        """The environment the sandbox gives a program, on the host: the policy's passed
        variables, its fixed ones and PATH, a private empty HOME and TMPDIR."""
        env = {k: self.tierbox_env[k] for k in policy.env_pass if k in self.tierbox_env}
        env.update(policy.env_set)
        env["PATH"] = policy.path
        env["HOME"] = os.path.join(unit_dir, "home")
        env["TMPDIR"] = os.path.join(unit_dir, "tmp")
        env.update(step_env)
        return env

    def run_unit(self, case: Case, variant: str) -> UnitResult:
        """One copy of the case: "host", or a sandbox variant."""
        started = time.monotonic()
        policy = self.policy(case.policy)
        unit_dir = os.path.join(self.root, "runs", case.name, variant)
        ws = os.path.join(unit_dir, "ws")
        for d in (ws, os.path.join(unit_dir, "home"), os.path.join(unit_dir, "tmp")):
            os.makedirs(d)
        result = UnitResult(ws=ws)
        try:
            if case.fixture is not None:
                # Fixture commands (git commits) get the fixed identity and dates too.
                case.fixture(Fixture(ws, self.host_env(policy, unit_dir, GIT_ENV)))
        except Exception as e:  # noqa: BLE001 - a broken fixture is reported, not raised
            result.error = f"fixture: {type(e).__name__}: {e}"
            return result
        for s in case.steps:
            if variant == "host":
                r = self.run_host(policy, unit_dir, ws, s)
            else:
                r = self.run_sandboxed(policy, variant, ws, s)
            result.steps.append(r)
            if r.exit != s.host_exit:
                break  # what follows depends on this step; the first difference is the report
        result.files = snapshot(ws, case.outputs)
        result.seconds = time.monotonic() - started
        return result

    def run_host(self, policy: Policy, unit_dir: str, ws: str, s: Step) -> StepResult:
        argv = [self.expand(a, ws) for a in s.argv]
        env = self.host_env(policy, unit_dir, s.env)
        try:
            done = subprocess.run(argv, cwd=os.path.join(ws, s.cwd), env=env, stdin=subprocess.DEVNULL,
                                  capture_output=True, timeout=STEP_TIMEOUT_S)
        except FileNotFoundError as e:
            return StepResult(127, "", str(e), detail=str(e))
        except subprocess.TimeoutExpired:
            return StepResult(124, "", "", detail=f"timed out after {STEP_TIMEOUT_S} s")
        code = done.returncode if done.returncode >= 0 else 128 - done.returncode
        return StepResult(code, done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace"),
                          hashlib.sha256(done.stdout).hexdigest())

    def run_sandboxed(self, policy: Policy, variant: str, ws: str, s: Step) -> StepResult:
        tier = BACKENDS[variant][0]
        cmd = [self.binary, "run", "--json", "--tier", tier, "--policy", policy.files[variant],
               "--workspace", ws, "--state-dir", self.state_dir]
        if s.cwd:
            cmd += ["--cwd", s.cwd]
        for k, v in s.env.items():
            cmd += ["-e", f"{k}={v}"]
        cmd += ["--", *(self.expand(a, ws) for a in s.argv)]
        try:
            done = subprocess.run(cmd, cwd=self.root, env=self.tierbox_env, stdin=subprocess.DEVNULL,
                                  capture_output=True, timeout=STEP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return StepResult(124, "", "", detail=f"tierbox did not return within {STEP_TIMEOUT_S} s")
        return parse_outcome(done.returncode, done.stdout, done.stderr)


def parse_outcome(rc: int, out: bytes, err: bytes) -> StepResult:
    try:
        o = json.loads(out)
    except ValueError:
        msg = one_line(err.decode("utf-8", "replace"))
        return StepResult(rc, "", "", detail=f"tierbox exited {rc} without an outcome: {msg}")
    if "rejected" in o:
        r = o["rejected"]
        return StepResult(125, "", "", detail=f"rejected [{r.get('code')}]: {r.get('message')}")
    code = o.get("exit_code")
    notes = []
    if code is None:
        if o.get("signal") is not None:
            sig = o["signal"]
            code = 128 + (sig if isinstance(sig, int) else getattr(signal, str(sig), 0))
            notes.append(f"killed by {sig}")
        else:
            code = rc
    if o.get("timed_out"):
        notes.append("timed out")
    if o.get("limit_hit"):
        notes.append(f"limit hit: {o['limit_hit']}")
    if o.get("sandbox_failure"):
        notes.append(f"sandbox failure: {one_line(json.dumps(o['sandbox_failure']), 200)}")
    for d in (o.get("denials") or [])[:3]:
        notes.append(f"denial: {d.get('layer')} {d.get('operation')} {d.get('target')}")
    stdout, stderr = o.get("stdout") or {}, o.get("stderr") or {}
    return StepResult(code, stdout.get("text", ""), stderr.get("text", ""),
                      stdout.get("sha256", "") if stdout.get("lossy_utf8") else "",
                      "; ".join(notes), o.get("tier", ""), o.get("backend", ""))


def snapshot(ws: str, specs: tuple[str, ...]) -> dict[str, tuple]:
    """Kind, mode, and (unless ":mode") content of each path, directories recursively."""
    out: dict[str, tuple] = {}

    def visit(path: str, rel: str, content: bool) -> None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            out[rel] = ("missing",)
            return
        mode = oct(stat.S_IMODE(st.st_mode))
        if stat.S_ISLNK(st.st_mode):
            out[rel] = ("symlink", os.readlink(path))
        elif stat.S_ISDIR(st.st_mode):
            out[rel] = ("directory", mode)
            for name in sorted(os.listdir(path)):
                visit(os.path.join(path, name), f"{rel}/{name}", content)
        elif stat.S_ISREG(st.st_mode):
            if content:
                with open(path, "rb") as fh:
                    data = fh.read()
                out[rel] = ("file", mode, len(data), hashlib.sha256(data).hexdigest()[:16])
            else:
                out[rel] = ("file", mode)
        else:
            out[rel] = ("other", mode)

    for spec in specs:
        rel, _, how = spec.partition(":")
        visit(os.path.join(ws, rel), rel, how != "mode")
    return out


# --- judging ----------------------------------------------------------------------------

def normalize(text: str, ws: str) -> str:
    return DURATION.sub(r"\1 N s", text.replace(ws, "{ws}"))


def last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def describe(s: Step) -> str:
    argv = " ".join(a if a and " " not in a else repr(a) for a in s.argv)
    return f"`{argv}`" + (f" in {s.cwd}/" if s.cwd else "")


def difference(case: Case, host: UnitResult, got: UnitResult, variant: str) -> str | None:
    """None when `got` ended as the host did; else what differs first, with what the
    sandbox said."""
    if got.error:
        return got.error
    want_tier, want_backend = BACKENDS[variant]
    for i, s in enumerate(case.steps):
        h = host.steps[i]
        if i >= len(got.steps):
            return f"step {i + 1} {describe(s)} did not run"
        g = got.steps[i]
        if g.backend and (g.tier != want_tier or g.backend != want_backend):
            return f"WRONG BACKEND: step {i + 1} ran in tier {g.tier} ({g.backend})"
        said = "; ".join(x for x in (
            g.detail,
            f"stderr: {tail(g.stderr)}" if g.stderr.strip() else "",
            f"stdout: {tail(g.stdout)}" if g.stdout.strip() and g.exit != h.exit else "",
        ) if x)
        if g.exit != h.exit:
            return f"step {i + 1} {describe(s)}: exit {g.exit} (host {h.exit}); {said}"
        for what in s.compare:
            if what == "stdout":
                if g.stdout_sha256:  # not UTF-8: the bytes' digests
                    same = g.stdout_sha256 == h.stdout_sha256
                else:
                    same = normalize(g.stdout, got.ws) == normalize(h.stdout, host.ws)
                if not same:
                    return (f"step {i + 1} {describe(s)}: stdout {one_line(normalize(g.stdout, got.ws), 200)!r} "
                            f"(host {one_line(normalize(h.stdout, host.ws), 200)!r}); {said}")
            elif what == "stderr":
                gl, hl = normalize(last_line(g.stderr), got.ws), normalize(last_line(h.stderr), host.ws)
                if gl != hl:
                    return f"step {i + 1} {describe(s)}: stderr ends {gl!r} (host {hl!r}); {said}"
            elif what == "line":
                if len(g.stdout.splitlines()) != 1 or not g.stdout.strip():
                    return f"step {i + 1} {describe(s)}: stdout {g.stdout!r}, not one line; {said}"
    if got.files != host.files:
        diffs = []
        for path in sorted(set(got.files) | set(host.files)):
            if got.files.get(path) != host.files.get(path):
                diffs.append(f"{path}: {got.files.get(path, ('missing',))} (host {host.files.get(path, ('missing',))})")
        return "files differ: " + "; ".join(diffs[:4]) + (f"; and {len(diffs) - 4} more" if len(diffs) > 4 else "")
    return None


def host_broken(case: Case, host: UnitResult) -> str | None:
    if host.error:
        return host.error
    for i, s in enumerate(case.steps):
        if i >= len(host.steps):
            return f"step {i + 1} did not run on the host"
        h = host.steps[i]
        if h.exit != s.host_exit:
            return (f"step {i + 1} {describe(s)} exits {h.exit} on the host, the case expects {s.host_exit}: "
                    f"{h.detail or tail(h.stderr)}")
    return None


# --- the doc table ----------------------------------------------------------------------

def doc_table(cases: list[Case]) -> str:
    rows = ["| case | command | where | what fails today |", "|---|---|---|---|"]
    clean = []
    for case in cases:
        by_reason: dict[str, list[str]] = {}
        for v in VARIANTS:
            g = case.gap(v)
            if g is not None:
                by_reason.setdefault(g.reason, []).append(VARIANT_TITLES[v])
        if not by_reason:
            clean.append(f"`{case.name}`")
        for reason, where in by_reason.items():
            title, why = case.title.replace("|", "\\|"), reason.replace("|", "\\|")
            rows.append(f"| `{case.name}` | `{title}` | {', '.join(where)} | {why} |")
    if len(rows) == 2:
        rows = ["No case differs from the host in any tier."]
    lines = [DOC_START, *rows, "", "Matching the host in every tier: " + ", ".join(clean) + ".", DOC_END]
    return "\n".join(lines)


def check_doc(cases: list[Case], write: bool) -> str | None:
    with open(TIERS_DOC, encoding="utf-8") as fh:
        doc = fh.read()
    want = doc_table(cases)
    start, end = doc.find(DOC_START), doc.find(DOC_END)
    if start < 0 or end < 0:
        return f"{TIERS_DOC} has no {DOC_START} … {DOC_END} block"
    have = doc[start:end + len(DOC_END)]
    if have == want:
        return None
    if write:
        with open(TIERS_DOC, "w", encoding="utf-8") as fh:
            fh.write(doc[:start] + want + doc[end + len(DOC_END):])
        return None
    return "docs/tiers.md's real-tools table differs from cases.py; rerun with --write-doc. Expected:\n" + want


# --- main -------------------------------------------------------------------------------

def main() -> int:
    signal.signal(signal.SIGALRM, _hard_timeout)
    signal.alarm(OVERALL_TIMEOUT_S)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("binary", nargs="?", default=os.environ.get("TIERBOX_BIN", ""))
    ap.add_argument("--jobs", type=int, default=4, help="copies run at once (default 4)")
    ap.add_argument("--only", action="append", default=[], help="run only this case (repeatable)")
    ap.add_argument("--keep", action="store_true", help="keep the workspaces (their path is printed)")
    ap.add_argument("--write-doc", action="store_true", help="rewrite docs/tiers.md's table from cases.py")
    args = ap.parse_args()
    if not args.binary:
        ap.print_usage(sys.stderr)
        return 2
    binary = os.path.abspath(args.binary)
    if not os.access(binary, os.X_OK):
        print(f"FAIL: {binary} is not an executable", flush=True)
        return 2
    names = [c.name for c in CASES]
    bad = sorted({n for n in names if names.count(n) > 1}) + [
        f"{c.name}: {o}" for c in CASES for o in c.outputs
        if os.path.isabs(o) or ".." in o.split(":")[0].split("/")]
    if bad:
        print(f"cases.py: duplicate names, or outputs outside the workspace: {bad}", file=sys.stderr)
        return 2
    unknown = [n for n in args.only if n not in names]
    if unknown:
        print(f"no such case: {', '.join(unknown)}", file=sys.stderr)
        return 2
    os.umask(0o022)
    counts = {"PASS": 0, "GAP": 0, "XPASS": 0, "FAIL": 0, "SKIP": 0}
    failed: list[str] = []

    def report(kind: str, name: str, text: str = "") -> None:
        if kind == "SKIP" and IN_CI:
            kind, text = "FAIL", f"{text} (CI=true: nothing may pass by not running)"
        counts[kind] += 1
        if kind in ("FAIL", "XPASS"):
            failed.append(name)
        say(f"{kind}: {name}" + (f"  [{text}]" if text else ""))

    problem = check_doc(CASES, args.write_doc)
    report("FAIL" if problem else "PASS", "docs/tiers.md lists exactly the declared gaps", problem or "")

    root = tempfile.mkdtemp(prefix="tierbox-real-tools-")
    suite = Suite(binary, root)
    say(f"tierbox: {binary}\nworkspaces: {root}")
    started = time.monotonic()
    cases = [c for c in CASES if not args.only or c.name in args.only]
    table: dict[str, dict[str, str]] = {}
    try:
        # Which backends this host has: a run of `true` through each.
        available = {}
        probe_ws = os.path.join(root, "probe")
        os.mkdir(probe_ws)
        for v in VARIANTS:
            r = suite.run_sandboxed(suite.policy("strict"), v, probe_ws, Step(("true",), {}, "", (), 0))
            available[v] = None if r.exit == 0 else (r.detail or f"exit {r.exit}")
            if available[v] is not None:
                kind = "SKIP" if "[tier.unavailable]" in available[v] else "FAIL"
                report(kind, f"{VARIANT_TITLES[v]}: `true` runs", available[v])
        runnable = []
        for case in cases:
            pol = suite.policy(case.policy)
            missing = [p for p in case.needs if shutil.which(p, path=pol.path) is None]
            if missing:
                report("SKIP", case.name, f"not installed here: {', '.join(missing)} (on {pol.path})")
                table[case.name] = {v: "skip" for v in VARIANTS}
            else:
                runnable.append(case)
        units = [(c, v) for c in runnable for v in ("host", *VARIANTS) if v == "host" or available[v] is None]
        results: dict[tuple[str, str], UnitResult] = {}
        pending = {c.name: sum(1 for u in units if u[0] is c) for c in runnable}
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = {pool.submit(suite.run_unit, c, v): (c, v) for c, v in units}
            for fut in concurrent.futures.as_completed(futures):
                c, v = futures[fut]
                try:
                    results[(c.name, v)] = fut.result()
                except Exception as e:  # noqa: BLE001 - one broken unit must not hide the rest
                    results[(c.name, v)] = UnitResult(error=f"{type(e).__name__}: {e}")
                pending[c.name] -= 1
                if pending[c.name] == 0:
                    table[c.name] = judge(c, results, available, report)
    finally:
        for name in os.listdir("/tmp"):  # what the host copies made with {tmp}
            path = os.path.join("/tmp", name)
            if path.startswith(suite.tmp_prefix + "-") and os.path.isfile(path):
                os.unlink(path)
        if args.keep:
            say(f"kept: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    elapsed = time.monotonic() - started
    print_table(cases, table)
    print(f"real_tools_test: {counts['PASS']} passed, {counts['GAP']} gaps, {counts['XPASS']} xpassed, "
          f"{counts['FAIL']} failed, {counts['SKIP']} skipped in {elapsed:.0f} s", flush=True)
    for name in failed:
        print(f"  failed: {name}", flush=True)
    return 1 if failed else 0


def judge(case: Case, results, available, report) -> dict[str, str]:
    row = {}
    host = results[(case.name, "host")]
    broken = host_broken(case, host)
    if broken:
        report("FAIL", f"{case.name} (host)", f"the case does not run on this host: {broken}")
        return {v: "FAIL (host)" for v in VARIANTS}
    for v in VARIANTS:
        name = f"{case.name} [{VARIANT_TITLES[v]}]"
        if available[v] is not None:
            row[v] = "skip"  # reported once, with the reason
            continue
        got = results[(case.name, v)]
        diff = difference(case, host, got, v)
        if diff is not None and got.ws:  # workspace paths differ per copy; say {ws}
            diff = diff.replace(got.ws, "{ws}").replace(os.path.dirname(got.ws), "{ws}/..")
        gap = case.gap(v)
        if diff is not None and diff.startswith("WRONG BACKEND"):
            report("FAIL", name, diff)
            row[v] = "FAIL"
        elif diff is None and gap is None:
            report("PASS", name, f"{got.steps[-1].backend}, {len(got.steps)} step(s), {got.seconds:.1f} s")
            row[v] = "pass"
        elif diff is None:
            report("XPASS", name, f"declared gap now matches the host: remove it ({gap.reason})")
            row[v] = "XPASS"
        elif gap is None:
            report("FAIL", name, diff)
            row[v] = "FAIL"
        elif gap.sign not in diff:
            report("FAIL", name, f"fails otherwise than the declared gap (expected {gap.sign!r}): {diff}")
            row[v] = "FAIL"
        else:
            report("GAP", name, f"{gap.reason} — {diff}")
            row[v] = "gap"
    return row


def print_table(cases: list[Case], table: dict[str, dict[str, str]]) -> None:
    width = max(len(c.name) for c in cases)
    print("\n" + "case".ljust(width) + "  " + "  ".join(VARIANT_TITLES[v].ljust(13) for v in VARIANTS))
    for c in cases:
        row = table.get(c.name, {})
        print(c.name.ljust(width) + "  " + "  ".join(row.get(v, "-").ljust(13) for v in VARIANTS))
    print(flush=True)


if __name__ == "__main__":
    sys.exit(main())
