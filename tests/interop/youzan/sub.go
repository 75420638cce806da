package main

import (
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"log"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/nsqio/go-nsq"
)

// detailSize is the block `[u64 queue offset][u32 raw size]` before the body of every message
// delivered to a SUB_ORDERED (or SUB_ADVANCED) subscriber; youzan's go-nsq strips it.
const detailSize = 12

// partitionShift: a youzan message id's first 8 bytes are (partition << 50) + sequence.
const partitionShift = 50

// deliveryLine is printed once per message delivered.
type deliveryLine struct {
	IDHex     string `json:"id_hex"`
	Partition uint64 `json:"partition"` // from the id
	Conn      int    `json:"conn"`      // the partition this connection subscribed to
	Node      string `json:"node"`
	Attempts  uint16 `json:"attempts"`
	Body      string `json:"body"`
	Offset    int64  `json:"offset"` // from the detail block (ordered), else -1
}

type summaryLine struct {
	Done        bool     `json:"done"`
	Distinct    int      `json:"distinct"`
	Deliveries  int      `json:"deliveries"`
	Connections int      `json:"connections"`
	Refusals    []string `json:"refusals"` // error frames that closed a partition's connection
	Error       string   `json:"error,omitempty"`
}

// consumer keeps one connection per partition leader, as youzan's go-nsq does (connection key
// "addr-pid"), re-looking the topic up every second to replace lost ones.
type consumer struct {
	lookupd, topic, channel string
	ordered                 bool
	maxInFlight             int
	cfg                     *nsq.Config

	mu         sync.Mutex
	conns      map[string]*nsq.Conn
	want       int
	deliveries int
	distinct   map[string]struct{}
	refusals   []string
	done       chan struct{}
	closed     bool
}

func (c *consumer) handle(pid int, addr string, conn *nsq.Conn, m *nsq.Message) {
	body, offset := m.Body, int64(-1)
	if c.ordered && len(body) >= detailSize {
		offset = int64(binary.BigEndian.Uint64(body[:8]))
		body = body[detailSize:]
	}
	c.mu.Lock()
	c.deliveries++
	emit(deliveryLine{
		IDHex:     hex.EncodeToString(m.ID[:]),
		Partition: binary.BigEndian.Uint64(m.ID[:8]) >> partitionShift,
		Conn:      pid,
		Node:      addr,
		Attempts:  m.Attempts,
		Body:      string(body),
		Offset:    offset,
	})
	c.distinct[string(body)] = struct{}{}
	if !c.closed && len(c.distinct) >= c.want {
		c.closed = true
		close(c.done)
	}
	c.mu.Unlock()
	m.Finish()
}

// connect subscribes to partition pid at addr unless a connection for it is open.
func (c *consumer) connect(pid int, addr string, rdy int) {
	key := addr + "-" + strconv.Itoa(pid)
	c.mu.Lock()
	_, open := c.conns[key]
	c.mu.Unlock()
	if open {
		return
	}
	d := newDelegate()
	d.onMessage = func(conn *nsq.Conn, m *nsq.Message) { c.handle(pid, addr, conn, m) }
	d.onError = func(conn *nsq.Conn, data []byte) {
		c.mu.Lock()
		c.refusals = append(c.refusals, string(data))
		c.mu.Unlock()
		log.Printf("sub: partition %d at %s: %s", pid, addr, data)
		if leaderGone(string(data)) {
			conn.Close()
		}
	}
	d.onClose = func(*nsq.Conn) {
		c.mu.Lock()
		delete(c.conns, key)
		c.mu.Unlock()
	}
	conn, err := dial(addr, c.cfg, d)
	if err != nil {
		log.Printf("sub: connect %s: %v", key, err)
		return
	}
	name := "SUB"
	if c.ordered {
		name = "SUB_ORDERED"
	}
	params := [][]byte{[]byte(c.topic), []byte(c.channel)}
	if pid >= 0 {
		params = append(params, []byte(strconv.Itoa(pid)))
	}
	c.mu.Lock()
	c.conns[key] = conn
	c.mu.Unlock()
	if err := conn.WriteCommand(&nsq.Command{Name: []byte(name), Params: params}); err != nil {
		conn.Close()
		return
	}
	conn.SetRDY(int64(rdy))
	if err := conn.WriteCommand(nsq.Ready(rdy)); err != nil {
		conn.Close()
	}
}

// poll looks the topic up (access r) and connects to every partition's leader.
func (c *consumer) poll() error {
	res, err := lookup(c.lookupd, c.topic, "r")
	if err != nil {
		return err
	}
	leaders := res.leaders()
	rdy := max(1, c.maxInFlight/max(1, len(leaders)))
	if len(leaders) == 0 { // no partition map: plain SUB to every producer, partition -1
		for _, p := range res.Producers {
			c.connect(-1, p.addr(), rdy)
		}
		return nil
	}
	for _, pid := range sortedPids(leaders) {
		c.connect(pid, leaders[pid], rdy)
	}
	return nil
}

// runSub consumes through lookupd until -count distinct bodies were delivered (and FINed).
func runSub(args []string) int {
	fs := flag.NewFlagSet("sub", flag.ContinueOnError)
	lookupd := fs.String("lookupd", "127.0.0.1:4161", "nsqlookupd HTTP address HOST:PORT")
	topic := fs.String("topic", "", "topic (required)")
	channel := fs.String("channel", "", "channel (required)")
	count := fs.Int("count", 1, "stop after this many distinct bodies")
	ordered := fs.Bool("ordered", false, "subscribe with SUB_ORDERED")
	maxInFlight := fs.Int("max-in-flight", 200, "RDY shared over the partition connections")
	timeout := fs.Duration("timeout", 60*time.Second, "fail (exit 1) if not done this long")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *topic == "" || *channel == "" || *count < 1 {
		fmt.Fprintln(os.Stderr, "sub: -topic and -channel are required, -count must be >= 1")
		return 2
	}
	cfg := nsq.NewConfig()
	c := &consumer{
		lookupd: *lookupd, topic: *topic, channel: *channel, ordered: *ordered,
		maxInFlight: *maxInFlight, cfg: cfg, conns: map[string]*nsq.Conn{}, want: *count,
		distinct: map[string]struct{}{}, refusals: []string{}, done: make(chan struct{}),
	}
	deadline := time.NewTimer(*timeout)
	defer deadline.Stop()
	tick := time.NewTicker(time.Second) // youzan's go-nsq re-looks-up a second after a loss
	defer tick.Stop()
	done := false
	var lastErr error
	if lastErr = c.poll(); lastErr != nil {
		log.Printf("sub: %v", lastErr)
	}
wait:
	for {
		select {
		case <-c.done:
			done = true
			break wait
		case <-deadline.C:
			log.Printf("sub: timed out after %s", *timeout)
			break wait
		case <-tick.C:
			if lastErr = c.poll(); lastErr != nil {
				log.Printf("sub: %v", lastErr)
			}
		}
	}
	c.mu.Lock()
	summary := summaryLine{
		Done: done, Distinct: len(c.distinct), Deliveries: c.deliveries,
		Connections: len(c.conns), Refusals: c.refusals,
	}
	conns := make([]*nsq.Conn, 0, len(c.conns))
	for _, conn := range c.conns {
		conns = append(conns, conn)
	}
	c.mu.Unlock()
	if !done && lastErr != nil {
		summary.Error = lastErr.Error()
	}
	time.Sleep(100 * time.Millisecond) // let the last FINs go out
	for _, conn := range conns {
		conn.Close()
	}
	emit(summary)
	if !done {
		return 1
	}
	return 0
}
