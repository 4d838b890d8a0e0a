# NDMA build and test entry points. `make test` is the command CI runs.
GO ?= go

.PHONY: test lint unit bench fuzz build

build:
	$(GO) build ./...

## test: everything CI checks — formatting, vet, staticcheck, race tests.
test: lint unit

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...
	$(GO) mod tidy -diff

unit:
	$(GO) test -race -timeout 20m ./...

## bench: Go micro-benchmarks (codec, engine, executor, sockets) and the ndma rw benchmark.
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...
	$(GO) run ./cmd/ndma bench rw
	$(GO) run ./cmd/ndma bench rw --sim --loss 0.01 --sizes 1M --iters 1000

## fuzz: a short run of every fuzz target.
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s ./wire
	$(GO) test -run '^$$' -fuzz FuzzAck -fuzztime 30s ./wire
	$(GO) test -run '^$$' -fuzz FuzzExec -fuzztime 30s ./memnode
	$(GO) test -run '^$$' -fuzz FuzzCtrl -fuzztime 30s ./fabric
	$(GO) test -run '^$$' -fuzz FuzzSwitchStep -fuzztime 30s ./fabric
