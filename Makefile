# papershelf — every target works from a fresh clone with only python3 (>= 3.11) and make.
.DEFAULT_GOAL := help
SHELL := /bin/bash

UV ?= $(shell command -v uv 2>/dev/null || echo "python3 -m uv")
RUN := $(UV) run --no-sync
PYTEST_WORKERS ?= 2
PACKAGES := $(notdir $(wildcard packages/*))

.PHONY: help system-deps setup test-all test demo lint format build bench bench-report docs new release check-dist clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s $$'\t'

# Debian packages the speech testbed's corpus builder needs (text-to-speech engines). Installed when
# missing and we can (root + apt-get); otherwise the builder names them and the tests that need them skip.
SYSTEM_PACKAGES := espeak-ng flite

system-deps:  ## install the Debian packages the speech testbed uses, where missing and possible
	@missing=""; for p in $(SYSTEM_PACKAGES); do command -v $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing$$missing"; (apt-get install -y -qq $$missing >/dev/null 2>&1 \
				|| { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq $$missing >/dev/null; }) \
				|| echo "warning: could not install$$missing"; \
		else echo "note: missing$$missing (apt-get install$$missing); the speech corpus tests will skip"; fi; \
	fi

setup: system-deps  ## install uv if missing, then the whole workspace from uv.lock into .venv
	@command -v uv >/dev/null 2>&1 || python3 -m uv --version >/dev/null 2>&1 || python3 -m pip install --quiet uv \
		|| python3 -m pip install --quiet --user uv || python3 -m pip install --quiet --break-system-packages uv
	@# --compile-bytecode: where PYTHONDONTWRITEBYTECODE is set (this machine), no .pyc is ever cached, and
	@# every test worker recompiled torch and sklearn on import (~15 s each); once here, ~1 s on re-runs
	$(UV) sync --all-packages --locked --compile-bytecode

test-all: setup  ## the README's test command: every test of shared/, packages/ and tests/ on 2 workers
	$(RUN) pytest -n $(PYTEST_WORKERS) shared packages tests

test: setup  ## tests of one package: make test PKG=celeus-eval
	@test -n "$(PKG)" || { echo "usage: make test PKG=<distribution>"; exit 2; }
	$(RUN) pytest -n $(PYTEST_WORKERS) $(firstword $(wildcard packages/$(PKG) shared/$(PKG)))

demo: setup  ## every package's demo (PKG= for one)
	@set -e; for p in $(or $(PKG),$(PACKAGES)); do echo "== $$p demo"; $(RUN) $$p demo; done

lint: setup  ## ruff check and format check
	$(RUN) ruff check .
	$(RUN) ruff format --check .

format: setup  ## apply ruff's fixes and formatting
	$(RUN) ruff check --fix .
	$(RUN) ruff format .

build: setup  ## every wheel and sdist into dist/
	rm -rf dist && $(UV) build --all-packages --out-dir dist

bench: setup  ## full benchmark of one package, JSON into docs/bench/: make bench PKG=celeus-eval
	@test -n "$(PKG)" || { echo "usage: make bench PKG=<distribution>"; exit 2; }
	$(RUN) $(PKG) bench --out docs/bench/$(PKG).json

bench-report: setup  ## gather docs/bench/*.json into docs/benchmarks.md
	$(RUN) papershelf bench-report docs/bench/*.json --out docs/benchmarks.md

docs: setup  ## regenerate the generated parts of README.md and docs/
	$(RUN) python tests/shelf.py catalog --write
	$(RUN) papershelf bench-report docs/bench/*.json --out docs/benchmarks.md

new: setup  ## scaffold a package that passes the contract checks: make new PKG=my-paper
	@test -n "$(PKG)" || { echo "usage: make new PKG=<distribution>"; exit 2; }
	$(RUN) python tests/shelf.py new $(PKG)
	$(UV) lock
	$(UV) sync --all-packages

release: setup  ## bump, changelog, build, check, tag one package: make release PKG=x VERSION=1.2.3
	@test -n "$(PKG)" -a -n "$(VERSION)" || { echo "usage: make release PKG=<distribution> VERSION=x.y.z"; exit 2; }
	$(RUN) python tests/shelf.py release $(PKG) $(VERSION)

check-dist: build  ## each package alone in a fresh venv: import, --version, demo
	$(RUN) python tests/shelf.py check-dist

clean:  ## remove build outputs and caches
	rm -rf dist .pytest_cache .ruff_cache .hypothesis
