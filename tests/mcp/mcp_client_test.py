#!/usr/bin/env python3
"""Drive `tierbox serve --mcp` over stdio with the official MCP Python SDK.

Checks the contract in docs/api.md from a real MCP client: the seven tools and their
schemas, a foreground run, rejections, a WASM run, a background process (output by offset,
stdin, status, list, kill), a term (`cat` on a terminal: session_start, session_write with
its yield time, session_read, session_resize, session_signal, session_close), owner
isolation between two sessions, cleanup when a session ends, progress notifications, and a
client that only speaks the initialize handshake.

The strict default policy has no shell or interpreter, so the background processes are
`tail -f FILE` (the test appends to FILE in the workspace to make it print) and `cat` (fed
with process_write_stdin).

Usage:
    python3 -m pip install mcp==2.3.0
    python3 tests/mcp/mcp_client_test.py [PATH/TO/tierbox]     # or TIERBOX_BIN=...

Prints one PASS/FAIL line per check and exits 0 only if every check passed (1 if any
failed, 2 on the overall timeout or an unexpected crash). Never waits on stdin.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from typing import Any

OVERALL_TIMEOUT_S = 120  # hard backstop (SIGALRM); the async body gives up a little earlier
CALL_TIMEOUT_S = 30  # per MCP request
TOOLS = {
    "process_run",
    "process_status",
    "process_output",
    "process_write_stdin",
    "process_kill",
    "process_list",
    "changes_show",
    "changes_apply",
    "changes_discard",
    "wasm_run",
    "session_start",
    "session_write",
    "session_read",
    "session_resize",
    "session_signal",
    "session_close",
    "file_read",
    "file_write",
    "file_list",
    "file_stat",
}
# An MCP connection is an agent: changes_apply is offered only where the server's policy
# says workspace.agent_may_apply (docs/api.md, "Tokens").
AGENT_TOOLS = TOOLS - {"changes_apply"}
HANDLE_FIELDS = {"status", "startup_stdout", "startup_stderr"}
STATUS_FIELDS = {
    "id", "state", "exit_code", "signal", "argv", "lifetime", "lifetime_ms",
    "started_unix_ms", "tier", "backend", "stdout_bytes", "stderr_bytes",
}
OUTPUT_FIELDS = {"id", "stream", "state", "offset", "text", "next_offset", "missed_bytes", "total_bytes"}
OUTCOME_FIELDS = {
    "exit_code", "signal", "timed_out", "limit_hit", "stdout", "stderr", "duration_ms",
    "usage", "tier", "backend", "enforcement", "plan_sha256", "run_id",
}
STREAM_FIELDS = {"text", "total_bytes", "omitted_bytes", "truncated", "redacted"}

_results: list[tuple[str, bool]] = []


def _hard_timeout(_signum: int, _frame: Any) -> None:
    print(f"FAIL: overall timeout of {OVERALL_TIMEOUT_S} s reached; aborting", flush=True)
    os._exit(2)


def check(name: str, ok: bool, detail: Any = "") -> bool:
    ok = bool(ok)
    _results.append((name, ok))
    line = f"{'PASS' if ok else 'FAIL'}: {name}"
    if detail != "" and detail is not None:
        text = detail.replace("\n", "\\n") if isinstance(detail, str) else json.dumps(detail, default=str)
        limit = 2000 if not ok else 160  # a failure shows what came back; a pass stays short
        if len(text) > limit:
            text = text[:limit] + "…"
        line += f"  [{text}]"
    print(line, flush=True)
    return ok


def notice(text: str) -> None:
    print(f"NOTE: {text}", flush=True)


def procs_with_token(token: str) -> list[int]:
    """Pids (not ours) whose command line contains `token`. Zombies have an empty cmdline."""
    needle = token.encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if needle in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def wait_until(predicate, timeout_s: float, interval_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)


def text_of(result: Any) -> str:
    return "\n".join(getattr(block, "text", "") for block in (result.content or []) if getattr(block, "type", "") == "text")


class Tierbox:
    """Everything one test run needs: the binary, the workspace and the server arguments."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.root = tempfile.mkdtemp(prefix="tierbox-mcp-test-")
        self.workspace = os.path.join(self.root, "workspace")
        self.state = os.path.join(self.root, "state")
        os.mkdir(self.workspace)
        os.mkdir(self.state, 0o700)
        help_text = subprocess.run(
            [binary, "serve", "--help"], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30
        )
        self.serve_help = help_text.stdout + help_text.stderr
        self.args = ["serve", "--mcp", "--workspace", self.workspace]
        if "--state-dir" in self.serve_help:
            self.args += ["--state-dir", self.state]
        else:
            notice("`tierbox serve --help` does not mention --state-dir; running without it")

    def params(self):
        from mcp import StdioServerParameters

        return StdioServerParameters(
            command=self.binary, args=self.args, cwd=self.workspace, env={"RUST_BACKTRACE": "1"}
        )

    def client(self, mode: str = "auto"):
        """`auto` (the SDK default) probes server/discover (the 2026-07-28 protocol) and falls
        back to the initialize handshake; `legacy` forces the handshake, as older clients do."""
        from mcp import Client

        return Client(self.params(), read_timeout_seconds=CALL_TIMEOUT_S, mode=mode)

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


# Each tool's declared outputSchema (from tools/list), and how many successful results were
# checked against it here — on top of the SDK's own check, so that a client that does not
# validate would still be covered.
OUTPUT_SCHEMAS: dict[str, dict] = {}
VALIDATED: dict[str, int] = {}


async def call(client, tool: str, arguments: dict, **kwargs) -> tuple[Any, Any]:
    """Calls a tool; returns (result, structuredContent). A successful result's structured
    content must validate against the tool's outputSchema."""
    result = await client.call_tool(tool, arguments, **kwargs)
    sc = result.structured_content
    schema = OUTPUT_SCHEMAS.get(tool)
    if not result.is_error and schema is not None:
        import jsonschema

        errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(sc), key=str)
        if errors:
            check(f"{tool}: structuredContent validates against its outputSchema", False,
                  {"error": str(errors[0])[:400]})
        else:
            VALIDATED[tool] = VALIDATED.get(tool, 0) + 1
    return result, sc


def expect_rejection(name: str, result: Any, sc: Any, code: str, mentions: str | None = None) -> None:
    ok = (
        result.is_error is True
        and isinstance(sc, dict)
        and sc.get("code") == code
        and isinstance(sc.get("message"), str)
        and sc["message"] != ""
    )
    check(f"{name}: isError with structuredContent.code == {code!r}", ok, {"isError": result.is_error, "structuredContent": sc})
    if isinstance(sc, dict) and isinstance(sc.get("message"), str):
        text = text_of(result)
        check(
            f"{name}: text content is 'rejected: <code>: <message>'",
            text == f"rejected: {sc.get('code')}: {sc['message']}",
            text,
        )
        if mentions is not None:
            check(f"{name}: message names the offending value {mentions!r}", mentions in sc["message"], sc["message"])


async def poll_output(client, handle: str, offset: int, want: str, timeout_s: float = 10.0) -> dict | None:
    """Reads from `offset` (always the same offset) until the text contains `want`."""
    import anyio

    deadline = time.monotonic() + timeout_s
    last = None
    while True:
        result, sc = await call(client, "process_output", {"id": handle, "offset": offset})
        if result.is_error or not isinstance(sc, dict):
            check(f"process_output(offset={offset}) succeeds", False, {"isError": result.is_error, "sc": sc})
            return None
        last = sc
        if want in sc.get("text", ""):
            return sc
        if time.monotonic() >= deadline:
            check(f"process_output(offset={offset}) eventually contains {want!r}", False, last)
            return None
        await anyio.sleep(0.1)


async def poll_status(client, handle: str, states: set[str], timeout_s: float = 10.0) -> dict | None:
    import anyio

    deadline = time.monotonic() + timeout_s
    sc = None
    while True:
        result, sc = await call(client, "process_status", {"id": handle})
        if not result.is_error and isinstance(sc, dict) and sc.get("state") in states:
            return sc
        if time.monotonic() >= deadline:
            return sc
        await anyio.sleep(0.1)


def status_of(sc: Any) -> dict:
    """process_status's result is the status itself; tolerate a {status: …} wrapper too."""
    if isinstance(sc, dict) and isinstance(sc.get("status"), dict):
        return sc["status"]
    return sc if isinstance(sc, dict) else {}


# ---------------------------------------------------------------------------------------
# The sections. Each one reports its own checks; an exception fails the section only.
# ---------------------------------------------------------------------------------------


async def section_tools(client, offered=AGENT_TOOLS) -> None:
    listing = await client.list_tools()
    tools = {tool.name: tool for tool in listing.tools}
    check(f"tools/list has exactly the {len(offered)} tools", set(tools) == offered, sorted(tools))
    if "changes_apply" not in offered:
        result, sc = await call(client, "changes_apply", {"run_id": "0" * 32})
        expect_rejection("changes_apply is refused to an agent by default", result, sc, "changes.apply_denied")
    for name in sorted(offered):
        tool = tools.get(name)
        schema = getattr(tool, "input_schema", None)
        check(f"tool {name} has an inputSchema object", isinstance(schema, dict) and schema.get("type") == "object", schema)
    for name in sorted(offered):
        out = getattr(tools.get(name), "output_schema", None)
        ok = isinstance(out, dict) and out.get("type") == "object"
        check(f"tool {name} declares an outputSchema object", ok, out if not ok else None)
        if ok:
            import jsonschema

            jsonschema.Draft202012Validator.check_schema(out)
            OUTPUT_SCHEMAS[name] = out
    outcome = (OUTPUT_SCHEMAS.get("process_run") or {}).get("$defs", {}).get("Outcome", {})
    check("process_run's outputSchema types the outcome (exit_code, stdout, attestation)",
          all(k in outcome.get("properties", {}) for k in ("exit_code", "stdout", "attestation")),
          sorted(outcome.get("properties", {})))
    run_schema = getattr(tools.get("process_run"), "input_schema", None) or {}
    check("process_run inputSchema has additionalProperties: false", run_schema.get("additionalProperties") is False,
          {"additionalProperties": run_schema.get("additionalProperties")})
    check("process_run inputSchema requires command", "command" in (run_schema.get("required") or []),
          {"required": run_schema.get("required")})
    # Annotations say what each tool does to the world (docs/api.md).
    expect = {
        "process_run": {"readOnlyHint": False, "destructiveHint": True, "openWorldHint": True},
        "wasm_run": {"readOnlyHint": False, "destructiveHint": True, "openWorldHint": False},
        "process_status": {"readOnlyHint": True},
        "process_output": {"readOnlyHint": True},
        "process_list": {"readOnlyHint": True},
        "process_write_stdin": {"readOnlyHint": False, "destructiveHint": False},
        "process_kill": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True},
        "changes_show": {"readOnlyHint": True},
        "changes_apply": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False},
        "changes_discard": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True},
        "file_read": {"readOnlyHint": True},
        "file_list": {"readOnlyHint": True},
        "file_stat": {"readOnlyHint": True},
        "file_write": {"readOnlyHint": False, "destructiveHint": True},
    }
    for name, hints in expect.items():
        if name not in offered:
            continue
        annotations = getattr(tools.get(name), "annotations", None)
        got = annotations.model_dump(by_alias=True) if annotations is not None else {}
        check(f"tool {name} annotations {hints}", all(got.get(k) == v for k, v in hints.items()), got)


async def section_bounded(client) -> None:
    # 588,895 bytes of output: over the 64 KiB a tool result keeps of a stream's text.
    result, sc = await call(client, "process_run", {"command": "seq", "args": ["1", "100000"]})
    sc = sc if isinstance(sc, dict) else {}
    out = sc.get("stdout") if isinstance(sc.get("stdout"), dict) else {}
    text = out.get("text", "")
    check("a large output: the run succeeded", result.is_error is False and sc.get("exit_code") == 0,
          {"isError": result.is_error, "exit_code": sc.get("exit_code")})
    check("a large output: all of it was captured (total_bytes 588895)", out.get("total_bytes") == 588895,
          {"total_bytes": out.get("total_bytes")})
    check("structuredContent keeps at most 64 KiB of the text (plus the marker line)",
          len(text.encode()) <= 64 * 1024 + 100, {"len": len(text.encode())})
    check("the view says how much it left out (view_omitted_bytes)",
          isinstance(out.get("view_omitted_bytes"), int) and out["view_omitted_bytes"] > 500_000
          and "bytes of this stream's output left out of this view" in text,
          {"view_omitted_bytes": out.get("view_omitted_bytes")})
    check("the view keeps the first and the last lines", text.startswith("1\n2\n3\n") and text.endswith("99999\n100000\n"),
          {"head": text[:20], "tail": text[-20:]})
    check("the whole tool result stays small (< 96 KiB of JSON)", len(json.dumps(sc)) < 96 * 1024,
          {"json_bytes": len(json.dumps(sc))})


async def section_foreground(client) -> None:
    result, sc = await call(client, "process_run", {"command": "echo", "args": ["hello"]})
    check("process_run echo hello: not isError", result.is_error is False, {"isError": result.is_error, "sc": sc})
    sc = sc if isinstance(sc, dict) else {}
    check("process_run echo hello: exit_code 0", sc.get("exit_code") == 0, {"exit_code": sc.get("exit_code")})
    stdout = sc.get("stdout") if isinstance(sc.get("stdout"), dict) else {}
    check("process_run echo hello: stdout.text == 'hello\\n'", stdout.get("text") == "hello\n", stdout)
    att = sc.get("attestation") or {}
    check("process_run outcome carries a signed attestation (64-byte signature, 32-byte key)",
          len(att.get("signature", "")) == 128 and len(att.get("public_key", "")) == 64
          and att.get("attestation", {}).get("body", {}).get("kind") == "run",
          {"attestation": att})
    missing = sorted(OUTCOME_FIELDS - set(sc))
    check("process_run outcome has the documented fields (docs/api.md Results)", not missing, {"missing": missing, "keys": sorted(sc)})
    missing = sorted(STREAM_FIELDS - set(stdout))
    check("outcome stdout has the documented {text, bytes, truncated}", not missing, {"missing": missing, "keys": sorted(stdout)})
    text = text_of(result)
    check("process_run echo hello: a text content block exists", text != "", [c.model_dump() for c in result.content])
    check("process_run echo hello: the text mentions the exit status",
          re.search(r"exit", text, re.I) is not None and "0" in text, text)


async def section_rejections(client) -> None:
    result, sc = await call(client, "process_run", {"command": "curl", "args": ["https://example.com"]})
    expect_rejection("process_run curl", result, sc, "exec.not_allowed", mentions="curl")

    result, sc = await call(client, "process_run", {"command": "echo", "bogus": 1})
    expect_rejection("process_run with unknown field", result, sc, "input.malformed", mentions="bogus")

    result, sc = await call(client, "process_run", {"command": "sh", "args": ["-c", "id"]})
    expect_rejection("process_run sh -c", result, sc, "exec.interpreter_denied", mentions="sh")

    result, sc = await call(client, "process_status", {"id": "0" * 32, "extra": True})
    expect_rejection("process_status with unknown field", result, sc, "input.malformed")

    result, sc = await call(client, "wasm_run", {"module_wat": "(module)"})
    expect_rejection("wasm_run inline module under the strict policy", result, sc, "wasm.inline_denied")

    from mcp import MCPError

    try:
        result = await client.call_tool("no_such_tool", {})
        check("unknown tool name is a protocol error", False, {"isError": result.is_error, "content": text_of(result)})
    except MCPError as e:
        check("unknown tool name is a protocol error", True, f"MCPError {e.error.code}: {e.error.message}")


async def section_wasm(ctx: Tierbox, client) -> None:
    with open(os.path.join(ctx.workspace, "noop.wat"), "w") as f:
        f.write('(module (func (export "_start")))\n')
    result, sc = await call(client, "wasm_run", {"module": "noop.wat"})
    sc = sc if isinstance(sc, dict) else {}
    check("wasm_run noop.wat: not isError, exit_code 0, tier a",
          result.is_error is False and sc.get("exit_code") == 0 and sc.get("tier") == "a",
          {"isError": result.is_error, "exit_code": sc.get("exit_code"), "tier": sc.get("tier"),
           "backend": sc.get("backend"), "code": sc.get("code"), "message": sc.get("message")})


async def section_background(ctx: Tierbox, client) -> dict:
    """Starts `tail -f` on a workspace file (the strict policy has no shell or interpreter);
    the test appends lines to the file to make it print. Returns {id, token}."""
    token = f"tick-{uuid.uuid4().hex}.log"
    log_path = os.path.join(ctx.workspace, token)
    open(log_path, "w").close()
    result, sc = await call(client, "process_run",
                            {"command": "tail", "args": ["-n", "+1", "-f", token], "background": True})
    check("background start (tail -f): not isError", result.is_error is False, {"isError": result.is_error, "sc": sc})
    sc = sc if isinstance(sc, dict) else {}
    status = sc.get("status") if isinstance(sc.get("status"), dict) else {}
    handle = status.get("id")
    check("background start returns {status, startup_stdout, startup_stderr}", HANDLE_FIELDS <= set(sc), sorted(sc))
    missing = sorted(STATUS_FIELDS - set(status))
    check("handle status has the documented fields", not missing, {"missing": missing, "keys": sorted(status)})
    check("handle id is 32 hex digits", isinstance(handle, str) and re.fullmatch(r"[0-9a-f]{32}", handle) is not None, handle)
    check("handle state is running", status.get("state") == "running", status.get("state"))
    check("handle lifetime defaults to run_owned", status.get("lifetime") == "run_owned", status.get("lifetime"))
    check("handle argv is the request's argv", status.get("argv") in (["tail", "-n", "+1", "-f", token], ["-n", "+1", "-f", token]),
          status.get("argv"))
    if not isinstance(handle, str):
        raise RuntimeError("no handle id; the background checks cannot continue")

    # First read: two lines, read from offset 0.
    with open(log_path, "a") as f:
        f.write("tick 0\ntick 1\n")
    first = await poll_output(client, handle, 0, "tick 1\n")
    if first is None:
        return {"id": handle, "token": token}
    missing = sorted(OUTPUT_FIELDS - set(first))
    check("process_output has the documented fields", not missing, {"missing": missing, "keys": sorted(first)})
    check("first read: offset 0, text is exactly the two lines",
          first.get("offset") == 0 and first.get("text") == "tick 0\ntick 1\n", first)
    check("first read: next_offset == offset + bytes read, missed_bytes 0, stream stdout, state running",
          first.get("next_offset") == len(first.get("text", "").encode()) and first.get("missed_bytes") == 0
          and first.get("stream") == "stdout" and first.get("state") == "running", first)

    # Second read from next_offset: only the new line.
    with open(log_path, "a") as f:
        f.write("tick 2\n")
    second = await poll_output(client, handle, first["next_offset"], "tick 2\n")
    if second is not None:
        check("second read starts at the first read's next_offset", second.get("offset") == first.get("next_offset"),
              {"first": first, "second": second})
        check("second read returns only the new text", second.get("text") == "tick 2\n", second)
        check("offsets are monotonic (next_offset advanced by the new bytes)",
              second.get("next_offset") == first.get("next_offset") + len("tick 2\n")
              and second.get("total_bytes", 0) >= second.get("next_offset", 0), second)
        # Reading at the end returns nothing new and keeps the offset.
        result, at_end = await call(client, "process_output", {"id": handle, "offset": second["next_offset"]})
        check("a read at next_offset returns empty text and the same next_offset",
              not result.is_error and isinstance(at_end, dict) and at_end.get("text") == ""
              and at_end.get("next_offset") == second.get("next_offset"), at_end)
        result, err = await call(client, "process_output", {"id": handle, "stream": "stderr"})
        check("process_output stream=stderr works (empty)",
              not result.is_error and isinstance(err, dict) and err.get("stream") == "stderr" and err.get("text") == "", err)

    result, sc = await call(client, "process_status", {"id": handle})
    st = status_of(sc)
    check("process_status: running", not result.is_error and st.get("state") == "running", sc)
    check("process_status: stdout_bytes counts the output", st.get("stdout_bytes") == len("tick 0\ntick 1\ntick 2\n"), st)

    result, sc = await call(client, "process_list", {})
    ids = [p.get("id") for p in (sc or {}).get("processes", [])] if isinstance(sc, dict) else []
    check("process_list contains the handle", not result.is_error and handle in ids, sc)
    return {"id": handle, "token": token}


async def section_stdin(client) -> None:
    """`cat` in the background echoes what process_write_stdin sends; close ends it."""
    result, sc = await call(client, "process_run", {"command": "cat", "background": True})
    status = (sc or {}).get("status", {}) if isinstance(sc, dict) else {}
    handle = status.get("id")
    check("background cat: running", not result.is_error and status.get("state") == "running", sc)
    if not isinstance(handle, str):
        return
    result, sc = await call(client, "process_write_stdin", {"id": handle, "data": "ping\n"})
    check("process_write_stdin: {id, bytes_written: 5, closed: false}",
          not result.is_error and isinstance(sc, dict) and sc.get("id") == handle
          and sc.get("bytes_written") == 5 and sc.get("closed") is False, sc)
    got = await poll_output(client, handle, 0, "ping\n")
    check("the written stdin comes back on stdout", got is not None and got.get("text") == "ping\n", got)
    result, sc = await call(client, "process_write_stdin", {"id": handle, "data": "", "close": True})
    check("process_write_stdin close: closed true", not result.is_error and isinstance(sc, dict) and sc.get("closed") is True, sc)
    st = status_of(await poll_status(client, handle, {"exited"}))
    check("cat exits 0 once stdin is closed", st.get("state") == "exited" and st.get("exit_code") == 0, st)
    result, sc = await call(client, "process_write_stdin", {"id": handle, "data": "late\n"})
    check("writing to a closed stdin is refused (isError, a string code)",
          result.is_error is True and isinstance(sc, dict) and isinstance(sc.get("code"), str), sc)


async def section_term(client) -> None:
    """`cat` on a terminal of its own: what is typed is echoed by the terminal and again by
    cat; INT to the foreground job ends cat, and with it the term."""
    result, sc = await call(client, "session_start", {"command": "cat", "rows": 24, "cols": 80, "yield_ms": 100})
    sc = sc if isinstance(sc, dict) else {}
    term = sc.get("id")
    check("session_start cat: an id and a running status", not result.is_error and isinstance(term, str)
          and (sc.get("status") or {}).get("state") == "running", sc)
    if not isinstance(term, str):
        return
    offset = (sc.get("output") or {}).get("next_offset", 0)
    result, sc = await call(client, "session_write", {"id": term, "data": "ping\r", "offset": offset, "yield_ms": 500})
    sc = sc if isinstance(sc, dict) else {}
    check("session_write: {id, bytes_written: 5, eof: false, output}", not result.is_error
          and sc.get("bytes_written") == 5 and sc.get("eof") is False and isinstance(sc.get("output"), dict), sc)
    seen = (sc.get("output") or {}).get("text", "")
    offset = (sc.get("output") or {}).get("next_offset", offset)
    deadline = time.monotonic() + 10
    while seen.count("ping") < 2 and time.monotonic() < deadline:
        result, out = await call(client, "session_read", {"id": term, "offset": offset, "yield_ms": 300})
        out = out if isinstance(out, dict) else {}
        seen += out.get("text", "")
        offset = out.get("next_offset", offset)
    check("the terminal echoes the typed line and cat prints it again", seen.count("ping\r\n") == 2, seen)
    result, sc = await call(client, "session_read", {"id": term, "offset": offset, "yield_ms": 0})
    check("session_read: nothing new, the term still running", not result.is_error and isinstance(sc, dict)
          and sc.get("text") == "" and sc.get("ended") is False, sc)
    result, sc = await call(client, "session_resize", {"id": term, "rows": 40, "cols": 100})
    check("session_resize: 40x100", not result.is_error and (sc or {}).get("rows") == 40 and (sc or {}).get("cols") == 100, sc)
    result, sc = await call(client, "session_signal", {"id": term, "signal": "USR1"})
    expect_rejection("session_signal USR1", result, sc, "term.signal_refused", "USR1")
    result, sc = await call(client, "session_signal", {"id": term, "signal": "INT"})
    check("session_signal INT", not result.is_error and (sc or {}).get("signal") == "INT", sc)
    result, sc = await call(client, "session_close", {"id": term})
    check("session_close: the final status", not result.is_error and isinstance(sc, dict)
          and sc.get("state") in ("exited", "killed") and sc.get("id") == term, sc)
    result, sc = await call(client, "session_read", {"id": uuid.uuid4().hex})
    expect_rejection("session_read of a never-issued id", result, sc, "term.not_found")


async def section_files(client) -> None:
    """The file face: a write lands and reads back exactly, a list and a stat see it, and
    the paths a run could not write (`.git/config`, `..`) are typed refusals."""
    result, sc = await call(client, "file_write", {"path": "mcp-sdk/note.txt", "data": "hello\n",
                                                   "mkdir_parents": True})
    sc = sc if isinstance(sc, dict) else {}
    check("file_write: written, with its sha256", not result.is_error and isinstance(sc.get("sha256"), str)
          and sc.get("bytes_written") == 6, sc)
    result, sc = await call(client, "file_read", {"path": "mcp-sdk/note.txt"})
    check("file_read: the bytes written", not result.is_error and (sc or {}).get("text") == "hello\n", sc)
    result, sc = await call(client, "file_list", {"path": "mcp-sdk"})
    names = [e.get("name") for e in (sc or {}).get("entries", [])] if isinstance(sc, dict) else []
    check("file_list: the file is listed", not result.is_error and names == ["note.txt"], sc)
    result, sc = await call(client, "file_stat", {"path": "mcp-sdk/note.txt"})
    check("file_stat: a 6-byte file", not result.is_error and (sc or {}).get("size") == 6, sc)
    result, sc = await call(client, "file_write", {"path": ".git/config", "data": "[core]\n", "mkdir_parents": True})
    expect_rejection("file_write .git/config", result, sc, "file.protected")
    result, sc = await call(client, "file_read", {"path": "../etc/passwd"})
    expect_rejection("file_read ../etc/passwd", result, sc, "file.refused")


async def section_isolation(ctx: Tierbox, client1, bg: dict) -> None:
    handle = bg["id"]
    # The message for an id this session does not own must not differ from the message for
    # an id that never existed (apart from the id itself): handles cannot be probed.
    fake = uuid.uuid4().hex
    result, own_missing = await call(client1, "process_status", {"id": fake})
    expect_rejection("session 1: process_status of a never-issued id", result, own_missing, "background.not_found")

    async with ctx.client() as client2:
        result, sc = await call(client2, "process_list", {})
        check("session 2: process_list is empty", not result.is_error and isinstance(sc, dict) and sc.get("processes") == [], sc)
        for tool, args in (
            ("process_status", {"id": handle}),
            ("process_kill", {"id": handle}),
            ("process_output", {"id": handle}),
            ("process_write_stdin", {"id": handle, "data": "x\n"}),
        ):
            result, sc = await call(client2, tool, args)
            expect_rejection(f"session 2: {tool} of session 1's id", result, sc, "background.not_found")
            if tool == "process_status" and isinstance(sc, dict) and isinstance(own_missing, dict):
                a = str(sc.get("message", "")).replace(handle, "<id>")
                b = str(own_missing.get("message", "")).replace(fake, "<id>")
                check("a foreign id and a never-issued id get the same message", a == b, {"foreign": a, "never_issued": b})

    result, sc = await call(client1, "process_status", {"id": handle})
    st = status_of(sc)
    check("after session 2 (which tried to kill it) ended, session 1's process is still running",
          not result.is_error and st.get("state") == "running", sc)
    check("…and its process is still alive on the host", procs_with_token(bg["token"]) != [], bg["token"])


async def section_kill(client, bg: dict) -> None:
    handle = bg["id"]
    result, sc = await call(client, "process_kill", {"id": handle})
    st = status_of(sc)
    check("process_kill: not isError, state killed", not result.is_error and st.get("state") == "killed", sc)
    result, sc = await call(client, "process_status", {"id": handle})
    st = status_of(sc)
    check("process_status after kill: killed", not result.is_error and st.get("state") == "killed", sc)
    gone = wait_until(lambda: procs_with_token(bg["token"]) == [], 2.0)
    check("the killed process is gone from the host", gone, procs_with_token(bg["token"]))
    result, sc = await call(client, "process_kill", {"id": handle})
    check("killing it again does not fail with a server error",
          isinstance(sc, dict) and (not result.is_error or isinstance(sc.get("code"), str)), {"isError": result.is_error, "sc": sc})


async def section_progress(client) -> None:
    events: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        events.append((progress, total, message))

    lines = "".join(f"{i}\n" for i in range(1, 6))
    result, sc = await call(client, "process_run", {"command": "seq", "args": ["1", "5"]}, progress_callback=on_progress)
    # The SDK routes a progress notification only while its request is pending (one that
    # arrives after the result is dropped), then runs the callback in a spawned task: give
    # the callbacks a moment, and any event at all proves it arrived before the result.
    import anyio

    await anyio.sleep(0.3)
    ok = not result.is_error and isinstance(sc, dict) and (sc.get("stdout") or {}).get("text") == lines
    check("process_run seq 1 5 with a progressToken: result as usual", ok, sc if not ok else "")
    check("at least one notifications/progress arrived", len(events) >= 1, events)
    joined = "".join(m or "" for _, _, m in events)
    check("the progress messages carry the output text", lines in joined or all(str(i) in joined for i in range(1, 6)), events)
    progress = [p for p, _, _ in events]
    check("progress values increase", all(b > a for a, b in zip(progress, progress[1:])), progress)


async def section_lifetime(ctx: Tierbox) -> None:
    owned = f"owned-{uuid.uuid4().hex}.txt"
    detached = f"detached-{uuid.uuid4().hex}.txt"
    for name in (owned, detached):
        open(os.path.join(ctx.workspace, name), "w").close()
    async with ctx.client() as client3:
        result, sc = await call(client3, "process_run", {"command": "tail", "args": ["-f", owned], "background": True})
        check("session 3: run_owned background process started", not result.is_error, sc if result.is_error else "")
        result, sc = await call(client3, "process_run",
                                {"command": "tail", "args": ["-f", detached], "background": True, "lifetime": "detached"})
        status = (sc or {}).get("status", {}) if isinstance(sc, dict) else {}
        check("session 3: detached background process started", not result.is_error and status.get("lifetime") == "detached", sc)
        check("session 3: both processes are visible on the host",
              wait_until(lambda: procs_with_token(owned) and procs_with_token(detached), 3.0),
              {"owned": procs_with_token(owned), "detached": procs_with_token(detached)})
        closing = time.monotonic()
    closed_after = time.monotonic() - closing
    check("session 3's server exits on stdin EOF without being signalled (< 2 s)", closed_after < 2.0,
          f"client shutdown took {closed_after:.2f} s; the SDK sends SIGTERM after 2 s")
    gone = wait_until(lambda: not procs_with_token(owned), 2.0)
    check("after session 3 ended, its run_owned process is gone within 2 s", gone, procs_with_token(owned))
    gone = wait_until(lambda: not procs_with_token(detached), 2.0)
    check("nothing outlives the server: the detached process is gone too", gone, procs_with_token(detached))


async def section_legacy(ctx: Tierbox) -> None:
    """A client that only speaks the initialize handshake (protocol 2025-xx) works too."""
    async with ctx.client(mode="legacy") as client:
        check("legacy handshake: negotiated a handshake-era protocol", not str(client.protocol_version).startswith("2026"),
              client.protocol_version)
        listing = await client.list_tools()
        check(f"legacy handshake: tools/list has the {len(AGENT_TOOLS)} tools", {t.name for t in listing.tools} == AGENT_TOOLS,
              sorted(t.name for t in listing.tools))
        events = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            events.append(message)

        result, sc = await call(client, "process_run", {"command": "echo", "args": ["hello"]}, progress_callback=on_progress)
        ok = not result.is_error and isinstance(sc, dict) and (sc.get("stdout") or {}).get("text") == "hello\n"
        check("legacy handshake: process_run echo hello", ok, sc if not ok else "")
        import anyio

        await anyio.sleep(0.3)
        check("legacy handshake: a progress notification carried the output", any("hello" in (m or "") for m in events), events)


async def section_audit(ctx: Tierbox) -> None:
    """With an audit log in the policy, each MCP run and each rejection is a signed record."""
    from mcp import Client, StdioServerParameters

    log = os.path.join(ctx.root, "audit.jsonl")
    policy = os.path.join(ctx.root, "audit-policy.toml")
    base = subprocess.run([ctx.binary, "policy", "init"], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=30).stdout
    with open(policy, "w") as f:
        f.write(base + f'\n[audit]\nlog = "{log}"\n')
    params = StdioServerParameters(command=ctx.binary, args=ctx.args + ["--policy", policy], cwd=ctx.workspace,
                                   env={"RUST_BACKTRACE": "1"})
    async with Client(params, read_timeout_seconds=CALL_TIMEOUT_S) as client:
        result, sc = await call(client, "process_run", {"command": "echo", "args": ["audited"]})
        check("audit: process_run succeeds", not result.is_error, sc)
        result, sc = await call(client, "process_run", {"command": "curl", "args": ["example.org"]})
        expect_rejection("audit: curl", result, sc, "exec.not_allowed")
    key = subprocess.run([ctx.binary, "attest", "pubkey", "--state-dir", ctx.state], stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=30).stdout.strip()
    verify = subprocess.run([ctx.binary, "audit", "verify", log, "--pubkey", key], stdin=subprocess.DEVNULL,
                            capture_output=True, text=True, timeout=30)
    check("audit: tierbox audit verify accepts the log with the server's key", verify.returncode == 0,
          verify.stdout + verify.stderr)
    kinds = []
    if os.path.exists(log):
        for line in open(log):
            kinds.append(json.loads(line)["record"]["envelope"]["attestation"]["body"]["kind"])
    check("audit: one run record and one rejection record, in order", kinds == ["run", "rejection"], kinds)


async def section_review(ctx: Tierbox) -> None:
    """Review mode: an overlay run leaves the workspace alone and returns its change set;
    changes_show, changes_apply (partial, then refused on a conflict) and changes_discard."""
    from mcp import Client, StdioServerParameters

    ws = os.path.join(ctx.root, "review-ws")
    os.mkdir(ws)
    for name, text in (("base.txt", "base\n"), ("gone.txt", "bye\n")):
        with open(os.path.join(ws, name), "w") as f:
            f.write(text)
    policy = os.path.join(ctx.root, "review-policy.toml")
    with open(policy, "w") as f:
        f.write('version = 1\n[exec]\nallowed_executables = ["sh"]\nallow_interpreters = true\n'
                'allow_eval = true\n[workspace]\nmode = "overlay"\nagent_may_apply = true\n')
    args = ["serve", "--mcp", "--workspace", ws, "--state-dir", ctx.state, "--policy", policy]
    params = StdioServerParameters(command=ctx.binary, args=args, cwd=ws, env={"RUST_BACKTRACE": "1"})
    async with Client(params, read_timeout_seconds=CALL_TIMEOUT_S) as client:
        await section_tools(client, TOOLS)
        result, sc = await call(client, "process_run", {
            "command": "sh", "tier": "c",
            "args": ["-c", "echo new > added.txt; echo changed > base.txt; rm gone.txt"]})
        sc = sc if isinstance(sc, dict) else {}
        changes = (sc.get("changes") or {}).get("changes") or []
        kinds = sorted((c.get("path"), c.get("kind")) for c in changes)
        check("review: an overlay run returns its change set in the structured result",
              not result.is_error and kinds == [("added.txt", "added"), ("base.txt", "modified"), ("gone.txt", "deleted")],
              {"isError": result.is_error, "kinds": kinds})
        check("review: the workspace is unchanged until applied",
              open(os.path.join(ws, "base.txt")).read() == "base\n" and os.path.exists(os.path.join(ws, "gone.txt"))
              and not os.path.exists(os.path.join(ws, "added.txt")), sorted(os.listdir(ws)))
        run_id = sc.get("run_id", "")
        result, shown = await call(client, "changes_show", {"run_id": run_id, "diff": True})
        shown = shown if isinstance(shown, dict) else {}
        check("review: changes_show lists the changes and diffs the text",
              not result.is_error and len((shown.get("changes") or {}).get("changes") or []) == 3
              and "+changed" in (shown.get("diff") or ""), {"isError": result.is_error, "diff": shown.get("diff")})
        result, applied = await call(client, "changes_apply", {"run_id": run_id, "paths": ["added.txt"]})
        applied = applied if isinstance(applied, dict) else {}
        check("review: changes_apply of one path applies it alone",
              not result.is_error and applied.get("applied") == ["added.txt"] and applied.get("remaining") == 2
              and open(os.path.join(ws, "added.txt")).read() == "new\n"
              and open(os.path.join(ws, "base.txt")).read() == "base\n", applied)
        with open(os.path.join(ws, "base.txt"), "w") as f:
            f.write("edited by someone else\n")
        result, sc = await call(client, "changes_apply", {"run_id": run_id})
        expect_rejection("review: apply after the workspace changed", result, sc, "changes.conflict", "base.txt")
        check("review: a refused apply changes nothing",
              os.path.exists(os.path.join(ws, "gone.txt"))
              and open(os.path.join(ws, "base.txt")).read() == "edited by someone else\n", sorted(os.listdir(ws)))
        result, sc = await call(client, "changes_discard", {"run_id": run_id})
        check("review: changes_discard drops the set", not result.is_error and (sc or {}).get("discarded") is True, sc)
        result, sc = await call(client, "changes_show", {"run_id": run_id})
        expect_rejection("review: a discarded set is gone", result, sc, "changes.not_found")
        result, sc = await call(client, "changes_apply", {"run_id": run_id, "paths": ["../etc"]})
        expect_rejection("review: a path out of the workspace is refused", result, sc, "input.malformed", "../etc")


async def main_async(ctx: Tierbox) -> None:
    import anyio

    with anyio.fail_after(OVERALL_TIMEOUT_S - 10):
        async with ctx.client() as client1:
            info = client1.server_info
            notice(f"session 1: protocol {client1.protocol_version}, server "
                   f"{getattr(info, 'name', '?')} {getattr(info, 'version', '?')}")
            for title, coro in (
                ("tools", lambda: section_tools(client1)),
                ("foreground", lambda: section_foreground(client1)),
                ("bounded", lambda: section_bounded(client1)),
                ("rejections", lambda: section_rejections(client1)),
                ("wasm", lambda: section_wasm(ctx, client1)),
                ("stdin", lambda: section_stdin(client1)),
                ("term", lambda: section_term(client1)),
                ("files", lambda: section_files(client1)),
                ("progress", lambda: section_progress(client1)),
            ):
                await run_section(title, coro)
            bg = await run_section("background", lambda: section_background(ctx, client1))
            if isinstance(bg, dict):
                await run_section("isolation", lambda: section_isolation(ctx, client1, bg))
                await run_section("kill", lambda: section_kill(client1, bg))
        await run_section("lifetime", lambda: section_lifetime(ctx))
        await run_section("legacy handshake", lambda: section_legacy(ctx))
        await run_section("audit log", lambda: section_audit(ctx))
        await run_section("review mode", lambda: section_review(ctx))
    # Every tool's successful result was checked against its outputSchema at least once.
    unchecked = sorted(t for t in TOOLS if VALIDATED.get(t, 0) == 0)
    check("every tool's structured content was validated against its outputSchema",
          not unchecked, {"validated": VALIDATED, "never": unchecked})


async def run_section(title: str, make) -> Any:
    print(f"--- {title}", flush=True)
    try:
        return await make()
    except Exception as e:  # one broken section must not hide the others
        check(f"section {title} ran without an exception", False, f"{type(e).__name__}: {e}")
        traceback.print_exc()
        return None


def main() -> int:
    signal.signal(signal.SIGALRM, _hard_timeout)
    signal.alarm(OVERALL_TIMEOUT_S)
    binary = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("TIERBOX_BIN", "")
    if not binary:
        print("usage: mcp_client_test.py PATH/TO/tierbox   (or set TIERBOX_BIN)", file=sys.stderr)
        return 2
    binary = os.path.abspath(binary)
    if not os.access(binary, os.X_OK):
        print(f"FAIL: {binary} is not an executable", flush=True)
        return 2
    try:
        import anyio
        import mcp  # noqa: F401
    except ImportError as e:
        print(f"FAIL: the MCP Python SDK is not installed ({e}); pip install mcp==2.3.0", flush=True)
        return 2
    print(f"tierbox: {binary}", flush=True)
    ctx = Tierbox(binary)
    print(f"server: {binary} {' '.join(ctx.args)}", flush=True)
    try:
        anyio.run(main_async, ctx)
    except BaseException as e:  # noqa: BLE001 - report anything, including the fail_after timeout
        check("the test body completed", False, f"{type(e).__name__}: {e}")
        traceback.print_exc()
    finally:
        ctx.cleanup()
    failed = [name for name, ok in _results if not ok]
    print(f"mcp_client_test: {len(_results) - len(failed)} passed, {len(failed)} failed", flush=True)
    for name in failed:
        print(f"  failed: {name}", flush=True)
    return 1 if failed or not _results else 0


if __name__ == "__main__":
    sys.exit(main())
