# weblm: `make demo` runs the whole pipeline on this machine; `make test` runs the test suite.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
JARS := $(abspath $(VENV))/jars
KENLM_VERSION := 0.3.0
KENLM_TOOLS := $(VENV)/.kenlm-tools-$(KENLM_VERSION)
KENLM_SRC := $(VENV)/src/kenlm
FAKE_GCS_VERSION := v1.56.1
FAKE_GCS := $(VENV)/.fake-gcs-server-$(FAKE_GCS_VERSION)
export SPARK_LOCAL_IP ?= 127.0.0.1
# rustup's cargo, when there is one: pip builds rs-trafilatura (no Linux wheels on PyPI) with it.
# Go from go.dev's tarball (/usr/local/go) when it is not on PATH: it builds the tests' GCS server.
export PATH := $(HOME)/.cargo/bin:$(PATH):/usr/local/go/bin

.PHONY: setup demo test bench wheel system-deps jars kenlm fake-gcs-server mlflow-ui clean

## setup: the virtualenv with every part's extras, and the Delta jars (idempotent; reruns only what changed)
setup: $(VENV)/.installed $(JARS)/.resolved $(KENLM_TOOLS)

$(VENV)/.installed: setup.cfg pyproject.toml
	@command -v java >/dev/null || { echo "Spark needs Java 17+: run 'make system-deps' (Debian, as root) or install a JDK" >&2; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip uv==0.13.9
	# uv keeps each build of an sdist it fetched anew (pyspark's: 1.4 GB a setup, as this index revalidates it every
	# time) and never drops the old ones: repeated setups had left 60 GB in uv's cache here and filled the disk, so
	# setup prunes the cache before installing (what earlier setups left) and after (its own old builds).
	$(VENV)/bin/uv cache prune -q
	# uv installs the same pinned set as pip in half the time (97 s against 199 s from a warm cache, measured here).
	# --compile-bytecode: the .pyc files, once. uv writes none by default, and where PYTHONDONTWRITEBYTECODE is set
	# (the CI machine) every process compiled torch, megatron and pyspark from source: ~15 s of CPU per trainer rank or
	# Spark worker; a tp2-dp2 test took 123 s without them and 60 s with them, measured here.
	$(VENV)/bin/uv pip install -q --compile-bytecode --python $(PY) -e '.[spider,localweb,jobs,trainer,demo,gcs,dev]'
	$(VENV)/bin/uv cache prune -q
	touch $@

# Delta's, the s3a connector's and Google's gs connector's own jars only: pyspark already ships newer copies of their other dependencies.
SPARK_JAR_GROUPS := io.delta,org.apache.hadoop,com.google.cloud.bigdataoss,software.amazon.awssdk,software.amazon.s3.analyticsaccelerator,software.amazon.eventstream,org.reactivestreams,org.wildfly.openssl
$(JARS)/.resolved: jobs/jars/pom.xml
	@command -v mvn >/dev/null || { echo "resolving the Delta jars needs Maven: run 'make system-deps' (Debian, as root) or install maven" >&2; exit 1; }
	rm -rf $(JARS)
	mvn -q -B -f jobs/jars/pom.xml dependency:copy-dependencies -DoutputDirectory=$(JARS) \
	    -DincludeGroupIds=$(SPARK_JAR_GROUPS) -DexcludeArtifactIds=delta-kernel-api,delta-kernel-defaults,delta-kernel-unitycatalog
	touch $@

jars: $(JARS)/.resolved

# KenLM's lmplz and build_binary (jobs/quality/train_kenlm.py): no wheel or Debian package ships them, so they are
# built once from the kenlm sdist (the same version as the `kenlm` query module) with Debian's Boost, into .venv/bin.
$(KENLM_TOOLS): | $(VENV)/.installed
	@command -v cmake >/dev/null && command -v g++ >/dev/null && test -e /usr/include/boost/program_options.hpp || { echo "building KenLM's lmplz needs cmake, g++ and Boost: run 'make system-deps' (Debian, as root)" >&2; exit 1; }
	rm -rf $(KENLM_SRC) && mkdir -p $(KENLM_SRC)
	$(PY) -m pip download -q --no-deps --no-binary kenlm --no-build-isolation -d $(KENLM_SRC) kenlm==$(KENLM_VERSION)
	tar xzf $(KENLM_SRC)/kenlm-$(KENLM_VERSION).tar.gz -C $(KENLM_SRC)
	cmake -S $(KENLM_SRC)/kenlm-$(KENLM_VERSION) -B $(KENLM_SRC)/build -DCMAKE_BUILD_TYPE=Release >$(KENLM_SRC)/cmake.log
	cmake --build $(KENLM_SRC)/build -j2 --target lmplz build_binary >$(KENLM_SRC)/build.log
	install -m 755 $(KENLM_SRC)/build/bin/lmplz $(KENLM_SRC)/build/bin/build_binary $(VENV)/bin/
	rm -rf $(KENLM_SRC)
	touch $@

kenlm: $(KENLM_TOOLS)

# The tests' gs:// server: fsouza/fake-gcs-server, a GCS JSON API server that both gcsfs and Google's Hadoop connector
# (Spark's Delta tables on gs://) work against; gcp-storage-emulator, on PyPI, answered the connector's writes of
# _delta_log with 404s.  Built from the Go module proxy into .venv/bin (no PyPI or Debian package ships it).
$(FAKE_GCS): | $(VENV)/.installed
	@command -v go >/dev/null || { echo "building the tests' GCS server needs Go 1.21+ (it fetches the 1.26 toolchain the module asks for): install it from go.dev, Debian 12's golang-go is 1.19" >&2; exit 1; }
	GOBIN=$(abspath $(VENV))/bin GOFLAGS=-mod=mod go install github.com/fsouza/fake-gcs-server@$(FAKE_GCS_VERSION)
	touch $@

fake-gcs-server: $(FAKE_GCS)

## demo: local web -> crawl -> WARC -> Delta -> tokens -> Megatron shards -> CPU training; summary in var/demo/summary.json
demo: setup
	$(PY) -m demo

## test: the whole suite (real Spark + Delta, real MLflow, real HTTP)
# Two workers (pytest-xdist), each test file whole on one of them (tests/conftest.py groups them): the suite's Spark,
# torchrun and crawl processes leave a core idle for much of a serial run.  Files go out in collection order (the
# demo's, the longest, first), not by test count, which sent the one-test files of several minutes out last.
TEST_WORKERS ?= 2
test: setup $(FAKE_GCS)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

## bench: speed targets, each a ratio against a baseline run in the same process (bench/*.py)
bench: setup
	@for b in bench/*.py; do echo "== $$b"; PYTHONPATH=. $(PY) $$b || exit 1; done

## wheel: the project as a wheel (var/dist/) to install on a Spark cluster (Databricks library, EMR bootstrap)
wheel: setup
	$(PY) -m pip wheel -q --no-deps -w var/dist .

## system-deps: Debian packages the project needs (JDK for Spark, Maven for the jars); needs root
system-deps:
	bash .ci/system-deps

## mlflow-ui: the MLflow UI over the demo's store (installs full mlflow, which carries the UI, on first use)
mlflow-ui: setup
	$(PY) -m pip show -q mlflow >/dev/null 2>&1 || $(PY) -m pip install -q 'mlflow==3.17.2'
	$(VENV)/bin/mlflow ui --backend-store-uri sqlite:///var/mlflow/mlflow.db --host 127.0.0.1 --port 5000

clean:
	rm -rf var spark-warehouse metastore_db derby.log .pytest_cache
