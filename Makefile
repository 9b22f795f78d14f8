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

.PHONY: quickstart test clean-venv FORCE

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

test: $(STAMP)
	$(VENV)/bin/python -m pytest -q -n auto --dist loadfile tests

clean-venv:
	rm -rf $(VENV)
