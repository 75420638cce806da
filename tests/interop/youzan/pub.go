package main

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nsqio/go-nsq"
	"github.com/spaolacci/murmur3"
)

// sentLine is printed once per acknowledged publish.
type sentLine struct {
	Sent      string `json:"sent"`
	Key       string `json:"key,omitempty"`
	Partition int    `json:"partition"`
	Node      string `json:"node"`
}

type pubResult struct {
	Published int      `json:"published"`
	Retries   int      `json:"retries"`
	Refusals  []string `json:"refusals"` // error frames that made a publish go elsewhere
	ElapsedMS int64    `json:"elapsed_ms"`
	Error     string   `json:"error,omitempty"`
}

// producer is youzan's TopicProducerMgr reduced to one topic: the partition leaders from the
// last lookup and one kept connection per node, shared by the partitions it leads.
type producer struct {
	lookupd, topic string
	cfg            *nsq.Config
	leaders        map[int]string
	pids           []int
	partitionNum   int
	conns          map[string]*nsq.Conn
	delegates      map[string]*delegate
	next           atomic.Uint64
}

func (p *producer) refresh(deadline time.Time) error {
	res, err := lookupUntil(p.lookupd, p.topic, "w", deadline)
	if err != nil {
		return err
	}
	p.leaders = res.leaders()
	p.pids = sortedPids(p.leaders)
	p.partitionNum = res.Meta.PartitionNum
	return nil
}

func (p *producer) drop(addr string) {
	if conn, ok := p.conns[addr]; ok {
		conn.Close()
		delete(p.conns, addr)
		delete(p.delegates, addr)
	}
}

func (p *producer) conn(addr string) (*nsq.Conn, *delegate, error) {
	if conn, ok := p.conns[addr]; ok {
		return conn, p.delegates[addr], nil
	}
	d := newDelegate()
	conn, err := dial(addr, p.cfg, d)
	if err != nil {
		return nil, nil, err
	}
	p.conns[addr], p.delegates[addr] = conn, d
	return conn, d, nil
}

// partition picks the target as youzan's go-nsq does: murmur3-32 (seed 0) of the sharding key
// modulo meta.partition_num, else round-robin over the partitions lookupd listed.
func (p *producer) partition(key string) int {
	if key != "" {
		return int(murmur3.Sum32([]byte(key))) % p.partitionNum
	}
	return p.pids[int(p.next.Add(1)%uint64(len(p.pids)))]
}

var errRefused = errors.New("refused")

// send publishes one body to partition pid and waits for the reply.
func (p *producer) send(pid int, body []byte) (string, error) {
	addr, ok := p.leaders[pid]
	if !ok {
		return "", fmt.Errorf("partition %d has no leader in lookup", pid)
	}
	conn, d, err := p.conn(addr)
	if err != nil {
		return addr, err
	}
	cmd := &nsq.Command{
		Name:   []byte("PUB"),
		Params: [][]byte{[]byte(p.topic), []byte(strconv.Itoa(pid))},
		Body:   body,
	}
	if err := conn.WriteCommand(cmd); err != nil {
		p.drop(addr)
		return addr, err
	}
	select {
	case f := <-d.frames:
		switch {
		case f.closed:
			p.drop(addr)
			return addr, errors.New("connection closed")
		case f.isErr:
			if leaderGone(string(f.data)) {
				p.drop(addr)
			}
			return addr, fmt.Errorf("%w: %s", errRefused, f.data)
		}
		return addr, nil
	case <-time.After(5 * time.Second):
		p.drop(addr)
		return addr, errors.New("no reply within 5s")
	}
}

// runPub publishes count bodies "<prefix><i>" through lookupd's partition leaders; with -keys K
// message i carries the sharding key "key-<i % K>" (youzan's PublishOrdered).
func runPub(args []string) int {
	fs := flag.NewFlagSet("pub", flag.ContinueOnError)
	lookupd := fs.String("lookupd", "127.0.0.1:4161", "nsqlookupd HTTP address HOST:PORT")
	topic := fs.String("topic", "", "topic to publish to (required)")
	count := fs.Int("count", 1, "number of messages to publish")
	keys := fs.Int("keys", 0, "publish with K sharding keys, key-<i % K> (0: round-robin)")
	prefix := fs.String("prefix", "msg-", "body prefix; bodies are <prefix><i>")
	timeout := fs.Duration("timeout", 60*time.Second, "give up (exit 1) after this long")
	tries := fs.Int("tries", 3, "attempts per message (youzan's synchronous publish: 3)")
	retryWait := fs.Duration("retry-wait", 0, "pause before each retry (then the partitions are looked up again)")
	stale := fs.String("stale-leader", "", "start from a stale partition map that names this "+
		"nsqd TCP address as every partition's leader (as after a leader moved)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *topic == "" || *count < 0 || *keys < 0 || *tries < 1 {
		fmt.Fprintln(os.Stderr, "pub: -topic is required, -count and -keys must be >= 0")
		return 2
	}
	start := time.Now()
	deadline := start.Add(*timeout)
	p := &producer{
		lookupd: *lookupd, topic: *topic, cfg: nsq.NewConfig(),
		conns: map[string]*nsq.Conn{}, delegates: map[string]*delegate{},
	}
	result := pubResult{Refusals: []string{}}
	finish := func(err error) int {
		for addr := range p.conns {
			p.drop(addr)
		}
		result.ElapsedMS = time.Since(start).Milliseconds()
		if err != nil {
			log.Printf("pub: %v", err)
			result.Error = err.Error()
			emit(result)
			return 1
		}
		emit(result)
		return 0
	}
	if err := p.refresh(deadline); err != nil {
		return finish(err)
	}
	if *stale != "" {
		for pid := range p.leaders {
			p.leaders[pid] = *stale
		}
	}
	for i := 0; i < *count; i++ {
		body := *prefix + strconv.Itoa(i)
		key := ""
		if *keys > 0 {
			key = "key-" + strconv.Itoa(i%*keys)
		}
		var err error
		for attempt := 0; attempt < *tries; attempt++ {
			if attempt > 0 {
				result.Retries++
				time.Sleep(*retryWait)
				if err = p.refresh(deadline); err != nil {
					break
				}
			}
			pid := p.partition(key)
			var addr string
			addr, err = p.send(pid, []byte(body))
			if err == nil {
				emit(sentLine{Sent: body, Key: key, Partition: pid, Node: addr})
				result.Published++
				break
			}
			if errors.Is(err, errRefused) {
				result.Refusals = append(result.Refusals, err.Error())
			}
			log.Printf("pub: %s to partition %d at %s: %v", body, pid, addr, err)
		}
		if err != nil {
			return finish(err)
		}
		if time.Now().After(deadline) {
			return finish(fmt.Errorf("timed out after %s", *timeout))
		}
	}
	return finish(nil)
}
