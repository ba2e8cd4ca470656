# weblm: `make demo` runs the whole pipeline on this machine; `make test` runs the test suite.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
JARS := $(abspath $(VENV))/jars
export SPARK_LOCAL_IP ?= 127.0.0.1
# rustup's cargo, when there is one: pip builds rs-trafilatura (no Linux wheels on PyPI) with it.
export PATH := $(HOME)/.cargo/bin:$(PATH)

.PHONY: setup demo test bench wheel system-deps jars mlflow-ui clean

## setup: the virtualenv with every part's extras, and the Delta jars (idempotent; reruns only what changed)
setup: $(VENV)/.installed $(JARS)/.resolved

$(VENV)/.installed: setup.cfg pyproject.toml
	@command -v java >/dev/null || { echo "Spark needs Java 17+: run 'make system-deps' (Debian, as root) or install a JDK" >&2; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[spider,localweb,jobs,trainer,demo,dev]'
	touch $@

# Delta's and the s3a connector's own jars only: pyspark already ships newer copies of their other dependencies.
SPARK_JAR_GROUPS := io.delta,org.apache.hadoop,software.amazon.awssdk,software.amazon.s3.analyticsaccelerator,software.amazon.eventstream,org.reactivestreams,org.wildfly.openssl
$(JARS)/.resolved: jobs/jars/pom.xml
	@command -v mvn >/dev/null || { echo "resolving the Delta jars needs Maven: run 'make system-deps' (Debian, as root) or install maven" >&2; exit 1; }
	rm -rf $(JARS)
	mvn -q -B -f jobs/jars/pom.xml dependency:copy-dependencies -DoutputDirectory=$(JARS) \
	    -DincludeGroupIds=$(SPARK_JAR_GROUPS) -DexcludeArtifactIds=delta-kernel-api,delta-kernel-defaults,delta-kernel-unitycatalog
	touch $@

jars: $(JARS)/.resolved

## demo: local web -> crawl -> WARC -> Delta -> tokens -> Megatron shards -> CPU training; summary in var/demo/summary.json
demo: setup
	$(PY) -m demo

## test: the whole suite (real Spark + Delta, real MLflow, real HTTP)
test: setup
	$(PY) -m pytest

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
