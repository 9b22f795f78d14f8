# The two set-up commands of README.md. Each (re)builds .venv when it is
# missing, older than its requirements or installed for another ACCEL, then
# does its job. ACCEL picks the accelerator: empty (CPU), cuda12 or cuda13
# (NVIDIA GPUs: requirements-cuda12.txt / requirements-cuda13.txt, which
# include requirements.txt), e.g. `make test ACCEL=cuda12`.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
WORKDIR ?= runs/quickstart
ACCEL ?=
ACCELS := cuda12 cuda13

ifneq ($(filter-out $(ACCELS),$(ACCEL))$(word 2,$(ACCEL)),)
$(error ACCEL=$(ACCEL) is not accepted; use one of: $(ACCELS), or leave it empty for CPU)
endif

REQUIREMENTS := $(if $(ACCEL),requirements-$(ACCEL).txt,requirements.txt)
# The other ACCELs' CUDA plugins: jax would find them next to this one's.
OTHER_PLUGINS := $(foreach a,$(filter-out $(ACCEL),$(ACCELS)),jax-$(a)-plugin jax-$(a)-pjrt)
# The stamp holds the ACCEL that .venv was installed for (empty: CPU).
INSTALLED_ACCEL := $(shell cat $(STAMP) 2>/dev/null)

.PHONY: quickstart test test-unit clean-venv FORCE

ifneq ($(INSTALLED_ACCEL),$(ACCEL))
$(STAMP): FORCE
endif

$(STAMP): requirements.txt $(REQUIREMENTS)
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
ifneq ($(INSTALLED_ACCEL),$(ACCEL))
	$(VENV)/bin/python -m pip uninstall --quiet --yes $(OTHER_PLUGINS)
endif
	$(VENV)/bin/python -m pip install --quiet -r $(REQUIREMENTS)
	printf '%s' '$(ACCEL)' >$(STAMP)

quickstart: $(STAMP)
	$(VENV)/bin/python main.py --config=configs/quickstart.py --workdir=$(WORKDIR)

# The tests come in three tiers (tests/tiers.py marks each module with one):
#   unit  the project's code called in the test's own process (pytest -m unit);
#   repo  checks of the repository's files: docs, pins, layers, citations,
#         committed results (pytest -m repo);
#   e2e   runs of main.py or launch.py as a user starts them (pytest -m e2e).
# `make test` runs all three; `make test-unit` the unit tier alone, the fast
# check while changing code.
test: $(STAMP)
	$(VENV)/bin/python -m pytest -q -n auto --dist loadfile tests

test-unit: $(STAMP)
	$(VENV)/bin/python -m pytest -q -n auto --dist loadfile -m unit tests

clean-venv:
	rm -rf $(VENV)
