#!/usr/bin/env bash
# Idempotent set-up: Debian packages, a .venv with CPU torch, the project and its test extras.
# Re-running it only installs what is missing (a stamp records the installed requirement files).
set -euo pipefail
cd "$(dirname "$0")/.."

# sweethome3d-furniture: real part-labelled furniture and its icons (generation3d, vision);
# r-cran-dslabs: the MovieLens latest-small ratings (streaming)
APT_PACKAGES=(chromium libusb-1.0-0 libvulkan1 mesa-vulkan-drivers libgl1 libgomp1 dataset-fashion-mnist
              sweethome3d-furniture r-cran-dslabs)
PYTHON=${PYTHON:-python3}
VENV=.venv
STAMP=$VENV/.moe-apps-installed

step() { printf '\n==> %s\n' "$*"; }
fail() { printf 'setup failed: %s\n' "$*" >&2; exit 1; }

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  step "installing Debian packages: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq || fail "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    || fail "apt-get install ${missing[*]} failed"
else
  step "Debian packages present"
fi

"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || fail "Python 3.11+ needed ($PYTHON is $("$PYTHON" --version 2>&1))"
if [ ! -x "$VENV/bin/python" ]; then
  step "creating $VENV"
  "$PYTHON" -m venv "$VENV" || fail "python -m venv failed"
fi

want=$(cat pyproject.toml constraints.txt scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && "$VENV/bin/python" -c "import moe, common" 2>/dev/null; then
  step "Python environment up to date"
  exit 0
fi
step "installing CPU torch (torch==2.13.0, the CPU build; never a bare 'torch')"
"$VENV/bin/python" -m pip install -q --upgrade pip || fail "pip upgrade failed"
"$VENV/bin/python" -m pip install -q "torch==2.13.0" || fail "installing torch==2.13.0 failed"
step "installing moe-apps and its test extras (pinned by constraints.txt)"
"$VENV/bin/python" -m pip install -q -c constraints.txt -e ".[test]" || fail "pip install -e .[test] failed"
step "installing molsets (MOSES corpus file only; --no-deps, the package itself is never imported)"
"$VENV/bin/python" -m pip install -q --no-deps "molsets==0.3.1" || fail "pip install --no-deps molsets failed"
"$VENV/bin/python" -c "import torch; assert not torch.version.cuda, 'a CUDA torch build was installed'" \
  || fail "a CUDA build of torch slipped in; expected the CPU build"
echo "$want" > "$STAMP"
step "set-up done"
