# The two commands of the README: `make demo` (set up + the suite's main job) and `make test`.
.PHONY: setup demo test serve bench lint clean

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

lint: setup
	@.venv/bin/ruff check .   # product packages, benchmarks/, experiments/, tests/, scripts/

clean:
	rm -rf results .cache
