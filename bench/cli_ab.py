#!/usr/bin/env python3
"""Two `tierbox` builds against each other, call by call interleaved (the order flips every
pair), so both see the same load: a cold CLI call (no daemon) and, with --daemon, the same
call handed to one daemon both clients share. Prints each build's p50 and the median of the
per-pair ratios B/A.

    python3 bench/cli_ab.py OLD/tierbox NEW/tierbox [CALLS] [--daemon]

Each binary needs its own `tierbox-full` beside it (for `daemon start`). A workspace and
the state directories (one per build for cold calls, one shared with the daemon) are made
in a temporary directory and removed after.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def timed(cmd, env=None):
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
                   env=env)
    return time.perf_counter() - t0


def main():
    args = [a for a in sys.argv[1:] if a != "--daemon"]
    daemon = "--daemon" in sys.argv[1:]
    if len(args) not in (2, 3):
        sys.exit(__doc__)
    a, b = (os.path.abspath(p) for p in args[:2])
    calls = int(args[2]) if len(args) == 3 else 200
    with tempfile.TemporaryDirectory() as tmp:
        ws = os.path.join(tmp, "ws")
        os.mkdir(ws)
        os.chdir(ws)
        os.environ["XDG_STATE_HOME"] = os.path.join(tmp, "state")
        # Cold calls: each build keeps its own state directory, so neither rewrites the
        # other's caches (a repository-scan cache in another build's format is rebuilt and
        # synced on every call, which would time the cache, not the build).
        envs = {a: None, b: None}
        if not daemon:
            for i, exe in enumerate((a, b)):
                envs[exe] = dict(os.environ, XDG_STATE_HOME=os.path.join(tmp, f"state-{i}"))
        if daemon:
            subprocess.run([b, "daemon", "start", "--workspace", ws], check=True,
                           stdout=subprocess.DEVNULL)
        else:
            os.environ["TIERBOX_DAEMON"] = "off"
        try:
            want = "daemon" if daemon else "in_process"
            for exe in (a, b):
                out = subprocess.run([exe, "run", "--json", "--tier", "b", "--", "true"],
                                     capture_output=True, check=True, env=envs[exe]).stdout
                via = json.loads(out)["via"]
                if via != want:
                    sys.exit(f"{exe}: via {via}, not {want}")
            calls_to_time = [["run", "--tier", "b", "--", "true"], ["run", "--tier", "c", "--", "true"]]
            if not daemon:
                calls_to_time.insert(0, ["--version"])
            for call in calls_to_time:
                ta, tb, ratios = [], [], []
                for i in range(calls):
                    t = {}
                    for exe in ((a, b) if i % 2 == 0 else (b, a)):
                        t[exe] = timed([exe] + call, envs[exe])
                    ta.append(t[a])
                    tb.append(t[b])
                    ratios.append(t[b] / t[a])
                print(f"{'daemon ' if daemon else ''}{' '.join(call):24s} "
                      f"A p50 {statistics.median(ta) * 1e3:6.2f} ms  "
                      f"B p50 {statistics.median(tb) * 1e3:6.2f} ms  "
                      f"B/A median of pairs {statistics.median(ratios):.3f}")
        finally:
            if daemon:
                subprocess.run([b, "daemon", "stop"], stdout=subprocess.DEVNULL, check=False)


if __name__ == "__main__":
    main()
