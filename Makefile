# kpsim: see README.md. Every target works on a fresh machine with Go, gcc, git and make.
GO       ?= go
SCENARIO ?= smoke
BACKEND  ?=
OUT      ?= out
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT   ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS  := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
KPSIM    := bin/kpsim

.PHONY: all build test scenario test-kernel compare clean FORCE
all: build

build: $(KPSIM)
$(KPSIM): FORCE
	$(GO) build -ldflags '$(LDFLAGS)' -o $@ ./cmd/kpsim

test:
	$(GO) vet ./...
	$(GO) test ./...

# Runs a scenario (default: smoke, on the in-memory kernel: no root needed),
# prints a summary, and writes a results file and an HTML report into $(OUT)/.
scenario: build
	@mkdir -p $(OUT)
	$(KPSIM) run -s $(SCENARIO) $(if $(BACKEND),--set backend=$(BACKEND)) -o $(OUT)/$(notdir $(basename $(SCENARIO))).json
	$(KPSIM) report $(OUT)/$(notdir $(basename $(SCENARIO))).json -o $(OUT)/$(notdir $(basename $(SCENARIO))).html
	@echo "report: $(OUT)/$(notdir $(basename $(SCENARIO))).html"
