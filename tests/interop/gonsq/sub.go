package main

import (
	"encoding/hex"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nsqio/go-nsq"
)

// deliveryLine is printed once per message delivered to the handler.
type deliveryLine struct {
	IDHex      string `json:"id_hex"`
	Attempts   uint16 `json:"attempts"`
	Body       string `json:"body"`
	Timestamp  int64  `json:"timestamp"`
	ReceivedNS int64  `json:"received_ns"`
}

// idleLine is printed after the -idle phase.
type idleLine struct {
	IdleOK      bool `json:"idle_ok"`
	Disconnects int  `json:"disconnects"`
}

// summaryLine is printed last.
type summaryLine struct {
	Done        bool   `json:"done"`
	Distinct    int    `json:"distinct"`
	Deliveries  int    `json:"deliveries"`
	Requeued    int    `json:"requeued"`
	Disconnects int    `json:"disconnects"` // connections lost before the final Stop()
	Connections int    `json:"connections"` // nsqd connections open when done
	CleanStop   bool   `json:"clean_stop"`
	Error       string `json:"error,omitempty"`
}

// subState is what the handler goroutine and the main goroutine share.
type subState struct {
	mu           sync.Mutex
	want         int
	requeueUntil int
	deliveries   int
	requeued     int
	finished     map[string]struct{} // distinct bodies FINed
	done         chan struct{}       // closed once len(finished) >= want
	closed       bool
	connections  int // set just before the final Stop()
}

// HandleMessage requeues (REQ <id> 0, no backoff) while attempts < requeueUntil, else FINs.
func (s *subState) HandleMessage(m *nsq.Message) error {
	m.DisableAutoResponse()
	received := time.Now().UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deliveries++
	emit(deliveryLine{
		IDHex:      hex.EncodeToString(m.ID[:]),
		Attempts:   m.Attempts,
		Body:       string(m.Body),
		Timestamp:  m.Timestamp,
		ReceivedNS: received,
	})
	if int(m.Attempts) < s.requeueUntil {
		s.requeued++
		m.RequeueWithoutBackoff(0)
		return nil
	}
	m.Finish()
	s.finished[string(m.Body)] = struct{}{}
	s.checkDone()
	return nil
}

// checkDone closes done once enough distinct bodies were FINed. Call with mu held.
func (s *subState) checkDone() {
	if !s.closed && len(s.finished) >= s.want {
		s.closed = true
		close(s.done)
	}
}

func (s *subState) summary(done bool, disconnects int, cleanStop bool, errText string) summaryLine {
	s.mu.Lock()
	defer s.mu.Unlock()
	return summaryLine{
		Connections: s.connections,
		Done:        done,
		Distinct:    len(s.finished),
		Deliveries:  s.deliveries,
		Requeued:    s.requeued,
		Disconnects: disconnects,
		CleanStop:   cleanStop,
		Error:       errText,
	}
}

// runSub consumes with a go-nsq Consumer connected straight to one nsqd, or (with -lookupd) to
// every nsqd that nsqlookupd lists for the topic (ConnectToNSQLookupd, polled every second).
func runSub(args []string) int {
	fs := flag.NewFlagSet("sub", flag.ContinueOnError)
	addr := fs.String("nsqd", "127.0.0.1:4150", "nsqd TCP address HOST:PORT")
	lookupd := fs.String("lookupd", "", "nsqlookupd HTTP address HOST:PORT (instead of -nsqd)")
	topic := fs.String("topic", "", "topic (required)")
	channel := fs.String("channel", "", "channel (required)")
	count := fs.Int("count", 1, "stop after this many distinct bodies were FINed (0: right after -idle)")
	maxInFlight := fs.Int("max-in-flight", 200, "go-nsq MaxInFlight (the RDY count on one connection)")
	heartbeat := fs.Duration("heartbeat", 30*time.Second, "go-nsq HeartbeatInterval (IDENTIFY heartbeat_interval)")
	requeueUntil := fs.Int("requeue-until-attempts", 0, "REQ <id> 0 while attempts < K, FIN after")
	timeout := fs.Duration("timeout", 60*time.Second, "fail (exit 1) if not done this long after the idle phase")
	idle := fs.Duration("idle", 0, "first stay connected this long and report idle_ok")
	stopWait := fs.Duration("stop-wait", 5*time.Second, "how long to wait for a clean CLS/CLOSE_WAIT stop")
	logLevel := fs.String("log-level", "warn", "go-nsq log level: debug, info, warn, error")
	conn := addConnFlags(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	lvl, err := parseLogLevel(*logLevel)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if *topic == "" || *channel == "" || *count < 0 {
		fmt.Fprintln(os.Stderr, "sub: -topic and -channel are required, -count must be >= 0")
		return 2
	}

	cfg := nsq.NewConfig()
	cfg.MaxAttempts = 0 // unlimited: never give a message up on attempts
	cfg.MaxInFlight = *maxInFlight
	cfg.HeartbeatInterval = *heartbeat
	cfg.LookupdPollInterval = time.Second
	if err := conn.apply(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "sub:", err)
		return 2
	}
	consumer, err := nsq.NewConsumer(*topic, *channel, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sub:", err)
		return 2
	}

	// go-nsq logs "there are N connections left alive" (warning) whenever a connection closes.
	var disconnects atomic.Int64
	hook := func(line string) {
		if strings.Contains(line, "connections left alive") {
			disconnects.Add(1)
		}
	}
	consumer.SetLogger(newHookLogger(lvl, hook), libLevel(lvl))

	state := &subState{
		want:         *count,
		requeueUntil: *requeueUntil,
		finished:     make(map[string]struct{}),
		done:         make(chan struct{}),
	}
	consumer.AddHandler(state)

	stop := func() bool {
		consumer.Stop()
		select {
		case <-consumer.StopChan:
			return true
		case <-time.After(*stopWait):
			log.Printf("sub: consumer did not stop within %s", *stopWait)
			return false
		}
	}

	connect := func() error { return consumer.ConnectToNSQD(*addr) }
	if *lookupd != "" {
		addr = lookupd
		connect = func() error { return consumer.ConnectToNSQLookupd(*lookupd) }
	}
	if err := connect(); err != nil {
		log.Printf("sub: connect to %s: %v", *addr, err)
		emit(state.summary(false, 0, stop(), err.Error()))
		return 1
	}

	idleOK := true
	if *idle > 0 {
		res := watchIdle(consumer, *idle, &disconnects)
		idleOK = res.IdleOK
		emit(res)
	}

	state.mu.Lock()
	state.checkDone() // -count 0
	state.mu.Unlock()

	timer := time.NewTimer(*timeout)
	defer timer.Stop()
	done := false
	select {
	case <-state.done:
		done = true
	case <-timer.C:
		log.Printf("sub: timed out after %s", *timeout)
	}
	lost := int(disconnects.Load()) // before stop(): its own close is not a disconnect
	state.mu.Lock()
	state.connections = consumer.Stats().Connections
	state.mu.Unlock()
	clean := stop()
	emit(state.summary(done, lost, clean, ""))
	if !done || !idleOK {
		return 1
	}
	return 0
}

// watchIdle stays connected for d, polling the connection count, and reports whether the
// connection survived (no disconnect logged and never fewer than one live connection).
func watchIdle(c *nsq.Consumer, d time.Duration, disconnects *atomic.Int64) idleLine {
	before := disconnects.Load()
	lowest := c.Stats().Connections
	deadline := time.Now().Add(d)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		<-tick.C
		lowest = min(lowest, c.Stats().Connections)
	}
	lowest = min(lowest, c.Stats().Connections)
	lost := int(disconnects.Load() - before)
	if lost == 0 && lowest < 1 {
		lost = 1 // the count dropped without a logged close; still a disconnect
	}
	return idleLine{IdleOK: lost == 0, Disconnects: lost}
}
