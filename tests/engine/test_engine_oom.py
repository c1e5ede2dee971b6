"""Check 4: explain-oom on failures induced in the real engine (failures.yaml), and its fix proved by a restart.

Each failure is caused for real: the server is started with the failing command (or, for a request, started
and sent the request). `vramctl explain-oom --json` reads what the engine printed and must name the cause of
failures.yaml. Its first fix that names a flag and a value is applied to the command, and the engine is started
again with it: it must come up (and answer the request). Where the engine states the longest max_model_len that
fits, `vramctl plan` on the same command must state the same (`max_model_len_fit`).
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import engine_harness as harness
import pytest
import yaml

FAILURES = yaml.safe_load((harness.HERE / "failures.yaml").read_text())["failures"]


def apply_fix(
    args: list[str], env: dict[str, str], flag: str, value: str
) -> tuple[list[str], dict[str, str]]:
    """The command with explain-oom's fix: `--flag value` replaced (every occurrence) or added; an environment
    variable (UPPER_CASE name) set."""
    value = value.replace(",", "") if re.fullmatch(r"[\d,]+", value) else value
    if not flag.startswith("-"):
        return list(args), {**env, flag: value}
    out: list[str] = []
    i = 0
    replaced = False
    while i < len(args):
        word = args[i]
        if word == flag:
            out += [flag, value]
            replaced = True
            i += 2
            continue
        if word.startswith(flag + "="):
            out.append(f"{flag}={value}")
            replaced = True
            i += 1
            continue
        out.append(word)
        i += 1
    if not replaced:
        out += [flag, value]
    return out, dict(env)


def first_fix(diagnosis: dict[str, Any]) -> tuple[str, str] | None:
    for fix in diagnosis.get("fixes") or []:
        if fix.get("flag") and fix.get("value") not in (None, ""):
            return str(fix["flag"]), str(fix["value"])
    return None


def send_request(port: int, model: str, tokens: int) -> tuple[int, str]:
    body = json.dumps({"model": model, "prompt": list(range(1, tokens + 1)), "max_tokens": 1}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return int(response.status), response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode("utf-8", "replace")


def _params() -> list[Any]:
    params = []
    for failure in FAILURES:
        marks = [pytest.mark.xfail(reason=failure["xfail"], strict=True)] if failure.get("xfail") else []
        params.append(pytest.param(failure, id=failure["id"], marks=marks))
    return params


@pytest.mark.parametrize("failure", _params())
def test_explain_oom_names_the_cause_and_its_fix_starts_the_engine(
    failure: dict[str, Any],
    engine_env: Any,
    engine_start: Callable[..., harness.EngineRun],
    engine_record: Callable[..., None],
) -> None:
    config = failure["config"]
    args = [str(a) for a in failure.get("args", [])]
    env = {str(k): str(v) for k, v in (failure.get("env") or {}).items()}
    model = str(harness.CONFIGS / config)
    tokens = failure.get("request_tokens")
    keep = tokens is not None
    run = engine_start(failure["id"], config, args, env, keep_running=keep)
    if tokens is None:
        assert not run.started, f"{failure['id']}: the engine started; the failure was not induced"
        evidence = run.log_path
    else:
        assert run.started, harness.failure_excerpt(run)
        try:
            status, body = send_request(run.port, model, int(tokens))
        finally:
            harness.stop_all()
        assert status >= 400, f"{failure['id']}: the engine served a {tokens}-token request (HTTP {status})"
        evidence = run.log_path.with_name(run.log_path.stem + ".with-response.log")
        evidence.write_text(
            run.log + f"\nPOST /v1/completions ({tokens} prompt tokens) -> HTTP {status}: {body}\n"
        )

    code, diagnosis, stderr = harness.vramctl_json(["explain-oom", str(evidence)])
    assert diagnosis, f"explain-oom exited {code}: {stderr.strip()[-400:]}"
    cause = diagnosis.get("cause")
    engine_record("4-explain-oom", failure["id"], "cause", cause, failure["cause"], cause == failure["cause"])
    assert cause == failure["cause"], (
        f"{failure['id']}: explain-oom says {cause}, the engine's failure is {failure['cause']}"
    )

    if failure.get("evidence"):
        said = json.dumps([diagnosis.get("what"), diagnosis.get("evidence")])
        assert failure["evidence"] in said, f"{failure['id']}: explain-oom's diagnosis does not rest on the failure"

    fix = first_fix(diagnosis)
    assert fix is not None, f"{failure['id']}: explain-oom gave no fix with a flag and a value"
    if failure.get("fix_flag"):
        assert fix[0] == failure["fix_flag"], (
            f"{failure['id']}: the first fix sets {fix[0]}, not {failure['fix_flag']}"
        )
    fixed_args, fixed_env = apply_fix(args, env, *fix)
    rerun = engine_start(failure["id"] + "-fixed", config, fixed_args, fixed_env, keep_running=keep)
    started = rerun.started
    note = f"{fix[0]} {fix[1]}"
    if started and tokens is not None:
        try:
            status, body = send_request(rerun.port, model, int(tokens))
        finally:
            harness.stop_all()
        started = status == 200
        note += f"; the request: HTTP {status}"
    if not started and failure.get("fix_xfail"):
        engine_record("4-fix-starts", failure["id"], "engine starts with the fix", note, "failed", False, "known")
        pytest.xfail(failure["fix_xfail"])
    engine_record(
        "4-fix-starts",
        failure["id"],
        "engine starts with the fix",
        note,
        "started" if started else "failed",
        started,
    )
    assert started, (
        f"{failure['id']}: with {fix[0]} {fix[1]} the engine still fails: {harness.failure_excerpt(rerun)}"
    )
    if failure.get("plan_fit"):
        # the block size the platform chose for this config (the failed start printed none): the fixed start's
        m = re.search(r"estimated maximum model length is (\d+)", run.log)
        assert m, "the engine's error states no estimated maximum model length"
        engine_fit = int(m.group(1))
        assert rerun.metrics.get("block_size"), "the fixed start reported no block size"
        command = [
            "vllm",
            "serve",
            model,
            *args,
            "--block-size",
            rerun.metrics["block_size"],
            *harness.platform_flags(run.log, args),
        ]
        _, plan, plan_err = harness.vramctl_json(
            ["plan", "--engine-version", engine_env.version, "--", *command]
        )
        assert plan, plan_err.strip()[-400:]
        agree = plan.get("max_model_len_fit") == engine_fit
        engine_record(
            "1-kv", failure["id"], "max_model_len_fit", plan.get("max_model_len_fit"), engine_fit, agree
        )
        assert agree, (
            f"vramctl plan max_model_len_fit {plan.get('max_model_len_fit')} vs the engine's {engine_fit}"
        )
