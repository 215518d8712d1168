#!/usr/bin/env bash
# Idempotent set-up: Debian packages, a .venv with torch, the project and its test extras.
# Re-running it only installs what is missing (a stamp records the requirement files and the variant).
#
# The torch variant (GPU=...):
#   auto (default)  the CUDA build when an NVIDIA GPU answers nvidia-smi, else the CPU build
#   0               the CPU build (torch==2.13.0, CPU wheel)
#   1               the CUDA build of the same version from the package registry (PyPI's Linux x86_64
#                   torch wheel is the CUDA one), and faiss-gpu-cu12 where its wheel fits that CUDA
#   system          no torch install: the venv sees the base Python's packages (--system-site-packages)
#                   and uses the torch already there (a machine whose Python has a CUDA torch)
set -euo pipefail
cd "$(dirname "$0")/.."

# sweethome3d-furniture: real part-labelled furniture and its icons (generation3d, vision);
# r-cran-dslabs: the MovieLens latest-small ratings (streaming)
APT_PACKAGES=(chromium libusb-1.0-0 libvulkan1 mesa-vulkan-drivers libgl1 libgomp1 dataset-fashion-mnist
              sweethome3d-furniture r-cran-dslabs)
PYTHON=${PYTHON:-python3}
VENV=.venv
STAMP=$VENV/.moe-apps-installed
GPU=${GPU:-auto}
TORCH_VERSION=2.13.0
FAISS_GPU=faiss-gpu-cu12==1.14.1.post1  # the nearest faiss-gpu wheel to faiss-cpu 1.15.1; CUDA 12 only

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

case "$GPU" in
  auto) if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then VARIANT=cuda; else VARIANT=cpu; fi ;;
  0|cpu) VARIANT=cpu ;;
  1|cuda) VARIANT=cuda ;;
  system) VARIANT=system ;;
  *) fail "GPU must be auto, 0, 1 or system, got '$GPU'" ;;
esac

"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || fail "Python 3.11+ needed ($PYTHON is $("$PYTHON" --version 2>&1))"
if [ ! -x "$VENV/bin/python" ]; then
  step "creating $VENV"
  venv_opts=()
  [ "$VARIANT" = system ] && venv_opts=(--system-site-packages)
  "$PYTHON" -m venv "${venv_opts[@]}" "$VENV" || fail "python -m venv failed"
fi

want="$(cat pyproject.toml constraints.txt scripts/setup.sh | sha256sum | cut -d' ' -f1) $VARIANT"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && "$VENV/bin/python" -c "import moe, common" 2>/dev/null; then
  step "Python environment up to date"
  exit 0
fi
constraints=constraints.txt
"$VENV/bin/python" -m pip install -q --upgrade pip || fail "pip upgrade failed"
case "$VARIANT" in
  cpu)
    step "installing CPU torch (torch==$TORCH_VERSION, the CPU build; never a bare 'torch')"
    if "$VENV/bin/python" -c "import torch, sys; sys.exit(not torch.version.cuda)" 2>/dev/null; then
      "$VENV/bin/python" -m pip uninstall -q -y torch  # the CUDA build of an earlier set-up
    fi
    "$VENV/bin/python" -m pip install -q "torch==$TORCH_VERSION" || fail "installing torch==$TORCH_VERSION failed" ;;
  cuda)
    step "installing CUDA torch (torch==$TORCH_VERSION from the package registry)"
    if "$VENV/bin/python" -c "import torch, sys; sys.exit(bool(torch.version.cuda))" 2>/dev/null; then
      "$VENV/bin/python" -m pip uninstall -q -y torch  # the CPU build of an earlier set-up
    fi
    "$VENV/bin/python" -m pip install -q "torch==$TORCH_VERSION" || fail "installing torch==$TORCH_VERSION failed"
    "$VENV/bin/python" -c "import torch, sys; sys.exit(not torch.version.cuda)" \
      || fail "the registry served a CPU build of torch $TORCH_VERSION; install a CUDA build of it into $VENV, then run 'make setup GPU=system' or 'GPU=1' again" ;;
  system)
    step "using the base Python's torch (--system-site-packages)"
    "$VENV/bin/python" -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda)" \
      || fail "GPU=system needs torch installed in $PYTHON"
    constraints=$VENV/constraints-system.txt  # the base torch stays: no torch pin
    grep -v '^torch==' constraints.txt > "$constraints" ;;
esac
step "installing moe-apps and its test extras (pinned by $constraints)"
"$VENV/bin/python" -m pip install -q -c "$constraints" -e ".[test]" || fail "pip install -e .[test] failed"
step "installing molsets (MOSES corpus file only; --no-deps, the package itself is never imported)"
"$VENV/bin/python" -m pip install -q --no-deps "molsets==0.3.1" || fail "pip install --no-deps molsets failed"
if [ "$VARIANT" = cpu ]; then
  "$VENV/bin/python" -c "import torch; assert not torch.version.cuda, 'a CUDA torch build was installed'" \
    || fail "a CUDA build of torch slipped in; expected the CPU build (GPU=1 asks for the CUDA one)"
else
  cuda_major=$("$VENV/bin/python" -c "import torch; print((torch.version.cuda or '').split('.')[0])")
  if [ "$cuda_major" = 12 ]; then
    step "installing $FAISS_GPU in place of faiss-cpu"
    if "$VENV/bin/python" -m pip install -q "$FAISS_GPU"; then
      "$VENV/bin/python" -m pip uninstall -q -y faiss-cpu || true
    else
      echo "note: $FAISS_GPU did not install; faiss-cpu stays (search runs on the CPU)"
    fi
  else
    echo "note: no faiss-gpu wheel for CUDA ${cuda_major:-none}; faiss-cpu stays (search runs on the CPU)"
  fi
fi
echo "$want" > "$STAMP"
step "set-up done (torch variant: $VARIANT)"
