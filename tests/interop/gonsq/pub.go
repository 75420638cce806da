package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"strconv"
	"time"

	"github.com/nsqio/go-nsq"
)

type pubResult struct {
	Published int    `json:"published"`
	Retries   int    `json:"retries,omitempty"`
	ElapsedMS int64  `json:"elapsed_ms"`
	Error     string `json:"error,omitempty"`
}

// runPub publishes count bodies "<prefix><i>" through a go-nsq Producer. It exits 0 only when
// nsqd acknowledged every PUB/MPUB/DPUB.
func runPub(args []string) int {
	fs := flag.NewFlagSet("pub", flag.ContinueOnError)
	addr := fs.String("nsqd", "127.0.0.1:4150", "nsqd TCP address HOST:PORT")
	topic := fs.String("topic", "", "topic to publish to (required)")
	count := fs.Int("count", 1, "number of messages to publish")
	mode := fs.String("mode", "pub", "pub (one PUB each), mpub (MPUB batches) or dpub (DPUB each)")
	batch := fs.Int("batch", 100, "messages per MPUB (mode mpub)")
	deferBy := fs.Duration("defer", time.Second, "delay for DPUB (mode dpub)")
	prefix := fs.String("prefix", "msg-", "body prefix; bodies are <prefix><i>")
	timeout := fs.Duration("timeout", 60*time.Second, "give up (exit 1) after this long")
	logLevel := fs.String("log-level", "warn", "go-nsq log level: debug, info, warn, error")
	retry := fs.Bool("retry", false, "mode pub: retry a refused or failed PUB (50 ms apart) until acknowledged")
	conn := addConnFlags(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	lvl, err := parseLogLevel(*logLevel)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if *topic == "" || *count < 0 || *batch < 1 {
		fmt.Fprintln(os.Stderr, "pub: -topic is required, -count must be >= 0, -batch >= 1")
		return 2
	}
	if *mode != "pub" && *mode != "mpub" && *mode != "dpub" {
		fmt.Fprintf(os.Stderr, "pub: unknown -mode %q\n", *mode)
		return 2
	}

	cfg := nsq.NewConfig()
	if err := conn.apply(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "pub:", err)
		return 2
	}
	producer, err := nsq.NewProducer(*addr, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	producer.SetLogger(newHookLogger(lvl, nil), lvl)

	// A daemon that never answers would block Publish forever: bound the whole run.
	start := time.Now()
	watchdog := time.AfterFunc(*timeout, func() {
		emit(pubResult{ElapsedMS: time.Since(start).Milliseconds(),
			Error: fmt.Sprintf("timed out after %s", *timeout)})
		os.Exit(1)
	})

	published, retries := 0, 0
	body := func(i int) []byte { return []byte(*prefix + strconv.Itoa(i)) }
	switch *mode {
	case "pub":
		for published < *count {
			if err = producer.Publish(*topic, body(published)); err != nil {
				if !*retry {
					break
				}
				retries++
				time.Sleep(50 * time.Millisecond)
				continue
			}
			published++
		}
	case "dpub":
		for ; published < *count; published++ {
			if err = producer.DeferredPublish(*topic, *deferBy, body(published)); err != nil {
				break
			}
		}
	case "mpub":
		for published < *count {
			n := min(*batch, *count-published)
			bodies := make([][]byte, n)
			for j := range bodies {
				bodies[j] = body(published + j)
			}
			if err = producer.MultiPublish(*topic, bodies); err != nil {
				break
			}
			published += n
		}
	}
	elapsed := time.Since(start).Milliseconds()
	watchdog.Stop()
	producer.Stop()

	if err != nil {
		log.Printf("pub: %s failed after %d acknowledged: %v", *mode, published, err)
		emit(pubResult{Published: published, ElapsedMS: elapsed, Error: err.Error()})
		return 1
	}
	emit(pubResult{Published: published, Retries: retries, ElapsedMS: elapsed})
	return 0
}
