package main

// The latency mode: publish→deliver latency at a fixed publish rate.
//
//	pnsq-loadgen latency -addr 127.0.0.1:4150 -topic T -rate 10000 -size 200 -runfor 10s \
//	    [-warmup 1s] [-cooldown 500ms] [-pubconns 1] [-rdy 2500] \
//	    [-output-buffer-size 16384] [-output-buffer-timeout 250ms] [-client raw|go-nsq]
//
// One consumer connection IDENTIFYs with the given output buffer settings (go-nsq v1.1.0's
// defaults unless told otherwise; -output-buffer-size -1 asks for unbuffered delivery), SUBs
// and sends RDY, and FINs every message. Then -pubconns connections PUB at -rate msgs/s in
// total, paced against the clock; the first 8 bytes of each body are its send time (ns on this
// process's monotonic clock, taken just before the PUB is written). A message's latency is its
// receive time minus its send time. Only messages sent after -warmup, during -runfor, count;
// publishing goes on for -cooldown after that (so that the last measured messages are not left
// waiting for an output buffer timeout), and every measured message must arrive (within
// drainMax after publishing stopped) or the run fails.
//
// -client go-nsq measures what an application on go-nsq v1.1.0 sees instead (latency_gonsq.go):
// the consumer is go-nsq's Consumer (its handler takes the receive time; the FIN is go-nsq's
// own), the publishers go-nsq's Producers (PublishAsync, which writes and flushes each PUB as
// its own command), paced to the same schedule.

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

type latencyResult struct {
	Mode                string  `json:"mode"`
	Client              string  `json:"client"`
	TargetRate          int     `json:"target_rate"`
	Size                int     `json:"size"`
	PubConns            int     `json:"pubconns"`
	OutputBufferSize    int     `json:"output_buffer_size"`
	OutputBufferTimeout int64   `json:"output_buffer_timeout_ms"`
	Msgs                int64   `json:"msgs"`         // measured messages (sent in the window)
	Seconds             float64 `json:"seconds"`      // the measured window
	MsgsPerSec          float64 `json:"msgs_per_sec"` // achieved publish rate in the window
	P50                 float64 `json:"p50_ms"`
	P99                 float64 `json:"p99_ms"`
	P999                float64 `json:"p999_ms"`
	Max                 float64 `json:"max_ms"`
	Error               string  `json:"error,omitempty"`
}

// clockBase anchors the send stamps: time.Since uses the monotonic clock.
var clockBase = time.Now()

func nowNs() int64 { return int64(time.Since(clockBase)) }

func runLatency(args []string) int {
	fs := flag.NewFlagSet("latency", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:4150", "nsqd TCP address (loopback only)")
	topic := fs.String("topic", "latency", "topic to PUB to and SUB from")
	channel := fs.String("channel", "ch", "channel to SUB to")
	rate := fs.Int("rate", 10000, "total publish rate, msgs/s")
	size := fs.Int("size", 200, "message body size in bytes (>= 8: the send time)")
	runfor := fs.Duration("runfor", 10*time.Second, "measured time, after the warm-up")
	warmup := fs.Duration("warmup", time.Second, "unmeasured publishing before -runfor")
	cooldown := fs.Duration("cooldown", 500*time.Millisecond,
		"unmeasured publishing after -runfor (so that the last measured messages do not wait for a buffer timeout)")
	pubconns := fs.Int("pubconns", 1, "publishing connections (the rate is split between them)")
	rdy := fs.Int("rdy", 2500, "the consumer's RDY count")
	obSize := fs.Int("output-buffer-size", 16384, "IDENTIFY output_buffer_size (-1: unbuffered)")
	obTimeout := fs.Duration("output-buffer-timeout", 250*time.Millisecond, "IDENTIFY output_buffer_timeout")
	client := fs.String("client", "raw", "raw: this tool's own V2 connections; go-nsq: go-nsq v1.1.0's Consumer and Producers")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *client != "raw" && *client != "go-nsq" {
		fmt.Fprintln(os.Stderr, "latency: -client raw|go-nsq")
		return 2
	}
	if *rate < 1 || *size < 8 || *runfor <= 0 || *warmup < 0 || *cooldown < 0 || *pubconns < 1 || *rdy < 1 {
		fmt.Fprintln(os.Stderr, "latency: need -rate>=1 -size>=8 -runfor>0 -warmup>=0 -cooldown>=0 -pubconns>=1 -rdy>=1")
		return 2
	}
	res := latencyResult{Mode: "latency", Client: *client, TargetRate: *rate, Size: *size, PubConns: *pubconns,
		OutputBufferSize: *obSize, OutputBufferTimeout: obTimeout.Milliseconds()}
	fail := func(err error) int {
		res.Error = err.Error()
		line, _ := json.Marshal(res)
		os.Stdout.Write(append(line, '\n'))
		return 1
	}
	if err := loopbackOnly(*addr); err != nil {
		return fail(err)
	}
	time.AfterFunc(*warmup+*runfor+*cooldown+2*drainMax+10*time.Second, func() {
		fail(errors.New("watchdog: run did not finish in time"))
		os.Exit(1)
	})

	if *client == "go-nsq" {
		lat, want, err := runGoNSQLatency(*addr, *topic, *channel, *rate, *size, *pubconns, *rdy,
			*obSize, *obTimeout, *warmup, *runfor, *cooldown)
		res.Msgs = want
		res.Seconds = runfor.Seconds()
		res.MsgsPerSec = float64(want) / res.Seconds
		if err != nil {
			return fail(err)
		}
		return report(res, lat)
	}

	identify, _ := json.Marshal(map[string]any{
		"client_id": "pnsq-loadgen", "hostname": "pnsq-loadgen", "user_agent": "pnsq-loadgen",
		"feature_negotiation": true, "heartbeat_interval": 30000,
		"output_buffer_size": *obSize, "output_buffer_timeout": obTimeout.Milliseconds(),
	})
	sub, err := subscribe(*addr, identify, *topic, *channel, *rdy)
	if err != nil {
		return fail(fmt.Errorf("consumer: %w", err))
	}
	defer sub.conn.Close()
	pubs := make([]*publisher, *pubconns)
	for i := range pubs {
		if pubs[i], err = dial(*addr, nil); err != nil {
			return fail(fmt.Errorf("publisher: %w", err))
		}
		defer pubs[i].conn.Close()
	}

	// The measured window on the stamp clock; the consumer keeps the latencies of the messages
	// stamped inside it.
	start := nowNs()
	from, until := start+int64(*warmup), start+int64(*warmup+*runfor)
	stop := until + int64(*cooldown)
	consumed := make(chan consumeResult, 1)
	go func() { consumed <- sub.consume(from, until) }()

	var sentInWindow atomic.Int64
	pubErrs := make(chan error, len(pubs))
	var wg sync.WaitGroup
	for i, p := range pubs {
		// Connection i sends messages i, i+n, i+2n, ... of the global schedule.
		wg.Add(1)
		go func(p *publisher, i int) {
			defer wg.Done()
			n, err := p.runPaced(*topic, *size, float64(*rate), i, len(pubs), start, stop, from, until)
			sentInWindow.Add(n)
			pubErrs <- err
		}(p, i)
	}
	wg.Wait()
	close(pubErrs)
	for err := range pubErrs {
		if err != nil {
			return fail(fmt.Errorf("publisher: %w", err))
		}
	}
	want := sentInWindow.Load()
	sub.expect.Store(want)
	var c consumeResult
	select {
	case c = <-consumed:
	case <-time.After(drainMax):
		sub.conn.Close()
		c = <-consumed
		if c.err == nil {
			c.err = errors.New("timed out")
		}
	}
	res.Msgs = want
	res.Seconds = runfor.Seconds()
	res.MsgsPerSec = float64(want) / res.Seconds
	if c.err != nil {
		return fail(fmt.Errorf("consumer: %w (%d of %d measured messages received)", c.err, len(c.lat), want))
	}
	if int64(len(c.lat)) != want {
		return fail(fmt.Errorf("consumer received %d measured messages, %d were sent", len(c.lat), want))
	}
	return report(res, c.lat)
}

// report prints the result with the percentiles of lat (ns, sorted here).
func report(res latencyResult, lat []int64) int {
	sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
	pct := func(q float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		i := int(math.Ceil(q*float64(len(lat)))) - 1
		return float64(lat[max(i, 0)]) / 1e6
	}
	res.P50, res.P99, res.P999, res.Max = pct(0.50), pct(0.99), pct(0.999), pct(1)
	line, _ := json.Marshal(res)
	os.Stdout.Write(append(line, '\n'))
	return 0
}

// runPaced publishes this connection's share of a schedule of rate msgs/s that starts at
// start: message k of the global schedule is due at start + k/rate, and this connection sends
// k = first, first+step, ... until the schedule reaches stop. Due messages are written together
// and flushed, then it sleeps until the next one is due; a reader goroutine collects the OKs.
// It returns how many of its messages were stamped inside [from, until).
func (p *publisher) runPaced(topic string, size int, rate float64, first, step int,
	start, stop, from, until int64) (int64, error) {
	p.conn.SetDeadline(time.Now().Add(time.Duration(stop-nowNs()) + drainMax))
	var sent, inWindow int64
	kick := make(chan struct{}, 1)
	okErr := make(chan error, 1)
	var writing atomic.Bool
	writing.Store(true)
	var wrote atomic.Int64
	go func() { // the OK reader: done once the writer stopped and every PUB is acknowledged
		var buf []byte
		var acked int64
		var err error
		for {
			if acked >= wrote.Load() {
				if !writing.Load() && acked >= wrote.Load() {
					okErr <- nil
					return
				}
				<-kick
				continue
			}
			if buf, err = p.nextOK(buf); err != nil {
				okErr <- err
				return
			}
			acked++
		}
	}()
	cmd := make([]byte, 0, len(topic)+9+size)
	cmd = append(cmd, "PUB "+topic+"\n"...)
	cmd = binary.BigEndian.AppendUint32(cmd, uint32(size))
	stampAt := len(cmd)
	for i := 0; i < size; i++ {
		cmd = append(cmd, byte('a'+i%26))
	}
	due := func(k int64) int64 { return start + int64(float64(k)*1e9/rate) }
	var err error
	for k := int64(first); ; k += int64(step) {
		if due(k) >= stop {
			break
		}
		if wait := due(k) - nowNs(); wait > 0 {
			// Everything due so far is written: flush, then sleep until the next one.
			p.wmu.Lock()
			err = p.w.Flush()
			p.wmu.Unlock()
			if err != nil {
				break
			}
			select {
			case kick <- struct{}{}:
			default:
			}
			time.Sleep(time.Duration(wait))
		}
		stamp := nowNs()
		binary.BigEndian.PutUint64(cmd[stampAt:], uint64(stamp))
		p.wmu.Lock()
		_, err = p.w.Write(cmd)
		p.wmu.Unlock()
		if err != nil {
			break
		}
		wrote.Add(1)
		sent++
		if stamp >= from && stamp < until {
			inWindow++
		}
	}
	if err == nil {
		p.wmu.Lock()
		err = p.w.Flush()
		p.wmu.Unlock()
	}
	writing.Store(false)
	select {
	case kick <- struct{}{}:
	default:
	}
	if err != nil {
		p.conn.Close()
		<-okErr
		return inWindow, err
	}
	return inWindow, <-okErr
}

// subscriber is the consumer connection.
type subscriber struct {
	*publisher              // its reader/writer and frame helpers
	expect     atomic.Int64 // measured messages to wait for (-1 until the publishers are done)
}

type consumeResult struct {
	lat []int64 // ns, of the messages stamped inside the window
	err error
}

// subscribe connects, IDENTIFYs (accepting "OK" or a feature negotiation JSON), SUBs and RDYs.
func subscribe(addr string, identify []byte, topic, channel string, rdy int) (*subscriber, error) {
	p, err := dial(addr, nil)
	if err != nil {
		return nil, err
	}
	s := &subscriber{publisher: p}
	s.expect.Store(-1)
	cmd := binary.BigEndian.AppendUint32([]byte("IDENTIFY\n"), uint32(len(identify)))
	cmd = append(cmd, identify...)
	steps := [][]byte{cmd, []byte("SUB " + topic + " " + channel + "\n")}
	for _, step := range steps {
		if _, err = p.w.Write(step); err == nil {
			err = p.w.Flush()
		}
		if err == nil {
			_, err = s.nextResponse()
		}
		if err != nil {
			p.conn.Close()
			return nil, err
		}
	}
	if _, err = fmt.Fprintf(p.w, "RDY %d\n", rdy); err == nil {
		err = p.w.Flush()
	}
	if err != nil {
		p.conn.Close()
		return nil, err
	}
	return s, nil
}

// nextResponse reads frames until a response other than a heartbeat.
func (s *subscriber) nextResponse() ([]byte, error) {
	for {
		ftype, data, err := s.readFrame(nil)
		switch {
		case err != nil:
			return nil, err
		case ftype == frameError:
			return nil, nsqdError(data)
		case ftype == frameResponse && string(data) == string(heartbeat):
			if _, err = s.w.Write(nopCmd); err == nil {
				err = s.w.Flush()
			}
			if err != nil {
				return nil, err
			}
		case ftype == frameResponse:
			return data, nil
		default:
			return nil, fmt.Errorf("unexpected frame type %d before SUB's OK", ftype)
		}
	}
}

// consume reads messages, FINs each (flushing the FINs whenever it has read everything that
// arrived), and keeps the latency of each stamped in [from, until) until it has s.expect.
func (s *subscriber) consume(from, until int64) consumeResult {
	var res consumeResult
	var buf []byte
	fin := []byte("FIN 0123456789abcdef\n")
	for {
		if want := s.expect.Load(); want >= 0 && int64(len(res.lat)) >= want {
			return res
		}
		if s.r.Buffered() == 0 {
			if res.err = s.w.Flush(); res.err != nil {
				return res
			}
			// Wake up now and then to see whether the publishers are done.
			s.conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			if _, err := s.r.Peek(1); err != nil {
				var ne interface{ Timeout() bool }
				if errors.As(err, &ne) && ne.Timeout() {
					continue
				}
				res.err = err
				return res
			}
			s.conn.SetReadDeadline(time.Time{})
		}
		ftype, data, err := s.readFrame(buf)
		if err != nil {
			res.err = err
			return res
		}
		buf = data
		now := nowNs()
		switch {
		case ftype == frameMessage && len(data) >= 26+8:
			// [i64 timestamp][u16 attempts][16 B id][body]
			stamp := int64(binary.BigEndian.Uint64(data[26:34]))
			if stamp >= from && stamp < until {
				res.lat = append(res.lat, now-stamp)
			}
			copy(fin[4:20], data[10:26])
			_, err = s.w.Write(fin)
		case ftype == frameResponse && string(data) == string(heartbeat):
			_, err = s.w.Write(nopCmd)
		case ftype == frameError:
			err = nsqdError(data)
		default:
			err = fmt.Errorf("unexpected frame type %d (%d bytes)", ftype, len(data))
		}
		if err != nil {
			res.err = err
			return res
		}
	}
}
