package kernel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"sync/atomic"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// dumpAttempts bounds the retries of a netlink dump the kernel interrupted
// (NLM_F_DUMP_INTR: the table changed while it was read, as when IPv6 adds
// an address to a link that just came up). The partial answer is not used.
const dumpAttempts = 5

// redump runs a netlink dump until the kernel answers it uninterrupted.
func redump[T any](dump func() (T, error)) (T, error) {
	var v T
	var err error
	for range dumpAttempts {
		if v, err = dump(); !errors.Is(err, nl.ErrDumpInterrupted) {
			break
		}
	}
	return v, err
}

// dumpSocket is a netlink socket that reads the kernel's dumps (the
// addresses of a link, every ipset with its entries) into one buffer, kept
// from dump to dump.
//
// nl's NetlinkRequest.Execute allocates a 64 KiB buffer for every datagram
// of an answer and keeps every message: listing 5,000 addresses allocated
// 4.4 MB, and every set at 5,000 services 6.4 MB. On a proxier's small heap
// that is a collection or two per read, which doubled what calibrate
// measured a read to cost under emulation; on a large heap it is a
// collection now and then, landing on whichever phase is running
// (docs/kernel-costs.md, The garbage collector).
type dumpSocket struct {
	*nl.SocketHandle
	buf []byte // guarded by the socket's lock
}

// dump sends req, a dump request, and calls each with the type and payload
// of every message of the answer, in order. The payload is valid only
// during the call. An error from each stops the calls but not the reading
// of the answer, and is returned. nl.ErrDumpInterrupted says the kernel's
// table changed while it was read: each has seen an inconsistent answer.
func (d *dumpSocket) dump(req *nl.NetlinkRequest, each func(typ uint16, payload []byte) error) error {
	s := d.Socket
	s.Lock()
	defer s.Unlock()
	req.Seq = atomic.AddUint32(&d.Seq, 1)
	if err := s.Send(req); err != nil {
		return err
	}
	pid, err := s.GetPid()
	if err != nil {
		return err
	}
	if d.buf == nil {
		d.buf = make([]byte, nl.RECEIVE_BUFFER_SIZE)
	}
	var eachErr error
	interrupted := false
	for {
		n, from, err := unix.Recvfrom(s.GetFd(), d.buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if sa, ok := from.(*unix.SockaddrNetlink); !ok || sa.Pid != nl.PidKernel {
			return fmt.Errorf("netlink answer from %v, not the kernel: %w", from, unix.EIO)
		}
		for b := d.buf[:n]; len(b) >= unix.SizeofNlMsghdr; {
			length := int(binary.NativeEndian.Uint32(b[0:]))
			typ := binary.NativeEndian.Uint16(b[4:])
			flags := binary.NativeEndian.Uint16(b[6:])
			seq := binary.NativeEndian.Uint32(b[8:])
			port := binary.NativeEndian.Uint32(b[12:])
			if length < unix.SizeofNlMsghdr || length > len(b) {
				return fmt.Errorf("malformed netlink message (%d bytes of %d): %w", length, len(b), unix.EIO)
			}
			payload := b[unix.SizeofNlMsghdr:length]
			b = b[min(nlmsgAlign(length), len(b)):]
			if seq != req.Seq || port != pid {
				continue // an answer to an earlier request on this socket
			}
			if flags&unix.NLM_F_DUMP_INTR != 0 {
				interrupted = true
			}
			if typ == unix.NLMSG_DONE || typ == unix.NLMSG_ERROR {
				if len(payload) >= 4 {
					if errno := int32(binary.NativeEndian.Uint32(payload)); errno != 0 {
						return syscall.Errno(-errno)
					}
				}
				return finishDump(eachErr, interrupted)
			}
			if eachErr == nil {
				eachErr = each(typ, payload)
			}
			if flags&unix.NLM_F_MULTI == 0 {
				return finishDump(eachErr, interrupted)
			}
		}
	}
}

func finishDump(eachErr error, interrupted bool) error {
	if eachErr != nil {
		return eachErr
	}
	if interrupted {
		return nl.ErrDumpInterrupted
	}
	return nil
}

func nlmsgAlign(n int) int { return (n + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1) }

// nlaTypeMask is NLA_TYPE_MASK: an attribute's type without the NESTED and
// NET_BYTEORDER flags.
const nlaTypeMask = 0x3fff

// attr is one netlink attribute, its type masked by nlaTypeMask.
type attr struct {
	typ uint16
	val []byte
}

// attrs yields a buffer's netlink attributes, allocating nothing: a dump of
// every set parses a few attributes for each of thousands of entries.
func attrs(b []byte) iter.Seq[attr] {
	return func(yield func(attr) bool) {
		for len(b) >= unix.SizeofNlAttr {
			l := int(binary.NativeEndian.Uint16(b))
			t := binary.NativeEndian.Uint16(b[2:])
			if l < unix.SizeofNlAttr || l > len(b) {
				return
			}
			if !yield(attr{t & nlaTypeMask, b[unix.SizeofNlAttr:l]}) {
				return
			}
			b = b[min((l+unix.NLA_ALIGNTO-1)&^(unix.NLA_ALIGNTO-1), len(b)):]
		}
	}
}
