# The two commands of the README: `make demo` (set up + the suite's main job) and `make test`.
# `make setup GPU=1` installs the CUDA build of torch (GPU=auto, the default, does when nvidia-smi answers).
.PHONY: setup demo test serve bench lint clean device-check

setup:
	@bash scripts/setup.sh

demo: setup
	@echo "==> running the quick end-to-end demo of every app (results/demo/)"
	@HF_HUB_OFFLINE=1 GRADIO_ANALYTICS_ENABLED=False MPLBACKEND=Agg .venv/bin/python -m apps.demo_run --out results/demo

test: setup
	@echo "==> running the test suite"
	@bash scripts/run_tests.sh -q

serve: setup
	@HF_HUB_OFFLINE=1 GRADIO_ANALYTICS_ENABLED=False .venv/bin/moe-demo

bench: setup
	@.venv/bin/python benchmarks/moe_dispatch.py --out results/bench

device-check: setup  # on a GPU machine: docs/results/device/<gpu>.json and its PNGs (at most 8 minutes); scripts/device_wheels.sh for a machine without network
	@HF_HUB_OFFLINE=1 MPLBACKEND=Agg .venv/bin/python scripts/device_check.py --device $${DEVICE:-cuda}

lint: setup
	@.venv/bin/ruff check .   # product packages, benchmarks/, experiments/, tests/, scripts/

clean:
	rm -rf results .cache
