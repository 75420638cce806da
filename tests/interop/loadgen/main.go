// Command pnsq-loadgen is pnsq's own load generator for the workloads that NSQ's bench tools do
// not cover: many connections each sending single-message PUBs (or, with -mpub N, MPUBs of N
// messages), either pipelined (a window of commands outstanding per connection) or synchronous
// (one command, wait for its OK), optionally numbered as pnsq's idempotent publishing numbers
// them; and publish→deliver latency at a fixed publish rate (the latency mode, in latency.go).
//
//	pnsq-loadgen pub -addr 127.0.0.1:4150 -topic T -conns 16 -size 200 -runfor 10s \
//	    -mode pipelined|sync [-window 1000] [-mpub N] [-numbered]
//	pnsq-loadgen latency -addr 127.0.0.1:4150 -topic T -rate 10000 -size 200 -runfor 10s ...
//
// It speaks protocol V2 over raw TCP (no client library), prints exactly one JSON line on stdout
// and exits 0, or prints a JSON line with "error" and exits 1. It only connects to the loopback
// address it is given and stops by itself (runfor, plus a bounded drain and a hard watchdog).
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	frameResponse = 0
	frameError    = 1
	frameMessage  = 2

	// chunkMax bounds how many commands a pipelined connection writes per flush.
	chunkMax = 64
	// drainMax bounds the wait for outstanding OKs after runfor has elapsed.
	drainMax = 10 * time.Second
)

var (
	magicV2   = []byte("  V2")
	heartbeat = []byte("_heartbeat_")
	okBody    = []byte("OK")
	nopCmd    = []byte("NOP\n")
)

type result struct {
	Mode       string  `json:"mode"`
	Conns      int     `json:"conns"`
	Size       int     `json:"size"`
	Window     int     `json:"window,omitempty"`
	Mpub       int     `json:"mpub,omitempty"`
	Numbered   bool    `json:"numbered,omitempty"`
	Commands   int64   `json:"commands"`
	Msgs       int64   `json:"msgs"`
	Seconds    float64 `json:"seconds"`
	MsgsPerSec float64 `json:"msgs_per_sec"`
	Error      string  `json:"error,omitempty"`
}

func emit(r result) {
	line, _ := json.Marshal(r)
	os.Stdout.Write(append(line, '\n'))
}

func main() {
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	log.SetPrefix("[pnsq-loadgen] ")
	if len(os.Args) >= 2 && os.Args[1] == "pub" {
		os.Exit(runPub(os.Args[2:]))
	}
	if len(os.Args) >= 2 && os.Args[1] == "latency" {
		os.Exit(runLatency(os.Args[2:]))
	}
	fmt.Fprintf(os.Stderr, "usage: %s pub|latency [flags]   (%s MODE -h for flags)\n", os.Args[0], os.Args[0])
	os.Exit(2)
}

// loopbackOnly refuses any address that does not resolve to a loopback IP.
func loopbackOnly(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	ips, err := net.LookupIP(host)
	if err != nil {
		return err
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return fmt.Errorf("%s resolves to non-loopback %s; refusing", addr, ip)
		}
	}
	return nil
}

func runPub(args []string) int {
	fs := flag.NewFlagSet("pub", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:4150", "nsqd TCP address (loopback only)")
	topic := fs.String("topic", "loadgen", "topic to PUB to")
	conns := fs.Int("conns", 16, "number of TCP connections")
	size := fs.Int("size", 200, "message body size in bytes")
	runfor := fs.Duration("runfor", 10*time.Second, "how long to keep publishing")
	mode := fs.String("mode", "pipelined", "pipelined (a window of outstanding commands) or sync (one at a time)")
	window := fs.Int("window", 1000, "max outstanding commands (PUBs, or MPUBs with -mpub) per connection (pipelined)")
	mpub := fs.Int("mpub", 0, "0: single-message PUBs; N>=1: each command an MPUB of N messages of -size bytes")
	numbered := fs.Bool("numbered", false, "pnsq's idempotent publishing: each connection names itself a producer (IDENTIFY pnsq_producer) and numbers its messages to partition 0 (an MPUB carries the number of its first)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *conns < 1 || *size < 1 || *window < 1 || *mpub < 0 || *runfor <= 0 || (*mode != "pipelined" && *mode != "sync") {
		fmt.Fprintln(os.Stderr, "pub: need -conns>=1 -size>=1 -window>=1 -mpub>=0 -runfor>0 -mode pipelined|sync")
		return 2
	}
	res := result{Mode: *mode, Conns: *conns, Size: *size, Mpub: *mpub, Numbered: *numbered}
	if *mode == "pipelined" {
		res.Window = *window
	}
	fail := func(err error) int {
		res.Error = err.Error()
		emit(res)
		return 1
	}
	if err := loopbackOnly(*addr); err != nil {
		return fail(err)
	}

	// Hard stop whatever happens: runfor + the drain bound + slack for dialing.
	time.AfterFunc(*runfor+drainMax+5*time.Second, func() {
		res.Error = "watchdog: run did not finish in time"
		emit(res)
		os.Exit(1)
	})

	// One command, built once and written over and over (a numbered one gets its
	// "0 <sequence>" line per command: see publisher.write).
	verb, per, body := pubBody(*size, *mpub)
	cmd := append([]byte(verb+" "+*topic+"\n"), body...)

	// Dial everything first so that connection set-up is not timed.
	pubs := make([]*publisher, *conns)
	for i := range pubs {
		p, err := dial(*addr, cmd)
		if err == nil {
			p.per = per
		}
		if err == nil && *numbered {
			name := fmt.Sprintf("loadgen-%d-%d", os.Getpid(), i)
			p.line, p.body = []byte(verb+" "+*topic+" 0 "), body
			if err = p.identifyProducer(name); err != nil {
				p.conn.Close()
			}
		}
		if err != nil {
			for _, q := range pubs[:i] {
				q.conn.Close()
			}
			return fail(err)
		}
		pubs[i] = p
	}

	var commands atomic.Int64
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(*runfor)
	for _, p := range pubs {
		wg.Add(1)
		go func(p *publisher) {
			defer wg.Done()
			defer p.conn.Close()
			var err error
			if *mode == "sync" {
				err = p.runSync(deadline)
			} else {
				err = p.runPipelined(deadline, *window)
			}
			commands.Add(p.acked)
			if err != nil {
				errOnce.Do(func() { firstErr = err })
			}
		}(p)
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()

	res.Commands = commands.Load()
	res.Msgs = res.Commands * int64(per)
	res.Seconds = elapsed
	if elapsed > 0 {
		res.MsgsPerSec = float64(res.Msgs) / elapsed
	}
	if firstErr != nil {
		log.Printf("error: %v", firstErr)
		return fail(firstErr)
	}
	emit(res)
	return 0
}

// pubBody returns the command's verb, the messages per command and its body after the command
// line: PUB's [u32 size][message], or with mpub >= 1 MPUB's
// [u32 body size][u32 count]([u32 size][message])*count. Every message is size bytes of a-z.
func pubBody(size, mpub int) (string, int, []byte) {
	msg := make([]byte, size)
	for i := range msg {
		msg[i] = byte('a' + i%26)
	}
	if mpub == 0 {
		return "PUB", 1, append(binary.BigEndian.AppendUint32(nil, uint32(size)), msg...)
	}
	body := binary.BigEndian.AppendUint32(nil, uint32(4+mpub*(4+size)))
	body = binary.BigEndian.AppendUint32(body, uint32(mpub))
	for i := 0; i < mpub; i++ {
		body = binary.BigEndian.AppendUint32(body, uint32(size))
		body = append(body, msg...)
	}
	return "MPUB", mpub, body
}

// publisher is one connection. The writer side (the command loop, or the reader answering a
// heartbeat with NOP) holds wmu while it touches w.
type publisher struct {
	conn  net.Conn
	r     *bufio.Reader
	wmu   sync.Mutex
	w     *bufio.Writer
	cmd   []byte
	per   int   // messages per command: 1 for PUB, N for -mpub N
	acked int64 // commands answered OK; read by the caller after the run
	// numbered (-numbered): the line up to the sequence, the sized body, the next sequence
	// (an MPUB's first message's: the next command's is per higher)
	line []byte
	body []byte
	seq  uint64
}

// identifyProducer names the connection a producer (pnsq's idempotent publishing) and reads
// the IDENTIFY reply, which must carry pnsq_producer.
func (p *publisher) identifyProducer(name string) error {
	doc, _ := json.Marshal(map[string]any{"feature_negotiation": true, "pnsq_producer": name})
	msg := append([]byte("IDENTIFY\n"), binary.BigEndian.AppendUint32(nil, uint32(len(doc)))...)
	if _, err := p.conn.Write(append(msg, doc...)); err != nil {
		return err
	}
	ftype, data, err := p.readFrame(nil)
	if err != nil {
		return err
	}
	if ftype != frameResponse || !strings.Contains(string(data), "pnsq_producer") {
		return fmt.Errorf("IDENTIFY: no pnsq_producer in %q", data)
	}
	return nil
}

// write buffers one command: the fixed one, or a numbered one with its next sequence.
func (p *publisher) write() error {
	if p.line == nil {
		_, err := p.w.Write(p.cmd)
		return err
	}
	p.w.Write(p.line)
	p.w.Write(strconv.AppendUint(nil, p.seq, 10))
	p.w.WriteByte('\n')
	p.seq += uint64(p.per)
	_, err := p.w.Write(p.body)
	return err
}

func dial(addr string, cmd []byte) (*publisher, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write(magicV2); err != nil {
		c.Close()
		return nil, err
	}
	return &publisher{
		conn: c,
		r:    bufio.NewReaderSize(c, 64*1024),
		w:    bufio.NewWriterSize(c, 64*1024),
		cmd:  cmd,
	}, nil
}

// nsqdError is an error frame sent by the server.
type nsqdError string

func (e nsqdError) Error() string { return "nsqd error: " + string(e) }

// readFrame reads one server frame: [u32 size][i32 type][data].
func (p *publisher) readFrame(buf []byte) (int32, []byte, error) {
	var hdr [8]byte
	if _, err := io.ReadFull(p.r, hdr[:]); err != nil {
		return 0, nil, err
	}
	size := binary.BigEndian.Uint32(hdr[:4])
	if size < 4 || size > 16*1024*1024 {
		return 0, nil, fmt.Errorf("bad frame size %d", size)
	}
	ftype := int32(binary.BigEndian.Uint32(hdr[4:]))
	n := int(size - 4)
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(p.r, buf); err != nil {
		return 0, nil, err
	}
	return ftype, buf, nil
}

// nextOK reads frames until an OK, answering heartbeats with NOP on the way.
func (p *publisher) nextOK(buf []byte) ([]byte, error) {
	for {
		ftype, data, err := p.readFrame(buf)
		if err != nil {
			return data, err
		}
		buf = data
		switch {
		case ftype == frameResponse && string(data) == string(okBody):
			return buf, nil
		case ftype == frameResponse && string(data) == string(heartbeat):
			p.wmu.Lock()
			_, err = p.w.Write(nopCmd)
			if err == nil {
				err = p.w.Flush()
			}
			p.wmu.Unlock()
			if err != nil {
				return buf, err
			}
		case ftype == frameError:
			return buf, nsqdError(data)
		case ftype == frameMessage:
			return buf, errors.New("unexpected message frame on a publishing connection")
		default:
			return buf, fmt.Errorf("unexpected frame type %d: %q", ftype, data)
		}
	}
}

// runSync: write one command, wait for its OK, repeat until the deadline.
func (p *publisher) runSync(deadline time.Time) error {
	p.conn.SetDeadline(deadline.Add(drainMax))
	var buf []byte
	var err error
	for time.Now().Before(deadline) {
		p.wmu.Lock()
		err = p.write()
		if err == nil {
			err = p.w.Flush()
		}
		p.wmu.Unlock()
		if err != nil {
			return err
		}
		if buf, err = p.nextOK(buf); err != nil {
			return err
		}
		p.acked++
	}
	return nil
}

// runPipelined keeps up to window commands outstanding: a writer goroutine takes a token per
// command and writes them in chunks of at most chunkMax per flush; this goroutine reads the OKs
// and gives the tokens back. After the deadline the writer stops and the outstanding OKs are
// drained.
func (p *publisher) runPipelined(deadline time.Time, window int) error {
	p.conn.SetDeadline(deadline.Add(drainMax))
	tokens := make(chan struct{}, window)
	for i := 0; i < window; i++ {
		tokens <- struct{}{}
	}
	var sent atomic.Int64             // commands handed to the socket (counted before the write)
	kick := make(chan struct{}, 1)    // poked after each chunk, wakes an idle reader
	writerDone := make(chan error, 1) // the writer's final error (nil at the deadline)
	go func() {
		var err error
		defer func() {
			if err != nil {
				// Give the reader a moment to pick up an error frame that explains the
				// failed write, then let its read fail.
				p.conn.SetReadDeadline(time.Now().Add(time.Second))
			}
			writerDone <- err
		}()
		for time.Now().Before(deadline) {
			// Block for the first token, then take whatever else is free, up to chunkMax.
			<-tokens
			n := 1
		more:
			for n < chunkMax {
				select {
				case <-tokens:
					n++
				default:
					break more
				}
			}
			sent.Add(int64(n))
			p.wmu.Lock()
			for i := 0; i < n && err == nil; i++ {
				err = p.write()
			}
			if err == nil {
				err = p.w.Flush()
			}
			p.wmu.Unlock()
			if err != nil {
				return
			}
			select {
			case kick <- struct{}{}:
			default:
			}
		}
	}()

	var buf []byte
	var err error
	writing := true
	for {
		if p.acked >= sent.Load() {
			// Nothing outstanding: done if the writer has finished, else wait for more.
			if !writing {
				return nil
			}
			select {
			case werr := <-writerDone:
				if werr != nil {
					return werr
				}
				writing = false
			case <-kick:
			}
			continue
		}
		if buf, err = p.nextOK(buf); err != nil {
			var nerr nsqdError
			if errors.As(err, &nerr) || !writing {
				return err // the server's own words explain best
			}
			p.conn.Close() // the writer may be blocked in a write; let it out
			if werr := <-writerDone; werr != nil {
				return werr
			}
			return err
		}
		p.acked++
		tokens <- struct{}{}
	}
}
