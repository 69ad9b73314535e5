# shellcheck shell=sh
# What `make test-kernel` runs inside the VM: the one place to add a test.
#
# vm_build runs on the host (bash, from the repo root) and builds static
# binaries into the folder $1; they are on PATH inside the VM.
# vm_tests runs in the VM (busybox sh, root, Debian's kernel with every
# module kpsim needs loaded, cwd /tmp): each `step NAME CMD...` passes when
# CMD exits 0, and the run passes when every step does. `vm_export FILE`
# copies a file out to .cache/kernel-vm/out/.

vm_build() {
	CGO_ENABLED=0 go build -trimpath -o "$1/kpsim" ./cmd/kpsim
	CGO_ENABLED=0 go test -c -trimpath -o "$1/kernel.test" ./kernel
}

vm_tests() {
	step doctor kpsim doctor -require kernel
	step kernel-tests kernel.test -test.v -test.count=1 -test.timeout=15m
}
