package testbed

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/kernel/netns"
)

// Probe outcomes, as record.Failure spells them (plus "ok").
const (
	OutcomeOK      = "ok"
	OutcomeRefused = "refused"
	OutcomeReset   = "reset"
	OutcomeTimeout = "timeout"
)

// The echo protocol: the client sends one line, the server answers with the
// endpoint address it is serving ("10.244.1.5:8080\n"), so a probe knows
// which backend answered. TCP connections may repeat the exchange (the
// long-lived connections do, once per probe round).
const probeRequest = "kpsim-probe\n"

// maxServerConnLife bounds how long a server keeps an idle connection open:
// every traffic loop in a run ends by itself.
const maxServerConnLife = 10 * time.Minute

// Servers are the echo servers of the probe services' endpoints, all in the
// pods namespace, each bound to its endpoint's address.
type Servers struct {
	pods *netns.Namespace
	mu   sync.Mutex
	run  map[serverKey]*server
}

type serverKey struct {
	ep    netip.AddrPort
	proto dataplane.Protocol
}

type server struct {
	ln    net.Listener   // TCP
	pc    net.PacketConn // UDP
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	done  sync.WaitGroup
}

// NewServers returns an empty set of servers in pods.
func NewServers(pods *netns.Namespace) *Servers {
	return &Servers{pods: pods, run: map[serverKey]*server{}}
}

// Start opens an echo server for the endpoint unless one runs already. The
// endpoint's address must be in the pods namespace (Topology.AddPodAddress).
func (s *Servers) Start(ep netip.AddrPort, proto dataplane.Protocol) error {
	k := serverKey{ep, proto}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.run[k]; ok {
		return nil
	}
	srv := &server{conns: map[net.Conn]struct{}{}}
	err := s.pods.Do(func() error {
		var err error
		switch proto {
		case dataplane.TCP:
			srv.ln, err = net.Listen("tcp", ep.String())
		case dataplane.UDP:
			srv.pc, err = net.ListenPacket("udp", ep.String())
		default:
			err = fmt.Errorf("no %s echo server: only TCP and UDP endpoints can be probed", proto)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("echo server %s/%s: %w", ep, proto, err)
	}
	srv.done.Add(1)
	if srv.ln != nil {
		go srv.serveTCP(ep)
	} else {
		go srv.serveUDP(ep)
	}
	s.run[k] = srv
	return nil
}

// Stop closes the endpoint's server and its connections, as a pod that
// shuts down does: open connections see an orderly close (FIN), not a reset.
func (s *Servers) Stop(ep netip.AddrPort, proto dataplane.Protocol) {
	k := serverKey{ep, proto}
	s.mu.Lock()
	srv := s.run[k]
	delete(s.run, k)
	s.mu.Unlock()
	if srv != nil {
		srv.close()
	}
}

// Running reports whether a server is open for the endpoint.
func (s *Servers) Running(ep netip.AddrPort, proto dataplane.Protocol) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.run[serverKey{ep, proto}]
	return ok
}

// Close stops every server.
func (s *Servers) Close() {
	s.mu.Lock()
	run := s.run
	s.run = map[serverKey]*server{}
	s.mu.Unlock()
	for _, srv := range run {
		srv.close()
	}
}

func (srv *server) close() {
	if srv.ln != nil {
		srv.ln.Close()
	}
	if srv.pc != nil {
		srv.pc.Close()
	}
	srv.mu.Lock()
	for c := range srv.conns {
		c.Close()
	}
	srv.mu.Unlock()
	srv.done.Wait()
}

func (srv *server) serveTCP(ep netip.AddrPort) {
	defer srv.done.Done()
	reply := []byte(ep.String() + "\n")
	for {
		c, err := srv.ln.Accept()
		if err != nil {
			return // closed
		}
		srv.mu.Lock()
		srv.conns[c] = struct{}{}
		srv.mu.Unlock()
		srv.done.Add(1)
		go func() {
			defer srv.done.Done()
			defer func() {
				srv.mu.Lock()
				delete(srv.conns, c)
				srv.mu.Unlock()
				c.Close()
			}()
			_ = c.SetDeadline(time.Now().Add(maxServerConnLife))
			r := bufio.NewReader(c)
			for {
				if _, err := r.ReadString('\n'); err != nil {
					return
				}
				if _, err := c.Write(reply); err != nil {
					return
				}
			}
		}()
	}
}

func (srv *server) serveUDP(ep netip.AddrPort) {
	defer srv.done.Done()
	reply := []byte(ep.String() + "\n")
	buf := make([]byte, 512)
	for {
		_, from, err := srv.pc.ReadFrom(buf)
		if err != nil {
			return // closed
		}
		_, _ = srv.pc.WriteTo(reply, from)
	}
}

// Prober makes connections from the client namespace.
type Prober struct {
	client  *netns.Namespace
	timeout time.Duration

	mu   sync.Mutex
	long map[netip.AddrPort]*longConn // one long-lived TCP connection per TCP target
}

type longConn struct {
	mu   sync.Mutex
	conn net.Conn
	r    *bufio.Reader
}

// NewProber returns a prober whose every attempt gives up after timeout.
func NewProber(client *netns.Namespace, timeout time.Duration) *Prober {
	return &Prober{client: client, timeout: timeout, long: map[netip.AddrPort]*longConn{}}
}

// Attempt is one probe of a service address.
type Attempt struct {
	Outcome string
	Latency time.Duration
	Served  netip.AddrPort // the endpoint that answered, when Outcome is ok
	// Long is the outcome of the target's long-lived TCP connection in this
	// round: ok, or how it broke (reset, timeout). Empty for UDP, and when
	// no long-lived connection was open.
	Long string
}

// Probe makes one attempt: a new connection (TCP) or a request/response
// (UDP) to target, and, for TCP, one exchange on the target's long-lived
// connection, which is opened on first use and re-opened after it ends.
func (p *Prober) Probe(ctx context.Context, target netip.AddrPort, proto dataplane.Protocol) (Attempt, error) {
	switch proto {
	case dataplane.TCP:
		var a Attempt
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.Long = p.longRound(ctx, target)
		}()
		a.Outcome, a.Latency, a.Served = p.tcpOnce(ctx, target)
		wg.Wait()
		return a, nil
	case dataplane.UDP:
		var a Attempt
		a.Outcome, a.Latency, a.Served = p.udpOnce(ctx, target)
		return a, nil
	}
	return Attempt{}, fmt.Errorf("probe %s/%s: only TCP and UDP services can be probed", target, proto)
}

// UDPClientPort is the source port of every UDP probe, whatever its
// target: the client is one socket address per target, like a resolver's,
// so the conntrack entry one datagram left behind is the one the next
// follows, and a stale entry breaks it as it breaks lookups. The sim's
// probes use the same port, so both kernels hold the same flows and clear
// the same number of them.
const UDPClientPort = 40000

func (p *Prober) dial(ctx context.Context, network string, target netip.AddrPort) (net.Conn, error) {
	d := net.Dialer{Timeout: p.timeout}
	if network == "udp" {
		local := netip.IPv4Unspecified()
		if target.Addr().Is6() && !target.Addr().Is4In6() {
			local = netip.IPv6Unspecified()
		}
		d.LocalAddr = net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, UDPClientPort))
		// Attempts follow one another on the one port; a socket still
		// closing must not refuse the next.
		d.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
			}); err != nil {
				return err
			}
			return serr
		}
	}
	var conn net.Conn
	err := p.client.Do(func() error {
		// The socket is created on this thread, inside the client namespace.
		var err error
		conn, err = d.DialContext(ctx, network, target.String())
		return err
	})
	return conn, err
}

// exchange sends the request and reads the endpoint's answer, giving up at
// deadline or as soon as ctx ends (a stopped run does not wait out probes).
func exchange(ctx context.Context, c net.Conn, r *bufio.Reader, deadline time.Time) (netip.AddrPort, error) {
	if err := c.SetDeadline(deadline); err != nil {
		return netip.AddrPort{}, err
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	if _, err := io.WriteString(c, probeRequest); err != nil {
		return netip.AddrPort{}, err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return netip.AddrPort{}, err
	}
	served, err := netip.ParseAddrPort(strings.TrimSpace(line))
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("unexpected answer %q: %w", line, err)
	}
	return served, nil
}

func (p *Prober) tcpOnce(ctx context.Context, target netip.AddrPort) (string, time.Duration, netip.AddrPort) {
	start := time.Now()
	deadline := start.Add(p.timeout)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	c, err := p.dial(ctx, "tcp", target)
	if err != nil {
		return classify(err), time.Since(start), netip.AddrPort{}
	}
	defer c.Close()
	served, err := exchange(ctx, c, bufio.NewReader(c), deadline)
	if err != nil {
		return classify(err), time.Since(start), netip.AddrPort{}
	}
	return OutcomeOK, time.Since(start), served
}

func (p *Prober) udpOnce(ctx context.Context, target netip.AddrPort) (string, time.Duration, netip.AddrPort) {
	start := time.Now()
	c, err := p.dial(ctx, "udp", target)
	if err != nil {
		return classify(err), time.Since(start), netip.AddrPort{}
	}
	defer c.Close()
	served, err := exchange(ctx, c, bufio.NewReader(c), start.Add(p.timeout))
	if err != nil {
		return classify(err), time.Since(start), netip.AddrPort{}
	}
	return OutcomeOK, time.Since(start), served
}

// longRound exercises target's long-lived connection once. A connection the
// server closed in order (its endpoint went away) is replaced silently: only
// a reset or a stall counts as a drop.
func (p *Prober) longRound(ctx context.Context, target netip.AddrPort) string {
	p.mu.Lock()
	lc := p.long[target]
	if lc == nil {
		lc = &longConn{}
		p.long[target] = lc
	}
	p.mu.Unlock()
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.conn == nil {
		ctx, cancel := context.WithTimeout(ctx, p.timeout)
		defer cancel()
		c, err := p.dial(ctx, "tcp", target)
		if err != nil {
			return "" // the new-connection attempt of this round reports it
		}
		lc.conn, lc.r = c, bufio.NewReader(c)
		return OutcomeOK
	}
	_, err := exchange(ctx, lc.conn, lc.r, time.Now().Add(p.timeout))
	if err == nil {
		return OutcomeOK
	}
	lc.conn.Close()
	lc.conn, lc.r = nil, nil
	if errors.Is(err, io.EOF) {
		return ""
	}
	return classify(err)
}

// Close closes the long-lived connections.
func (p *Prober) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, lc := range p.long {
		lc.mu.Lock()
		if lc.conn != nil {
			lc.conn.Close()
			lc.conn = nil
		}
		lc.mu.Unlock()
	}
}

// classify maps a connection error to a probe outcome. Unreachable errors
// (an ICMP error from the node) count as refused: the network answered no.
// An orderly close before the answer counts as a reset: the service did not serve.
func classify(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EADDRNOTAVAIL):
		return OutcomeRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF):
		return OutcomeReset
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return OutcomeTimeout
	}
	return OutcomeRefused
}
