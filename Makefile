# NDMA build and test entry points. `make test` is the command CI runs.
GO ?= go

.PHONY: test lint unit race norace bench fuzz build libndma

build:
	$(GO) build ./...

## libndma: the C library (build/libndma.so, build/libndma.a) and its
## header (build/include/ndma.h), for C programs and the Python package;
## and, where Open MPI's or MPICH's compiler wrapper is installed, the MPI
## interposition library for each (build/libndma_mpi.so for Open MPI,
## build/libndma_mpi_mpich.so for MPICH).
MPICC_OPENMPI ?= $(shell command -v mpicc.openmpi || command -v mpicc)
MPICC_MPICH ?= $(shell command -v mpicc.mpich)
MPI_CFLAGS = -O2 -Wall -Wextra -shared -fPIC -Ibuild/include libndma/mpi/ndma_mpi.c -Lbuild -lndma -lpthread -Wl,-rpath,'$$ORIGIN'

libndma:
	mkdir -p build/include
	$(GO) build -buildmode=c-shared -o build/libndma.so ./libndma
	$(GO) build -buildmode=c-archive -o build/libndma.a ./libndma
	rm -f build/libndma.h
	cp libndma/ndma.h build/include/ndma.h
	@if [ -n "$(MPICC_OPENMPI)" ]; then echo "$(MPICC_OPENMPI) ... -o build/libndma_mpi.so"; \
	  $(MPICC_OPENMPI) $(MPI_CFLAGS) -o build/libndma_mpi.so; \
	  else echo "no Open MPI (mpicc): build/libndma_mpi.so not built"; fi
	@if [ -n "$(MPICC_MPICH)" ]; then echo "$(MPICC_MPICH) ... -o build/libndma_mpi_mpich.so"; \
	  $(MPICC_MPICH) $(MPI_CFLAGS) -o build/libndma_mpi_mpich.so; \
	  else echo "no MPICH (mpicc.mpich): build/libndma_mpi_mpich.so not built"; fi

## test: everything CI checks — formatting, vet, staticcheck, module tidiness,
## every test under the race detector, then the tests that skip under it.
test: lint unit

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...
	$(GO) mod tidy -diff

unit: race norace

## race: every package's tests under the race detector.
race:
	$(GO) test -race -timeout 20m ./...

# NORACE_TESTS are the tests that skip or shrink under -race: the race
# detector makes allocation counts meaningless and the simulator ~30x
# slower, so the figure tests, the 256-rank scale test, the tuner test,
# the full collective matrix and the hostile-fabric test's full size and
# 1 ms Step bound run here, without it, with every allocation test, and
# the C library's tests (they build the library and run C, Python and MPI
# programs), with the suite's DDP rows on a testbed (they build it too).
# internal/citest fails if a test that reads raceEnabled or counts
# allocations is left out of them.
NORACE_TESTS = ^(TestSimHostileFabric|TestSuiteDDPTestbed|TestSimFigures|TestSimDeterministic|TestSimAllgatherControlFirst|TestSimScale256|TestSimTuner|TestSimMatrix|TestSimLarge|Test[A-Za-z]*Allocs|TestCABI|TestPython|TestMPI|TestExampleC|TestExampleCStalled)$$
NORACE_PKGS = ./bench ./coll ./fabric ./reduce ./netio ./transport ./memnode ./wire ./wire/ctrl ./secure ./libndma

## norace: NORACE_TESTS without the race detector.
norace:
	$(GO) test -timeout 15m -run '$(NORACE_TESTS)' $(NORACE_PKGS)

## bench: Go micro-benchmarks (codec, engine, executor, sockets) and the ndma rw benchmark.
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...
	$(GO) run ./cmd/ndma bench rw
	$(GO) run ./cmd/ndma bench rw --sim --loss 0.01 --sizes 1M --iters 1000

## fuzz: a short run of every fuzz target.
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s ./wire
	$(GO) test -run '^$$' -fuzz FuzzAck -fuzztime 30s ./wire
	$(GO) test -run '^$$' -fuzz FuzzPoolPayload -fuzztime 30s ./wire
	$(GO) test -run '^$$' -fuzz FuzzEngineStep -fuzztime 30s ./transport
	$(GO) test -run '^$$' -fuzz FuzzCoreStep -fuzztime 30s ./endpoint
	$(GO) test -run '^$$' -fuzz FuzzExec -fuzztime 30s ./memnode
	$(GO) test -run '^$$' -fuzz FuzzFence -fuzztime 30s ./memnode
	$(GO) test -run '^$$' -fuzz FuzzParseGrants -fuzztime 30s ./memnode
	$(GO) test -run '^$$' -fuzz FuzzParseReplies -fuzztime 30s ./memnode/durable
	$(GO) test -run '^$$' -fuzz FuzzParseUndo -fuzztime 30s ./memnode/durable
	$(GO) test -run '^$$' -fuzz FuzzParseRecord -fuzztime 30s ./fabric/ctrlstore
	$(GO) test -run '^$$' -fuzz FuzzCtrl -fuzztime 30s ./wire/ctrl
	$(GO) test -run '^$$' -fuzz FuzzParseBatch -fuzztime 30s ./mq
	$(GO) test -run '^$$' -fuzz FuzzPushMessages -fuzztime 30s ./mq
	$(GO) test -run '^$$' -fuzz FuzzFrame -fuzztime 30s ./mq/kafka
	$(GO) test -run '^$$' -fuzz FuzzHandle -fuzztime 30s ./mq/kafka
	$(GO) test -run '^$$' -fuzz FuzzSwitchStep -fuzztime 30s ./fabric
	$(GO) test -run '^$$' -fuzz FuzzTreeSwitchStep -fuzztime 30s ./fabric
	$(GO) test -run '^$$' -fuzz FuzzOpen -fuzztime 30s ./secure
	$(GO) test -run '^$$' -fuzz FuzzParseIdentity -fuzztime 30s ./secure
	$(GO) test -run '^$$' -fuzz FuzzParseRevocations -fuzztime 30s ./secure
	$(GO) test -run '^$$' -fuzz FuzzLayerReceive -fuzztime 30s ./secure
	$(GO) test -run '^$$' -fuzz FuzzResponder -fuzztime 30s ./secure
	$(GO) test -run '^$$' -fuzz FuzzReadReq -fuzztime 30s ./stor
	$(GO) test -run '^$$' -fuzz FuzzOneReq -fuzztime 30s ./stor
	$(GO) test -run '^$$' -fuzz FuzzProtoRoundTrip -fuzztime 30s ./stor
	$(GO) test -run '^$$' -fuzz FuzzParseEnv -fuzztime 30s ./coll
	$(GO) test -run '^$$' -fuzz FuzzDecoders -fuzztime 30s ./kv
	$(GO) test -run '^$$' -fuzz FuzzMemcached -fuzztime 30s ./kv/frontend
	$(GO) test -run '^$$' -fuzz FuzzRedis -fuzztime 30s ./kv/frontend
