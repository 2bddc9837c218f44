# Elastic GPU - the two commands: `make demo` and `make check`.
#
#   make deps    install missing Debian packages (as root), else print the apt-get line
#   make build   configure and build into build/
#   make install build, then cmake --install: the binaries (egpu-scheduler,
#                egpu-agent, egpu-webhook, egpu-controller, egpu-sim,
#                egpu-vcuda-inspect, the kubectl plugin kubectl-egpu) into
#                $(PREFIX)/bin, the interposer into $(PREFIX)/lib/elastic-gpu
#                (PREFIX defaults to /usr/local; run as root there)
#   make demo    deps + build, then replay the openb trace with every policy (seed 42)
#   make check   deps + build, then every test: unit (ctest), unit under ASan+UBSan
#                (ctest), the threaded unit tests under TSan (ctest -L tsan),
#                integration (pytest), formatting and source checks, and
#                a short smoke of every fuzz target (FUZZ_RUNS executions each)
#   make tsan    the threaded unit tests under ThreadSanitizer (build-tsan;
#                the list is EGPU_TSAN_TESTS in tests/CMakeLists.txt)
#   make fuzz    the libFuzzer targets of tests/fuzz, FUZZ_SECONDS each
#                (default 60; docs/fuzzing.md)
#   make bench   benchmarks under bench/ (print figures; not part of check)
#   make bench-webhook  egpu-webhook under load over TLS (bench/webhook/run.sh)
#   make bench-controller  egpu-controller binding 10,000 claims on 1,000 nodes against the
#                test API server (bench/controller/run.sh; BENCH_ARGS=--quick for a smoke)
#   make bench-scale  the extender at 1,000 / 5,000 / 20,000 nodes with the openb trace's pod
#                mix: filter, prioritize and bind p50/p99, CPU per pod, peak RSS
#                (bench_extender --nodes N; SCALE_NODES overrides the sizes)
#   make bench-restart  egpu-scheduler's restart to ready at RESTART_NODES (default 5000)
#                nodes, against an API server in the bench (bench_restart)
#   make bench-live-replay  egpu-scheduler driven as kube-scheduler drives it through the
#                default trace's arrivals, beside egpu-sim (bench/live_replay/run.sh;
#                BENCH_ARGS=--every 1 for the whole trace)
#   make k8s     build the real control plane the cluster tests start (kube-apiserver,
#                kube-scheduler, kube-controller-manager, etcd, and the kubelet of
#                tests/cluster/kubelet.py) into tools/bin from the
#                versions pinned in tools/go.mod (scripts/k8s-build.sh; make deps runs it)
#   make cluster-demo  Elastic GPU on a real control plane: helm install, two nodes with
#                fake GPUs, deploy/examples; prints the pods, kubectl egpu inspect and
#                each placement, then stops (tests/cluster/demo.py; needs make deps)
#   make data    download the openb trace CSVs into data/openb (needs network;
#                DATA_DIR and TRACE_URL override where to and where from)

BUILD      ?= build
SCALE_NODES   ?= 1000 5000 20000
RESTART_NODES ?= 5000
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_RUNS  ?= 10000
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
PYTHON     ?= /usr/bin/python3
PREFIX     ?= /usr/local
DATA_DIR   ?= data/openb
TRACE_URL  ?= https://raw.githubusercontent.com/alibaba/clusterdata/master/cluster-trace-gpu-v2023/csv
TRACE_FILES = openb_node_list_gpu_node.csv openb_node_list_all_node.csv \
              openb_pod_list_default.csv openb_pod_list_gpushare40.csv \
              openb_pod_list_multigpu20.csv openb_pod_list_cpu050.csv \
              openb_pod_list_gpuspec10.csv

.PHONY: all k8s deps build install demo cluster-demo check unit asan tsan integration fuzz fuzz-smoke lint format bench bench-webhook bench-controller bench-scale bench-restart bench-live-replay data clean

all: build

deps:
	@sh scripts/deps.sh

k8s:
	@sh scripts/k8s-build.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

install: build
	@cmake --install $(BUILD) --prefix $(PREFIX)

demo: build
	@if [ -z "$$EGPU_TRACE_DIR" ] && [ ! -d ../shared/data/openb ] && [ ! -d data/openb ]; then \
		$(MAKE) --no-print-directory data; fi
	@./$(BUILD)/egpu-sim --seeds 42 --policy all --out out

cluster-demo: build
	@EGPU_BUILD=$(abspath $(BUILD)) $(PYTHON) tests/cluster/demo.py

check: build
	@$(MAKE) --no-print-directory lint unit asan tsan integration fuzz-smoke

unit:
	@echo "== unit tests (ctest)"
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

asan:
	@echo "== unit tests under AddressSanitizer + UndefinedBehaviorSanitizer (ctest)"
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DEGPU_SANITIZE=ON \
		-DEGPU_TESTS_ONLY=ON >/dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	@cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
		UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j $(JOBS)

# RelWithDebInfo: TSan at -O0 is several times slower, and gcc's value-range
# warnings (-Wformat-truncation) misfire on TSan-instrumented code at -O0.
# halt_on_error: the first race fails the test; ignore_noninstrumented_modules:
# the system libraries are not built with TSan (tests/tsan.supp says more).
tsan:
	@echo "== threaded unit tests under ThreadSanitizer (ctest -L tsan)"
	@cmake -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEGPU_SANITIZE=thread \
		-DEGPU_TESTS_ONLY=ON >/dev/null
	@cmake --build $(TSAN_BUILD) -j $(JOBS) --target egpu_tsan_tests
	@cd $(TSAN_BUILD) && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ignore_noninstrumented_modules=1 suppressions=$(abspath tests/tsan.supp)" \
		ctest --output-on-failure -j $(JOBS) -L tsan

integration:
	@echo "== integration tests (pytest)"
	@EGPU_BUILD=$(abspath $(BUILD)) $(PYTHON) -m pytest -q tests/integration

fuzz: deps
	@echo "== fuzzing (libFuzzer, $(FUZZ_SECONDS) s per target)"
	@FUZZ_BUILD=$(FUZZ_BUILD) JOBS=$(JOBS) sh scripts/fuzz.sh run $(FUZZ_SECONDS)

fuzz-smoke:
	@echo "== fuzz smoke (libFuzzer, $(FUZZ_RUNS) executions per target)"
	@FUZZ_BUILD=$(FUZZ_BUILD) FUZZ_RUNS=$(FUZZ_RUNS) JOBS=$(JOBS) sh scripts/fuzz.sh smoke

lint:
	@echo "== source checks"
	@sh scripts/checksrc.sh
	@sh scripts/format.sh --check

format:
	@sh scripts/format.sh

bench: build
	@sh bench/replay_speed.sh $(BUILD)/egpu-sim
	@./$(BUILD)/bench_cache
	@./$(BUILD)/bench_extender
	@./$(BUILD)/bench_extender --one-core
	@/usr/bin/python3 bench/agent_bench.py --agent $(BUILD)/src/agent/egpu-agent
	@./$(BUILD)/bench/vcuda/vcuda_share
	@./$(BUILD)/bench/vcuda/vcuda_overhead
	@sh bench/gpu/run.sh $(BUILD)
	@EGPU_BUILD=$(abspath $(BUILD)) sh bench/webhook/run.sh

bench-webhook: build
	@EGPU_BUILD=$(abspath $(BUILD)) sh bench/webhook/run.sh

bench-controller: build
	@EGPU_BUILD=$(abspath $(BUILD)) sh bench/controller/run.sh $(BENCH_ARGS)

bench-scale: build
	@for n in $(SCALE_NODES); do ./$(BUILD)/bench_extender --nodes $$n || exit 1; done

bench-restart: build
	@./$(BUILD)/bench_restart --nodes $(RESTART_NODES)

bench-live-replay: build
	@EGPU_BUILD=$(abspath $(BUILD)) sh bench/live_replay/run.sh $(BENCH_ARGS)

data:
	@mkdir -p $(DATA_DIR)
	@for f in $(TRACE_FILES); do \
		echo "fetching $(TRACE_URL)/$$f"; \
		if ! curl -fsSL --connect-timeout 10 --max-time 300 -o $(DATA_DIR)/$$f.part "$(TRACE_URL)/$$f"; then \
			rm -f $(DATA_DIR)/$$f.part; \
			echo "make data: cannot download $$f." >&2; \
			echo "  Fetch these files by hand from https://github.com/alibaba/clusterdata," >&2; \
			echo "  folder cluster-trace-gpu-v2023/csv: $(TRACE_FILES)" >&2; \
			echo "  and put them in $(DATA_DIR)/ (or point EGPU_TRACE_DIR at them)." >&2; \
			exit 1; \
		fi; \
		mv $(DATA_DIR)/$$f.part $(DATA_DIR)/$$f; \
	done

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) $(FUZZ_BUILD) out
