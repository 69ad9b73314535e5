package kubeproxy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"syscall"

	"k8s.io/kubernetes/pkg/proxy"
	"sigs.k8s.io/knftables"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/internal/private"
	"github.com/kpsim/kpsim/proxier/observed"
)

// nftablesProxier is the release's nftables proxier for one family on k.
// Its constructor makes its own knftables interface (knftables.New, which
// runs `nft --version` and an `nft --check`): on the real node it is kept,
// in the run's namespace; on the in-memory kernel the constructor runs
// against a stand-in nft (standInNFT) and the interface is then replaced
// by the kernel's table. Either way every transaction and listing is
// counted (countedNFT).
func (r Release) nftablesProxier(ctx context.Context, k Kernel, params Params, fam *observed.Family) (proxy.Provider, error) {
	if r.NewNFTablesProxier == nil {
		return nil, fmt.Errorf("kube-proxy %s: this release is not run in nftables mode", params.Family)
	}
	build := func() (proxy.Provider, error) { return r.NewNFTablesProxier(ctx, params) }
	if k.NFTables != nil {
		build = func() (proxy.Provider, error) {
			var p proxy.Provider
			err := standInNFT(func() (err error) { p, err = r.NewNFTablesProxier(ctx, params); return err })
			return p, err
		}
	}
	p, err := build()
	if err != nil {
		return nil, fmt.Errorf("kube-proxy %s: nftables.NewProxier: %w", params.Family, err)
	}
	if k.Adopt != nil {
		if err := k.Adopt(p, params.Family); err != nil {
			return nil, err
		}
	}
	f, err := private.Field(p, fieldNFTables)
	if err != nil {
		return nil, fmt.Errorf("kube-proxy %s: %w", params.Family, err)
	}
	own, _ := f.Interface().(knftables.Interface)
	netlink := listsOverNetlink(own)
	table := own
	if k.NFTables != nil {
		var options []knftables.Option
		if netlink {
			options = append(options, knftables.UseNetlink)
		}
		if table, err = k.NFTables.Table(dataplane.NFTablesFamily(dataplane.Family(params.Family)), dataplane.NFTablesTable, options...); err != nil {
			return nil, err
		}
	}
	if err := private.Set(p, fieldNFTables, knftables.Interface(countedNFT{table, fam, dataplane.NFTablesFamily(dataplane.Family(params.Family)), netlink})); err != nil {
		return nil, fmt.Errorf("kube-proxy %s: %w", params.Family, err)
	}
	return p, nil
}

// listsOverNetlink reports whether the release's own knftables interface
// lists names over netlink: it was made with knftables.UseNetlink
// (kube-proxy's NFTablesNetlink gate), which sets its netlink adapter.
func listsOverNetlink(own knftables.Interface) bool {
	nl, err := private.Field(own, fieldKnftablesNL)
	return err == nil && nl.Kind() == reflect.Interface && !nl.IsNil()
}

// standInMu serializes the stand-in's use of the process's PATH.
var standInMu sync.Mutex

// standInNFT runs build (a release's nftables.NewProxier) with a stand-in
// nft binary first on PATH, for the in-memory kernel: knftables.New
// insists on running nft (its version, and a check that it may program a
// table) before it hands out the interface the generation replaces at once.
// The stand-in is a shell script that prints a version and accepts any
// check; nothing else runs it. The release's kernel version check is
// skipped the way kube-proxy allows ($KUBE_PROXY_NFTABLES_SKIP_KERNEL_VERSION_CHECK):
// the in-memory kernel is not the host's.
func standInNFT(build func() error) error {
	standInMu.Lock()
	defer standInMu.Unlock()
	dir, err := os.MkdirTemp("", "kpsim-nft-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	const script = "#!/bin/sh\n" +
		"# kpsim: the in-memory kernel's stand-in for nft while kube-proxy's constructor checks it\n" +
		"case \"$1\" in\n--version) echo 'nftables v1.0.6 (kpsim in-memory kernel)' ;;\n*) cat >/dev/null ;;\nesac\n"
	if err := os.WriteFile(filepath.Join(dir, "nft"), []byte(script), 0o755); err != nil {
		return err
	}
	for name, v := range map[string]string{"PATH": dir + string(os.PathListSeparator) + os.Getenv("PATH"), "KUBE_PROXY_NFTABLES_SKIP_KERNEL_VERSION_CHECK": "kpsim"} {
		old, had := os.LookupEnv(name)
		if err := os.Setenv(name, v); err != nil {
			return err
		}
		defer func() {
			if had {
				_ = os.Setenv(name, old)
			} else {
				_ = os.Unsetenv(name)
			}
		}()
	}
	return build()
}

// countedNFT counts each transaction (and its commands) and each listing
// of a generation's nftables proxier, as dataplane.Count counts them, and
// refuses them once the generation is killed. The calls a sync does not
// make (Check, ListAll, ListRules, ListCounters: kube-proxy's cleanup and
// failure logging) pass through uncounted.
type countedNFT struct {
	knftables.Interface
	f       *observed.Family
	family  knftables.Family
	netlink bool // the release lists names over netlink (knftables.UseNetlink)
}

// counted is the table on the counted dataplane that does nothing.
func (c countedNFT) counted(dp dataplane.Dataplane) knftables.Interface {
	var options []knftables.Option
	if c.netlink {
		options = append(options, knftables.UseNetlink)
	}
	t, _ := dp.NFTables.Table(c.family, dataplane.NFTablesTable, options...)
	return t
}

func (c countedNFT) Run(ctx context.Context, tx *knftables.Transaction) error {
	const op = "nft transaction"
	if err := c.f.Record(op, func(dp dataplane.Dataplane) { _ = c.counted(dp).Run(ctx, tx) }); err != nil {
		return err
	}
	return c.f.Result(op, c.Interface.Run(ctx, tx))
}

func (c countedNFT) List(ctx context.Context, objectType string) ([]string, error) {
	op := "nft list " + objectType
	if err := c.f.Record(op, func(dp dataplane.Dataplane) { _, _ = c.counted(dp).List(ctx, objectType) }); err != nil {
		return nil, err
	}
	out, err := c.Interface.List(ctx, objectType)
	_ = c.f.Result(op, ignoreNotFound(err))
	return out, err
}

func (c countedNFT) ListElements(ctx context.Context, objectType, name string) ([]*knftables.Element, error) {
	op := "nft list " + objectType + " " + name
	if err := c.f.Record(op, func(dp dataplane.Dataplane) { _, _ = c.counted(dp).ListElements(ctx, objectType, name) }); err != nil {
		return nil, err
	}
	out, err := c.Interface.ListElements(ctx, objectType, name)
	_ = c.f.Result(op, ignoreNotFound(err))
	return out, err
}

// ignoreNotFound keeps a listing of what is not there yet (the table
// before the first sync) from being the sync's failure: the release
// expects it. knftables says so by its error, or, listing over netlink
// (kube-proxy's NFTablesNetlink gate), by the kernel's ENOENT. The release
// still gets the error.
func ignoreNotFound(err error) error {
	if knftables.IsNotFound(err) || errors.Is(err, syscall.ENOENT) {
		return nil
	}
	return err
}
