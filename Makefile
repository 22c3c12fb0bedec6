# lagbridge: the two commands that matter are `make demo` and `make test`.
GO        ?= go
PKGS      ?= ./...
STATICCHECK = honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: all build test test-fast lint conformance demo bench kafka-up kafka-down clean

all: build

build:
	$(GO) build -o bin/lagbridge ./cmd/lagbridge

## test: everything CI runs: lint, then all tests with -race, including the
## real Apache Kafka 4.x tests (the broker is fetched through Maven and
## started on 127.0.0.1 by integration/kafka/kafka.sh, and stopped after).
test: lint
	scripts/test.sh

## test-fast: the tests that need no real Kafka (kfake, embedded NATS).
test-fast:
	$(GO) test -race -count=1 $(PKGS)

## conformance: the quota protocol against docs/quota-protocol.yaml with
## schemathesis (pinned, installed into scripts/.venv), in every auth mode;
## part of `make test`.
conformance:
	scripts/conformance.sh

lint:
	@echo "== gofmt"; out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	@echo "== go vet"; $(GO) vet $(PKGS)
	@echo "== staticcheck"; $(GO) run $(STATICCHECK) $(PKGS)

demo:
	$(GO) run ./cmd/lagbridge demo --duration 60s

## bench: the benchmarks the README reports:
## 1. every Go benchmark with -benchmem (the daemon's observe cycle at
##    10,000 partitions and 1,000 groups, the quota controller and
##    allocator, the SDK's admit path, the ttl guards, push latency) into
##    results/gobench.txt;
## 2. `lagbridge bench`: the overload benchmark matrix, naive producers
##    vs lagbridge at 2x, 5x and 10x per consumer, producer and observation
##    interval, on embedded Kafka (kfake) and NATS with the real daemon,
##    into results/bench.md, results/bench.png and one CSV per run. The full
##    matrix takes about an hour; BENCHFLAGS=--short a few minutes. Other
##    flags: --rows GLOB, --kafka HOST:9092; see docs/benchmark.md.
BENCHTIME  ?= 1s
BENCHFLAGS ?=
bench:
	@mkdir -p results
	@echo "== go test -bench (-benchmem, -benchtime $(BENCHTIME)) -> results/gobench.txt"
	@$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS) > results/gobench.txt 2>&1; st=$$?; \
	  grep -E '^(Benchmark|ok|FAIL|---|panic)' results/gobench.txt; exit $$st
	@echo "== lagbridge bench $(BENCHFLAGS) -> results/"
	$(GO) run ./cmd/lagbridge bench --out results/ $(BENCHFLAGS)

kafka-up:
	integration/kafka/kafka.sh start

kafka-down:
	integration/kafka/kafka.sh stop

clean:
	rm -rf bin
