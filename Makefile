# FlashAttention, step by step: build, tests, sanitizer, docs.   `make help` lists the targets.
#
# Layout: chapters/NN_name/ holds a chapter (main.cu or main.cpp is its program, every other .cu and
# .cpp file in it or its subfolders is its code); tests/chapterNN_test.cpp are its tests. Objects go to build/, programs to
# ./chapterN. Dependencies are tracked per file (-MMD), so editing one chapter rebuilds that chapter
# and what links it only, and `make -j` is safe.

SHELL := /bin/bash
comma := ,
# Every core by default, so that a plain `make test` or `make chapter5` compiles side by side;
# a -j on the command line (make -j1 ...) takes precedence.
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 2)
.DEFAULT_GOAL := all
.DELETE_ON_ERROR:

NVCC ?= nvcc
BUILD ?= build
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(realpath $(shell command -v $(NVCC) 2>/dev/null)))

# ---- GPU architecture -------------------------------------------------------------------------
# ARCH=sm_90 chooses one; otherwise the GPU in this machine; with no GPU, sm_80 alone: the oldest
# architecture every chapter's kernels compile for in full (tensor cores, cp.async), which is all a
# machine that cannot run them needs (the build proves they compile, the CPU emulator runs them).
# ARCH=all builds the fat binary that runs everywhere the course does: sm_75, sm_80 (whose code
# sm_86 and sm_89 run as it is: same major version), sm_90, and PTX for what comes after.
# Chapters 9 and 11 are always built for sm_90a (below).
GPU_CC := $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .' | grep -E '^[0-9]+$$')
ARCH_GIVEN := $(if $(filter command line environment,$(origin ARCH)),$(ARCH))
ifeq ($(ARCH),)
  ARCH := $(if $(GPU_CC),sm_$(GPU_CC),sm_80)
  ARCH_WHY := $(if $(GPU_CC),this machine's GPU,no GPU here: one architecture proves the GPU code compiles)
endif
ifneq ($(ARCH),all)
  GENCODE := -gencode arch=compute_$(ARCH:sm_%=%),code=$(ARCH)
  # make chapterN.ptx: for the GPU here, or for the newest architecture the course targets
  PTX_ARCH := $(if $(or $(GPU_CC),$(ARCH_GIVEN)),compute_$(ARCH:sm_%=%),compute_90)
else
  GENCODE := $(foreach a,75 80,-gencode arch=compute_$(a),code=sm_$(a)) -gencode arch=compute_90,code=[sm_90,compute_90]
  PTX_ARCH := compute_90
endif

# ---- flags --------------------------------------------------------------------------------------
NVCCFLAGS := -std=c++17 -O3 -lineinfo -MMD -MP $(GENCODE) -Xcompiler -Wall,-Wextra $(EXTRA_NVCCFLAGS)
# -Wno-unknown-pragmas: the CPU emulator compiles the kernels' `#pragma unroll` with g++.
CXXFLAGS := -std=c++17 -O3 -MMD -MP -Wall -Wextra -Wno-unknown-pragmas -isystem $(CUDA_HOME)/include
LDFLAGS := -L$(CUDA_HOME)/lib64
LDLIBS := -lcublas -lcudart
# Objects depend on a stamp named after the flags: changing ARCH (or any flag) rebuilds everything.
FLAGS_STAMP := $(BUILD)/flags-$(shell echo '$(NVCCFLAGS) $(CXXFLAGS)' | md5sum | cut -c1-10)

# ---- chapters ----------------------------------------------------------------------------------
CHAPTER_DIRS := $(sort $(wildcard chapters/[0-9][0-9]_*))
num_of = $(patsubst 0%,%,$(firstword $(subst _, ,$(notdir $(1)))))
CHAPTERS := $(foreach d,$(CHAPTER_DIRS),$(call num_of,$(d)))
dir_of = $(firstword $(foreach d,$(CHAPTER_DIRS),$(if $(filter $(1),$(call num_of,$(d))),$(d))))
two_digits = $(if $(filter 1 2 3 4 5 6 7 8 9,$(1)),0$(1),$(1))
obj = $(patsubst %,$(BUILD)/%.o,$(basename $(1)))

# Other chapters whose objects a chapter links (to reuse a kernel, or to compare with it in one run).
# Headers need no entry: chapter 10 compiles chapter 7's kernel headers and chapter 2's state merge,
# and links nothing of theirs.
USES_3 := 2
USES_4 := 2 3
USES_5 := 2 3 4
USES_6 := 2 3 4 5
USES_7 :=
USES_8 := 2 3 4 5 6 7
USES_9 := 7
USES_10 :=
USES_11 := 2 3 4 5 6 7 8 9
USES_12 := 2 3 4 5 6 7 8 9 11

main_src = $(wildcard $(call dir_of,$(1))/main.cu $(call dir_of,$(1))/main.cpp)
# make chapterN.ptx: chapters 9 and 11 exist for sm_90a only (wgmma, setmaxnreg)
ptx_arch = $(if $(filter 9 11,$(1)),compute_90a,$(PTX_ARCH))
lib_srcs = $(filter-out %/main.cu %/main.cpp,$(shell find $(call dir_of,$(1)) -name '*.cu' -o -name '*.cpp' | sort))
lib_objs = $(call obj,$(call lib_srcs,$(1)))
link_objs = $(call lib_objs,$(1)) $(foreach u,$(USES_$(1)),$(call lib_objs,$(u)))
test_src = $(wildcard tests/chapter$(call two_digits,$(1))_test.cpp)
test_bin = $(if $(call test_src,$(1)),$(BUILD)/tests/chapter$(call two_digits,$(1))_test)
is_gpu = $(if $(filter %.cu,$(call lib_srcs,$(1)) $(call main_src,$(1))),$(1))

PROGRAMS := $(foreach n,$(CHAPTERS),$(if $(call main_src,$(n)),chapter$(n)))
TEST_MAIN := $(BUILD)/tests/main.o
COMMON_TEST := $(BUILD)/tests/common_test
TEST_BINS := $(COMMON_TEST) $(foreach n,$(CHAPTERS),$(call test_bin,$(n)))
GPU_CHAPTERS := $(foreach n,$(CHAPTERS),$(call is_gpu,$(n)))
GPU_TEST_BINS := $(foreach n,$(GPU_CHAPTERS),$(call test_bin,$(n)))

LINK = $(NVCC) $(GENCODE) $(LDFLAGS) $^ -o $@ $(LDLIBS)

# ---- Catch2, for the goals that build tests: found or fetched (tools/find_catch2.sh) when make
# starts, before anything compiles. v2 is one header; v3 a library, and tests/catch2_v3 maps its
# names to v2's. Test objects depend on a stamp of these flags (the chapters' objects do not).
CATCH2_GOALS := tests test test-chapter% sanitize check-exercises $(if $(CH),exercise) $(BUILD)/tests/%
ifneq ($(filter $(CATCH2_GOALS),$(MAKECMDGOALS)),)
  CATCH2 := $(shell tools/find_catch2.sh '$(CATCH2_INCLUDE)' '$(BUILD)/deps')
  $(if $(CATCH2),,$(error no usable Catch2 for the tests (the line above says why)))
  CATCH2_DIR := $(filter-out -,$(word 2,$(CATCH2)))
  CATCH2_FLAGS := $(if $(CATCH2_DIR),-isystem $(CATCH2_DIR)) $(if $(filter 3,$(word 1,$(CATCH2))),-I tests/catch2_v3)
  $(TEST_BINS): LDLIBS += $(word 3,$(CATCH2))
  CATCH2_STAMP := $(BUILD)/catch2-$(shell echo '$(CATCH2_FLAGS)' | md5sum | cut -c1-10)
endif

# ---- targets that would check nothing on this machine say why and stop before building anything
CUOBJDUMP := $(or $(shell command -v cuobjdump 2>/dev/null),$(wildcard $(CUDA_HOME)/bin/cuobjdump))
ifneq ($(filter %.sass,$(MAKECMDGOALS)),)
  $(if $(CUOBJDUMP),,$(error cuobjdump not found (neither on PATH nor in $(CUDA_HOME)/bin): make chapterN.sass needs the CUDA Toolkit's cuobjdump (Debian/Ubuntu's NVIDIA packages: cuda-cuobjdump-<version>)))
endif
ifneq ($(filter sanitize,$(MAKECMDGOALS)),)
  $(if $(GPU_CC),,$(error make sanitize: no CUDA device on this machine (nvidia-smi lists none), so nothing could be checked))
endif

define CHAPTER_RULES
chapter$(1): $(call obj,$(call main_src,$(1))) $(call link_objs,$(1))
	$$(LINK)
ifneq ($(call test_src,$(1)),)
$(call test_bin,$(1)): $(call obj,$(call test_src,$(1))) $(TEST_MAIN) $(call link_objs,$(1))
	$$(LINK)
endif
.PHONY: test-chapter$(1)
test-chapter$(1): $(call test_bin,$(1))
	@tests/run_tests.sh $$^ -- $$(if $$(VARIANT),"[v$$(VARIANT)]") $$(TEST_ARGS)
chapter$(1).sass: $(call lib_objs,$(1))
	$(CUOBJDUMP) -sass $$^ > $$@
	@echo "wrote $$@ (SASS of $$^)"
chapter$(1).ptx: $(filter %.cu,$(call lib_srcs,$(1)))
	@rm -f $$@ $$@.part
	@for f in $$^; do \
	  echo "$(NVCC) -std=c++17 -O3 -lineinfo -arch=$(call ptx_arch,$(1)) -ptx $$$$f"; \
	  $(NVCC) -std=c++17 -O3 -lineinfo -arch=$(call ptx_arch,$(1)) -ptx $$$$f -o $$@.part || exit 1; \
	  { echo "// ===== $$$$f"; cat $$@.part; } >> $$@; \
	done; rm -f $$@.part
	@echo "wrote $$@ (PTX for $(call ptx_arch,$(1)), one section per source file)"
endef
$(foreach n,$(CHAPTERS),$(eval $(call CHAPTER_RULES,$(n))))

$(COMMON_TEST): $(BUILD)/tests/common_test.o $(TEST_MAIN)
	$(LINK)

# ---- NCCL, for chapter 12's multi-GPU ring ------------------------------------------------------
# nccl.h and libnccl from NCCL_HOME, CUDA's own folders, /usr, or the nvidia-nccl pip package
# (asked only when none of the others has it). Without them chapter 12 still builds, with virtual
# ranks only (one GPU), and says how to get NCCL; its NCCL test cases report themselves not run.
nccl_lib_in = $(firstword $(foreach d,$(1),$(wildcard $(d)/libnccl.so)))
NCCL_DIRS := $(if $(NCCL_HOME),$(NCCL_HOME)) $(CUDA_HOME) /usr /usr/local
NCCL_INC := $(firstword $(foreach d,$(NCCL_DIRS),$(if $(wildcard $(d)/include/nccl.h),$(d)/include)))
ifeq ($(NCCL_INC),)
  NCCL_PIP := $(shell $(or $(PYTHON),python3) -c "import importlib.util as u; s = u.find_spec('nvidia.nccl'); print(list(s.submodule_search_locations)[0] if s else '')" 2>/dev/null)
  NCCL_INC := $(if $(wildcard $(NCCL_PIP)/include/nccl.h),$(NCCL_PIP)/include)
endif
NCCL_LIB := $(dir $(call nccl_lib_in,$(patsubst %/include,%,$(NCCL_INC))/lib $(patsubst %/include,%,$(NCCL_INC))/lib64 $(patsubst %/include,%,$(NCCL_INC))/lib/x86_64-linux-gnu))
ifeq ($(NCCL_LIB),)
  NCCL_LIB := $(if $(wildcard $(patsubst %/include,%,$(NCCL_INC))/lib/libnccl.so.2),$(patsubst %/include,%,$(NCCL_INC))/lib/)
endif
CH12_OBJS := $(BUILD)/chapters/12_context_parallel/%.o
ifneq ($(and $(NCCL_INC),$(NCCL_LIB)),)
  $(CH12_OBJS): NVCCFLAGS += -DFA_HAVE_NCCL -I$(NCCL_INC)
  chapter12 $(BUILD)/tests/chapter12_test: LDLIBS += -L$(NCCL_LIB) -Xlinker -rpath=$(NCCL_LIB) $(if $(wildcard $(NCCL_LIB)libnccl.so),-lnccl,-l:libnccl.so.2)
  NCCL_NOTE :=
else
  NCCL_NOTE := chapter 12: no NCCL found (nccl.h and libnccl in NCCL_HOME, $(CUDA_HOME), /usr or the nvidia-nccl pip package): built with virtual ranks only. Get NCCL with your package manager (libnccl-dev) or pip install nvidia-nccl-cu12, or set NCCL_HOME=dir, then make clean-chapter12 chapter12
endif
.PHONY: nccl-note clean-chapter12
chapter12: | nccl-note
nccl-note:
	@$(if $(NCCL_NOTE),echo "$(NCCL_NOTE)",true)
clean-chapter12:
	rm -rf $(BUILD)/chapters/12_context_parallel $(BUILD)/tests/chapter12_test* chapter12

# ---- compiling ---------------------------------------------------------------------------------
$(FLAGS_STAMP):
	@mkdir -p $(BUILD)
	@rm -f $(BUILD)/flags-*
	@touch $@

# Each object is written as a new file (rm first): make exercise hard-links unchanged objects into
# its work folders, and a compiler writing in place would change both copies.
$(BUILD)/%.o: %.cu $(FLAGS_STAMP)
	@mkdir -p $(@D) && rm -f $@
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

# Chapters 9 and 11 use wgmma and setmaxnreg, which exist for sm_90a only: their objects are built
# for that target alone, whatever ARCH says (the other chapters keep theirs).
SM90A_FLAGS = $(subst $(GENCODE),-gencode arch=compute_90a$(comma)code=sm_90a,$(NVCCFLAGS))
$(BUILD)/chapters/09_hopper/%.o: NVCCFLAGS := $(SM90A_FLAGS)
$(BUILD)/chapters/11_hopper_backward/%.o: NVCCFLAGS := $(SM90A_FLAGS)

$(BUILD)/%.o: %.cpp $(FLAGS_STAMP)
	@mkdir -p $(@D) && rm -f $@
	$(CXX) $(CXXFLAGS) -c $< -o $@

$(CATCH2_STAMP):
	@mkdir -p $(BUILD)
	@rm -f $(BUILD)/catch2-*
	@touch $@

$(BUILD)/tests/%.o: tests/%.cpp $(FLAGS_STAMP) $(CATCH2_STAMP)
	@mkdir -p $(@D) && rm -f $@
	$(CXX) $(CXXFLAGS) $(CATCH2_FLAGS) -c $< -o $@

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# ---- targets -----------------------------------------------------------------------------------
.PHONY: all tests test sanitize docs check-docs clean help

all: $(PROGRAMS)

tests: $(TEST_BINS)

test: all tests check-docs
	@tests/run_tests.sh $(TEST_BINS) -- $(TEST_ARGS)

sanitize: $(GPU_TEST_BINS)
	@tools/sanitize.sh $(GPU_TEST_BINS)

docs: check-docs
	@BUILD=$(BUILD) tools/make_docs.sh

# The docs speak of the course as it is (no process words), every measured table in them is what
# tools/doc_tables.py makes from results/ now, line counts are true and results/ holds only what is
# used (tools/check_docs.py; --self-test first shows that its patterns catch what they should).
check-docs:
	@$(PYTHON) tools/check_docs.py --self-test
	@$(PYTHON) tools/check_docs.py

# ---- bug-hunt exercises (docs/exercises.md) ------------------------------------------------------
# make exercise CH=5 BUG=2 plants bug 2 of chapter 5 in a copy (exercises-work/ch5-bug2/), builds the
# chapter's tests there and runs them; make check-exercises proves that every planted bug is caught.
EXERCISE_ENV = ARCH="$(ARCH_GIVEN)" CATCH2_INCLUDE="$(or $(CATCH2_DIR),$(CATCH2_INCLUDE))" NVCC="$(NVCC)" \
  EXTRA_NVCCFLAGS="$(EXTRA_NVCCFLAGS)" BUILD="$(BUILD)"
.PHONY: exercise exercise-answer check-exercises clean-exercises

exercise:
	@$(EXERCISE_ENV) tools/exercise.sh "$(CH)" "$(BUG)"

exercise-answer:
	@tools/exercise.sh --answer "$(CH)" "$(BUG)"

check-exercises:
	@$(EXERCISE_ENV) tools/check_exercises.sh

clean-exercises:
	rm -rf exercises-work

# ---- benchmarks (docs/benchmarks.md) -------------------------------------------------------------
# make bench runs every GPU chapter over one grid of shapes into results/<gpu>-<date>.csv.
# Narrow it with BENCH_CHAPTERS="5 7" BENCH_D=64 BENCH_N="1024 8192" BENCH_CAUSAL=0 BENCH_REPEAT=5;
# BENCH_CHECK_N="1024 8192" (or all, none) picks the checked lengths; BENCH_CH4_MAX_N,
# BENCH_TIMEOUT (seconds per run), BENCH_OUT=file; BENCH_DRY_RUN=1 prints the commands only.
# Chapter 5 is always built: it writes each shape's inputs once for the other programs.
PYTHON ?= python3
BENCH_CHAPTERS ?= 3 4 5 6 7 8 9 11
BENCH_PROGRAMS = $(addprefix chapter,$(sort $(BENCH_CHAPTERS) 5))
BENCH_GIVEN = $(foreach v,$(sort $(filter BENCH_%,$(.VARIABLES))),$(if $(filter command line environment,$(origin $(v))),$(v)='$($(v))'))
BENCH_FLAGS = --chapters "$(BENCH_CHAPTERS)" $(if $(BENCH_D),--dims "$(BENCH_D)") \
  $(if $(BENCH_N),--seq "$(BENCH_N)") $(if $(BENCH_CAUSAL),--causal "$(BENCH_CAUSAL)") \
  $(if $(BENCH_REPEAT),--repeat $(BENCH_REPEAT)) $(if $(BENCH_CHECK_N),--check-seq "$(BENCH_CHECK_N)") \
  $(if $(BENCH_CH4_MAX_N),--ch4-max-seq $(BENCH_CH4_MAX_N)) $(if $(BENCH_TIMEOUT),--timeout $(BENCH_TIMEOUT)) \
  $(if $(BENCH_OUT),--out "$(BENCH_OUT)") $(if $(BENCH_DRY_RUN),--dry-run)
.PHONY: bench plots results-table doc-tables compare

bench: $(if $(BENCH_DRY_RUN),,$(BENCH_PROGRAMS))
	@$(PYTHON) tools/bench.py $(strip $(BENCH_FLAGS)) --command "$(strip make bench $(BENCH_GIVEN))"

plots:
	@$(PYTHON) tools/plot_results.py $(foreach c,$(CSV),--csv "$(c)") $(foreach c,$(PYTORCH_CSV),--pytorch "$(c)")

results-table:
	@$(PYTHON) tools/update_readme_table.py $(foreach c,$(CSV),--csv "$(c)")

doc-tables:
	@$(PYTHON) tools/doc_tables.py

compare: chapter3 chapter4 chapter5 chapter7 chapter9
	@$(PYTHON) tools/compare_pytorch.py $(COMPARE_ARGS)

clean: clean-exercises
	rm -rf $(BUILD) $(foreach n,$(CHAPTERS),chapter$(n) chapter$(n).sass chapter$(n).ptx)

help:
	@echo "Programs"
	@echo "  make chapterN        build ./chapterN (N in: $(CHAPTERS)); ./chapterN --help lists its options"
	@echo "  make all             build every chapter's program"
	@echo "Tests"
	@echo "  make test            build everything, run every test binary; ends with 'N passed, M failed'"
	@echo "  make test-chapterN   build and run one chapter's tests (what to rerun after editing its kernel)"
	@echo "                       TEST_ARGS='[cpu]' (or any Catch2 test spec) narrows a run"
	@echo "  make test-chapterN VARIANT=k  only the tests of kernel variant (ladder step) k: chapters 5, 7,"
	@echo "                       8, 9, 10 and 11 (with the emulator of chapters 7, 8, 10 also without a GPU)"
	@echo "                       The file to edit: chapter 1 softmax.cpp; 2-6 kernels.cu; 7"
	@echo "                       kernel/flash_forward.cuh; 8 kernel/backward.cuh (step 6:"
	@echo "                       kernel/backward_fa2.cuh); 9 kernel/hopper_forward.cuh (compute"
	@echo "                       capability 9.0 only); 10 kernel/decode_attention.cuh; 11"
	@echo "                       kernel/hopper_backward.cuh (compute capability 9.0 only)"
	@echo "  make sanitize        compute-sanitizer memcheck, racecheck, synccheck, initcheck over every"
	@echo "                       GPU chapter's tests on small shapes, one test case per process,"
	@echo "                       SANITIZE_JOBS (default 4) at a time (without a GPU: says so, exits 1)"
	@echo "  make exercise CH=N BUG=K  plant bug K of chapter N in a copy (exercises-work/) and run its tests;"
	@echo "                       fix it there and rerun (docs/exercises.md). make exercise lists them all;"
	@echo "                       make clean-exercises removes every work folder; make exercise-answer"
	@echo "                       CH=N BUG=K shows the planted change"
	@echo "  make check-exercises every planted bug must make its chapter's tests fail (without a GPU: the"
	@echo "                       cpu ones; CHECK_EXERCISES_ONLY=\"5:2 7\" picks some, EXERCISES_JOBS=N)"
	@echo "Reading what the compiler made"
	@echo "  make chapterN.sass   SASS of a chapter's kernels (cuobjdump)"
	@echo "  make chapterN.ptx    PTX of a chapter's kernels (for $(PTX_ARCH); chapters 9, 11: compute_90a)"
	@echo "Benchmarks (docs/benchmarks.md)"
	@echo "  make bench           every GPU chapter over one grid of shapes -> results/<gpu>-<date>.csv"
	@echo "                       BENCH_CHAPTERS, BENCH_D, BENCH_N, BENCH_CAUSAL, BENCH_REPEAT narrow it;"
	@echo "                       BENCH_DRY_RUN=1 prints the commands only"
	@echo "  make plots           PNG figures of results files into docs/figures (CSV=\"full.csv partial.csv\""
	@echo "                       as for results-table; PYTORCH_CSV=compare_pytorch file(s) add PyTorch's"
	@echo "                       flash and cuDNN rates; needs tools/requirements.txt)"
	@echo "  make results-table   print the README's results section for a results file (CSV=file;"
	@echo "                      CSV=\"full.csv partial.csv\": the partial run's chapters replace the full one's)"
	@echo "  make compare         the course's kernels next to PyTorch's SDPA (needs torch; COMPARE_ARGS=--quick)"
	@echo "Docs"
	@echo "  make docs            HTML docs with Doxygen into $(BUILD)/docs/html, MathJax copied in, so the folder"
	@echo "                       reads offline wherever it is copied (libjs-mathjax's, else Debian's package"
	@echo "                       fetched into $(BUILD)/deps, or MATHJAX_DIR=dir); fails on a dead or outside link"
	@echo "  make check-docs      the docs' own test (make test and make docs run it): no words about how the"
	@echo "                       course was made, every measured table as results/ gives it"
	@echo "  make doc-tables      rewrite every measured table in the docs from results/ (tools/doc_tables.py)"
	@echo "Other"
	@echo "  make clean           remove $(BUILD)/, the programs and the exercises' work folders"
	@echo "Variables: ARCH=sm_90 (GPU target; now: $(ARCH)$(if $(ARCH_WHY), ($(ARCH_WHY))); ARCH=all: every"
	@echo "           architecture the course runs on, sm_75..sm_90 and PTX),"
	@echo "           CATCH2_INCLUDE=dir (a Catch2 v2 or v3 include folder; by default the installed one,"
	@echo "           or Debian's package fetched into $(BUILD)/deps), NVCC=path,"
	@echo "           EXTRA_NVCCFLAGS='-D...' (more nvcc flags, e.g. a chapter's tuning macros)"
