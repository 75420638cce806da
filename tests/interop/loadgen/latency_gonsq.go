package main

// The latency mode with go-nsq v1.1.0 as the client (-client go-nsq): what an application on
// the Go client sees, beside this tool's own raw connections.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"sync"
	"time"

	"github.com/nsqio/go-nsq"
)

// runGoNSQLatency runs the schedule of runLatency with a go-nsq Consumer (MaxInFlight rdy, the
// output buffer settings asked for in its IDENTIFY) and pubconns go-nsq Producers. It returns
// the latencies (ns) of the messages stamped in the measured window and how many were sent.
func runGoNSQLatency(addr, topic, channel string, rate, size, pubconns, rdy, obSize int,
	obTimeout, warmup, runfor, cooldown time.Duration) ([]int64, int64, error) {
	quiet := log.New(io.Discard, "", 0)
	cfg := nsq.NewConfig()
	cfg.MaxInFlight = rdy
	cfg.OutputBufferSize = int64(obSize)
	cfg.OutputBufferTimeout = obTimeout
	cfg.HeartbeatInterval = 30 * time.Second
	consumer, err := nsq.NewConsumer(topic, channel, cfg)
	if err != nil {
		return nil, 0, fmt.Errorf("consumer: %w", err)
	}
	consumer.SetLogger(quiet, nsq.LogLevelError)
	var mu sync.Mutex
	var lat []int64
	var from, until int64
	var want int64 = -1
	done := make(chan struct{})
	consumer.AddHandler(nsq.HandlerFunc(func(m *nsq.Message) error {
		now := nowNs()
		if len(m.Body) < 8 {
			return nil
		}
		stamp := int64(binary.BigEndian.Uint64(m.Body))
		mu.Lock()
		defer mu.Unlock()
		if stamp >= from && stamp < until {
			lat = append(lat, now-stamp)
			if want >= 0 && int64(len(lat)) == want {
				close(done)
			}
		}
		return nil // go-nsq FINs it
	}))
	// the window is set before the first message can be stamped
	start := nowNs() + int64(200*time.Millisecond)
	mu.Lock()
	from, until = start+int64(warmup), start+int64(warmup+runfor)
	mu.Unlock()
	stop := until + int64(cooldown)
	if err := consumer.ConnectToNSQD(addr); err != nil {
		return nil, 0, fmt.Errorf("consumer: %w", err)
	}
	defer consumer.Stop()
	producers := make([]*nsq.Producer, pubconns)
	for i := range producers {
		if producers[i], err = nsq.NewProducer(addr, nsq.NewConfig()); err != nil {
			return nil, 0, fmt.Errorf("producer: %w", err)
		}
		producers[i].SetLogger(quiet, nsq.LogLevelError)
		if err := producers[i].Ping(); err != nil {
			return nil, 0, fmt.Errorf("producer: %w", err)
		}
		defer producers[i].Stop()
	}
	due := func(k int64) int64 { return start + int64(float64(k)*1e9/float64(rate)) }
	var sent sync.WaitGroup
	errs := make(chan error, pubconns)
	counts := make([]int64, pubconns)
	for i, p := range producers {
		sent.Add(1)
		go func(i int, p *nsq.Producer) { // messages i, i+n, i+2n, ... of the schedule
			defer sent.Done()
			// room for every answer: the producer's router never waits for this goroutine
			acks := make(chan *nsq.ProducerTransaction, int(float64(rate)*float64(stop-start)/1e9)/len(producers)+2)
			var published int
			for k := int64(i); due(k) < stop; k += int64(len(producers)) {
				if wait := due(k) - nowNs(); wait > 0 {
					time.Sleep(time.Duration(wait))
				}
				body := make([]byte, size) // go-nsq holds it until written: one per PUB
				for j := 8; j < size; j++ {
					body[j] = byte('a' + j%26)
				}
				stamp := nowNs()
				binary.BigEndian.PutUint64(body, uint64(stamp))
				if err := p.PublishAsync(topic, body, acks); err != nil {
					errs <- err
					return
				}
				published++
				if stamp >= from && stamp < until {
					counts[i]++
				}
			}
			timeout := time.After(drainMax)
			for ; published > 0; published-- { // every PUB answered OK
				select {
				case t := <-acks:
					if t.Error != nil {
						errs <- t.Error
						return
					}
				case <-timeout:
					errs <- fmt.Errorf("%d PUBs unanswered", published)
					return
				}
			}
			errs <- nil
		}(i, p)
	}
	sent.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return nil, 0, fmt.Errorf("producer: %w", err)
		}
	}
	var total int64
	for _, n := range counts {
		total += n
	}
	mu.Lock()
	want = total
	if int64(len(lat)) >= want {
		close(done)
	}
	mu.Unlock()
	select {
	case <-done:
	case <-time.After(drainMax):
		mu.Lock()
		got := len(lat)
		mu.Unlock()
		return nil, total, fmt.Errorf("consumer: %d of %d measured messages received", got, total)
	}
	mu.Lock()
	defer mu.Unlock()
	if int64(len(lat)) != total {
		return nil, total, errors.New("consumer: more measured messages than were sent")
	}
	return lat, total, nil
}
