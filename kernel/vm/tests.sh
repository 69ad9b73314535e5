# shellcheck shell=sh
# What `make test-kernel` runs inside the VM: the one place to add a test.
#
# vm_build runs on the host (bash, from the repo root) and fills the folder
# $1, which is /kpsim inside the VM: static binaries go to $1/bin (on PATH in
# the VM), a package's test data to $1/src/PACKAGE/testdata, so that a test
# binary run from /kpsim/src/PACKAGE finds it as `go test` would.
# vm_tests runs in the VM (busybox sh, root, Debian's kernel with every
# module kpsim needs loaded): each `step NAME CMD...` passes when CMD exits 0,
# and the run passes when every step does. `vm_export FILE` copies a file out
# to .cache/kernel-vm/out/.

vm_build() {
	# Stamped as `make build` stamps it: results from the VM name their build.
	CGO_ENABLED=0 go build -trimpath -ldflags "-X main.version=${VERSION:-dev} -X main.commit=${COMMIT:-unknown}" \
		-o "$1/bin/kpsim" ./cmd/kpsim
	for pkg in kernel kernel/testbed; do
		CGO_ENABLED=0 go test -c -trimpath -o "$1/bin/$(basename "$pkg").test" "./$pkg"
	done
	mkdir -p "$1/src/kernel/testbed"
	cp -r kernel/testbed/testdata "$1/src/kernel/testbed/"
	# kube-proxy releases as the proxier under test (upstream/): a kpsim
	# binary per release, and their end-to-end test. Go's build cache keeps
	# each release's k8s.io/kubernetes build (a cold one: ~4 min, 3.4 GB).
	CGO_ENABLED=0 GOFLAGS=-trimpath make -s kube-proxy KUBE_PROXY_BIN="$1/bin" \
		LDFLAGS="-s -w -X main.version=${VERSION:-dev} -X main.commit=${COMMIT:-unknown}"
	CGO_ENABLED=0 go test -c -trimpath -o "$1/bin/kube-proxy-e2e.test" ./upstream/e2e
	mkdir -p "$1/src/upstream/e2e"
	cp -r upstream/e2e/testdata "$1/src/upstream/e2e/"
}

# kube_proxy_e2e RUN [TIMEOUT]: the kube-proxy end-to-end tests matching
# RUN (within TIMEOUT, 20m), from their folder; what they wrote is exported.
kube_proxy_e2e() (
	cd /kpsim/src/upstream/e2e || exit 1
	KPSIM_E2E_BIN_DIR=/kpsim/bin KPSIM_E2E_OUT=/tmp/kube-proxy-e2e kube-proxy-e2e.test -test.v -test.count=1 -test.timeout="${2:-20m}" -test.run "$1"
	rc=$?
	for f in /tmp/kube-proxy-e2e/*; do [ -f "$f" ] && vm_export "$f"; done
	rm -rf /tmp/kube-proxy-e2e
	exit $rc
)

vm_tests() {
	cd /kpsim/src/kernel || return 1
	kpsim version # run.sh checks the build it names
	step doctor kpsim doctor --require kernel
	step kernel-tests kernel.test -test.v -test.count=1 -test.timeout=15m
	# How a full sync can read the IPVS table and the sets back, at 5,000 services.
	step readback kernel.test -test.run '^$' -test.bench ReadBack -test.benchtime 3x -test.timeout=10m
	cd /kpsim/src/kernel/testbed || return 1
	step testbed-tests testbed.test -test.v -test.count=1 -test.timeout=15m -test.skip '^TestE2E'
	export KPSIM_E2E_BIN=/kpsim/bin/kpsim KPSIM_E2E_WHERE="Debian's kernel in the VM of make test-kernel"
	# The figures at 5,000 services, and the sim calibrated in this boot against them.
	step scale testbed.test -test.v -test.count=1 -test.timeout=20m -test.run '^TestE2EScale$'
	step e2e testbed.test -test.v -test.count=1 -test.timeout=20m -test.run '^TestE2E' -test.skip '^TestE2EScale$'
	step kube-proxy-restart kube_proxy_e2e '^TestKubeProxyRestart$'
	step kube-proxy-drift kube_proxy_e2e '^TestKubeProxyDrift$'
	step kube-proxy-parity kube_proxy_e2e '^TestKubeProxyParity$'
	step kube-proxy-agreement kube_proxy_e2e '^TestKubeProxyAgreement$'
	# The switch from IPVS mode to nftables mode: this kernel has both.
	step kube-proxy-switch kube_proxy_e2e '^TestKubeProxySwitch$'
	# kpsim's proxier and v1.37.1 side by side at 5,000 services (make side-by-side).
	named_step side-by-side kube_proxy_e2e '^TestSideBySide$' 45m
}
